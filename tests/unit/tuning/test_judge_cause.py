"""The cause a trial records when both its measurement and the quality guard have one."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.tuning.objective import Objective


class _Guard:
    on = True

    def verdict(self, flags: dict[str, Any], baseline: bool, found: dict[str, Any] | None
                ) -> tuple[dict[str, Any], float, str]:
        return ({"judged": True, "verdict": "fails", "kl": {"kl_mean": [0.0148, 0.0099, 0.0185]},
                 "reason": "KL 0.0148 above the line"},
                1.0, "quality: fails: KL 0.0148 above the line")


def test_a_failed_guard_is_named_beside_the_measurements_own_cause() -> None:
    """On the H100 (docs/results/quality/gpu) fp8 KV failed the guard while its capacity point
    was a client limit: the recorded cause named only the
    client limit, so no view said the guard had failed it. Both are recorded, the guard's
    first."""
    obj = Objective.__new__(Objective)
    obj.guard = _Guard()  # type: ignore[assignment]
    study = optuna.create_study(directions=["maximize"])
    trial = study.ask()
    metrics: dict[str, float] = {}
    cause = obj._judge(trial, {"kv_cache_dtype": "fp8"}, False, {}, "not a server verdict at 64",
                       metrics)
    # the guard's first: a long client-limit cause is cut in the table (200 characters), and
    # the guard's verdict must not be what is cut
    assert cause == "quality: fails: KL 0.0148 above the line; not a server verdict at 64"
    assert metrics == {"quality_kl_mean": 0.0148, "quality_kl_mean_low": 0.0099,
                       "quality_kl_mean_high": 0.0185, "quality_verdict": 1.0}
    alone = obj._judge(study.ask(), {"kv_cache_dtype": "fp8"}, False, {}, None, {})
    assert alone == "quality: fails: KL 0.0148 above the line"


def test_the_report_says_a_guard_failed_on_a_record_from_before_the_joined_cause() -> None:
    """Trial 3 of docs/results/quality/gpu/raw/optuna.db: quality_ok violated, its cause only
    the client limit (it ends in ': '); the report printed 'fails: ' and the last character."""
    from pathlib import Path

    from autotune.outputs.report import quality_markdown
    from autotune.tuning.record import records

    root = Path(__file__).resolve().parents[3]
    study = optuna.load_study(study_name="h100-real-spec", storage="sqlite:///" + str(
        root / "tests/data/quality-gpu-optuna.db"))
    recs = records(study)
    assert recs[3].constraints["quality_ok"] > 0 and "quality:" not in (recs[3].cause or "")
    md = "\n".join(quality_markdown(recs))
    # an earlier guard's records read as they were judged then
    assert "| 3 | fails the guard | - | - | - | - | - | - | fails (earlier guard): 31% exact, " \
        "log-prob drop 0.051 |" in md
    assert "| 1 | passes | - | - | - | - | - | - | passes (earlier guard): 100% exact, " \
        "log-prob drop -0.001 |" in md
