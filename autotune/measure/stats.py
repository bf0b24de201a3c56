"""Honest numbers: medians with bootstrap confidence intervals, a gain with its interval, and
the choice of a config on its lower confidence bound instead of its luckiest measurement.

A config measured r times gets the median of its r values and a percentile-bootstrap interval
of that median. A gain of A over a baseline B is the ratio of their medians minus one, with a
bootstrap interval from resampling both sets. A gain whose interval holds 0, or whose size is
inside the noise floor (the baseline's relative standard deviation), reads "no significant
change"; a single measurement is marked as one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
BOOTSTRAP = 2000


def rel_sd(values: Sequence[float]) -> float:
    """Relative standard deviation (0 for fewer than two values)."""
    if len(values) < 2 or not statistics.fmean(values):
        return 0.0
    return statistics.stdev(values) / abs(statistics.fmean(values))


def _boot_medians(x: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    """The medians of `n` resamples of `x` (with replacement)."""
    return np.asarray(np.median(rng.choice(x, size=(n, len(x)), replace=True), axis=1))


def median_ci(values: Sequence[float], level: float = LEVEL, n: int = BOOTSTRAP,
              seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the percentile-bootstrap interval of the median."""
    x = np.asarray(values, dtype=float)
    med = float(np.median(x))
    if len(x) < 2:
        return med, med, med
    boots = _boot_medians(x, np.random.default_rng(seed), n)
    a = (1 - level) / 2
    return med, float(np.quantile(boots, a)), float(np.quantile(boots, 1 - a))


def _binom_cdf(n: int, p: float) -> np.ndarray:
    """P(Binomial(n, p) <= j) for j = 0..n (the pmf by its ratio recurrence, in log space)."""
    j = np.arange(n, dtype=float)
    steps = np.log((n - j) / (j + 1)) + math.log(p) - math.log1p(-p)
    logpmf = np.concatenate([[n * math.log1p(-p)], n * math.log1p(-p) + np.cumsum(steps)])
    pmf = np.exp(logpmf - logpmf.max())
    return np.asarray(np.cumsum(pmf) / pmf.sum())


def percentile_ranks(n: int, q: float, level: float = LEVEL) -> tuple[int, int]:
    """The 1-based ranks (k, u) of the order statistics that bound the q-th percentile of n
    values at `level` (percentile_interval): X(k) <= the percentile <= X(u) with probability
    `level`. k may be 0 (no lower bound among the values) and u may exceed n."""
    cdf, a = _binom_cdf(n, q / 100.0), (1.0 - level) / 2.0
    # X(k), the k-th smallest, is <= the percentile with probability P(B >= k), B ~
    # Binomial(n, q): the lower end is the largest k with P(B <= k - 1) <= a, the upper the
    # smallest u with P(B <= u - 1) >= 1 - a
    return int(np.count_nonzero(cdf <= a)), int(np.argmax(cdf >= 1.0 - a)) + 1


def percentile_interval(values: Sequence[float], q: float, level: float = LEVEL
                        ) -> tuple[float, float]:
    """A distribution-free interval of the q-th percentile (0 < q < 100) from its order
    statistics: the k-th smallest of n values lies below the true percentile with the
    probability that a Binomial(n, q/100) is at least k, so the interval is the pair of order
    statistics whose ranks hold the binomial's central `level` (an upper end past the largest
    value is the largest value: a p99 of 100 values has no upper bound but its maximum).
    It assumes the values are independent draws; requests of one load point are not quite
    (a queue links neighbours), which docs/capacity.md discusses."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    k, u = percentile_ranks(n, q, level)
    return float(x[max(k, 1) - 1]), float(x[min(u, n) - 1])


@dataclass(frozen=True)
class Gain:
    """A's median over the baseline's, minus one, with its interval (maximize: up is good)."""

    gain: float
    low: float
    high: float
    n: int  # A's measurements
    n_base: int
    noise_floor: float  # the baseline's relative standard deviation
    median: float | None = None  # A's median, the value the gain is of

    @property
    def significant(self) -> bool:
        return (self.n > 1 and self.n_base > 1 and not self.low <= 0.0 <= self.high
                and abs(self.gain) > self.noise_floor)

    def text(self) -> str:
        if self.n < 2 or self.n_base < 2:
            return f"{self.gain * 100:+.1f}% (one measurement)"
        if not self.significant:
            return (f"no significant change ({self.gain * 100:+.1f}% "
                    f"[{self.low * 100:+.1f}, {self.high * 100:+.1f}])")
        return f"{self.gain * 100:+.1f}% [{self.low * 100:+.1f}, {self.high * 100:+.1f}]"


def gain_ci(values: Sequence[float], base: Sequence[float], level: float = LEVEL,
            n: int = BOOTSTRAP, seed: int = 0) -> Gain:
    """The gain of `values` over `base` (ratio of medians - 1) with a bootstrap interval."""
    a, b = np.asarray(values, dtype=float), np.asarray(base, dtype=float)
    g = float(np.median(a) / np.median(b) - 1)
    if len(a) < 2 or len(b) < 2:
        return Gain(g, g, g, len(a), len(b), rel_sd(base), float(np.median(a)))
    rng = np.random.default_rng(seed)
    boots = _boot_medians(a, rng, n) / _boot_medians(b, rng, n) - 1
    q = (1 - level) / 2
    return Gain(g, float(np.quantile(boots, q)), float(np.quantile(boots, 1 - q)), len(a),
                len(b), rel_sd(base), float(np.median(a)))


def pick(samples: Mapping[str, Sequence[float]], rule: str = "lower_bound",
         maximize: bool = True) -> str:
    """The config to recommend: the best lower confidence bound of the median (the best upper
    bound when minimizing), or with rule "point", the best median."""
    def score(k: str) -> float:
        med, lo, hi = median_ci(samples[k])
        if rule == "point":
            return med if maximize else -med
        return lo if maximize else -hi
    return max(samples, key=score)
