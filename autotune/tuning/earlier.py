"""What a new trial reads of the trials before it: its flags as one canonical key, an earlier
trial whose same flags failed (its verdict is reused: those flags are never booted again), and
the incumbent's capacity (where a capacity search starts, and below which it stops early)."""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.tuning.record import facts_of, records


def flags_key(flags: dict[str, Any]) -> str:
    return json.dumps(flags, sort_keys=True, separators=(",", ":"))


def failed_before(study: optuna.Study, key: str) -> FrozenTrial | None:
    """A finished trial whose same flags (`key`) failed, not fatally (TrialFacts.fatal); or
    None."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        was = facts_of(t)
        if was.flags_key == key and was.failure and not was.fatal:
            return t
    return None


def incumbent(study: optuna.Study, per_gpu: bool = False, key: str = "capacity"
              ) -> float | None:
    """The highest capacity (`key`: a suite's `<label>/capacity`) a feasible trial of the study
    has reached so far (per GPU its server used, with `per_gpu`)."""
    caps = [r.metrics[key] / (r.metrics.get("gpus", 1.0) if per_gpu else 1.0)
            for r in records(study) if r.feasible and key in r.metrics]
    return max(caps) if caps else None
