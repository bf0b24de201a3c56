"""A certified answer within the user's budget (docs/certify.md): the budget plan, the certify
phase and the certification a study ends on.

With `--budget-gpu-minutes` or `--timeout` a study is a plan, not only a stop. From the start it
keeps a reserve for certifying (`plan`: certify boots of the pick and of vLLM's defaults, and the
reference check of the pick) and explores with the rest. Then the certify phase boots the
first-pass pick and the defaults again, interleaved, a pair at a time, until the pick's gain has
an interval over boots whose lower bound clears 0 (`stats.censored_gain`, 90%), the pick is
shown no better, `certify.max_boots` is reached or the budget is spent. A certify boot of a
capacity study measures at the capacity already found and one step above (the "step" bracket:
two points when the boot agrees), not a whole search. Then `vllm bench serve` checks the pick
on a stock server at its capacity (session/checks.py), and the study ends on one of:
certified, not certified, budget spent before certification, or the defaults (nothing beat
them). Every surface reads it from `certify.json` through the study summary.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.config.study import StudyConfig
from autotune.errors import StudyError
from autotune.measure.stats import Gain, censored_gain
from autotune.tuning.bill import bill
from autotune.tuning.confirm import TrialHook, run_repeats
from autotune.tuning.failures import MAX_UNMEASURED
from autotune.tuning.machines import here
from autotune.tuning.objective import PhaseHook
from autotune.tuning.plan import Costs, boots_of, capacities_of, capacity_first, too_few
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import Status, TrialRecord, baseline, records

CERTIFIED = "certified"
NOT_CERTIFIED = "not certified"
BUDGET_SPENT = "budget spent"
DEFAULTS = "defaults"  # nothing beat vLLM's defaults: there is no gain to certify
EXIT_CODES = {CERTIFIED: 0, DEFAULTS: 0, NOT_CERTIFIED: 3, BUDGET_SPENT: 4}
DECIDED = (CERTIFIED, DEFAULTS, NOT_CERTIFIED)  # a run again reads them, it measures nothing
FILE = "certify.json"


def machine_of(recs: list[TrialRecord], here: str) -> str | None:
    """The machine whose boots a certification counts: where the study's measured trials ran
    on another machine than this one, or on several (trials from before machines were recorded
    count as another), this one only (capacities compare within one machine: one config
    served 2.3-2.8x apart on two H100s of one kind); else every boot (None)."""
    seen = {r.facts.machine for r in recs if r.measured}
    return None if seen <= {here} or seen <= {None} else here


def pick_gain(recs: list[TrialRecord], pick: int, base: int, cfg: StudyConfig,
              machine: str | None = None) -> Gain:
    """The pick's gain over the defaults (censored_gain at certify.coverage) over the boots of
    each on `machine` (if given), the pick's own first-pass boot left out (it was chosen for
    reading high: plan.same_config); a minimized first objective is turned around (a gain is
    always "better by")."""
    return censored_gain(*pick_boots(recs, pick, base, cfg, machine), cfg.certify.coverage)


def pick_boots(recs: list[TrialRecord], pick: int, base: int, cfg: StudyConfig,
               machine: str | None = None
               ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The brackets pick_gain judges: the pick's certify boots and the defaults' boots."""
    a = boots_of(recs, pick, cfg, machine, selected=True)
    b = boots_of(recs, base, cfg, machine)
    if cfg.objectives[0].direction == "minimize":
        a, b = [(1 / hi, 1 / lo) for lo, hi in a], [(1 / hi, 1 / lo) for lo, hi in b]
    return a, b


def first_pass(recs: list[TrialRecord]) -> int:
    """Trials the study explored (not repeats): a certification of fewer is stale."""
    return sum(r.facts.repeat_of is None for r in recs)


