"""The certify rule, pure (docs/certify.md): from the brackets of the pick's and the defaults'
certify boots, the pick's gain with its interval, and what the certify phase does next (boot
another round of pairs, or end). The product's loop (autotune.tuning.certify.run_certify) and
every simulation of it (autotune.tuning.certify_sim: the unit tests, lab/certify_split.py and
the bias-adjusted figure below) call these same functions, so the rule validated is the rule run.

What keeps it honest with few boots (issue 85's audit of the rule as it stood):

- **Neither first-pass boot counts.** The pick's was chosen for reading high; the defaults'
  was beaten by it (a study reaches its certify phase only where a candidate read above the
  defaults' first boot, which so reads 3-17% low). Only certify boots, booted in pairs in a
  random order, enter the interval (`plan.boots_where(selected=True)` on both sides).
- **One pooled spread, floored.** The spread between boots is pooled over the pick's and the
  defaults' certify boots and taken as at least `certify.noise` (censored.censored_bounds,
  `floor`): two boots that share a bracket read a spread of 0.
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

from autotune.measure.censored import (
    CERTIFY_LEVEL,
    blocked_gain,
    censored_bounds,
    censored_gain,
)
from autotune.measure.stats import Gain
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
# each bracket's machine, the pick's and the defaults' (TrialFacts.machine); None: one machine
Labels = tuple[Sequence[str | None], Sequence[str | None]] | None
# a config-by-machine interaction this unlikely under none: the machine becomes the unit
INTERACTION_P = 0.05


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


def gain(pick: Brackets, base: Brackets, rule: Rule, machines: Labels = None) -> Gain:
    """The pick's gain over the defaults from their certify boots (censored_gain, floored);
    with `machines` (each boot's machine) on more than one, blocked by machine (basis)."""
    return basis(pick, base, rule, machines)[0]


def basis(pick: Brackets, base: Brackets, rule: Rule, machines: Labels = None
          ) -> tuple[Gain, str]:
    """The gain and what it rests on. On one machine, censored_gain over the boots. On several
    (a study resumed elsewhere, workers on several hosts), each machine's boots of the pick
    against its boots of the defaults (censored.blocked_gain: a machine's pace cancels within it),
    pooled over the machines, which assumes a config's gain does not depend on the machine;
    where the machines' gains differ beyond the boots' spread (an F test, p < INTERACTION_P),
    the machine is the unit instead (a t-interval over the machines' gains, machines - 1
    degrees of freedom)."""
    names = sorted({m for side in machines for m in side if m is not None}) \
        if machines is not None else []
    if len(names) < 2:
        return censored_gain(pick, base, rule.level, rule.noise), "one machine"
    assert machines is not None
    blocks = {m: ([v for v, w in zip(pick, machines[0], strict=True) if w == m],
                  [v for v, w in zip(base, machines[1], strict=True) if w == m])
              for m in names}
    blocks = {m: ab for m, ab in blocks.items() if ab[0] and ab[1]}
    med = float(np.exp(np.median([np.log(math.sqrt(lo * hi)) for lo, hi in pick]))) \
        if pick else None
    b = blocked_gain(list(blocks.values()), rule.level, rule.noise)
    if b is None:
        g = censored_gain(pick, base, rule.level, rule.noise)  # every boot counts; no interval
        return Gain(g.gain, g.gain, g.gain, len(pick), len(base), 0.0, med), \
            f"{len(names)} machines, none with two boots of one config and one of the other"
    if b.interaction_p is None or b.interaction_p >= INTERACTION_P or len(blocks) < 2:
        return Gain(math.expm1(b.d), math.expm1(b.low), math.expm1(b.high), len(pick),
                    len(base), 0.0, med), \
            f"pooled over {b.machines} machines, each machine's boots against its own"
    per = [blocked_gain([ab], rule.level, rule.noise) for ab in blocks.values()]
    ds = np.array([x.d for x in per if x is not None])
    lows = [math.log(lo_a / hi_b) for ab in blocks.values()
            for lo_a, hi_b in [(float(np.exp(np.mean(np.log([v[0] for v in ab[0]])))),
                                float(np.exp(np.mean(np.log([v[1] for v in ab[1]])))))]]
    highs = [math.log(hi_a / lo_b) for ab in blocks.values()
             for hi_a, lo_b in [(float(np.exp(np.mean(np.log([v[1] for v in ab[0]])))),
                                 float(np.exp(np.mean(np.log([v[0] for v in ab[1]])))))]]
    m = len(ds)
    if m < 2:
        g = censored_gain(pick, base, rule.level, rule.noise)
        return Gain(g.gain, g.gain, g.gain, len(pick), len(base), 0.0, med), \
            "the machine as the unit: one"
    from scipy.special import stdtrit

    sd = max(float(ds.std(ddof=1)), rule.noise * math.sqrt(2))
    half = float(stdtrit(m - 1, 0.5 + rule.level / 2)) * sd / math.sqrt(m)
    return Gain(math.expm1(float(ds.mean())), math.expm1(float(np.mean(lows)) - half),
                math.expm1(float(np.mean(highs)) + half), len(pick), len(base), 0.0, med), \
        (f"the machine as the unit ({m} machines): the pick's gain differs between them "
         f"beyond the boots' spread (interaction p = {b.interaction_p:.3f})")


def pooled_spread(pick: Brackets, base: Brackets, machines: Labels = None) -> float | None:
    """The boots' spread as read (not floored): the pooled sd of the logs of the brackets'
    midpoints, each config on each machine about its own mean; None with fewer than 2 boots a
    side."""
    if len(pick) < 2 or len(base) < 2 or min(v[0] for v in [*pick, *base]) <= 0:
        return None
    where = machines if machines is not None else ([None] * len(pick), [None] * len(base))
    ss, n, cells = 0.0, 0, 0
    for side, ms in ((pick, where[0]), (base, where[1])):
        for m in set(ms):
            mids = np.log([math.sqrt(lo * hi) for (lo, hi), w in zip(side, ms, strict=True)
                           if w == m])
            ss += float(((mids - mids.mean()) ** 2).sum())
            n, cells = n + len(mids), cells + 1
    return math.sqrt(ss / (n - cells)) if n > cells else None


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
              lanes: int = 1, final: bool = True, pick_no: int | None = None,
              machines: Labels = None) -> Step:
    """The certify phase's decision after its last round (the module's rule): certified where
    the lower bound clears 1.0x at a spread the rule was validated for; not certified where
    the upper bound is under 1.0x, the spread is past VALIDATED_SPREAD, max_boots is reached,
    or the pairs `left` still pays could not clear 1.0x even at max_boots (plan.too_few, where
    `final`: the budget, not a run's timeout, is the limit); budget spent where `left` cannot
    pay a pair and the reference check, or the pairs it pays could decide nothing; else boot
    the next round. `machines`: each boot's machine (basis: pooled over machines, blocked)."""
    g, why = basis(pick, base, rule, machines)
    both = g.n > 1 and g.n_base > 1 and g.low < g.high
    spread = pooled_spread(pick, base, machines) or 0.0
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
