"""The certify phase simulated as the product runs it: a study's first pass boots K configs and
vLLM's defaults once each, its pick is the config whose first boot found the most capacity,
and, where that beat the defaults' first boot, the certify loop of autotune.tuning.certify_rule
runs (next_step: pairs of boots until a verdict, max_boots or the budget), each certify boot
searching in tolerance steps from the median of its config's capacities so far, as
autotune.tuning.certify does. Each boot's capacity is drawn around its config's true capacity
with a relative spread between boots (log-normal) and found to a bracket [C, C x (1 + tol)).

The unit tests hold the rule to its stated coverage and false-certification rate on it
(tests/unit/tuning/test_certify_rule.py), and lab/certify_split.py prices budgets with it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.measure.stats import Gain
from autotune.tuning.certify_rule import (
    BUDGET_SPENT,
    CERTIFIED,
    DEFAULTS,
    Rule,
    adjusted,
    gain,
    next_step,
)
from autotune.tuning.plan import Costs

BASE = 70.0  # the defaults' true capacity (any scale: the rule reads ratios)
# a budget no study here spends: every step paid, only the rule decides
UNBOUNDED = Costs("GPU-min", trial=1.0, check=1.0, reference=0.0, measured=True)


def found(rng: np.random.Generator, true: float, spread: float, anchor: float,
          tol: float) -> tuple[float, float]:
    """One boot: its capacity drawn around `true` with a relative spread, found to the bracket
    of a search stepping x(1 + tol) from `anchor`."""
    x = true * math.exp(rng.normal(0.0, spread))
    step = math.log1p(tol)
    lo = anchor * math.exp(math.floor(math.log(x / anchor) / step) * step)
    return lo, lo * (1 + tol)


@dataclass(frozen=True)
class Outcome:
    """How one simulated study ended: its status, the pick's true ratio to the defaults, the
    gain over the certify boots, the stopping-adjusted figure (certified only), the certify
    boots of each, and the device-minutes the certify phase spent."""

    status: str
    true: float
    gain: Gain | None = None
    adjusted: float | None = None
    boots: int = 0
    minutes: float = 0.0

    @property
    def certified(self) -> bool:
        return self.status == CERTIFIED

    @property
    def covered(self) -> bool | None:
        """Whether the interval holds the true gain (None: no interval)."""
        g = self.gain
        if g is None or g.n < 2 or g.n_base < 2:
            return None
        return g.low <= self.true - 1 <= g.high


def sitting(rng: np.random.Generator, ratios: Sequence[float], spread: float, rule: Rule,
            budget: float, cold: float, cost: Costs, tol: float = 0.1) -> Outcome:
    """One study within `budget` device-minutes, the plan's way (tuning.plan, bill.over_budget):
    the defaults' trial (`cold`, its first boot compiling), then each config in `ratios` order
    while what is spent, the next trial (`cost.trial`) and the fewest certify pairs with the
    reference check (plan.MIN_PAIRS) fit the budget; then the certify phase with the rest.
    Outcome.minutes: the whole study's."""
    from autotune.tuning.plan import MIN_PAIRS

    spent, explored = cold, 1
    while explored < len(ratios) and \
            spent + cost.trial + cost.reserve(MIN_PAIRS) <= budget:
        spent, explored = spent + cost.trial, explored + 1
    out = study(rng, ratios[:explored], spread, rule, tol, budget - spent, cost)
    return Outcome(out.status, out.true, out.gain, out.adjusted, out.boots, spent + out.minutes)


