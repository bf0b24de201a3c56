"""A suite's score and its config (the measurement runs in tests/integration/test_suite_real.py)."""

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from autotune.config import StudyConfig
from autotune.suite import combine, ratio, worst_case_gain


def test_ratios_and_scores() -> None:
    assert ratio(120.0, 100.0) == pytest.approx(1.2)
    assert ratio(0.0, 0.0) == 1.0 and math.isinf(ratio(1.0, 0.0))
    r = {"a": 1.2, "b": 0.9, "c": 1.05}
    w = {"a": 1.0, "b": 1.0, "c": 2.0}
    assert combine(r, w, "maximize", "worst") == 0.9  # the worst profile decides
    assert combine(r, w, "minimize", "worst") == 1.2  # a minimized metric: the largest ratio
    assert combine(r, w, "maximize", "weighted") == pytest.approx((1.2 + 0.9 + 2.1) / 4)
    assert worst_case_gain(r, "maximize") == pytest.approx(-0.1)
    assert worst_case_gain({"a": 0.8, "b": 0.95}, "minimize") == pytest.approx(0.05)


def cfg(**kw: Any) -> dict[str, Any]:
    return {"name": "s", "server": {"model": "/m", "executable": ["vllm"]},
            "search_space": "cpu-demo", **kw}


TWO = [{"name": "random", "input_len": 8, "output_len": 4},
       {"label": "long", "name": "random", "input_len": 64, "output_len": 4, "weight": 2}]


def test_suite_config() -> None:
    c = StudyConfig.model_validate(cfg(profiles=TWO))
    assert [p.key for p in c.workloads()] == ["random", "long"]
    assert c.metric_names() == ["suite_total_token_throughput", "suite_mean_tpot_ms"]
    assert "long/mean_tpot_ms" in c.profile_metrics()
    field = StudyConfig.model_validate(cfg(profiles="field", suite_scale=0.1))
    assert [(p.key, p.num_prompts) for p in field.workloads()] == [
        ("sharegpt", 100), ("1024-128", 100), ("32000-100", 6), ("1000-2000", 6)]
    assert StudyConfig.model_validate(cfg()).metric_names()[0] == "total_token_throughput"


@pytest.mark.parametrize("extra, expect", [
    ({"profiles": []}, "profiles: an empty suite"),
    ({"profiles": [{**TWO[0], "weight": 0}]}, "profiles.0.weight: Input should be greater than 0"),
    ({"profiles": [TWO[0], TWO[0]]}, "two profiles share a label"),
    ({"profiles": TWO, "baseline": False}, "keep baseline: true"),
    ({"profiles": TWO, "profile": TWO[0]}, "profile and profiles: set one"),
    ({"profiles": "gpu-lab"}, "no built-in suite 'gpu-lab'"),
])
def test_bad_suites(extra: dict[str, Any], expect: str) -> None:
    from autotune.errors import ConfigError
    from autotune.schema import parse_model

    with pytest.raises((ValidationError, ConfigError), match=expect):
        parse_model(StudyConfig, cfg(**extra), "study.yaml")


def test_cli_refuses_a_suite_with_workers(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(cfg(profiles=TWO, workdir=str(tmp_path / "w"))))
    r = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(p),
                        "--workers", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--workers: a suite scores every trial against the baseline trial" in r.stderr
