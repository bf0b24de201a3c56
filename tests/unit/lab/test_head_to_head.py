"""lab/head_to_head.py: the judge's verdicts as the summary keeps them, and its reading."""

from __future__ import annotations

from typing import Any

import lab.head_to_head as h2h


def _row(label: str, rate: float, met: bool, ttft: float) -> dict[str, Any]:
    return {"label": label, "rate": rate, "verdict": "meets" if met else "misses",
            "meets_share": 1.0 if met else 0.0, "misses": [] if met else ["p99_ttft_ms"],
            "p99_ttft_ms": ttft, "p99_tpot_ms": 50.0, "samples_n": 3}


def _contender(claim: float | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    judged = {"reference_capacity_verdicts": rows}
    return {"claimed_capacity": claim, "reference": h2h._reference(judged, 3)}


def test_the_reference_is_kept_by_rate_with_the_issues_fields() -> None:
    ref = h2h._reference({"reference_capacity_verdicts": [
        _row("C", 31.4, True, 1900.0), _row("C x 1.1", 34.54, False, 2600.0)]}, 3)
    assert ref == {
        "31.4": {"label": "C", "samples": 3, "met": True, "meets_share": 1.0,
                 "p99_ttft_ms": 1900.0, "p99_tpot_ms": 50.0},
        "34.54": {"label": "C x 1.1", "samples": 3, "met": False, "meets_share": 0.0,
                  "p99_ttft_ms": 2600.0, "p99_tpot_ms": 50.0}}
    assert h2h._reference({"error": "RuntimeError: no boot"}, 3) == {
        "error": "RuntimeError: no boot"}
    assert h2h._reference({}, 3) is None


def test_the_reading_says_which_claims_held_and_ranks_by_the_highest_rate_met() -> None:
    contenders = {
        "autotune": _contender(31.4, [_row("C", 31.4, True, 1900.0),
                                      _row("C x 1.1", 34.54, False, 2600.0)]),
        "auto_tune_sh": _contender(18.0, [_row("C", 18.0, False, 2100.0),
                                          _row("best claim", 31.4, False, 9000.0)]),
        "recipe": _contender(None, [_row("best claim", 31.4, True, 1500.0)]),
        "random": {"claimed_capacity": None, "reference": None},
    }
    r = h2h.reading(contenders)
    assert r is not None
    assert r["claims_held"] == {"autotune": True, "auto_tune_sh": False, "recipe": None,
                                "random": None}
    # autotune and the recipe both met 31.4: the lower p99 TTFT there ranks first
    assert r["ranked_first"] == "recipe"
    assert r["met_at_most"] == {"autotune": 31.4, "auto_tune_sh": None, "recipe": 31.4}


def test_no_reading_before_the_judge_has_run() -> None:
    assert h2h.reading({"autotune": {"claimed_capacity": 31.4, "reference": None}}) is None
