"""Several GPUs per trial: the layout constraint, per-GPU scoring and the preflight's errors
(the measurement is a stand-in; the real thing ran on two H200s, docs/results/multi-gpu-h200x2)."""

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.config.metric_names import base_metric, objective_metric, per_gpu
from autotune.config.study import StudyConfig, gpus_per_replica, layout_text
from autotune.errors import ConfigError
from autotune.tuning import objective as objective_mod
from autotune.tuning.earlier import incumbent
from autotune.tuning.objective import BOOT_OK, Objective
from autotune.tuning.preflight import check_layout
from autotune.tuning.record import Status, records
from autotune.tuning.search_space import SearchSpace, load_search_space
from autotune.tuning.workers import visible_gpus, worker_config
from tests.fakes import fake_bench, study_cfg

LAYOUTS = SearchSpace.model_validate({
    "name": "layouts",
    "parameters": {
        "tensor_parallel_size": {"type": "categorical", "choices": [1, 2]},
        "data_parallel_size": {"type": "categorical", "choices": [1, 2]},
    },
})


def cfg(tmp_path: Path, gpus: int | None = 2, **extra: Any) -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "mg", "server": {"model": "/m", "executable": ["vllm"],
                                 "args": {"load_format": "dummy"}},
        "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "objectives": [{"metric": "total_token_throughput_per_gpu", "direction": "maximize"},
                       {"metric": "mean_tpot_ms", "direction": "minimize"}],
        "search_space": "multi-gpu-dummy", "workdir": str(tmp_path), "gpus_per_trial": gpus,
        **extra})


def test_layout_arithmetic() -> None:
    assert gpus_per_replica({}) == 1
    assert gpus_per_replica({"tensor_parallel_size": 2, "data_parallel_size": 2}) == 4
    assert gpus_per_replica({"tensor_parallel_size": 2, "pipeline_parallel_size": 2,
                             "data_parallel_size": None}) == 4
    assert layout_text({"data_parallel_size": 2}) == "tp1-dp2"
    assert layout_text({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}) == "tp2-pp2-dp1"


def test_per_gpu_metrics() -> None:
    m = {"total_token_throughput": 1000.0, "capacity": 60.0, "mean_tpot_ms": 20.0}
    assert per_gpu(m, 2) == {"total_token_throughput_per_gpu": 500.0, "capacity_per_gpu": 30.0}
    assert base_metric("capacity_per_gpu") == "capacity"
    assert base_metric("mean_tpot_ms_per_gpu") == "mean_tpot_ms_per_gpu"
    assert objective_metric("output_throughput_per_gpu") == "output_throughput_per_gpu"
    with pytest.raises(ValueError, match="also as <metric>_per_gpu"):
        objective_metric("mean_tpot_ms_per_gpu")
    with pytest.raises(ValueError, match="capacity_per_gpu is what a capacity search finds"):
        cfg(Path("/tmp"), objectives=[{"metric": "capacity_per_gpu", "direction": "maximize"}])


def test_layouts_beyond_the_trials_gpus_are_infeasible_without_a_boot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layout of tp {1, 2} x dp {1, 2} on 2 GPUs: tp2-dp2 is refused before any boot;
    the others are scored per GPU they use."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(objective_mod, "run_boot", fake_bench(calls))
    c = cfg(tmp_path)
    study = optuna.create_study(directions=["maximize", "minimize"])
    for tp in (1, 2):
        for dp in (1, 2):
            study.enqueue_trial({"tensor_parallel_size": tp, "data_parallel_size": dp})
    study.optimize(Objective(c, LAYOUTS, [], tmp_path), n_trials=4)
    assert [gpus_per_replica(f) for f in calls] == [1, 2, 2]  # tp2-dp2 never booted
    study.set_metric_names(c.metric_names())
    recs = records(study)
    refused = recs[3]
    assert refused.status == Status.INFEASIBLE and refused.facts.failure == "LayoutError"
    assert refused.cause == "layout tp2-dp2 needs 4 GPUs; the trial has 2 (--gpus-per-trial 2)"
    assert study.trials[3].constraints[BOOT_OK] == 1.0
    for r in recs[:3]:
        gpus = r.metrics["gpus"]
        assert r.values["total_token_throughput_per_gpu"] == pytest.approx(
            r.metrics["total_token_throughput"] / gpus)
    assert [r.metrics["gpus"] for r in recs[:3]] == [1, 2, 2]


