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


def test_a_rate_is_judged_on_the_median_of_its_samples() -> None:
    """One sample's p99 TPOT at a fixed rate spread 30-66% of the rate's median on the H100 MoE
    (docs/results/warm-server-h100): a rate is judged on the median over fresh samples, and a
    failed request in any sample is a miss."""
    def sample(tpot: float, completed: int = 100) -> object:
        c = rc.RateCheck("C", 44.0, 100, 0, {"p99_ttft_ms": 400.0, "p99_tpot_ms": tpot,
                                             "completed": completed})
        c.misses = rc.judge(c.metrics, SLOS, 100)
        c.verdict = "misses" if c.misses else "meets"
        return c

    one_bad = [sample(42.7), sample(66.3), sample(36.2), sample(50.9)]  # the MoE at 44 req/s
    p = rc.pooled("C", 44.0, one_bad, SLOS)
    assert p["verdict"] == "meets" and p["metrics"]["p99_tpot_ms"] == pytest.approx(46.8)
    assert p["meets_share"] == 0.75 and len(p["samples"]) == 4
    failed = rc.pooled("C", 44.0, [sample(40.0), sample(41.0, completed=98)], SLOS)
    assert failed["verdict"] == "misses" and "2 of 200 requests failed" in failed["misses"][0]


def test_samples_alternate_the_rates_with_fresh_seeds(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int]] = []

    def fake(a: object, url: str, log: object, label: str, rate: float, seed: int,
             slos: object, out_dir: Path) -> object:
        seen.append((label, seed))
        tpot = 50.0 if label == "C" else 70.0
        c = rc.RateCheck(label, rate, 10, seed, {"p99_ttft_ms": 1.0, "p99_tpot_ms": tpot,
                                                 "completed": 10})
        c.misses = rc.judge(c.metrics, SLOS, 10)
        c.verdict = "misses" if c.misses else "meets"
        return c

    monkeypatch.setattr(rc, "check_rate", fake)
    a = rc.parser().parse_args(["--model", "m", "--capacity", "10", "--url", "http://x",
                                "--samples", "3", "--warmup-s", "0", "--out",
                                str(tmp_path / "c.json"), "--vllm", sys.executable])
    a.flags, a.vllm, a.slo = [], [sys.executable], ["p99_ttft_ms<=2000", "p99_tpot_ms<=60"]
    doc = rc.run(a)
    assert doc["verdicts_agree"] and [r["samples_n"] for r in doc["rates"]] == [3, 3]
    assert len({s for _, s in seen}) == 6  # a fresh request sample each run
    assert {lab for lab, _ in seen[:2]} == {"C", "C x 1.1"}  # both rates in each round
