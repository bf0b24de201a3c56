"""The MLflow UI as a subprocess owned by a context manager, bound to 127.0.0.1.

`mlflow ui` starts gunicorn/uvicorn workers and a huey consumer; killing only its main process
leaves those running, so it runs as an autotune.server.process.ProcessGroup and stops as a whole.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from autotune.errors import AutotuneError
from autotune.server.process import ProcessGroup, port_is_free


class MlflowUI:
    def __init__(self, backend_uri: str, *, port: int = 5000, log_path: Path) -> None:
        self.backend_uri = backend_uri
        self.port = port
        self.group = ProcessGroup(
            [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", backend_uri,
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
             # MLflow's server plus autotune's /autotune/open page (outputs/mlflow_app.py)
             "--app-name", "autotune"], log_path=log_path)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.group.log_path

    @property
    def pid(self) -> int:
        return self.group.pid

    def __enter__(self) -> MlflowUI:
        if not port_is_free(self.port):
            raise AutotuneError(f"--port: {self.port} is in use on 127.0.0.1; pick another port")
        self.group.start()
        return self

    def wait_ready(self, timeout_s: float) -> float:
        started = self.group.started_at or time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if self.group.poll() is not None:
                raise AutotuneError(f"mlflow ui exited with code {self.group.returncode}; "
                                    f"see {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.monotonic() - started
            time.sleep(0.3)
        raise AutotuneError(f"mlflow ui not ready after {timeout_s:.0f} s; see {self.log_path}")

    def wait(self) -> None:
        self.group.wait()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.group.stop(grace_s=10)