@dataclass(frozen=True)
class Certification:
    """How a planned study ended: its status, the pick and the defaults, the pick's gain over
    boots with its interval, the reference check's verdict at the pick's capacity, what is
    left to run (budget spent), the device-minutes of the certify phase (every run's), and
    the trials explored when it was written (`explored`: a later exploration makes it stale)."""

    status: str
    pick: int | None
    base: int | None
    metric: str
    gain: dict[str, Any] | None = None  # ratio, low, high, coverage, boots_pick, boots_defaults
    reference: dict[str, Any] | None = None  # load, samples, met, p99_ttft_ms, p99_tpot_ms
    remaining: str = ""
    minutes: dict[str, float] = field(default_factory=dict)  # boots, reference
    why: str = ""
    explored: int = 0
    lower_is_better: bool = False  # a minimized metric: the gain is the defaults' over the pick's

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def gain_obj(self) -> Gain | None:
        g = self.gain
        if not g or not g["boots_pick"] or not g["boots_defaults"]:
            return None
        return Gain(g["ratio"] - 1, g["low"] - 1, g["high"] - 1, g["boots_pick"],
                    g["boots_defaults"], 0.0, None)

    def ratio_text(self) -> str:
        g = self.gain
        if not g:
            return ""
        n, nb = g["boots_pick"], g["boots_defaults"]
        if not n or not nb:
            return f"not measured yet ({n} certify boots of it, {nb} of the defaults)"
        if n > 1 and nb > 1:
            return (f"{g['ratio']:.2f}x [{g['low']:.2f}, {g['high']:.2f}] ({g['coverage']:.0%}, "
                    f"{n} boots of it, {nb} of the defaults)")
        return (f"{g['ratio']:.2f}x ({n} certify boot{'s' if n > 1 else ''} of it, {nb} of the "
                "defaults: no interval yet)")

    def sentence(self) -> str:
        """The study's last word: certified, not certified, budget spent, or the defaults."""
        who, ratio, ref = f"trial {self.pick}", self.ratio_text(), reference_text(self.reference)
        if self.status == DEFAULTS:
            return f"vLLM's defaults (trial {self.base}): {self.why}"
        if self.base is None:
            return f"not certified: {who}: {self.why}"
        than = (f"{who} is {ratio} better than the defaults on {self.metric} (theirs over its: "
                "lower is better)") if self.lower_is_better else ""
        if self.status == CERTIFIED:
            return "certified: " + (than or f"{who} is {ratio} the defaults' {self.metric}") + \
                (f", and {ref}" if ref else "")
        than = than or f"{who}'s {self.metric} is {ratio} the defaults'"
        if self.status == NOT_CERTIFIED:
            return (f"not certified: {than}; {self.why}" + (f"; {ref}" if ref else "")
                    + f"; keep vLLM's defaults (trial {self.base})")
        if self.why:  # stopped with budget left that could not certify (too_few)
            return (f"budget too small to certify: {than} so far; {self.why}; left to run: "
                    f"{self.remaining}")
        return f"budget spent before certification: {than} so far; left to run: {self.remaining}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"sentence": self.sentence(), "exit_code": self.exit_code}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Certification:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})


def reference_text(ref: dict[str, Any] | None) -> str:
    """The reference check's verdict as every surface says it."""
    if not ref:
        return ""
    if ref.get("skipped"):
        return f"no reference check ({ref['skipped']})"
    if ref.get("error"):
        return f"the reference check did not run: {ref['error']}"
    verdict = "meets" if ref["met"] else "MISSES"
    n = ref["samples"]
    return (f"`vllm bench serve` {verdict} the SLOs at {ref['load']:g} on a stock server "
            f"({n} sample{'s' if n != 1 else ''}: p99 TTFT {ref['p99_ttft_ms']:,.0f} ms, p99 TPOT "
            f"{ref['p99_tpot_ms']:,.1f} ms)")


def gain_doc(g: Gain, coverage: float) -> dict[str, Any]:
    """A gain as certify.json keeps it: the ratio of the boots' geometric means (not a
    median), its interval, coverage and boots."""
    return {"ratio": 1 + g.gain, "low": 1 + g.low, "high": 1 + g.high, "coverage": coverage,
            "boots_pick": g.n, "boots_defaults": g.n_base}


def path(cfg: StudyConfig) -> Path:
    return cfg.study_dir() / FILE


