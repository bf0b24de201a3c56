"""Honest numbers: medians with intervals whose coverage is stated, a gain with its interval, and
the choice of a config on its lower confidence bound instead of its luckiest measurement.

A config measured r times gets the median of its r values and an order-statistic interval of
that median: the k-th smallest and k-th largest values, whose chance of holding the true median
is exactly 1 - 2 P(B <= k - 1), B ~ Binomial(r, 1/2), whatever the distribution. It is a 95%
interval from 6 boots on; with fewer it is their range, and its coverage is said (3 boots: 75%).

A gain of A over a baseline B is the ratio of their geometric means minus one, with a Welch
t-interval on the difference of the logs (95% when boot-to-boot noise is log-normal; the unit
tests check the coverage by simulation). A gain whose interval holds 0, or whose size is inside
the noise floor (the baseline's relative standard deviation), reads "no significant change"; a
single measurement is marked as one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
# a gain's interval from fewer boots than this on either side bounds nothing: with 2 each, Welch's
# t has 1 to 2 degrees of freedom (t = 4.3 to 12.7) and the README demo's validation printed
# "+23.9% [-91.7, +1756.6]"; with 3 each it has 2 to 4
MIN_BOOTS = 3
# a boot count a reader can still act on; above it, "more than" this is said
MAX_BOOTS_SAID = 50


def rel_sd(values: Sequence[float]) -> float:
    """Relative standard deviation (0 for fewer than two values)."""
    if len(values) < 2 or not statistics.fmean(values):
        return 0.0
    return statistics.stdev(values) / abs(statistics.fmean(values))


def median_coverage(n: int, level: float = LEVEL) -> tuple[int, float]:
    """(k, coverage): the interval [X(k), X(n+1-k)] of the median of n values, with the largest
    k whose exact coverage 1 - 2 P(B <= k - 1), B ~ Binomial(n, 1/2), is at least `level`; when
    no k reaches it (n < 6 at 95%), k = 1 (the range) and its coverage 1 - 2^(1-n)."""
    if n < 2:
        return 1, 0.0
    cdf = _binom_cdf(n, 0.5)
    k = 1
    while k + 1 <= (n + 1) // 2 and 1 - 2 * cdf[k] >= level:
        k += 1
    return k, float(1 - 2 * cdf[k - 1])


def median_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(median, low, high): the order-statistic interval of the median (`median_coverage` says
    its exact coverage: 95% from 6 values, the range below that)."""
    x = np.sort(np.asarray(values, dtype=float))
    med = float(np.median(x))
    if len(x) < 2:
        return med, med, med
    k, _ = median_coverage(len(x), level)
    return med, float(x[k - 1]), float(x[len(x) - k])


def interval_name(n: int, level: float = LEVEL) -> str:
    """How a table heads a median's interval over n boots: "95% interval", or "range of 3 boots,
    covers 75%" where the boots are too few for `level`."""
    _, cov = median_coverage(n, level)
    return f"{level:.0%} interval" if cov >= level else f"range of {n} boots, covers {cov:.0%}"


