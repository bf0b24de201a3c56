"""A certified answer within the user's budget (docs/certify.md): the certify phase, which
writes the certification a study ends on (autotune.tuning.certification; the rule it follows
is autotune.tuning.certify_rule's).

With `--budget-gpu-minutes` or `--timeout` a study is a plan, not only a stop. From the start it
keeps a reserve for certifying (`plan`: certify boots of the pick and of vLLM's defaults, and the
reference check of the pick) and explores with the rest. Then the certify phase boots the
first-pass pick and the defaults again, interleaved, a pair at a time, until the pick's gain has
an interval over boots whose lower bound clears 0 (`censored.censored_gain`, 90%), the pick is
shown no better, `certify.max_boots` is reached or the budget is spent. A certify boot of a
capacity study measures at the capacity already found and one step above (the "step" bracket:
two points when the boot agrees), not a whole search. Then `vllm bench serve` checks the pick
on a stock server at its capacity (session/checks.py), and the study ends on one of:
certified, not certified, budget spent before certification, the defaults (nothing explored
beat them), or a budget too small to explore (only the defaults ran). Every surface reads it
from `certify.json` through the study summary.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from autotune.config.study import StudyConfig
from autotune.errors import StudyError
from autotune.measure.capacity import CapacityResult
from autotune.measure.runner import OnMeasured
from autotune.measure.stats import Gain
from autotune.tuning.bill import bill
from autotune.tuning.certification import (
    DECIDED,
    EXIT_CODES,
    TOO_SMALL,
    Certification,
    first_pass,
    gain_doc,
    path,
    read_certification,
    reference_text,
    write_certification,
)
from autotune.tuning.certify_rule import (
    BUDGET_SPENT,
    CERTIFIED,
    DEFAULTS,
    NOT_CERTIFIED,
    Labels,
    Rule,
    Step,
    adjusted,
    basis,
    gain,
    next_step,
    round_pairs,
)
from autotune.tuning.confirm import TrialHook, run_repeats
from autotune.tuning.failures import MAX_UNMEASURED
from autotune.tuning.machines import here
from autotune.tuning.objective import PhaseHook
from autotune.tuning.plan import (
    MIN_PAIRS,
    Costs,
    boots_where,
    capacities_of,
    capacity_first,
    reference_on_boot,
)
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import Status, TrialRecord, baseline, records

__all__ = ["BUDGET_SPENT", "CERTIFIED", "DEFAULTS", "DECIDED", "EXIT_CODES", "NOT_CERTIFIED",
           "TOO_SMALL", "Certification", "gain_doc", "path", "read_certification",
           "reference_text", "round_pairs", "run_certify", "write_certification"]


def machines_of(recs: list[TrialRecord]) -> int:
    """The machines the study's measured trials ran on (trials from before machines were
    recorded count as one)."""
    return len({r.facts.machine for r in recs if r.measured})


def rule_of(cfg: StudyConfig) -> Rule:
    """The certify rule as the study file sets it (certify_rule.Rule)."""
    c = cfg.certify
    return Rule(level=c.coverage, max_boots=c.max_boots, noise=c.noise)


def pick_gain(recs: list[TrialRecord], pick: int, base: int, cfg: StudyConfig) -> Gain:
    """The pick's gain over the defaults (certify_rule.gain) over the certify boots of each,
    blocked by machine where they ran on several; a minimized first objective is turned around
    (a gain is always "better by")."""
    a, b, where = pick_boots(recs, pick, base, cfg)
    return gain(a, b, rule_of(cfg), where)


def pick_boots(recs: list[TrialRecord], pick: int, base: int, cfg: StudyConfig
               ) -> tuple[list[tuple[float, float]], list[tuple[float, float]], Labels]:
    """The brackets the rule judges: the certify boots of the pick and of the defaults, each
    config's first-pass boot left out (both were selected: the pick's for reading high, the
    defaults' for being beaten; certify_rule), and the machine of each (certify_rule.Labels:
    each machine's boots are compared with its own)."""
    pa = boots_where(recs, pick, cfg, selected=True)
    pb = boots_where(recs, base, cfg, selected=True)
    a, b = [x for x, _ in pa], [x for x, _ in pb]
    if cfg.objectives[0].direction == "minimize":
        a, b = [(1 / hi, 1 / lo) for lo, hi in a], [(1 / hi, 1 / lo) for lo, hi in b]
    return a, b, ([m for _, m in pa], [m for _, m in pb])