def read_certification(cfg: StudyConfig, recs: list[TrialRecord]) -> Certification | None:
    """The study's certification (None: none ran, it is of trials this study lacks, or the
    study explored more since: it no longer speaks for the study's pick)."""
    p = path(cfg)
    if not p.is_file():
        return None
    c = Certification.from_json(json.loads(p.read_text()))
    nums = {r.number for r in recs if r.measured}
    if not {n for n in (c.pick, c.base) if n is not None} <= nums:
        return None
    return c if first_pass(recs) <= c.explored else None


def write_certification(cfg: StudyConfig, c: Certification) -> Certification:
    p = path(cfg)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(c.to_json(), indent=2) + "\n")
    return c


Reference = Callable[[TrialRecord, float], dict[str, Any]]
# boots the trials' configs again at once, each a certify boot from its load (workers.py)
Boots = Callable[[list[int], dict[int, float | None]], None]


def round_pairs(lanes: int, most: int, left: float, cost: Costs) -> int:
    """Pairs of certify boots in the next round: as many as the lanes hold at once (one pair
    where boots run one at a time), no more than `most` (max_boots less the boots there are),
    and no more than `left` device-minutes pay with the reference check; 0: not one."""
    k = max(1, lanes // 2)
    k = min(k, max(most, 1))
    while k > 0 and left < cost.reserve(k):
        k -= 1
    return k


def boot_range(n: int, k: int) -> str:
    return f"{n + 1}" if k == 1 else f"{n + 1}-{n + k}"


def run_certify(study: optuna.Study, cfg: StudyConfig, pre: Preflight, requests: list[Any],
                pick: int, left: Callable[[], float], costs: Callable[[], Costs], *,
                reference: Reference | None = None, on_phase: PhaseHook | None = None,
                on_trial: TrialHook | None = None,
                on_step: Callable[[str], None] | None = None,
                boots: Boots | None = None, lanes: int = 1,
                final: Callable[[], bool] = lambda: True) -> Certification:
    """The certify phase (the module's docstring): pairs of boots of the pick and the defaults,
    in a random order each pair, until the gain's lower bound clears 0 (or its upper bound is
    under 0, or max_boots, or `left()` device-minutes cannot pay a pair and the reference, or
    a certify boot fails); then the reference check of a certified pick (`reference(record,
    load)`). With `lanes` > 1 (workers: boots at once, each on its own GPUs) a round boots
    lanes // 2 pairs at once through `boots(numbers, start_at)`, the configs shuffled across
    the lanes each round (where the budget and max_boots allow that many). Where `final()`
    (what `left()` gives is all the study will have: its budget, not this run's timeout, is the
    limit), it stops once the pairs left could decide nothing (plan.too_few). A certification
    already decided for this pick is read, not measured again; one whose budget ran out resumes
    (its boots count, its minutes add up). Writes and returns it."""
    say = on_step or (lambda _s: None)
    metric = cfg.metric_names()[0]
    recs = records(study)
    base = baseline(recs)
    before = read_certification(cfg, recs)
    if before is not None and before.pick == pick and before.status in DECIDED:
        say(f"certify: already decided ({before.status}; {path(cfg)})")
        return before
    spent = dict.fromkeys(("boots", "reference"), 0.0) | (
        before.minutes if before is not None and before.pick == pick else {})

    def done(status: str, g: Gain | None = None, **kw: Any) -> Certification:
        gd = None if g is None else gain_doc(g, cfg.certify.coverage)
        return write_certification(cfg, Certification(
            status, pick, None if base is None else base.number, metric, gd, minutes=spent,
            explored=first_pass(records(study)),
            lower_is_better=cfg.objectives[0].direction == "minimize", **kw))

    if base is None:
        return done(NOT_CERTIFIED, why="the study has no measured baseline to compare with")
    if pick == base.number:
        return done(DEFAULTS, why="no config explored beat them; there is no gain to certify")
    order = random.Random(f"{cfg.name}:{pick}")
    where = machine_of(recs, here())
    if where is not None:
        say("certify: the study's boots ran on another machine too; its interval counts the "
            "boots of this one only")
    starved = 0
    while True:
        recs = records(study)
        g = pick_gain(recs, pick, base.number, cfg, where)
        both = g.n > 1 and g.n_base > 1
        if both and (g.low > 0 or g.high < 0) or min(g.n, g.n_base) >= cfg.certify.max_boots:
            break
        cost = costs()
        most = cfg.certify.max_boots - min(g.n, g.n_base)
        k = round_pairs(lanes, most, left(), cost)
        few = too_few(*pick_boots(recs, pick, base.number, cfg, where), most, left(), cost,
                      cfg.certify.coverage) if k and final() else None
        if few is not None and few.decided:
            return done(NOT_CERTIFIED, g, why=few.why)
        if k == 0 or few:
            return done(BUDGET_SPENT, g, why=few.why if few else "", remaining=(
                f"up to {most} more boot{'s' if most > 1 else ''} each of trial {pick} and the "
                f"defaults (~{2 * cost.check:.1f} {cost.unit} a pair) and the reference check "
                f"(~{cost.reference:.1f})"))
        pair = [base.number, pick] * k
        order.shuffle(pair)
        at = {n: check_load(recs, n, cfg) for n in pair}
        so_far = Certification(NOT_CERTIFIED, pick, base.number, metric,
                               gain_doc(g, cfg.certify.coverage)).ratio_text()
        say(f"certify: boot{'s' if k > 1 else ''} {boot_range(g.n, k)} of trial {pick} and "
            f"{boot_range(g.n_base, k)} of the defaults" + (" at once" if k > 1 or lanes > 1
                                                             else "") + f" (so far {so_far})")
        n_before = len(study.get_trials(deepcopy=False))
        if boots is not None:
            boots(pair, at)
        else:
            run_repeats(study, cfg, pre, requests, pair, on_phase=on_phase, on_trial=on_trial,
                        start_at=at)
        new = records(study)[n_before:]
        spent["boots"] += bill(new, cfg).total
        failed = [r for r in new if not r.measured and r.status != Status.UNMEASURED]
        if failed:  # a boot that fails once fails again (its flags are not booted twice)
            return done(NOT_CERTIFIED, g, why=f"a certify boot was not measured (trial "
                        f"{failed[0].number}: {failed[0].label()}; see `autotune trials`)")
        # a boot the machine spoiled (starved, issue 70) is no verdict: the pair boots again
        starved = starved + 1 if any(r.status == Status.UNMEASURED for r in new) else 0
        if starved >= MAX_UNMEASURED:
            raise StudyError(f"{starved} certify pairs in a row measured nothing because the "
                             "machine was too busy (`autotune trials` shows each). Free the "
                             "machine; the same command resumes the certification")
    if not (g.n > 1 and g.n_base > 1 and g.low > 0):
        return done(NOT_CERTIFIED, g, why=(
            f"its interval holds no gain ({cfg.certify.max_boots} boots each)"
            if g.high >= 0 else "it is worse than the defaults beyond the noise"))
    ref = None
    if reference is not None and capacity_first(cfg) and cfg.certify.reference:
        cost = costs()
        if left() < cost.reference:
            return done(BUDGET_SPENT, g, remaining=f"the reference check of trial {pick} "
                        f"(~{cost.reference:.1f} {cost.unit})")
        load = statistics.median(capacities_of(records(study), pick, where))
        say(f"certify: the reference check of trial {pick} at {load:g}")
        ref = reference(next(r for r in records(study) if r.number == pick), load)
        spent["reference"] += float(ref.get("minutes", 0.0))
    if ref is None or ref.get("skipped") or ref.get("met"):
        return done(CERTIFIED, g, reference=ref)
    return done(NOT_CERTIFIED, g, reference=ref, why=(
        "the reference check did not run" if ref.get("error") else
        "`vllm bench serve` misses the SLOs at its capacity on a stock server"))


def check_load(recs: list[TrialRecord], number: int, cfg: StudyConfig) -> float | None:
    """Where a certify boot of the config starts: the median of the capacities its boots found
    (None: the first objective is no capacity, the boot is a full measurement)."""
    found = capacities_of(recs, number) if capacity_first(cfg) else []
    return statistics.median(found) if found else None
