"""A suite's score: one config measured on several profiles, each objective scored against the
baseline trial (vLLM's defaults) per profile and combined into one number per objective.

The score is a ratio to the baseline, so the baseline scores 1.0 and a trial's change against
it reads as usual (1.12: +12%). `worst` takes the worst profile (the smallest ratio of a
maximized metric, the largest of a minimized one): a config scores well only if it does well on
every profile. `weighted` takes the weighted mean of the ratios.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def ratio(value: float, base: float) -> float:
    """value / base, with 0 / 0 as no change."""
    if base == 0:
        return 1.0 if value == 0 else math.inf
    return value / base


def combine(ratios: Mapping[str, float], weights: Mapping[str, float], direction: str,
            how: str) -> float:
    """One objective's score from its per-profile ratios to the baseline."""
    if how == "weighted":
        total = sum(weights[k] for k in ratios)
        return sum(weights[k] * r for k, r in ratios.items()) / total
    return min(ratios.values()) if direction == "maximize" else max(ratios.values())


def worst_case_gain(ratios: Mapping[str, float], direction: str) -> float:
    """The smallest relative gain across profiles (a gain of a minimized metric is a drop)."""
    gains = [(r - 1.0) if direction == "maximize" else (1.0 - r) for r in ratios.values()]
    return min(gains)
