"""The MLflow UI as a subprocess owned by a context manager, bound to 127.0.0.1.

`mlflow ui` starts gunicorn/uvicorn workers and a huey consumer; killing only its main process
leaves those running, so it gets its own process group and stop() ends the whole group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from autotune.errors import AutotuneError
from autotune.server import group_pids, port_is_free


class MlflowUI:
    def __init__(self, backend_uri: str, *, port: int = 5000, log_path: Path) -> None:
        self.backend_uri = backend_uri
        self.port = port
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MlflowUI:
        if not port_is_free(self.port):
            raise AutotuneError(f"--port: {self.port} is in use on 127.0.0.1; pick another port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", self.backend_uri,
                "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.started = time.monotonic()
        return self

    def wait_ready(self, timeout_s: float) -> float:
        assert self.proc is not None
        deadline = self.started + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AutotuneError(f"mlflow ui exited with code {self.proc.returncode}; "
                                    f"see {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.monotonic() - self.started
            time.sleep(0.3)
        raise AutotuneError(f"mlflow ui not ready after {timeout_s:.0f} s; see {self.log_path}")

    def wait(self) -> None:
        assert self.proc is not None
        self.proc.wait()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc is None:
            return
        pg = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pg, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while group_pids(pg) and time.monotonic() < deadline:
            self.proc.poll()
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pg, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