def boots_for_width(rel_sd: float, half_width: float, level: float = LEVEL) -> int:
    """Boots of each of two configs for a gain interval of +-`half_width` (relative) at
    `level`, with boot-to-boot noise `rel_sd` (log-normal): the smallest n with
    t(n) * rel_sd * sqrt(2 / n) <= half_width."""
    from scipy.stats import t as student

    n = 2
    while student.ppf(0.5 + level / 2, 2 * n - 2) * rel_sd * math.sqrt(2 / n) > half_width:
        n += 1
        if n > 10_000:
            break
    return n


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
    """A's figure over the baseline's, minus one, with its interval (maximize: up is good).
    The figures are `value` and `base_value`, so a surface shows the very numbers the gain
    divides: 1 + gain == value / base_value."""

    gain: float
    low: float
    high: float
    n: int  # A's measurements
    n_base: int
    noise_floor: float  # the baseline's relative standard deviation
    value: float | None = None  # A's figure the gain is of (gain_ci: its geometric mean)
    log_sd: float | None = None  # the boots' spread: the pooled sd of the logs of A and B
    base_value: float | None = None  # the baseline's figure, the one the gain divides by

    @property
    def bounded(self) -> bool:
        """Whether both sides have the boots (MIN_BOOTS) for the interval to bound the gain."""
        return self.n >= MIN_BOOTS and self.n_base >= MIN_BOOTS

    @property
    def significant(self) -> bool:
        return (self.bounded and not self.low <= 0.0 <= self.high
                and abs(self.gain) > self.noise_floor)

    def boots_needed(self) -> int | None:
        """Boots of each side for an interval that tells this gain from none (a half-width of
        |gain|, at least 5%), at the spread measured; None without a spread."""
        if not self.log_sd:
            return None
        return max(MIN_BOOTS, boots_for_width(self.log_sd, max(abs(self.gain), 0.05)))

    def text(self) -> str:
        if self.n < 2 or self.n_base < 2:
            return f"{self.gain * 100:+.1f}% (one measurement)"
        if not self.bounded:
            need = self.boots_needed()
            would = f"{need} boots each would" if need is not None and need <= MAX_BOOTS_SAID \
                else f"more than {MAX_BOOTS_SAID} boots each would" if need is not None \
                else f"{MIN_BOOTS} boots each at least would"
            return (f"{self.gain * 100:+.1f}%, too few boots to bound it (n={self.n}"
                    + ("" if self.n_base == self.n else f", defaults {self.n_base}")
                    + f"; {would} at this spread)")
        if not self.significant:
            return (f"no significant change ({self.gain * 100:+.1f}% "
                    f"[{self.low * 100:+.1f}, {self.high * 100:+.1f}])")
        return f"{self.gain * 100:+.1f}% [{self.low * 100:+.1f}, {self.high * 100:+.1f}]"


def gain_ci(values: Sequence[float], base: Sequence[float], level: float = LEVEL) -> Gain:
    """The gain of `values` over `base`: the ratio of their geometric means minus one, with a
    Welch t-interval on the difference of their logs (its coverage is `level` when the noise is
    log-normal). One measurement on either side: the ratio, no interval. Values at or below 0
    (no log): the ratio of the medians, no interval. The geometric means (or those medians)
    are the Gain's `value` and `base_value`: the figures to show beside it, not the medians
    (a median of 3 boots of the defaults read 15,100 where their geometric mean, which a
    +1.9% divided by, was 14,610.58: the gain read as a loss)."""
    from scipy.stats import t as student

    a, b = np.asarray(values, dtype=float), np.asarray(base, dtype=float)
    if (a <= 0).any() or (b <= 0).any():
        med, bmed = float(np.median(a)), float(np.median(b))
        g = med / bmed - 1 if bmed else 0.0
        return Gain(g, g, g, 1, 1, rel_sd(base), med, None, bmed)
    la, lb = np.log(a), np.log(b)
    d = float(la.mean() - lb.mean())
    g = math.expm1(d)
    of, against = float(np.exp(la.mean())), float(np.exp(lb.mean()))
    if len(a) < 2 or len(b) < 2:
        return Gain(g, g, g, len(a), len(b), rel_sd(base), of, None, against)
    va, vb = float(la.var(ddof=1)) / len(a), float(lb.var(ddof=1)) / len(b)
    se = math.sqrt(va + vb)
    spread = math.sqrt((float(la.var(ddof=1)) + float(lb.var(ddof=1))) / 2)
    if se == 0:
        return Gain(g, g, g, len(a), len(b), rel_sd(base), of, spread, against)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    t = float(student.ppf(0.5 + level / 2, df))
    return Gain(g, math.expm1(d - t * se), math.expm1(d + t * se), len(a), len(b),
                rel_sd(base), of, spread, against)


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
