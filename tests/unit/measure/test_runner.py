"""The runner's environment for a server: every reusable cache under the study's cache root."""

from pathlib import Path

import pytest

from autotune.config.study import ServerConfig
from autotune.measure.runner import server_env

JIT = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
       "CUDA_CACHE_PATH")


def test_every_jit_cache_lands_under_the_cache_root(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for k in JIT:
        monkeypatch.delenv(k, raising=False)
    env = server_env(ServerConfig(model="/m"), tmp_path / "study" / "trial-0000")
    root = tmp_path / "study" / "vllm-cache"
    assert env["VLLM_CACHE_ROOT"] == str(root)
    assert all(Path(env[k]).parent == root for k in JIT)
    # one root a study can copy to another machine: server.cache_root moves them all
    env = server_env(ServerConfig(model="/m", cache_root=str(tmp_path / "carried")), tmp_path)
    assert all(env[k].startswith(str(tmp_path / "carried")) for k in (*JIT, "VLLM_CACHE_ROOT"))


def test_a_cache_the_user_placed_stays_where_it_is(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", "/fast/triton")
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/elsewhere")
    env = server_env(ServerConfig(model="/m", env={"CUDA_CACHE_PATH": "/cfg/cuda"}), tmp_path)
    assert env["TRITON_CACHE_DIR"] == "/fast/triton" and env["CUDA_CACHE_PATH"] == "/cfg/cuda"
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path.parent / "vllm-cache")  # always the study's


def test_the_engine_process_is_forked_unless_the_user_says_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CLI spawns its engine (a second import of vLLM and torch, 20-29 s of a warm H100
    boot); the server gets fork, vLLM's library default, unless the user's environment or the
    study's server.env names a method."""
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    assert server_env(ServerConfig(model="/m"), tmp_path)["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    assert server_env(ServerConfig(model="/m"), tmp_path)["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD")
    cfg = ServerConfig(model="/m", env={"VLLM_WORKER_MULTIPROC_METHOD": "spawn"})
    assert server_env(cfg, tmp_path)["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"


def test_on_a_gpu_a_study_launches_stock_vllm_serve(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the preloaded launch served faster than a stock `vllm serve` at high load
    (docs/results/warm-server-h100), so `preload: auto` launches stock there: no fork server,
    vLLM's own engine start, and no CPU-only variable in the server's environment or the deploy
    line. On a machine without a GPU, auto preloads and the CPU default applies."""
    from autotune.server import machine

    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setattr(machine, "has_gpu", lambda: True)
    gpu = ServerConfig(model="/m")
    env = server_env(gpu, tmp_path)
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in env and "VLLM_CPU_KVCACHE_SPACE" not in env
    assert not machine.preloads(gpu) and machine.launch_env(gpu) == {}
    assert machine.preloads(gpu.model_copy(update={"preload": True}))
    set_env = ServerConfig(model="/m", env={"NCCL_DEBUG": "WARN"})
    assert machine.launch_env(set_env) == {"NCCL_DEBUG": "WARN"}
    monkeypatch.setattr(machine, "has_gpu", lambda: False)
    assert machine.preloads(gpu) and not machine.preloads(gpu.model_copy(update={"preload": False}))
    assert machine.launch_env(gpu) == machine.CPU_ENV
    assert machine.launch_env(set_env) == {"NCCL_DEBUG": "WARN"}  # the study file's, as given
    assert server_env(gpu, tmp_path)["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"
