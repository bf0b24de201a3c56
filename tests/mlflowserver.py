"""A real MLflow tracking server (`mlflow server`, SQLite backend, served artifacts) on a free
loopback port, for the tests of workers on several hosts and of MLflow outages."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from autotune.server.process import ProcessGroup, free_port


def wait_ready(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"mlflow server at {url} not ready in {timeout_s} s")
        time.sleep(0.5)


@contextmanager
def mlflow_server(root: Path, port: int | None = None) -> Iterator[str]:
    """Yield the URL of a tracking server storing under `root`; stop its process group after."""
    port = port or free_port()
    root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with ProcessGroup(argv, log_path=root / "server.log", cwd=root) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url)
        yield url
        proc.stop(grace_s=20)
