"""The certify rule, pure (docs/certify.md): from the brackets of the pick's and the defaults'
certify boots, the pick's gain with its interval, and what the certify phase does next (boot
another round of pairs, or end). The product's loop (autotune.tuning.certify.run_certify) and
every simulation of it (autotune.tuning.certify_sim: the unit tests, bench/certify_split.py and
the bias-adjusted figure below) call these same functions, so the rule validated is the rule run.

What keeps it honest with few boots (issue 85's audit of the rule as it stood):

- **Neither first-pass boot counts.** The pick's was chosen for reading high; the defaults'
  was beaten by it (a study reaches its certify phase only where a candidate read above the
  defaults' first boot, which so reads 3-17% low). Only certify boots, booted in pairs in a
  random order, enter the interval (`plan.same_config(selected=True)` on both sides).
- **A spread floor.** Each side's spread between boots is taken as at least `certify.noise`
  (stats.censored_gain `floor`): two boots that share a bracket read a spread of 0.
- **One pooled spread, floored.** The spread between boots is pooled over the pick's and the
  defaults' certify boots and taken as at least `certify.noise` (stats.censored_bounds): two
  boots that share a bracket read a spread of 0.
- **A validated spread, and the looks.** A look after every pair, stopping once the bound
  clears, inflates the error of a single look, most where boots spread widely. Simulated as
  the product runs it (certify_sim: the pick the best first boot of K configs, the defaults'
  first boot left out, brackets stepped from each config's median), false certifications stay
  under 5% and the interval's coverage over 90% up to a 40% spread between boots because the
  rule ends "not certified" at any look where the boots' pooled spread reads over
  VALIDATED_SPREAD (without that: 6% false, 89% coverage at 40%).
- **Every boot counts toward `certify.max_boots`**, the first pass's included.
- **The figure is adjusted for stopping early.** Stopping as soon as the lower bound clears 1.0x
  keeps the boots that read high (a true 1.25x certified at a 20% spread read 1.49x on
  average): `adjusted` is the gain whose certifications at this look read, on average, what
  these boots read (a conditional bias-adjusted estimate, by simulating this rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.measure.stats import CERTIFY_LEVEL, Gain, censored_bounds, censored_gain
from autotune.tuning.plan import Costs, too_few

CERTIFIED = "certified"
NOT_CERTIFIED = "not certified"
BUDGET_SPENT = "budget spent"
DEFAULTS = "defaults"  # nothing beat vLLM's defaults: there is no gain to certify

# The largest pooled spread between boots (sd of the logs of the brackets' midpoints) at which
# the rule looks again or certifies: simulated (certify_sim, 1,000-2,000 studies a cell), with
# this refusal false certifications of K = 20 configs no better than the defaults were at most
# 4.4% and coverage at least 91% at true spreads up to 40%; without it, 6% and 89-90% at 40%.
VALIDATED_SPREAD = 0.25

Brackets = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Rule:
    """What the rule is run with: the interval's coverage, boots of each config at most (first
    pass included), the spread floor, and the spread it refuses past."""

    level: float = CERTIFY_LEVEL
    max_boots: int = 5
    noise: float = 0.06
    max_spread: float = VALIDATED_SPREAD

    @property
    def most_certify_boots(self) -> int:
        """Certify boots of each config at most: max_boots less its first-pass boot."""
        return max(self.max_boots - 1, 1)


def gain(pick: Brackets, base: Brackets, rule: Rule) -> Gain:
    """The pick's gain over the defaults from their certify boots (censored_gain, floored)."""
    return censored_gain(pick, base, rule.level, rule.noise)


def pooled_spread(pick: Brackets, base: Brackets) -> float | None:
    """The boots' spread as read (not floored): the pooled sd of the logs of the brackets'
    midpoints, each config about its own mean; None with fewer than 2 boots a side."""
    if len(pick) < 2 or len(base) < 2 or min(v[0] for v in [*pick, *base]) <= 0:
        return None
    mids = [np.log([math.sqrt(lo * hi) for lo, hi in side]) for side in (pick, base)]
    ss = sum(float(m.var(ddof=1)) * (len(m) - 1) for m in mids)
    return math.sqrt(ss / (len(pick) + len(base) - 2))


@dataclass(frozen=True)
class Step:
    """What the certify phase does next: boot `pairs` more pairs (status ""), or end with a
    status (CERTIFIED: the interval clears 1.0x, the reference check follows), why, and what
    a larger budget would still run (budget spent)."""

    pairs: int = 0
    status: str = ""
    why: str = ""
    remaining: str = ""