Reference = Callable[[TrialRecord, float], dict[str, Any]]
# the reference check on a server already up: (its URL, its log, the load) -> its verdict
ReferenceUp = Callable[[str, Path, float], dict[str, Any]]
# boots the trials' configs again at once, each a certify boot from its load (workers.py)
Boots = Callable[[list[int], dict[int, float | None]], None]


def boot_range(n: int, k: int) -> str:
    return f"{n + 1}" if k == 1 else f"{n + 1}-{n + k}"


def run_certify(study: optuna.Study, cfg: StudyConfig, pre: Preflight, requests: list[Any],
                pick: int, left: Callable[[], float], costs: Callable[[], Costs], *,
                reference: Reference | None = None, on_phase: PhaseHook | None = None,
                on_trial: TrialHook | None = None,
                on_step: Callable[[str], None] | None = None,
                boots: Boots | None = None, lanes: int = 1,
                final: Callable[[], bool] = lambda: True,
                reference_up: ReferenceUp | None = None) -> Certification:
    """The certify phase (the module's docstring): pairs of boots of the pick and the defaults,
    in a random order each pair, until the gain's lower bound clears 0 (or its upper bound is
    under 0, or max_boots, or `left()` device-minutes cannot pay a pair and the reference, or
    a certify boot fails); then the reference check of a certified pick (`reference(record,
    load)`). With `lanes` > 1 (workers: boots at once, each on its own GPUs) a round boots
    lanes // 2 pairs at once through `boots(numbers, start_at)`, the configs shuffled across
    the lanes each round (where the budget and max_boots allow that many). Where `final()`
    (what `left()` gives is all the study will have: its budget, not this run's timeout, is the
    limit), it stops once the pairs left could decide nothing (plan.too_few). With
    `reference_up`, where the study's boots are stock launches one at a time
    (plan.reference_on_boot), each round boots the defaults, then the pick, and the reference
    check runs on the pick's server once its boot makes the round certify: no boot of its own
    (its minutes are the boot's). A certification
    already decided for this pick is read, not measured again; one whose budget ran out resumes
    (its boots count, its minutes add up). Writes and returns it."""
    say = on_step or (lambda _s: None)
    metric = cfg.metric_names()[0]
    recs = records(study)
    base = baseline(recs)
    before = read_certification(cfg, recs)
    # --certify-here reopens a certification decided elsewhere until this machine has a pair
    reopen = cfg.certify.here and base is not None and not paired_here(recs, pick, base.number)
    if before is not None and before.pick == pick and before.status in DECIDED and not (
            reopen and before.status == CERTIFIED):
        say(f"certify: already decided ({before.status}; {path(cfg)})" + (
            "; certified on other machines: `--certify-here` adds a pair on this one and "
            "checks the reference here" if before.status == CERTIFIED and base is not None
            and not paired_here(recs, pick, base.number) else ""))
        return before
    spent = dict.fromkeys(("boots", "reference"), 0.0) | (
        before.minutes if before is not None and before.pick == pick else {})

    def done(status: str, g: Gain | None = None, adjusted_ratio: float | None = None,
             **kw: Any) -> Certification:
        gd = None if g is None else gain_doc(g, cfg.certify.coverage) | (
            {"adjusted": adjusted_ratio} if adjusted_ratio is not None else {})
        return write_certification(cfg, Certification(
            status, pick, None if base is None else base.number, metric, gd, minutes=spent,
            explored=first_pass(records(study)),
            lower_is_better=cfg.objectives[0].direction == "minimize", **kw))

    if base is None:
        return done(NOT_CERTIFIED, why="the study has no measured baseline to compare with")
    if pick == base.number:
        if explored_beyond(recs, base) or verdicts(recs) >= cfg.n_trials:
            return done(DEFAULTS, why="no config explored beat them; there is no gain to "
                        "certify")
        return done(TOO_SMALL, why=explore_need(bill(recs, cfg).total, costs(), final()))
    order = random.Random(f"{cfg.name}:{pick}")
    if machines_of(recs) > 1:
        say(f"certify: the study's boots ran on {machines_of(recs)} machines; each machine's "
            "boots of the pick are compared with its own boots of the defaults, pooled")
    rule = rule_of(cfg)
    on_boot = reference_up is not None and boots is None and reference is not None and \
        capacity_first(cfg) and cfg.certify.reference and reference_on_boot(cfg, lanes)
    ref_on_boot: dict[str, Any] | None = None
    starved = 0
    while True:
        recs = records(study)
        a, b, labels = pick_boots(recs, pick, base.number, cfg)
        g, rests = basis(a, b, rule, labels)
        step = next_step(a, b, rule, left(), costs(), lanes, final(), pick, labels)
        if reopen and step.status in ("", CERTIFIED) and not paired_here(recs, pick,
                                                                          base.number):
            if not round_pairs(1, 1, left(), costs()):
                return done(BUDGET_SPENT, g, basis=rests, remaining=(
                    f"a pair of boots of trial {pick} and the defaults on this machine and "
                    f"the reference check (~{costs().reserve(1):.1f} {costs().unit})"))
            step = Step(pairs=1)  # --certify-here: this machine's own pair first
        if step.status == CERTIFIED:
            break
        if step.status:
            return done(step.status, g, why=step.why, remaining=step.remaining, basis=rests)
        k = step.pairs
        pair = [base.number, pick] * k
        if not on_boot:  # else the defaults first: the pick's server decides the round
            order.shuffle(pair)
        at = {n: check_load(recs, n, cfg) for n in pair}
        so_far = Certification(NOT_CERTIFIED, pick, base.number, metric,
                               gain_doc(g, cfg.certify.coverage), basis=rests).ratio_text() \
            if g.n and g.n_base else ""
        say(f"certify: boot{'s' if k > 1 else ''} {boot_range(g.n, k)} of trial {pick} and "
            f"{boot_range(g.n_base, k)} of the defaults" + (
                " at once" if k > 1 or lanes > 1 else "")
            + (f" (so far {so_far})" if so_far else ""))
        n_before = len(study.get_trials(deepcopy=False))
        if boots is not None:
            boots(pair, at)
        else:
            hooks = {pick: check_on_boot(study, cfg, pick, base.number, rule, costs,
                                         reference_up, say)} \
                if on_boot and reference_up is not None else None
            run_repeats(study, cfg, pre, requests, pair, on_phase=on_phase, on_trial=on_trial,
                        start_at=at, on_measured=hooks)
        new = records(study)[n_before:]
        ref_on_boot = next((r.facts.reference for r in reversed(new)
                            if r.facts.repeat_of == pick and r.facts.reference), ref_on_boot)
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
    ref = None
    if ref_on_boot is not None:  # run on the pick's last certify boot; billed with it
        ref = ref_on_boot
    elif reference is not None and capacity_first(cfg) and cfg.certify.reference:
        cost = costs()
        if left() < cost.reference:
            return done(BUDGET_SPENT, g, remaining=f"the reference check of trial {pick} "
                        f"(~{cost.reference:.1f} {cost.unit})")
        load = reference_load(records(study), pick)
        say(f"certify: the reference check of trial {pick} at {load:g}")
        ref = reference(next(r for r in records(study) if r.number == pick), load)
        spent["reference"] += float(ref.get("minutes", 0.0))
    if ref is None or ref.get("skipped") or ref.get("met"):
        return done(CERTIFIED, g, adjusted(a, b, rule), reference=ref, basis=rests)
    return done(NOT_CERTIFIED, g, reference=ref, why=(
        "the reference check did not run" if ref.get("error") else
        "`vllm bench serve` misses the SLOs at its capacity on a stock server"))


