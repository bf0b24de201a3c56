"""A study name reused for another workload, through the real CLI entry in this process (the
measurement replaced by tests/fakes.py, the vLLM help by a stand-in): one error naming what
differs and the fix, exit 1, nothing measured; --force-new keeps the old study, renamed, and
starts a fresh one under the name."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.config.study import load_study_config
from autotune.server.vllm_help import VllmInfo
from autotune.tuning import objective, preflight
from tests.fakes import fake_bench
from tests.functional.test_trial_errors import SPACE, run_cli


def test_a_name_reused_for_another_workload_is_refused_and_force_new_starts_afresh(
        tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    cfg = {"name": "gpu-example", "server": {"model": str(tiny_model),
                                             "executable": [sys.executable]},
           "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
           "search_space": str(tmp_path / "space.yaml"), "n_trials": 2,
           "sampler": {"name": "random", "seed": 1}, "workdir": str(tmp_path / "w")}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setattr(preflight, "get_vllm_info",
                        lambda *a, **k: VllmInfo("test", frozenset({"max_num_seqs"})))
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(objective, "run_boot", fake_bench(calls))
    code, err = run_cli(["study", "--config", str(path), "--no-mlflow"], capsys)
    assert code == 0, err
    assert len(calls) == 2

    # the file copied with its name kept, another workload
    cfg["profile"]["input_len"] = 16
    path.write_text(yaml.safe_dump(cfg))
    code, err = run_cli(["study", "--config", str(path), "--no-mlflow", "--n-trials", "4"],
                        capsys)
    assert code == 1 and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1
    text = " ".join(err.split())
    assert "study 'gpu-example'" in text and "was created for another setup" in text
    assert "profile.input_len: 8 -> 16" in text
    assert "new `name:`" in text and "--force-new" in text
    assert len(calls) == 2  # nothing booted

    code, err = run_cli(["study", "--config", str(path), "--no-mlflow", "--force-new"], capsys)
    assert code == 0, err
    assert len(calls) == 4
    url = load_study_config(path).storage_url()
    names = sorted(s.study_name for s in optuna.get_all_study_summaries(url))
    assert names[0] == "gpu-example" and names[1].startswith("gpu-example.old-")
    for name in names:  # each study whole: its own two trials
        assert len(optuna.load_study(study_name=name, storage=url).get_trials()) == 2
    assert f"--force-new: study 'gpu-example' set aside as '{names[1]}'" in " ".join(
        err.split())
