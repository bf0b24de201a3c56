"""The cause a trial records when both its measurement and the quality guard have one."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.tuning.objective import Objective


class _Guard:
    on = True

    def verdict(self, flags: dict[str, Any], baseline: bool, found: dict[str, Any] | None
                ) -> tuple[dict[str, Any], float, str]:
        return ({"judged": True, "exact_match": 0.3125, "logprob_drop": 0.051, "prompts": 16},
                0.1875, "quality: exact match 31% of 16 prompts (min 50%)")


def test_a_failed_guard_is_named_beside_the_measurements_own_cause() -> None:
    """On the H100 (docs/results/quality/gpu) fp8 KV failed the guard (31% exact, violation
    0.1875) while its capacity point was a client limit: the recorded cause named only the
    client limit, so no view said the guard had failed it."""
    obj = Objective.__new__(Objective)
    obj.guard = _Guard()  # type: ignore[assignment]
    study = optuna.create_study(directions=["maximize"])
    trial = study.ask()
    metrics: dict[str, float] = {}
    cause = obj._judge(trial, {"kv_cache_dtype": "fp8"}, False, {}, "not a server verdict at 64",
                       metrics)
    assert cause == ("not a server verdict at 64; quality: exact match 31% of 16 prompts "
                     "(min 50%)")
    assert metrics == {"quality_exact_match": 0.3125, "quality_logprob_drop": 0.051}
    alone = obj._judge(study.ask(), {"kv_cache_dtype": "fp8"}, False, {}, None, {})
    assert alone == "quality: exact match 31% of 16 prompts (min 50%)"
