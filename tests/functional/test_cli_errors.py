"""Bad input through the real CLI: one clear error, exit 1, no traceback, nothing in storage.
None of these reaches vLLM (they fail before `vllm serve --help` or any boot)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def study(tmp_path: Path, cfg: dict) -> subprocess.CompletedProcess[str]:
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(cfg) if isinstance(cfg, dict) else cfg)
    return subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(p)],
                          capture_output=True, text=True, timeout=120)


def base(tmp_path: Path, tiny_model: Path, **kw: object) -> dict:
    cfg = {"name": "s", "server": {"model": str(tiny_model)}, "search_space": "cpu-demo",
           "workdir": str(tmp_path / "w")}
    cfg.update(kw)
    return cfg


def check(p: subprocess.CompletedProcess[str], tmp_path: Path, *expect: str) -> None:
    err = " ".join(p.stderr.split())
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert len([ln for ln in p.stderr.splitlines() if ln.startswith("error:")]) == 1
    for e in expect:
        assert e in err, err
    assert not (tmp_path / "w" / "optuna.db").exists()
    assert not list(tmp_path.rglob("server.log"))  # nothing booted


def test_malformed_yaml(tmp_path: Path) -> None:
    p = study(tmp_path, "name: s\nserver: {model: x\nsearch_space: cpu-demo\n")
    check(p, tmp_path, "study.yaml", "line 3", "malformed YAML")


def test_unknown_key_and_wrong_type(tmp_path: Path, tiny_model: Path) -> None:
    p = study(tmp_path, base(tmp_path, tiny_model, n_trails=3, sampler={"name": "bayes"}))
    check(p, tmp_path, "n_trails: unknown key", "sampler.name: Input should be")


def test_bad_client_processes(tmp_path: Path, tiny_model: Path) -> None:
    p = study(tmp_path, base(tmp_path, tiny_model, profile={"client_processes": "many"}))
    check(p, tmp_path, "profile.client_processes: Value error, must be a number of processes "
                       "(1 or more) or auto (got 'many')")


def test_missing_model_path(tmp_path: Path) -> None:
    p = study(tmp_path, base(tmp_path, Path("/nonexistent/model")))
    check(p, tmp_path, "server.model: '/nonexistent/model' does not exist")


def test_missing_and_non_executable_vllm(tmp_path: Path, tiny_model: Path) -> None:
    cfg = base(tmp_path, tiny_model)
    cfg["server"]["executable"] = ["no-such-vllm-binary"]
    check(study(tmp_path, cfg), tmp_path, "server.executable: 'no-such-vllm-binary' was not found")
    f = tmp_path / "vllm"
    f.write_text("#!/bin/sh\n")
    os.chmod(f, 0o644)
    cfg["server"]["executable"] = [str(f)]
    check(study(tmp_path, cfg), tmp_path, "is not executable")


def test_profile_longer_than_max_model_len(tmp_path: Path, tiny_model: Path) -> None:
    cfg = base(tmp_path, tiny_model, profile={"name": "long-context"})
    check(study(tmp_path, cfg), tmp_path, "max_model_len: 512 is shorter than the profile needs",
          "32100 tokens: long-context")


@pytest.mark.parametrize("space", ["empty", "unknown-condition"])
def test_bad_search_space(tmp_path: Path, tiny_model: Path, space: str) -> None:
    text = {"empty": "name: x\nparameters: {}\n",
            "unknown-condition": "name: x\nparameters: {a: {type: bool, when: {zz: [1]}}}\n"}[space]
    (tmp_path / "space.yaml").write_text(text)
    p = study(tmp_path, base(tmp_path, tiny_model, search_space=str(tmp_path / "space.yaml")))
    check(p, tmp_path, "space.yaml", "parameters")


def test_more_workers_than_devices(tmp_path: Path, tiny_model: Path) -> None:
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(base(tmp_path, tiny_model)))
    cores = len(os.sched_getaffinity(0))
    r = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(p),
                        "--workers", str(cores + 1)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    check(r, tmp_path, f"--workers {cores + 1}: this host has {cores} CPU cores")
    r = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(p),
                        "--workers", "2", "--gpus-per-trial", "1"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    check(r, tmp_path, "--workers 2 --gpus-per-trial 1 needs 2 GPUs; CUDA_VISIBLE_DEVICES gives 1 "
                       "(0)")


def test_worker_on_a_missing_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w' / 'optuna.db'}"
    r = subprocess.run([sys.executable, "-m", "autotune", "worker", "--storage", url,
                        "--study-name", "nope"], capture_output=True, text=True, timeout=120)
    err = " ".join(r.stderr.split())
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--study-name: no study 'nope'" in err and "autotune create-study" in err


def test_worker_envs_split_gpus_and_cores() -> None:
    from autotune.tuning.workers import worker_envs

    assert worker_envs(2, 2, gpus=["0", "1", "2", "3"]) == [
        {"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "2,3"}]
    assert worker_envs(2, None, gpus=["4", "5"]) == [
        {"CUDA_VISIBLE_DEVICES": "4"}, {"CUDA_VISIBLE_DEVICES": "5"}]
    assert worker_envs(2, None, gpus=[], cpus=[0, 1, 2, 3, 4]) == [
        {"VLLM_CPU_OMP_THREADS_BIND": "0,1"}, {"VLLM_CPU_OMP_THREADS_BIND": "2,3"}]


def test_warnings_print_as_one_line() -> None:
    """A warning raised under `autotune` reads `warning: ...`, without file, line or category."""
    code = ("import sys, warnings; from autotune import cli\n"
            "cli.cli.add_command(__import__('click').command('warn')(\n"
            "    lambda: warnings.warn('MLflow: could not log [x]; the study goes on')))\n"
            "sys.argv = ['autotune', 'warn']; cli.main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == "warning: MLflow: could not log [x]; the study goes on"


@pytest.mark.parametrize(
    ("storage", "expect"),
    [("postgres-at-home", "storage: 'postgres-at-home' is not a database URL"),
     ("sqlite:///:memory:", "names no file"),
     ("sqlite:////proc/1/study.db", "is not a writable folder")],
    ids=["not-a-url", "memory", "unwritable"])
def test_bad_storage_url(tmp_path: Path, tiny_model: Path, storage: str, expect: str) -> None:
    check(study(tmp_path, base(tmp_path, tiny_model, storage=storage)), tmp_path, expect)


def test_workdir_that_is_a_file(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "afile").write_text("x")
    cfg = base(tmp_path, tiny_model, workdir=str(tmp_path / "afile"))
    check(study(tmp_path, cfg), tmp_path, "workdir:", "is a file, not a folder")


def test_model_directory_vllm_cannot_load(tmp_path: Path) -> None:
    model = tmp_path / "not-a-model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")
    check(study(tmp_path, base(tmp_path, model)), tmp_path,
          "server.model:", "has no config.json")


def test_model_without_tokenizer(tmp_path: Path, tiny_model: Path) -> None:
    model = tmp_path / "no-tok"
    model.mkdir()
    (model / "config.json").write_text((tiny_model / "config.json").read_text())
    check(study(tmp_path, base(tmp_path, model)), tmp_path, "no tokenizer.json")


def test_hub_id_the_cache_lacks_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub id is looked up before the study exists: one error naming the real key and the
    fix, and no empty study left behind."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = base(tmp_path, Path("x"), profile={"name": "random", "input_len": 256,
                                             "output_len": 64})  # fits cpu-demo's 512
    cfg["server"]["model"] = "meta-llama/Llama-3.1-8B-Instruct"
    check(study(tmp_path, cfg), tmp_path,
          "server.model: 'meta-llama/Llama-3.1-8B-Instruct' is not a folder here",
          "hf download meta-llama/Llama-3.1-8B-Instruct", "HF_TOKEN", "server.tokenizer")


def test_chat_endpoint_with_token_id_prompts(tmp_path: Path, tiny_model: Path) -> None:
    cfg = base(tmp_path, tiny_model, profile={"name": "random", "endpoint": "chat"})
    check(study(tmp_path, cfg), tmp_path, "profile: Value error, endpoint: chat needs text "
          "prompts, and the 'random' profile sends token ids")


def test_parallel_knobs_need_several_gpus_per_trial(tmp_path: Path, tiny_model: Path) -> None:
    p = study(tmp_path, base(tmp_path, tiny_model, search_space="multi-gpu-dummy"))
    check(p, tmp_path, "search space 'multi-gpu-dummy': tensor_parallel_size takes sizes up "
                       "to 2, but each trial gets 1 GPU (without --gpus-per-trial): run with "
                       "--gpus-per-trial 2")


def test_more_gpus_per_trial_than_cuda_visible_devices(tmp_path: Path, tiny_model: Path) -> None:
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(base(tmp_path, tiny_model, search_space="multi-gpu-dummy")))
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    r = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(p),
                        "--gpus-per-trial", "2"], capture_output=True, text=True, timeout=120,
                       env={**env, "CUDA_VISIBLE_DEVICES": "0"})
    check(r, tmp_path, "--workers 1 --gpus-per-trial 2 needs 2 GPUs; CUDA_VISIBLE_DEVICES "
                       "gives 1 (0)", "list more GPUs in CUDA_VISIBLE_DEVICES")


def test_confirm_needs_a_study_with_a_measured_baseline(tmp_path: Path, tiny_model: Path) -> None:
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(base(tmp_path, tiny_model)))
    r = subprocess.run([sys.executable, "-m", "autotune", "confirm", "--config", str(p)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error:") and "'s'" in r.stderr


def test_an_interruption_says_what_it_stopped() -> None:
    """Ctrl-C or SIGTERM: the study's note only where a study's trial was running (stopping
    `autotune ui` printed that a trial's server was stopped)."""
    from autotune.cli import interrupted_note

    assert "trial marked in the storage" in interrupted_note(["study", "--config", "s.yaml"])
    assert "trial marked" in interrupted_note(["--debug", "worker", "--storage", "x"])
    assert interrupted_note(["ui"]) == " (ui stopped)"
    assert interrupted_note(["bench", "--model", "m"]) == " (bench stopped)"


def test_a_bad_acceptance_profile_and_acceptance_on_random_weights(
        tmp_path: Path, tiny_model: Path) -> None:
    """server.acceptance is checked with the field named; `autotune acceptance` refuses a
    study that serves random weights (nothing is accepted there) before any boot."""
    bad = base(tmp_path, tiny_model)
    bad["server"] = {"model": str(tiny_model), "shape_only": True,
                     "acceptance": {"ngram": {"mean_length": 5, "measured_k": 2}}}
    check(study(tmp_path, bad), tmp_path, "server.acceptance.ngram",
          "a step emits at most K + 1 tokens")
    shape = base(tmp_path, tiny_model)
    shape["server"] = {"model": str(tiny_model), "shape_only": True}
    path = tmp_path / "shape.yaml"
    path.write_text(yaml.safe_dump(shape))
    p = subprocess.run([sys.executable, "-m", "autotune", "acceptance", "--config", str(path),
                        "--method", "ngram"], capture_output=True, text=True, timeout=120)
    check(p, tmp_path, "server.shape_only", "measured on the model's own weights")
