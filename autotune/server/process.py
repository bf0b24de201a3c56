"""One owner of child process groups: the vLLM server, the MLflow UI and the study's workers.

Each child gets an argv list (no shell), its own session and process group, its output in a log
file (never an unread PIPE), and is stopped as a group: TERM, a grace period, KILL, reap. Killing
only the leader is not enough: `vllm serve` starts an engine-core process, `mlflow ui` starts
gunicorn/uvicorn workers and a huey consumer, and a worker starts its own vLLM server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType


def group_pids(pgid: int) -> list[int]:
    """Live processes in process group `pgid` (from /proc; zombies excluded)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the ")" that closes comm: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago on `host` (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on the port. SO_REUSEADDR, as uvicorn sets it: closed
    connections lingering in TIME_WAIT do not keep a new server from binding."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


SOCKET_DIR_PREFIX = "autotune-"
OWNER_FILE = "owner.pid"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep_socket_dirs(root: str = "/tmp") -> list[Path]:
    """Remove the socket folders of servers whose owner died without stopping them (killed, or
    its machine lost: stop() never ran). A folder is only removed when its owner.pid names a
    process that no longer exists; returns what was removed."""
    removed = []
    for d in Path(root).glob(SOCKET_DIR_PREFIX + "*"):
        owner = d / OWNER_FILE
        try:
            pid = int(owner.read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being set up
        if not _pid_alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def owned_tmpdir(prefix: str = SOCKET_DIR_PREFIX) -> Path:
    """A new short folder under /tmp with our pid in its owner.pid, after sweeping the folders
    of dead owners: a child's Unix sockets go there (a socket path must stay under 107 bytes)."""
    sweep_socket_dirs()
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    (d / OWNER_FILE).write_text(str(os.getpid()))
    return d


def log_line(path: Path, line: str) -> None:
    """Append one line of autotune's to a child's log (its folder made if need be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as log:
        log.write(line + "\n")


def with_pdeathsig(argv: Sequence[str]) -> list[str]:
    """The child gets SIGTERM when autotune dies, even by SIGKILL (it runs in its own session,
    so nothing else would reach it): util-linux's setpriv sets the parent-death signal, which
    survives the exec. Without setpriv the child can outlive a killed autotune."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else list(argv)


class ProcessGroup:
    """A child process in its own session, logging to a file, stopped as a whole group.

    >>> with ProcessGroup(["mlflow", "ui"], log_path=Path("ui.log")) as p:
    ...     p.wait()
    """

    def __init__(self, argv: Sequence[str], *, log_path: Path,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 pdeathsig: bool = False, header: bool = False) -> None:
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.pdeathsig = pdeathsig
        self.header = header  # write "$ argv" at the top of the log
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None

    def start(self) -> None:
        if self.header:
            log_line(self.log_path, f"$ {' '.join(self.argv)}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # Popen dups the fd: the child keeps writing after we close our handle.
            self.proc = subprocess.Popen(
                with_pdeathsig(self.argv) if self.pdeathsig else self.argv,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, cwd=self.cwd, start_new_session=True)
        self.started_at = time.monotonic()

    def __enter__(self) -> ProcessGroup:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        assert self.proc is not None, "start() first"
        return self.proc.pid

    @property
    def started(self) -> bool:
        return self.proc is not None

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def running(self) -> bool:
        return self.started and self.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.poll() if self.started else None

    def wait(self) -> int:
        assert self.proc is not None, "start() first"
        return self.proc.wait()

    def _reap(self, timeout: float) -> None:
        """Collect the leader's exit status (a zombie until then)."""
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)

    def signal(self, sig: int) -> None:
        """Send `sig` to the whole group (a new session: the group id is the leader's pid)."""
        if self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def stop(self, grace_s: float = 5.0) -> None:
        """TERM the group, KILL it after `grace_s`, reap the leader, wait for the group to go."""
        if not self.started:
            return
        pgid = self.pid
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self.poll()
            if not group_pids(pgid):
                break
            time.sleep(0.1)
        else:
            self.signal(signal.SIGKILL)
        self._reap(10)
        while group_pids(pgid) and time.monotonic() < deadline + 10:
            time.sleep(0.1)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])
