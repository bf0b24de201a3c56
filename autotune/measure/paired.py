"""Paired pass/fail outcomes of two servers on the same task items (docs/quality.md): the drop in
pass rate from the defaults to a config, with Tango's score interval for a difference of paired
proportions, and McNemar's exact test. Pure.

Why Tango's interval: the items are paired (both servers answer the same questions), so only
the discordant items (one passes, the other fails) carry the difference; a bootstrap of the
difference collapses to a point when no item is discordant (0 of 164 changed reads [0, 0],
claiming a certainty 164 items cannot give), while the score interval keeps its width (about
+-0.023 at 95% there) and holds its coverage near the nominal level down to a handful of
discordant items (Tango 1998, Statistics in Medicine 17:891; tests/unit/measure/test_paired.py
simulates it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from scipy.stats import binomtest, norm


@dataclass(frozen=True)
class Paired:
    """The drop from the defaults to a config over `items` paired items."""

    items: int
    defaults_pass: int
    config_pass: int
    lost: int  # items the defaults pass and the config fails
    gained: int  # items the config passes and the defaults fail
    drop: float  # (lost - gained) / items: the defaults' pass rate minus the config's
    low: float  # the drop's interval at `coverage` (Tango's score interval)
    high: float
    coverage: float
    mcnemar_p: float  # McNemar's exact two-sided p-value (the discordant items' binomial test)

    def to_json(self) -> dict[str, float | int]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Paired:
        """From a record that may hold more (the task's name, the items lost and gained)."""
        return cls(**{f.name: d[f.name] for f in fields(cls)})


def _score(lost: int, gained: int, n: int, d: float) -> float:
    """Tango's score statistic for the hypothesis drop = d (decreasing in d)."""
    w = -(lost + gained) + (2 * n - lost + gained) * d
    # the constrained maximum-likelihood probability of a gained item given drop d
    q = (-w + math.sqrt(max(w * w + 8 * n * gained * d * (1 - d), 0.0))) / (4 * n)
    var = n * (2 * q + d * (1 - d))
    diff = lost - gained - n * d
    if var <= 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def _root(lost: int, gained: int, n: int, z: float, lo: float, hi: float) -> float:
    """The d in [lo, hi] where the score statistic crosses z (bisection; it decreases in d)."""
    for _ in range(100):
        mid = (lo + hi) / 2
        if _score(lost, gained, n, mid) > z:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def tango(lost: int, gained: int, n: int, coverage: float = 0.95) -> tuple[float, float]:
    """Tango's score interval for the drop (p_lost - p_gained) at `coverage`."""
    if n <= 0:
        return -1.0, 1.0
    z = float(norm.ppf(1 - (1 - coverage) / 2))
    point = (lost - gained) / n
    edge = 1 - 1e-12
    low = -edge if _score(lost, gained, n, -edge) <= z else _root(lost, gained, n, z, -edge,
                                                                     point)
    high = edge if _score(lost, gained, n, edge) >= -z else _root(lost, gained, n, -z, point,
                                                                   edge)
    return min(low, point), max(high, point)


def paired(defaults: Sequence[bool], config: Sequence[bool], coverage: float = 0.95) -> Paired:
    """The defaults' outcomes against a config's, item by item (same items, same order)."""
    if len(defaults) != len(config):
        raise ValueError(f"paired outcomes of {len(defaults)} and {len(config)} items")
    n = len(defaults)
    lost = sum(d and not c for d, c in zip(defaults, config, strict=True))
    gained = sum(c and not d for d, c in zip(defaults, config, strict=True))
    low, high = tango(lost, gained, n, coverage)
    m = lost + gained
    p = float(binomtest(lost, m, 0.5).pvalue) if m else 1.0
    return Paired(n, sum(defaults), sum(config), lost, gained, (lost - gained) / n if n else 0.0,
                  low, high, coverage, p)
