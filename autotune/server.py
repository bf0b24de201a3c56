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
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from autotune.errors import ServerBootError, ServerBootTimeout, ServerDiedError

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


def _with_pdeathsig(argv: list[str]) -> list[str]:
    """The server gets SIGTERM when autotune dies, even by SIGKILL (it runs in its own session,
    so nothing else would reach it): util-linux's setpriv sets the parent-death signal, which
    survives the exec of vllm. Without setpriv the server can outlive a killed autotune."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


class ServerProcess:
    """A `vllm serve` subprocess owned by a context manager.

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
    ) -> None:
        self.argv = [*argv, "--host", host, "--port", str(port)]
        self.log_path = Path(log_path)
        self.host, self.port = host, port
        self.env = dict(os.environ if env is None else env)
        self.stop_grace_s = stop_grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.healthy_at: float | None = None
        self.tmpdir: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

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
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # vLLM puts ZMQ IPC sockets in TMPDIR and leaves them behind; a socket path must stay
        # under 107 bytes, so each server gets a short private directory, removed at stop.
        self.tmpdir = tempfile.mkdtemp(prefix="autotune-", dir="/tmp")
        self.env["TMPDIR"] = self.tmpdir
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            # Popen dups the fd: the child keeps writing after we close our handle.
            self.proc = subprocess.Popen(
                _with_pdeathsig(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def cause(self) -> str | None:
        return root_cause(self.log_text())

    def wait_healthy(self, timeout_s: float, poll_interval_s: float = 0.5) -> float:
        """Block until GET /health answers 200; returns seconds since start."""
        assert self.proc is not None and self.started_at is not None, "start() first"
        deadline = self.started_at + timeout_s
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    raise ServerBootError(rc, self.cause(), log_path=str(self.log_path))
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        self.healthy_at = time.monotonic()
                        return self.healthy_at - self.started_at
                if time.monotonic() >= deadline:
                    raise ServerBootTimeout(
                        f"vLLM server not healthy after {timeout_s:.0f} s",
                        cause=f"boot timeout ({timeout_s:.0f} s)",
                        log_path=str(self.log_path),
                    )
                time.sleep(poll_interval_s)

    def check_alive(self) -> None:
        """Raise ServerDiedError if the server has exited."""
        if self.proc is not None and (rc := self.proc.poll()) is not None:
            cause = self.cause() or f"exit code {rc}"
            raise ServerDiedError(
                f"vLLM server exited with code {rc} while serving: {cause}",
                cause=cause,
                log_path=str(self.log_path),
            )

    def stop(self) -> None:
        """TERM the whole process group, KILL it after the grace period, reap, check the port.

        The grace is short on purpose: a benchmark server has nothing to save, and on an H100
        vLLM with ngram speculation took 10.7 s to exit on TERM (seen in the GPU study).
        """
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        while time.monotonic() < deadline:
            self.proc.poll()
            if not group_pids(pgid):
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        while group_pids(pgid) and time.monotonic() < deadline + 10:
            time.sleep(0.1)
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        port_deadline = time.monotonic() + 10
        while not port_is_free(self.port, self.host) and time.monotonic() < port_deadline:
            time.sleep(0.1)
