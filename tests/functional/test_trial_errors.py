"""An unexpected exception inside a trial, through the real CLI entry in this process (the
measurement replaced by tests/fakes.py, the vLLM help by a stand-in): one error line, no
traceback, the trial recorded, and the same command resumes and completes the study."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.cli import main
from autotune.config.study import load_study_config
from autotune.server.vllm_help import VllmInfo
from autotune.tuning import objective, preflight
from autotune.tuning.record import Status, records
from tests.fakes import fake_bench

SPACE = {"name": "t", "parameters": {"max_num_seqs": {"type": "categorical",
                                                      "choices": [4, 8, 16]}}}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    old = sys.argv
    sys.argv = ["autotune", *argv]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        sys.argv = old
    return code, capsys.readouterr().err


def test_unexpected_exception_is_recorded_and_resumed(
        tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    cfg = {"name": "boom", "server": {"model": str(tiny_model), "executable": [sys.executable]},
           "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
           "search_space": str(tmp_path / "space.yaml"), "n_trials": 3,
           "sampler": {"name": "random", "seed": 1}, "workdir": str(tmp_path / "w")}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    info = VllmInfo("test", frozenset({"max_num_seqs"}))
    monkeypatch.setattr(preflight, "get_vllm_info", lambda *a, **k: info)
    calls: list[dict[str, Any]] = []
    # what the GPU machine saw: the working directory removed under the study
    injected = FileNotFoundError(2, "No such file or directory (os.getcwd)")
    monkeypatch.setattr(objective, "run_boot", fake_bench(calls, raise_first=injected))

    code, err = run_cli(["study", "--config", str(path), "--no-mlflow"], capsys)
    assert code == 1
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "trial 0 stopped on an unexpected FileNotFoundError" in lines[0]
    assert "the same command resumes" in " ".join(err.split())
    c = load_study_config(path)
    st = optuna.load_study(study_name=c.name, storage=c.storage_url())
    (rec,) = records(st)
    assert rec.status == Status.ERROR and rec.facts.error is not None
    assert rec.facts.error["type"] == "FileNotFoundError" and rec.facts.log_path
    assert rec.values == {}

    code, err = run_cli(["study", "--config", str(path), "--no-mlflow"], capsys)
    assert code == 0, err
    recs = records(optuna.load_study(study_name=c.name, storage=c.storage_url()))
    assert [r.status for r in recs] == [Status.ERROR, Status.OK, Status.OK, Status.OK]
    assert recs[1].baseline  # the baseline the error stopped runs again
    assert len(calls) == 4

    # --debug shows the traceback instead
    monkeypatch.setattr(objective, "run_boot", fake_bench([], raise_first=RuntimeError("x")))
    with pytest.raises(Exception, match="trial 4 stopped on an unexpected RuntimeError"):
        sys.argv = ["autotune", "--debug", "study", "--config", str(path), "--no-mlflow",
                    "--n-trials", "5"]
        try:
            main()
        finally:
            sys.argv = ["pytest"]
