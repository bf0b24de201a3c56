"""One vLLM server process: start it, wait until healthy, capture its log, stop its process group.

Modelled on vLLM's own `benchmarks/sweep/server.py`: an argv list (no shell), its own session and
process group, output to a log file (never an unread PIPE), `poll()` checked before every health
probe against a monotonic deadline, and stop = TERM, then KILL, of the whole group.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from autotune.errors import (
    ServerBootError,
    ServerBootHung,
    ServerBootStarved,
    ServerBootTimeout,
    ServerDiedError,
)
from autotune.server.forkserver import ForkedGroup, ForkServerError, fork_server, refuse
from autotune.server.process import (
    ProcessGroup,
    group_pids,
    log_line,
    owned_tmpdir,
    port_is_free,
)
from autotune.server.starved import CpuClock, cpu_text, group_ticks, starved_since

# Lines that wrap the real cause; the root cause is the first exception line that is not one.
_WRAPPERS = (
    "Engine core initialization failed",
    "See root cause above",
    "Engine process failed to start",
    "EngineCore failed to start",
    "APIServer failed",
)
_EXC_LINE = re.compile(
    r"(?:^|[\s:\]])((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit)): (.+)$"
)
_ARGPARSE = re.compile(r"(?:^|\s)(vllm[\w ]*: error: .+)$")
# vLLM's engine process logs this when it cannot start; the server normally exits soon after,
# but on two H200s a tensor-parallel engine whose workers hit a CUDA error during the KV-cache
# profile left the whole process tree alive and silent until the boot timeout (13 minutes of a
# study's GPU time). Seen with vLLM 0.26.0 (docs/results/multi-gpu-h200x2).
ENGINE_FAILED = "EngineCore failed to start"
# the fork server's imports: ~85 s on a fresh H100 machine, where the first boot pays them
FORK_SERVER_READY_S = 600.0


def root_cause(log_text: str) -> str | None:
    """The line of a vLLM log that says why it failed, or None.

    argparse errors (`vllm serve: error: unrecognized arguments: --foo`) win; otherwise the first
    `SomethingError: message` line that is not a generic wrapper such as "Engine core
    initialization failed. See root cause above."
    """
    lines = [ln.rstrip() for ln in log_text.splitlines()]
    for ln in lines:
        if m := _ARGPARSE.search(ln):
            return m.group(1).strip()
    found: list[str] = []
    for i, ln in enumerate(lines):
        if m := _EXC_LINE.search(ln):
            text = f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"
            if "validation error" in text and i + 1 < len(lines):
                # pydantic puts the message on the next line: "  Value error, ... [type=..."
                nxt = re.sub(r"^\(\w+ pid=\d+\)\s*", "", lines[i + 1].strip())
                text += ": " + nxt.split(" [type=", 1)[0]
            if not any(w in text for w in _WRAPPERS):
                found.append(text)
    if found:
        return found[0]
    for ln in reversed(lines):
        if "ERROR" in ln and not any(w in ln for w in _WRAPPERS):
            return ln.split("ERROR", 1)[1].strip(" :]")
    return None


class ServerProcess:
    """A `vllm serve` subprocess owned by a context manager (autotune.server.process.ProcessGroup).

    >>> with ServerProcess(argv, log_path=p, port=8123) as server:
    ...     server.wait_healthy(timeout_s=120)
    ...     ...  # talk to server.base_url
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        port: int,
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        stop_grace_s: float = 5.0,
        hang_grace_s: float = 30.0,
        preload: Sequence[str] | None = None,
        preload_log: Path | None = None,
    ) -> None:
        self.argv = [*argv, "--host", host, "--port", str(port)]
        self.log_path = Path(log_path)
        self.host, self.port = host, port
        self.env = dict(os.environ if env is None else env)
        self.stop_grace_s = stop_grace_s
        self.hang_grace_s = hang_grace_s
        # fork the server from a process that imported this vLLM executable's CLI once
        # (autotune.server.forkserver), when it is a Python console script
        self.preload = list(preload) if preload else None
        self.preload_log = preload_log or self.log_path.with_name("vllm-forkserver.log")
        self.group: ProcessGroup | None = None
        self.started_at: float | None = None
        # when the server itself started: after the fork server's imports, which are the
        # study's once, not this config's (a busy machine took 324 s over them, and they
        # had counted against a 240 s boot timeout), and the CPU's stall clock then
        self.launched: CpuClock | None = None
        self.healthy_at: float | None = None
        self.tmpdir: str | None = None
        self.launch = "direct"  # or "forked"; `direct_why` says why a preload fell back
        self.direct_why: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.group is not None and self.group.running()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        # vLLM puts ZMQ IPC sockets in TMPDIR and leaves them behind; a socket path must stay
        # under 107 bytes, so each server gets a short private directory, removed at stop.
        self.started_at = time.monotonic()
        self.tmpdir = str(owned_tmpdir())
        env = {**self.env, "TMPDIR": self.tmpdir}
        if self.preload is not None:
            self.group = self._forked(self.preload, env)
        if self.group is None:
            self.group = ProcessGroup(self.argv, log_path=self.log_path, env=env,
                                      pdeathsig=True, header=True)
            self.group.start()
        self.launched = CpuClock.now()

    def _forked(self, executable: list[str], env: dict[str, str]) -> ProcessGroup | None:
        """The server forked from the fork server of `executable`, or None (started directly,
        with the reason at the top of its log) when there is none or it failed."""
        server = fork_server(executable, env, self.preload_log) \
            if self.argv[:len(executable)] == executable else "the argv does not start with it"
        if isinstance(server, str):
            self._direct(server)
            return None
        try:
            server.wait_ready(time.monotonic() + FORK_SERVER_READY_S)
            group = ForkedGroup(server, self.argv, log_path=self.log_path, env=env)
            group.start()
        except ForkServerError as e:
            refuse(server, str(e))
            self._direct(str(e))
            return None
        self.launch = "forked"
        return group

    def _direct(self, why: str) -> None:
        self.direct_why = why
        log_line(self.log_path, f"# autotune: not preloaded, started directly: {why}")

    def log_text(self) -> str:
        return self.group.log_text() if self.group is not None else ""

    def cause(self) -> str | None:
        return root_cause(self.log_text())

    def wait_healthy(self, timeout_s: float, poll_interval_s: float = 0.5) -> float:
        """Block until GET /health answers 200; returns seconds since start. A server whose
        engine failed to start and that has not exited `hang_grace_s` later is hung: raise
        ServerBootHung with the engine's cause (the caller stops the group). The deadline runs
        from the server's own start (`launched`: a fork server's imports come before it); at
        the deadline, ServerBootStarved where the machine was starved meanwhile, else
        ServerBootTimeout."""
        assert self.group is not None and self.started_at is not None, "start() first"
        assert self.launched is not None
        started = self.started_at
        deadline = self.launched.at + timeout_s
        engine_failed_at: float | None = None
        next_scan = 0.0
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while True:
                rc = self.group.poll()
                if rc is not None:
                    raise ServerBootError(rc, self.cause(), log_path=str(self.log_path))
                now = time.monotonic()
                if engine_failed_at is None and now >= next_scan:
                    next_scan = now + 2.0
                    if ENGINE_FAILED in self.log_text():
                        engine_failed_at = now
                if engine_failed_at is not None and now - engine_failed_at >= self.hang_grace_s:
                    raise ServerBootHung(self.hang_grace_s, self.cause(),
                                         log_path=str(self.log_path))
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        self.healthy_at = time.monotonic()
                        # what the CPUs did during a boot that made it (starved: below)
                        log_line(self.log_path, "# autotune: healthy; during the boot: "
                                 + cpu_text(self.launched, CpuClock.now(),
                                            group_ticks(group_pids(self.group.pid))))
                        return self.healthy_at - started
                if time.monotonic() >= deadline:
                    starved = starved_since(self.launched, group_pids(self.group.pid))
                    if starved is not None:
                        raise ServerBootStarved(
                            f"vLLM server not healthy after {timeout_s:.0f} s on a machine "
                            f"starved by other work: {starved}", starved,
                            cause=f"boot timeout ({timeout_s:.0f} s)", log_path=str(self.log_path))
                    raise ServerBootTimeout(
                        f"vLLM server not healthy after {timeout_s:.0f} s",
                        cause=f"boot timeout ({timeout_s:.0f} s)",
                        log_path=str(self.log_path),
                    )
                time.sleep(poll_interval_s)

    def check_alive(self) -> None:
        """Raise ServerDiedError if the server has exited."""
        if self.group is not None and (rc := self.group.poll()) is not None:
            cause = self.cause() or f"exit code {rc}"
            raise ServerDiedError(
                f"vLLM server exited with code {rc} while serving: {cause}",
                cause=cause,
                log_path=str(self.log_path),
            )

    def stop(self) -> None:
        """Stop the whole process group, remove the socket folder, wait for the port to free.

        The grace is short on purpose: a benchmark server has nothing to save, and on an H100
        vLLM with ngram speculation took 10.7 s to exit on TERM (seen in the GPU study).
        """
        if self.tmpdir:  # also when start() was interrupted (waiting for the fork server)
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        if self.group is None:
            return
        self.group.stop(self.stop_grace_s)
        port_deadline = time.monotonic() + 10
        while not port_is_free(self.port, self.host) and time.monotonic() < port_deadline:
            time.sleep(0.1)