def test_the_capacity_incumbent_is_per_gpu(tmp_path: Path) -> None:
    study = optuna.create_study(directions=["maximize"])
    for cap, gpus in ((60.0, 1.0), (100.0, 2.0)):
        study.add_trial(optuna.trial.create_trial(
            values=[cap / gpus], user_attrs={"metrics": {"capacity": cap, "gpus": gpus},
                                             "flags": {}},
            constraints={"capacity_ok": 0.0}))
    assert incumbent(study) == 100.0
    assert incumbent(study, per_gpu=True) == 60.0


def test_preflight_rejects_layouts_that_cannot_fit(tmp_path: Path) -> None:
    check_layout(cfg(tmp_path, 2), LAYOUTS)  # tp2-dp2 is left to the trial
    check_layout(cfg(tmp_path, 2), load_search_space("multi-gpu-dummy"))
    with pytest.raises(ConfigError, match=r"tensor_parallel_size takes sizes up to 2, but each "
                                          r"trial gets 1 GPU \(without --gpus-per-trial\): run "
                                          r"with --gpus-per-trial 2"):
        check_layout(cfg(tmp_path, None), LAYOUTS)
    with pytest.raises(ConfigError, match=r"each trial gets 1 GPU \(--gpus-per-trial 1\)"):
        check_layout(cfg(tmp_path, 1), LAYOUTS)
    four = SearchSpace.model_validate({"name": "four", "parameters": {
        "tensor_parallel_size": {"type": "categorical", "choices": [2, 4]}}})
    with pytest.raises(ConfigError, match=r"tensor_parallel_size 4 needs 4 GPUs; each trial "
                                          r"gets 2 \(--gpus-per-trial 2\)"):
        check_layout(cfg(tmp_path, 2), four)
    fixed = cfg(tmp_path, 2).model_copy(update={"server": cfg(tmp_path).server.model_copy(
        update={"args": {"tensor_parallel_size": 2}})})
    with pytest.raises(ConfigError, match=r"the smallest layout \(data_parallel_size\) needs 4"):
        check_layout(fixed, SearchSpace.model_validate({"name": "dp", "parameters": {
            "data_parallel_size": {"type": "categorical", "choices": [2]}}}))
    with pytest.raises(ConfigError, match=r"server.args: layout tp4-dp1 needs 4 GPUs"):
        check_layout(fixed.model_copy(update={"server": fixed.server.model_copy(
            update={"args": {"tensor_parallel_size": 4}})}), SearchSpace.model_validate(
            {"name": "seqs", "parameters": {"max_num_seqs": {"type": "categorical",
                                                             "choices": [8, 16]}}}))


def test_worker_config_leaves_the_layout_to_the_space(tmp_path: Path) -> None:
    c = cfg(tmp_path, None)
    assert worker_config(c, 2, set()).server.args["tensor_parallel_size"] == 2
    spaced = worker_config(c, 2, LAYOUTS.flag_names())
    assert "tensor_parallel_size" not in spaced.server.args and spaced.gpus_per_trial == 2
    assert worker_config(c, 0, set()).gpus_per_trial is None


def test_cuda_visible_devices_must_name_gpus_of_this_host() -> None:
    smi = ["0", "GPU-aaa", "1", "GPU-bbb"]
    assert visible_gpus("1", smi) == ["1"]
    assert visible_gpus("GPU-bbb,0", smi) == ["GPU-bbb", "0"]
    with pytest.raises(ConfigError, match=r"CUDA_VISIBLE_DEVICES=0,3: no GPU 3 on this host "
                                          r"\(nvidia-smi lists 0, 1\)"):
        visible_gpus("0,3", smi)