def study(rng: np.random.Generator, ratios: Sequence[float], spread: float, rule: Rule,
          tol: float = 0.1, budget: float = math.inf, cost: Costs = UNBOUNDED,
          adjust: bool = False) -> Outcome:
    """One study: `ratios` are the configs' true capacities over the defaults' (the defaults
    first, 1.0); the first pass and the certify loop as the module says, within `budget`
    device-minutes for the certify phase at `cost` a step."""
    first = [found(rng, BASE * r, spread, BASE * r * math.exp(rng.normal(0.0, spread)), tol)
             for r in ratios]
    pick = max(range(len(ratios)), key=lambda i: (first[i][0], -i))
    if pick == 0 or first[pick][0] <= first[0][0]:
        return Outcome(DEFAULTS, ratios[pick])
    caps = {0: [first[0][0]], pick: [first[pick][0]]}
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    spent = 0.0
    while True:
        step = next_step(a, b, rule, budget - spent, cost)
        if step.status:
            break
        for _ in range(step.pairs):
            for n, side in ((pick, a), (0, b)):
                side.append(found(rng, BASE * ratios[n], spread,
                                  statistics.median(caps[n]), tol))
                caps[n].append(side[-1][0])
            spent += 2 * cost.check
    status = step.status
    if status == CERTIFIED and budget - spent < cost.reference:
        status = BUDGET_SPENT
    elif status == CERTIFIED:
        spent += cost.reference
    g = gain(a, b, rule)
    adj = adjusted(a, b, rule, sims=1000) if adjust and status == CERTIFIED else None
    return Outcome(status, ratios[pick], g, adj, len(a), spent)


@dataclass(frozen=True)
class Cell:
    """Studies of one kind: how often certified, the interval's coverage (where it has one),
    the mean figure certified and its adjusted mean, and the mean certify boots."""

    studies: int
    certified: float
    coverage: float | None
    certified_ratio: float | None
    adjusted_ratio: float | None
    boots: float


def cell(seed: int, n: int, ratios: Sequence[float], spread: float, rule: Rule,
         tol: float = 0.1, adjust: bool = False) -> Cell:
    """`n` studies of one landscape and spread (seeded)."""
    rng = np.random.default_rng(seed)
    runs = [study(rng, ratios, spread, rule, tol, adjust=adjust) for _ in range(n)]
    cov = [c for r in runs if (c := r.covered) is not None]
    cert = [r for r in runs if r.certified]
    adj = [r.adjusted for r in cert if r.adjusted is not None]
    return Cell(n, len(cert) / n, sum(cov) / len(cov) if cov else None,
                statistics.fmean(1 + r.gain.gain for r in cert if r.gain) if cert else None,
                statistics.fmean(adj) if adj else None,
                statistics.fmean(r.boots for r in runs))


def across(rng: np.random.Generator, true: float, spread: float, rule: Rule, sittings: int,
           pairs: int = 2, machine_sd: float = 0.06, interaction_sd: float = 0.0,
           tol: float = 0.1) -> Outcome:
    """A certification pooled over sittings on different machines (issue 80): the study's
    first pass on the first machine picked the config of true gain `true` (its and the
    defaults' first boots, left out as the rule leaves them), then each sitting a new machine
    with its own pace (log-normal, `machine_sd`, both configs alike) and, for the pick, its own
    gain (`interaction_sd`: a config-by-machine interaction) boots up to `pairs` pairs, the
    defaults then the pick, each certify boot stepping from its config's median so far, the
    rule (next_step, blocked by machine) judging after every pair; stops at a verdict."""
    caps = {0: [BASE], 1: [BASE * true]}
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    where: tuple[list[str | None], list[str | None]] = ([], [])
    status = ""
    for s in range(sittings):
        pace = math.exp(rng.normal(0.0, machine_sd))
        mine = true * math.exp(rng.normal(0.0, interaction_sd))
        name = f"machine:{s}"
        for _ in range(pairs):
            step = next_step(a, b, rule, math.inf, UNBOUNDED, machines=where)
            if step.status:
                status = step.status
                break
            for n, side, ratio in ((0, b, 1.0), (1, a, mine)):
                side.append(found(rng, BASE * pace * ratio, spread,
                                  statistics.median(caps[n]), tol))
                caps[n].append(side[-1][0])
                where[1 if n == 0 else 0].append(name)
        if status:
            break
    if not status:
        status = next_step(a, b, rule, math.inf, UNBOUNDED, machines=where).status or \
            BUDGET_SPENT
    g = gain(a, b, rule, where)
    return Outcome(status, true, g, None, len(a), 0.0)
