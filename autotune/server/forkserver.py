"""Preloaded vLLM: one process per study imports vLLM's CLI once and forks each server from it.

A warm boot on the H100 spent 24-37 s in the `vllm` command's own imports before vLLM's first
log line (docs/results/trial-cost-h100), the same work for every trial. The fork server
(`_forkserver_main.py`, run by vLLM's interpreter) does those imports once; each boot is then a
fork that runs the console script's `main` with the trial's argv and environment. That is what
vLLM itself does to start its engine process when VLLM_WORKER_MULTIPROC_METHOD is fork: it is
safe while CUDA is untouched in the parent, which the fork server checks after every import.

Ownership follows `ProcessGroup`: the fork server is a child in its own session with a
parent-death signal; each server it forks gets its own session (group id = its pid) and a
parent-death signal on the fork server, so autotune's death reaches both. `ForkedGroup` is the
handle: stopped as a group like any child, its exit status read from the file the fork server
writes when it reaps it.

Only a one-word executable that is a Python console script is preloaded (the `vllm` of a venv);
anything else (`docker exec ...`, a wrapper script) starts directly, as does every boot after
the fork server failed to start (its log says why).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.server.process import SOCKET_DIR_PREFIX, ProcessGroup, log_line, owned_tmpdir

SCRIPT = Path(__file__).with_name("_forkserver_main.py")
# What `vllm serve` imports before its first log line; a module missing from this vLLM is
# skipped (the fork server's log names it).
PRELOAD_MODULES = (
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve",
    "vllm.entrypoints.cli.openai",
    "vllm.entrypoints.cli.benchmark.main",
    "vllm.entrypoints.cli.collect_env",
    "vllm.entrypoints.cli.run_batch",
    "vllm.entrypoints.openai.api_server",
)
DIR_PREFIX = SOCKET_DIR_PREFIX + "fs-"  # swept like a server's folder when we die
_FROM_IMPORT = re.compile(r"^from ([\w.]+) import (\w+)\s*$", re.M)


class ForkServerError(AutotuneError):
    """The fork server could not start or fork; the boot starts vLLM directly instead."""


def console_script(executable: Sequence[str]) -> tuple[str, str] | None:
    """(its Python, "module:function") when `executable` is one Python console script, such as
    the `vllm` pip writes into a venv; else None."""
    if len(executable) != 1:
        return None
    path = shutil.which(executable[0])
    if path is None:
        return None
    try:
        head = Path(path).read_bytes()[:4096].decode("utf-8", errors="replace")
    except OSError:
        return None
    first, _, rest = head.partition("\n")
    python = first[2:].strip()
    if not first.startswith("#!") or " " in python or "python" not in Path(python).name:
        return None
    m = _FROM_IMPORT.search(rest)
    if m is None or not os.access(python, os.X_OK):
        return None
    return python, f"{m.group(1)}:{m.group(2)}"


class ForkServer:
    """One fork server: started by `start()`, ready when its socket exists, stopped by `stop()`."""

    def __init__(self, python: str, entry: str, env: Mapping[str, str], log_path: Path,
                 modules: Sequence[str] | None = None) -> None:
        self.python, self.entry = python, entry
        self.modules = list(PRELOAD_MODULES if modules is None else modules)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.dir: Path | None = None
        self.group: ProcessGroup | None = None
        self.added: list[str] = []  # variables of the forks' environment that self.env lacks

    @property
    def socket_path(self) -> Path:
        assert self.dir is not None, "start() first"
        return self.dir / "s"

    @property
    def status_dir(self) -> Path:
        assert self.dir is not None, "start() first"
        return self.dir / "exit"

    def start(self) -> None:
        self.dir = owned_tmpdir(DIR_PREFIX)
        self.status_dir.mkdir()
        argv = [self.python, str(SCRIPT), str(self.socket_path), str(self.status_dir),
                self.entry, ",".join(self.modules), str(self.log_path.resolve())]
        self.group = ProcessGroup(argv, log_path=self.log_path,
                                  env={**self.env, "TMPDIR": str(self.dir)}, pdeathsig=True,
                                  header=True)
        self.group.start()

    def wait_ready(self, deadline: float) -> None:
        """Block until the socket listens; ForkServerError if the process exits or `deadline`
        (monotonic) passes."""
        assert self.group is not None, "start() first"
        while not self.socket_path.exists():
            if (rc := self.group.poll()) is not None:
                raise ForkServerError(f"vLLM's fork server exited with code {rc} while importing "
                                      f"(see {self.log_path}): {self.group.log_tail(1)}")
            if time.monotonic() >= deadline:
                raise ForkServerError(f"vLLM's fork server was not ready in time ({self.log_path})")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.group is not None and self.group.running()

    def note(self, text: str) -> None:
        """A line of autotune's in the fork server's log."""
        log_line(self.log_path, f"# autotune: {text}")

    def fork(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> int:
        """Fork one server running `argv` with exactly `env`, output appended to `log_path`;
        its pid."""
        added = sorted(k for k in env if k not in self.env and k != "TMPDIR")
        if added != self.added:
            self.added = added
            self.note("the next forks have variables this fork server's imports did not see: "
                      + ", ".join(added))
        req = {"argv": list(argv), "env": dict(env), "cwd": os.getcwd(),
               "log": str(Path(log_path).resolve())}
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(30)
                s.connect(str(self.socket_path))
                s.sendall(json.dumps(req).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            answer = json.loads(data)
        except (OSError, ValueError) as e:
            raise ForkServerError(f"vLLM's fork server did not fork: {e}") from e
        if "pid" not in answer:
            raise ForkServerError(f"vLLM's fork server did not fork: {answer.get('error')}")
        return int(answer["pid"])

    def exit_status(self, pid: int) -> int | None:
        try:
            return int((self.status_dir / str(pid)).read_text())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        if self.group is not None:
            self.group.stop()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


class ForkedGroup(ProcessGroup):
    """A server forked by a `ForkServer`, stopped as a group like any `ProcessGroup`. Its exit
    status comes from the fork server, which reaps it."""

    def __init__(self, server: ForkServer, argv: Sequence[str], *, log_path: Path,
                 env: Mapping[str, str]) -> None:
        super().__init__(argv, log_path=log_path, env=env, header=True)
        self.server = server
        self._pid: int | None = None
        self._rc: int | None = None

    def start(self) -> None:
        log_line(self.log_path, f"$ {' '.join(self.argv)}")
        self._pid = self.server.fork(self.argv, self.env, self.log_path)
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int:
        assert self._pid is not None, "start() first"
        return self._pid

    @property
    def started(self) -> bool:
        return self._pid is not None

    def poll(self) -> int | None:
        if self._pid is None or self._rc is not None:
            return self._rc
        self._rc = self.server.exit_status(self._pid)
        if self._rc is None and not Path(f"/proc/{self._pid}").exists():
            # reaped: the fork server writes the status just after (or it died and cannot)
            deadline = time.monotonic() + 2
            while (rc := self.server.exit_status(self._pid)) is None and \
                    self.server.alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            self._rc = -9 if rc is None else rc
        return self._rc

    def wait(self) -> int:
        self._reap(float("inf"))
        assert self._rc is not None
        return self._rc

    def _reap(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)


_SERVERS: dict[tuple[str, str], ForkServer] = {}  # by (python, entry): one at a time
_FAILED: dict[tuple[str, str], str] = {}


def fork_server(executable: Sequence[str], env: Mapping[str, str],
                log_path: Path) -> ForkServer | str:
    """The running fork server of this vLLM, started if need be; or why there is none.

    A fork server serves an environment that keeps every variable it started with (TMPDIR
    aside): the fork gets the environment exactly, but its imports happened with the fork
    server's. Variables added since (libraries autotune imports set some: scikit-learn sets
    KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK) do not replace it, and its log names them; a
    changed or removed variable starts a new one, and the log says why."""
    found = console_script(executable)
    if found is None:
        return f"{' '.join(executable)} is not a Python console script"
    if found in _FAILED:
        return _FAILED[found]
    own = {k: v for k, v in env.items() if k != "TMPDIR"}
    server = _SERVERS.get(found)
    why = None
    if server is not None:
        changed = sorted(k for k, v in server.env.items() if own.get(k) != v)
        if not server.alive():
            why = f"the last one exited with code {server.group and server.group.poll()}"
        elif changed:
            why = f"the environment changed in {', '.join(changed)}"
        else:
            return server
    stop_fork_servers()
    server = ForkServer(*found, own, log_path)
    if why:
        server.note(f"a new fork server: {why}")
    server.start()
    _SERVERS[found] = server
    return server


def refuse(server: ForkServer, why: str) -> None:
    """Stop a fork server that failed; its key starts servers directly from now on."""
    for key, s in list(_SERVERS.items()):
        if s is server:
            _FAILED[key] = why
            del _SERVERS[key]
    server.stop()


def stop_fork_servers() -> None:
    while _SERVERS:
        _, server = _SERVERS.popitem()
        server.stop()


atexit.register(stop_fork_servers)
