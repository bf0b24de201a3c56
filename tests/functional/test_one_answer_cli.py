"""What the inspection commands say about a recorded study (no server): a study with nothing
to recommend says why, one line per failed trial, and `export` exits 1; a GPU-style config's
deploy line carries only the environment the config set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from autotune.config.study import load_study_config
from autotune.tuning.record import TrialFacts

CAUSE = ("RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) but "
         "received 4 argument(s).\nDeclaration: _C::static_scaled_fp8_quant() -> ()")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def recorded(tmp_path: Path, tiny_model: Path, rows: list[tuple[dict, list[float] | None]],
             **server: object) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "rec", "server": {"model": str(tiny_model), **server},
        "search_space": "cpu-demo", "workdir": str(tmp_path / "w")}))
    cfg = load_study_config(path)
    Path(cfg.workdir).mkdir(parents=True, exist_ok=True)
    st = optuna.create_study(study_name=cfg.name, storage=cfg.storage_url(),
                             directions=["maximize", "minimize"])
    st.set_metric_names(cfg.metric_names())
    for i, (flags, values) in enumerate(rows):
        if values is None:
            facts = TrialFacts(flags=flags, flags_key=str(i), baseline=(i == 0) or None,
                               cause=CAUSE, failure="ServerBootError")
            st.add_trial(optuna.trial.create_trial(values=[0.0, 1e6], constraints={"boot_ok": 1.0},
                                                   user_attrs=facts.to_attrs()))
        else:
            facts = TrialFacts(flags=flags, flags_key=str(i), baseline=(i == 0) or None,
                               metrics=dict(zip(cfg.metric_names(), values, strict=True)))
            st.add_trial(optuna.trial.create_trial(values=values, constraints={"boot_ok": 0.0},
                                                   user_attrs=facts.to_attrs()))
    return path


def test_a_study_with_nothing_to_recommend_says_why_and_export_exits_1(
        tmp_path: Path, tiny_model: Path) -> None:
    path = recorded(tmp_path, tiny_model, [({}, None), ({"max_num_seqs": 8}, None)])
    t = cli("trials", "--config", str(path))
    assert t.returncode == 0, t.stderr
    assert "recommended: nothing to recommend: no trial was measured" in " ".join(
        t.stdout.split())
    e = cli("export", "--config", str(path))
    err = " ".join(e.stderr.split())
    assert e.returncode == 1 and "Traceback" not in e.stderr
    assert "nothing to recommend" in err
    assert "trial 0: infeasible: Declaration: _C::static_scaled_fp8_quant() -> ()" in err


def test_a_gpu_configs_deploy_line_has_only_the_env_it_set(tmp_path: Path,
                                                            tiny_model: Path) -> None:
    """On a machine without a GPU the CPU default (VLLM_CPU_KVCACHE_SPACE) applies to what the
    study launches; the exported line carries what the config set, and on a GPU study that set
    nothing, nothing."""
    path = recorded(tmp_path, tiny_model, [({}, [100.0, 20.0]), ({"max_num_seqs": 8},
                                                                 [150.0, 18.0])],
                    env={"VLLM_ALLREDUCE_USE_SYMM_MEM": "0"})
    e = cli("export", "--config", str(path))
    assert e.returncode == 0, e.stderr
    line = next(ln for ln in e.stdout.splitlines() if " serve " in ln)
    assert line.startswith("VLLM_ALLREDUCE_USE_SYMM_MEM=0 vllm serve ")
    assert "VLLM_CPU_KVCACHE_SPACE" not in e.stdout