def round_pairs(lanes: int, most: int, left: float, cost: Costs) -> int:
    """Pairs of certify boots in the next round: as many as the lanes hold at once (one pair
    where boots run one at a time), no more than `most` (the certify boots still allowed), and
    no more than `left` device-minutes pay with the reference check; 0: not one."""
    k = max(1, lanes // 2)
    k = min(k, max(most, 1))
    while k > 0 and left < cost.reserve(k):
        k -= 1
    return k


def next_step(pick: Brackets, base: Brackets, rule: Rule, left: float, cost: Costs,
              lanes: int = 1, final: bool = True, pick_no: int | None = None) -> Step:
    """The certify phase's decision after its last round (the module's rule): certified where
    the lower bound clears 1.0x at a spread the rule was validated for; not certified where
    the upper bound is under 1.0x, the spread is past VALIDATED_SPREAD, max_boots is reached,
    or the pairs `left` still pays could not clear 1.0x even at max_boots (plan.too_few, where
    `final`: the budget, not a run's timeout, is the limit); budget spent where `left` cannot
    pay a pair and the reference check, or the pairs it pays could decide nothing; else boot
    the next round."""
    g = gain(pick, base, rule)
    both = g.n > 1 and g.n_base > 1
    spread = pooled_spread(pick, base) or 0.0
    if both and spread > rule.max_spread:  # at any look: more looks there lose coverage
        return Step(status=NOT_CERTIFIED, why=(
            f"its boots spread {spread:.0%} between boots (pooled sd), beyond the "
            f"{rule.max_spread:.0%} this rule was validated for (docs/certify.md): no interval "
            "over so few boots can be trusted there"))
    if both and g.low > 0:
        return Step(status=CERTIFIED)
    if both and g.high < 0:
        return Step(status=NOT_CERTIFIED, why="it is worse than the defaults beyond the noise")
    done = min(g.n, g.n_base)
    if done >= rule.most_certify_boots:
        return Step(status=NOT_CERTIFIED, why=(
            f"its interval holds no gain ({rule.max_boots} boots each, the first pass's "
            "included)"))
    most = rule.most_certify_boots - done
    k = round_pairs(lanes, most, left, cost)
    few = too_few(list(pick), list(base), most, left, cost, rule.level, rule.noise) \
        if k and final else None
    if few is not None and few.decided:
        return Step(status=NOT_CERTIFIED, why=few.why)
    if k == 0 or few:
        who = f"trial {pick_no}" if pick_no is not None else "the pick"
        return Step(status=BUDGET_SPENT, why=few.why if few else "", remaining=(
            f"up to {most} more boot{'s' if most > 1 else ''} each of {who} and the "
            f"defaults (~{2 * cost.check:.1f} {cost.unit} a pair) and the reference check "
            f"(~{cost.reference:.1f})"))
    return Step(pairs=k)


def adjusted(pick: Brackets, base: Brackets, rule: Rule, sims: int = 4000,
             seed: int = 0) -> float | None:
    """The gain adjusted for stopping at the first look whose lower bound cleared 1.0x: the
    true gain at which this rule, certifying at this look (n pairs, no stop before), reads on
    average the estimate these boots read (simulated at their spread, floored, and their
    brackets' width; common random numbers across the candidates, bisection on the log gain).
    Never below the interval's lower bound nor above the estimate. None: no interval, or the
    interval does not clear 1.0x (nothing was stopped on)."""
    g = gain(pick, base, rule)
    if g.n < 2 or g.n_base < 2 or g.low <= 0:
        return None
    n = min(g.n, g.n_base)
    width = float(np.mean([math.log(hi / lo) for lo, hi in [*pick, *base]])) or 1e-9
    spread = max(pooled_spread(pick, base) or 0.0, rule.noise)
    d_obs, low = math.log1p(g.gain), math.log1p(g.low)
    rng = np.random.default_rng(seed)
    z_a, z_b = rng.normal(size=(2, sims, n))
    off_a, off_b = rng.uniform(size=(2, sims, 1))

    def mean_read(delta: float) -> float | None:
        lo_a = np.floor((delta + spread * z_a) / width - off_a) * width + off_a * width
        lo_b = np.floor(spread * z_b / width - off_b) * width + off_b * width
        stopped = np.zeros(sims, dtype=bool)
        for k in range(2, n):  # an earlier look that decided either way ended the phase
            _, lk, hk = censored_bounds(lo_a[:, :k], lo_a[:, :k] + width, lo_b[:, :k],
                                        lo_b[:, :k] + width, rule.level, rule.noise)
            stopped |= (lk > 0) | (hk < 0)
        d, lk, _ = censored_bounds(lo_a, lo_a + width, lo_b, lo_b + width, rule.level,
                                   rule.noise)
        kept = ~stopped & (lk > 0)
        return float(d[kept].mean()) if kept.sum() >= 50 else None

    lo_d, hi_d = low, d_obs
    if (at := mean_read(lo_d)) is not None and at >= d_obs:
        return math.exp(lo_d)  # even at the lower bound such certifications read this high
    for _ in range(30):
        mid = (lo_d + hi_d) / 2
        m = mean_read(mid)
        if m is None or m < d_obs:
            lo_d = mid
        else:
            hi_d = mid
        if hi_d - lo_d < 1e-3:
            break
    return math.exp((lo_d + hi_d) / 2)
