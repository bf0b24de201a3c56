"""lab/reference_check.py: its input errors (the check: tests/unit/measure/test_verify.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import lab.reference_check as rc


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


def test_the_scripts_json_keeps_its_fields(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """lab/gpu/moe_accept.py keeps the whole document: the fields the GPU write-ups read,
    and the warm-up sized as --warmup-s of arrivals at C."""
    from autotune.measure import verify as v

    def fake(ref: object, target: v.Target, slos: object, label: str, load: float,
             seed: int, out_dir: Path, n: int | None = None) -> v.RateCheck:
        n = n or target.requests_at(load)
        tpot = 70.0 if label.startswith("C x") else 50.0
        m = {"p99_ttft_ms": 1.0, "p99_tpot_ms": tpot, "completed": n}
        misses = v.judge(m, [], n) + (["p99_tpot_ms"] if tpot > 60 else [])
        return v.RateCheck(label, load, n, seed, m, misses, "misses" if misses else "meets",
                           jit_events=0)

    monkeypatch.setattr(v, "check_rate", fake)
    a = rc.parser().parse_args(["--model", "m", "--capacity", "10", "--url", "http://x",
                                "--samples", "2", "--warmup-s", "3", "--server-log",
                                str(tmp_path / "s.log"), "--out", str(tmp_path / "c.json"),
                                "--vllm", sys.executable])
    a.flags, a.vllm, a.slo = [], [sys.executable], ["p99_ttft_ms<=2000", "p99_tpot_ms<=60"]
    doc = rc.run(a)
    for key in ("model", "capacity", "tolerance", "slos", "samples", "rates", "url",
                "verdicts_agree", "jit_events_in_measured", "warmup"):
        assert key in doc, key
    assert doc["verdicts_agree"] and doc["jit_events_in_measured"] == 0
    assert doc["warmup"]["num_prompts"] == 30 and "s" in doc["warmup"]
    assert [r["rate"] for r in doc["rates"]] == [10.0, pytest.approx(11.0)]