def paired_here(recs: list[TrialRecord], pick: int, base: int) -> bool:
    """Whether this machine has a certify boot of the pick and one of the defaults."""
    return all(capacities_of(recs, n, here(), selected=True) for n in (pick, base))


# a trial whose config got a verdict: measured, or failed on its own (not spoiled by the
# machine, stopped by a signal, or yet to run)
JUDGED = (Status.OK, Status.SLO_MISS, Status.INFEASIBLE)


def verdicts(recs: list[TrialRecord]) -> int:
    """First-pass trials whose config got a verdict (JUDGED)."""
    return sum(r.facts.repeat_of is None and r.status in JUDGED for r in recs)


def explored_beyond(recs: list[TrialRecord], base: TrialRecord) -> int:
    """First-pass trials of configs other than vLLM's defaults with a verdict: what the study
    explored (a config that failed to boot was explored; none at all, and the pick being the
    defaults says nothing of the others)."""
    return sum(r.facts.repeat_of is None and r.status in JUDGED and not r.baseline
               and (r.facts.flags_key is None or r.facts.flags_key != base.facts.flags_key)
               for r in recs)


def explore_need(spent: float, cost: Costs, final: bool = True) -> str:
    """What the plan needs to explore one trial beyond the defaults and certify it: what was
    spent, the next trial, and the fewest certify boots it keeps (plan.MIN_PAIRS pairs) with
    the reference check; a budget of that much lets the trial start (bill.over_budget).
    `final`: the budget limited the run, else its --timeout did."""
    keep = cost.reserve(MIN_PAIRS)
    ref = f" and the reference check {cost.reference:.1f}" if cost.reference else ""
    more = "a larger budget" if final else "a longer --timeout"
    return (f"the plan needs about {spent + cost.trial + keep:.1f} {cost.unit} to explore one "
            f"trial and certify ({spent:.1f} spent, a trial {cost.trial:.1f}, {keep:.1f} kept "
            f"to certify: {MIN_PAIRS} more boots of the pick and of the defaults at "
            f"{cost.check:.1f} each{ref}); {more} resumes the study")


