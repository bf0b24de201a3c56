"""scripts/reference_check.py: the verdict rule and the input errors (no server, no vLLM)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from autotune.cli.bench import parse_slo
from autotune.errors import ConfigError


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "scripts" / "reference_check.py"
    spec = importlib.util.spec_from_file_location("reference_check", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["reference_check"] = mod
    spec.loader.exec_module(mod)
    return mod


rc = _load()
SLOS = [parse_slo("p99_ttft_ms<=2000"), parse_slo("p99_tpot_ms<=60")]


def test_meets_within_every_slo() -> None:
    assert rc.judge({"p99_ttft_ms": 1999.0, "p99_tpot_ms": 60.0, "completed": 480}, SLOS,
                    480) == []


def test_misses_name_the_metric_and_failed_requests() -> None:
    misses = rc.judge({"p99_ttft_ms": 150.0, "p99_tpot_ms": 66.6, "completed": 470}, SLOS, 480)
    assert misses[0].startswith("p99_tpot_ms 66.6") and "10 of 480 requests failed" in misses[1]


def test_an_slo_the_reference_does_not_report_names_it() -> None:
    with pytest.raises(ConfigError, match="reported no p99_e2el_ms"):
        rc.judge({"p99_ttft_ms": 1.0}, [parse_slo("p99_e2el_ms<=9")], 1)


def test_rates_last_the_minimum_duration() -> None:
    assert rc.requests_at(23.82, 20.0, 200) == 477
    assert rc.requests_at(4.0, 20.0, 200) == 200


@pytest.mark.parametrize("argv, needle", [
    (["--capacity", "0", "--url", "http://x"], "--capacity 0"),
    (["--capacity", "5", "--url", "http://x", "--tolerance", "1.5"], "--tolerance 1.5"),
    (["--capacity", "5"], "either --url"),
    (["--capacity", "5", "--url", "http://x", "--slo", "p99<"], "--slo"),
    (["--capacity", "5", "--url", "http://x", "--", "--load-format", "dummy"], "--url"),
])
def test_bad_input_exits_2_with_one_line(argv: list[str], needle: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = rc.main(["--model", "m", "--vllm", sys.executable, "--out",
                    str(tmp_path / "c.json"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err