def test_export_carries_the_servers_environment(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The serve line and the Deployment carry `server.env`: on the two-H200 host the tp2
    layout was measured with VLLM_ALLREDUCE_USE_SYMM_MEM=0, and without it is another config."""
    import yaml

    from autotune.outputs.deploy import k8s_deployment
    from autotune.outputs.export import export

    monkeypatch.setattr(objective_mod, "run_boot", fake_bench([]))
    c = cfg(tmp_path).model_copy(update={"server": cfg(tmp_path).server.model_copy(
        update={"env": {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0", "NOTE": "a b"}})})
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.enqueue_trial({"tensor_parallel_size": 2, "data_parallel_size": 1})
    study.optimize(Objective(c, LAYOUTS, [], tmp_path), n_trials=1)
    study.set_metric_names(c.metric_names())
    trial = records(study)[0]
    line = export(c, trial)["serve_command"]
    assert line.startswith("VLLM_ALLREDUCE_USE_SYMM_MEM=0 NOTE='a b' vllm serve /m ")
    assert "--tensor-parallel-size 2" in line
    pod = yaml.safe_load(k8s_deployment(c, trial, 3))["spec"]["template"]["spec"]
    assert pod["containers"][0]["env"] == [{"name": "VLLM_ALLREDUCE_USE_SYMM_MEM", "value": "0"},
                                           {"name": "NOTE", "value": "a b"}]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2


def test_tensor_parallel_on_a_host_without_multicast_needs_the_fusion_off(
        tmp_path: Path) -> None:
    from autotune.tuning.preflight import check_multicast

    off = {"NCCL_NVLS_ENABLE": "0"}
    check_multicast(cfg(tmp_path), LAYOUTS, {})  # multicast not turned off: nothing to say
    with pytest.raises(ConfigError, match=r"server.args: tensor_parallel_size goes up to 2 on a "
                                          r"host that keeps NVLink multicast off "
                                          r"\(NCCL_NVLS_ENABLE=0\).*fuse_allreduce_rms: false"):
        check_multicast(cfg(tmp_path), LAYOUTS, off)
    no_tp = SearchSpace.model_validate({"name": "dp", "parameters": {
        "data_parallel_size": {"type": "categorical", "choices": [1, 2]}}})
    check_multicast(cfg(tmp_path), no_tp, off)
    server = cfg(tmp_path).server
    fused_off = server.model_copy(update={"args": {
        **server.args, "compilation_config": {"pass_config": {"fuse_allreduce_rms": False}}}})
    check_multicast(cfg(tmp_path).model_copy(update={"server": fused_off}), LAYOUTS, off)
    ipc = server.model_copy(update={"env": {"VLLM_FLASHINFER_ALLREDUCE_BACKEND": "trtllm"}})
    check_multicast(cfg(tmp_path).model_copy(update={"server": ipc}), LAYOUTS, off)



def test_a_gpu_deploy_line_carries_no_cpu_only_default(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A study file that sets no server.env: on a GPU the serve line and the Deployment carry
    no environment (VLLM_CPU_KVCACHE_SPACE is vLLM-CPU's); without a GPU, the CPU default the
    trials' servers ran with."""
    import yaml

    from autotune.outputs.deploy import k8s_deployment
    from autotune.outputs.export import export
    from autotune.server import machine

    monkeypatch.setattr(objective_mod, "run_boot", fake_bench([]))
    c = cfg(tmp_path)
    assert "env" not in c.server.model_fields_set
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.enqueue_trial({"tensor_parallel_size": 1, "data_parallel_size": 2})
    study.optimize(Objective(c, LAYOUTS, [], tmp_path), n_trials=1)
    study.set_metric_names(c.metric_names())
    trial = records(study)[0]
    monkeypatch.setattr(machine, "has_gpu", lambda: True)
    assert export(c, trial)["serve_command"].startswith("vllm serve /m ")
    pod = yaml.safe_load(k8s_deployment(c, trial, 1))["spec"]["template"]["spec"]
    assert "env" not in pod["containers"][0]
    monkeypatch.setattr(machine, "has_gpu", lambda: False)
    assert export(c, trial)["serve_command"].startswith("VLLM_CPU_KVCACHE_SPACE=1 vllm serve ")


def test_a_worker_reads_the_study_files_server_env_as_the_study_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The config a study keeps for its workers leaves an unset `server.env` unset, so a
    worker's vLLM-CPU servers get CPU_ENV (a 1 GiB KV cache) as the study's own do; one the
    study file sets, even to nothing, stays set."""
    from autotune.config.base import parse_model
    from autotune.config.study import StudyConfig
    from autotune.server import machine
    from autotune.tuning.study import stored_config

    monkeypatch.setattr(machine, "has_gpu", lambda: False)
    cfg = study_cfg(tmp_path, server={"model": "/m", "executable": ["vllm"]})
    back = parse_model(StudyConfig, stored_config(cfg), "stored")
    assert machine.launch_env(back.server) == machine.launch_env(cfg.server) == machine.CPU_ENV
    cfg = study_cfg(tmp_path, server={"model": "/m", "executable": ["vllm"], "env": {}})
    back = parse_model(StudyConfig, stored_config(cfg), "stored")
    assert machine.launch_env(back.server) == {}