def check_load(recs: list[TrialRecord], number: int, cfg: StudyConfig) -> float | None:
    """Where a certify boot of the config starts: the median of the capacities its boots found
    (None: the first objective is no capacity, the boot is a full measurement)."""
    found = capacities_of(recs, number) if capacity_first(cfg) else []
    return statistics.median(found) if found else None


def reference_load(recs: list[TrialRecord], pick: int, extra: tuple[float, ...] = ()) -> float:
    """The load the reference check judges the pick at: the median capacity of its certify
    boots (not the first pass's, chosen for reading high) on this machine, where the check runs
    (`extra`: a boot not recorded yet); where it has none here, of its certify boots anywhere,
    else of its boots. A machine's pace is its own: on a study certified over two machines the
    faster one's capacities would be a claim the slower one was never measured at."""
    found = capacities_of(recs, pick, here(), selected=True) \
        or capacities_of(recs, pick, selected=True)
    return statistics.median([*found, *extra] or capacities_of(recs, pick))


def check_on_boot(study: optuna.Study, cfg: StudyConfig, pick: int, base: int,
                  rule: Rule, costs: Callable[[], Costs],
                  reference_up: ReferenceUp, say: Callable[[str], None]) -> OnMeasured:
    """What the pick's certify boot runs on its server once measured: where its bracket, with
    the boots so far (this round's defaults' included), makes the rule certify, the reference
    check at the pick's capacity (the median of its certify boots'), on this server; else
    nothing."""
    def check(url: str, log: Path, res: CapacityResult) -> dict[str, Any] | None:
        if res.capacity <= 0 or cfg.capacity is None:
            return None
        recs = records(study)
        a, b, labels = pick_boots(recs, pick, base, cfg)
        hi = res.fail if res.fail is not None else res.capacity * (1 + cfg.capacity.tolerance)
        a = [*a, (res.capacity, max(hi, res.capacity))]
        mine = (list(labels[0]) + [here()], labels[1]) if labels is not None else None
        if next_step(a, b, rule, math.inf, costs(), machines=mine).status != CERTIFIED:
            return None
        load = reference_load(recs, pick, (res.capacity,))
        say(f"certify: the reference check of trial {pick} at {load:g}, on its certify boot's "
            "server")
        return reference_up(url, log, load) | {"on_boot": True}
    return check
