"""A gain known only through brackets: boots whose capacity a search found to [met, missed),
as a certification counts them (autotune.tuning.certify_rule). censored_gain compares one
machine's boots of a config with its boots of the baseline; blocked_gain pools several
machines, each compared with its own; projected says what more boots would give. The
intervals' coverage, simulated as the product runs them, is tests/unit/tuning/
test_certify_rule.py's and test_certify_machines.py's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.measure.stats import Gain, rel_sd

# A certified gain (autotune.tuning.certify): the coverage its interval states. Over boots, the
# boot-to-boot spread is the noise that matters (one config's capacity spread 15-36% between
# boots of one MoE host), so a gain is certified on boots, not on one boot's requests.
CERTIFY_LEVEL = 0.90


def censored_gain(values: Sequence[tuple[float, float]], base: Sequence[tuple[float, float]],
                  level: float = CERTIFY_LEVEL, floor: float = 0.0) -> Gain:
    """The gain of a config over the baseline from boots whose value is known only to lie in
    [low, high): a capacity search's (capacity met, lowest load missed above it). The estimate is
    the ratio of the geometric means of the boots' midpoints (in logs). Its interval joins two
    parts: the bracket itself, exactly (the mean of the configs' low ends against the
    baseline's high ends, and the reverse), widened by a t-interval of the midpoints' spread
    between boots at `level`, pooled over both sides (censored_bounds). The first holds
    whatever the boots are; the second covers their spread. `floor`: that
    spread (sd of the logs) is taken as at least this (the planned boot-to-boot spread,
    certify.noise): boots that share a bracket read a spread of 0,
    and an interval that believed it certified 1.25x [1.13, 1.38] from the pick's two boots in
    one bracket where one bracket higher gave [0.89, 1.93] (issue 85's audit). Fewer than 2
    boots on either side: the estimate, no interval (n says so). The certify rule built on it,
    and its simulated coverage, is autotune.tuning.certify_rule's."""
    if not values or not base or min(v[0] for v in [*values, *base]) <= 0:
        return Gain(0.0, 0.0, 0.0, 0, 0, 0.0, None)
    lo_a, hi_a = np.log([v[0] for v in values]), np.log([v[1] for v in values])
    lo_b, hi_b = np.log([v[0] for v in base]), np.log([v[1] for v in base])
    mid_a, mid_b = (lo_a + hi_a) / 2, (lo_b + hi_b) / 2
    d = float(mid_a.mean() - mid_b.mean())
    g = math.expm1(d)
    of, against = float(np.exp(mid_a.mean())), float(np.exp(mid_b.mean()))
    noise = rel_sd(np.exp(mid_b).tolist())
    if len(mid_a) < 2 or len(mid_b) < 2:
        return Gain(g, g, g, len(mid_a), len(mid_b), noise, of, None, against)
    _, low, high = censored_bounds(lo_a, hi_a, lo_b, hi_b, level, floor)
    return Gain(g, math.expm1(float(low)), math.expm1(float(high)), len(mid_a), len(mid_b),
                noise, of, None, against)


def censored_bounds(lo_a: np.ndarray, hi_a: np.ndarray, lo_b: np.ndarray, hi_b: np.ndarray,
                    level: float, floor: float = 0.0
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """censored_gain's arithmetic on the logs of the brackets' ends, over the last axis (boots,
    at least 2 a side), for one study or many at once (the rule's simulations,
    autotune.tuning.certify_rule): (the log of the estimate, the lower bound, the upper)."""
    from scipy.special import stdtrit  # Student's t quantile: stats.t.ppf, without its overhead

    mid_a, mid_b = (lo_a + hi_a) / 2, (lo_b + hi_b) / 2
    na, nb = mid_a.shape[-1], mid_b.shape[-1]
    d = mid_a.mean(-1) - mid_b.mean(-1)
    # one spread for both sides, pooled, and at least `floor`: on one machine the pick and the
    # defaults spread alike (6.2% and 8.5% of their boots on the H200 x2), a side whose boots
    # share a bracket reads none of its own, and two boots a side give the pooled spread 2
    # degrees of freedom where Welch's on each side's gets 1 to 2 (simulated as the product
    # runs, certify_sim: a 1.4x pick at a 6% spread certified on two certify boots each 68% of
    # the time pooled, 57% with Welch on each side floored, both covering >= 91% up to a 40%
    # spread with the rule's refusal past VALIDATED_SPREAD)
    v = np.maximum(((na - 1) * mid_a.var(-1, ddof=1) + (nb - 1) * mid_b.var(-1, ddof=1))
                   / (na + nb - 2), floor ** 2)
    se = np.sqrt(v / na + v / nb)
    t = np.where(se > 0, stdtrit(na + nb - 2, 0.5 + level / 2), 0.0)
    low = lo_a.mean(-1) - hi_b.mean(-1) - t * se
    high = hi_a.mean(-1) - lo_b.mean(-1) + t * se
    return d, low, high


def projected(values: Sequence[tuple[float, float]], base: Sequence[tuple[float, float]],
              more: int, level: float = CERTIFY_LEVEL, floor: float = 0.0
              ) -> tuple[float, float] | None:
    """The interval censored_gain would give after `more` boots of each, were the boots to keep
    their brackets' mean width and midpoints' spread: its lower bound with the estimate one
    standard error above where it is now, its upper bound with the estimate one below (hoped
    and feared, so that a phase stopped on them rarely stops one that would have reached a
    verdict either way). None: fewer than 2 boots on either side (no spread yet). Simulated
    (lab/certify_split.py), stopping a certify phase where the pairs its budget still pays
    could decide neither way (plan.too_few) certified as often within 1.2 points and spent up
    to 4% of the budget less on average."""
    from scipy.stats import t as student

    if len(values) < 2 or len(base) < 2 or min(v[0] for v in [*values, *base]) <= 0:
        return None
    lo_a, hi_a = np.log([v[0] for v in values]), np.log([v[1] for v in values])
    lo_b, hi_b = np.log([v[0] for v in base]), np.log([v[1] for v in base])
    mid_a, mid_b = (lo_a + hi_a) / 2, (lo_b + hi_b) / 2
    d = float(mid_a.mean() - mid_b.mean())
    half = float((hi_a - lo_a).mean() + (hi_b - lo_b).mean()) / 2
    na, nb = len(mid_a), len(mid_b)
    v = max(((na - 1) * float(mid_a.var(ddof=1)) + (nb - 1) * float(mid_b.var(ddof=1)))
            / (na + nb - 2), floor ** 2)  # pooled, as censored_bounds
    now = math.sqrt(v / na + v / nb)
    a, b = v / (na + more), v / (nb + more)
    t = float(student.ppf(0.5 + level / 2, na + nb + 2 * more - 2)) if a + b > 0 else 0.0
    reach = half + t * math.sqrt(a + b)
    return math.expm1(d + now - reach), math.expm1(d - now + reach)


@dataclass(frozen=True)
class Blocked:
    """The gain over boots of two configs on several machines (blocked_gain): the log estimate
    and bounds, the residual degrees of freedom, the machines that held boots of both, and the
    p-value of a config-by-machine interaction (None: untestable)."""

    d: float
    low: float
    high: float
    df: int
    machines: int
    interaction_p: float | None


def blocked_gain(blocks: Sequence[tuple[Sequence[tuple[float, float]],
                                        Sequence[tuple[float, float]]]],
                 level: float = CERTIFY_LEVEL, floor: float = 0.0) -> Blocked | None:
    """censored_gain with the machine as a block: each block is one machine's boots of the
    config and of the baseline (brackets). Within a machine the two compare as censored_gain
    compares them; the estimate weighs each machine's difference of mean log midpoints (and
    its brackets' ends) by 1 / (1/n_a + 1/n_b), and the spread between boots is pooled within
    the machines' configs (N - 2M degrees of freedom), floored at `floor`: a machine's own pace
    cancels within it. One machine: exactly censored_bounds. The interaction test is an F test
    of the machines' differences around the estimate against that spread (floored). None:
    no machine holds two boots, one of each, or fewer than one degree of freedom remains."""
    from scipy.special import stdtrit
    from scipy.stats import f as fisher

    rows = []
    for a, b in blocks:
        if not a or not b or min(v[0] for v in [*a, *b]) <= 0:
            continue
        la, ha = np.log([v[0] for v in a]), np.log([v[1] for v in a])
        lb, hb = np.log([v[0] for v in b]), np.log([v[1] for v in b])
        ma, mb = (la + ha) / 2, (lb + hb) / 2
        ss = float(((ma - ma.mean()) ** 2).sum() + ((mb - mb.mean()) ** 2).sum())
        w = 1 / (1 / len(ma) + 1 / len(mb))
        rows.append((w, float(ma.mean() - mb.mean()), float(la.mean() - hb.mean()),
                     float(ha.mean() - lb.mean()), ss, len(ma) + len(mb)))
    if not rows:
        return None
    df = sum(r[5] for r in rows) - 2 * len(rows)
    if df < 1:
        return None
    weight = sum(r[0] for r in rows)
    d = sum(r[0] * r[1] for r in rows) / weight
    lo = sum(r[0] * r[2] for r in rows) / weight
    hi = sum(r[0] * r[3] for r in rows) / weight
    seen = sum(r[4] for r in rows) / df
    v = max(seen, floor ** 2)
    t = float(stdtrit(df, 0.5 + level / 2))
    se = math.sqrt(v / weight)
    p = None
    if len(rows) > 1:  # against the floored spread: boots in one bracket read none
        q = sum(r[0] * (r[1] - d) ** 2 for r in rows) / (len(rows) - 1)
        p = float(fisher.sf(q / v, len(rows) - 1, df)) if v > 0 else None
    return Blocked(d, lo - t * se, hi + t * se, df, len(rows), p)
