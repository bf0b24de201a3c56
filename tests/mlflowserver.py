"""A real MLflow tracking server (`mlflow server`, SQLite backend, served artifacts) on a free
loopback port, for the tests of workers on several hosts and of MLflow outages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from autotune.server import free_port, group_pids


def start_mlflow(root: Path, port: int) -> subprocess.Popen[bytes]:
    root.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination",
                             str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


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


def stop_mlflow(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while group_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)


@contextmanager
def mlflow_server(root: Path, port: int | None = None) -> Iterator[str]:
    """Yield the URL of a tracking server storing under `root`; stop its process group after."""
    port = port or free_port()
    proc = start_mlflow(root, port)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url)
        yield url
    finally:
        stop_mlflow(proc)
