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
from autotune.measure.stats import Gain, censored_gain
from autotune.tuning.confirm import TrialHook, run_repeats
from autotune.tuning.machines import here
from autotune.tuning.objective import PhaseHook
from autotune.tuning.plan import Costs, boots_of
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import TrialRecord, baseline, records

CERTIFIED = "certified"
NOT_CERTIFIED = "not certified"
BUDGET_SPENT = "budget spent"
DEFAULTS = "defaults"  # nothing beat vLLM's defaults: there is no gain to certify
EXIT_CODES = {CERTIFIED: 0, DEFAULTS: 0, NOT_CERTIFIED: 3, BUDGET_SPENT: 4}
FILE = "certify.json"

def machine_of(recs: list[TrialRecord], here: str) -> str | None:
    """The machine whose boots a certification counts: where the study's measured trials ran
    on more than one machine, or on another one, this one only (capacities compare within one
    machine: one config served 2.3-2.8x apart on two H100s of one kind); else all (None)."""
    seen = {r.facts.machine for r in recs if r.measured}
    return None if seen <= {here, None} and len(seen - {None}) <= 1 else here


def pick_gain(recs: list[TrialRecord], pick: int, base: int, cfg: StudyConfig,
              machine: str | None = None) -> Gain:
    """The pick's gain over the defaults over every boot of each (on `machine`, if given:
    censored_gain, 90%); a minimized first objective is turned around (a gain is always
    "better by")."""
    a, b = boots_of(recs, pick, cfg, machine), boots_of(recs, base, cfg, machine)
    if cfg.objectives[0].direction == "minimize":
        a, b = [(1 / hi, 1 / lo) for lo, hi in a], [(1 / hi, 1 / lo) for lo, hi in b]
    return censored_gain(a, b, cfg.certify.coverage)


@dataclass(frozen=True)
class Certification:
    """How a planned study ended: its status, the pick and the defaults, the pick's gain over
    boots with its interval, the reference check's verdict at the pick's capacity, what is
    left to run (budget spent), and the device-minutes of the certify phase."""

    status: str
    pick: int | None
    base: int | None
    metric: str
    gain: dict[str, Any] | None = None  # median, low, high, coverage, boots_pick, boots_base
    reference: dict[str, Any] | None = None  # load, samples, met, p99_ttft_ms, p99_tpot_ms
    remaining: str = ""
    minutes: dict[str, float] = field(default_factory=dict)  # boots, reference
    why: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def gain_obj(self) -> Gain | None:
        g = self.gain
        if not g:
            return None
        return Gain(g["median"] - 1, g["low"] - 1, g["high"] - 1, g["boots_pick"],
                    g["boots_base"], 0.0, None)

    def sentence(self) -> str:
        """The study's last word: certified, not certified, budget spent, or the defaults."""
        g = self.gain
        ratio = (f"{g['median']:.2f}x [{g['low']:.2f}, {g['high']:.2f}] ({g['coverage']:.0%}, "
                 f"{g['boots_pick']} boots of it, {g['boots_base']} of the defaults)"
                 if g and g["boots_pick"] > 1 and g["boots_base"] > 1 else
                 f"{g['median']:.2f}x (one boot each: no interval)" if g else "")
        who = f"trial {self.pick}"
        ref = reference_text(self.reference)
        if self.status == CERTIFIED:
            return f"certified: {who} is {ratio} the defaults' {self.metric}" + \
                (f", and {ref}" if ref else "")
        if self.status == DEFAULTS:
            return f"vLLM's defaults (trial {self.base}): {self.why}"
        if self.status == NOT_CERTIFIED:
            return f"not certified: {who}'s {self.metric} is {ratio} the defaults'; " + \
                self.why + (f"; {ref}" if ref else "") + \
                f"; keep vLLM's defaults (trial {self.base})"
        return (f"budget spent before certification: {who} at {ratio} the defaults' "
                f"{self.metric} so far; left to run: {self.remaining}")

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
    verdict = "meets" if ref["met"] else "MISSES"
    n = ref["samples"]
    return (f"`vllm bench serve` {verdict} the SLOs at {ref['load']:g} on a stock server "
            f"({n} sample{'s' if n != 1 else ''}: p99 TTFT {ref['p99_ttft_ms']:,.0f} ms, p99 TPOT "
            f"{ref['p99_tpot_ms']:,.1f} ms)")


def gain_doc(g: Gain, coverage: float) -> dict[str, Any]:
    return {"median": 1 + g.gain, "low": 1 + g.low, "high": 1 + g.high, "coverage": coverage,
            "boots_pick": g.n, "boots_base": g.n_base}


def path(cfg: StudyConfig) -> Path:
    return cfg.study_dir() / FILE


def read_certification(cfg: StudyConfig, recs: list[TrialRecord]) -> Certification | None:
    """The study's certification (None: none ran, or it is of trials this study lacks)."""
    p = path(cfg)
    if not p.is_file():
        return None
    c = Certification.from_json(json.loads(p.read_text()))
    nums = {r.number for r in recs if r.measured}
    return c if {n for n in (c.pick, c.base) if n is not None} <= nums else None


def write_certification(cfg: StudyConfig, c: Certification) -> None:
    p = path(cfg)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(c.to_json(), indent=2) + "\n")


Reference = Callable[[TrialRecord, float], dict[str, Any]]


def run_certify(study: optuna.Study, cfg: StudyConfig, pre: Preflight, requests: list[Any],
                pick: int, left: Callable[[], float], costs: Callable[[], Costs], *,
                reference: Reference | None = None, on_phase: PhaseHook | None = None,
                on_trial: TrialHook | None = None,
                on_step: Callable[[str], None] | None = None) -> Certification:
    """The certify phase (the module's docstring): pairs of boots of the pick and the defaults,
    in a random order each pair, until the gain's lower bound clears 0 (or its upper bound is
    under 0, or max_boots, or `left()` device-minutes cannot pay a pair and the reference);
    then the reference check of a certified pick (`reference(record, load)`). Resumable: the
    boots already measured count. Writes and returns the certification."""
    say = on_step or (lambda _s: None)
    metric = cfg.metric_names()[0]
    recs = records(study)
    base = baseline(recs)
    if base is None:
        c = Certification(NOT_CERTIFIED, pick, None, metric,
                          why="the study has no measured baseline to compare with")
        write_certification(cfg, c)
        return c
    if pick == base.number:
        c = Certification(DEFAULTS, pick, base.number, metric,
                          why="no config explored beat them; there is no gain to certify")
        write_certification(cfg, c)
        return c
    order = random.Random(f"{cfg.name}:{pick}")
    spent = {"boots": 0.0, "reference": 0.0}
    where = machine_of(recs, here())
    if where is not None:
        say("certify: the study ran on more than one machine; its interval counts the boots "
            "of this one only")
    while True:
        recs = records(study)
        g = pick_gain(recs, pick, base.number, cfg, where)
        both = g.n > 1 and g.n_base > 1
        if both and (g.low > 0 or g.high < 0) or min(g.n, g.n_base) >= cfg.certify.max_boots:
            break
        cost = costs()
        need = max(cfg.certify.max_boots - min(g.n, g.n_base), 1)
        if left() < cost.reserve(1):
            remaining = (f"{need} more boot{'s' if need > 1 else ''} each of trial {pick} and "
                         f"the defaults (~{2 * cost.check:.1f} {cost.unit} a pair) and the "
                         f"reference check (~{cost.reference:.1f})")
            c = Certification(BUDGET_SPENT, pick, base.number, metric,
                              gain_doc(g, cfg.certify.coverage), remaining=remaining,
                              minutes=spent)
            write_certification(cfg, c)
            return c
        pair = [base.number, pick]
        order.shuffle(pair)
        at = {n: check_load(recs, n, cfg) for n in pair}
        say(f"certify: boots {g.n + 1} of trial {pick} and {g.n_base + 1} of the defaults "
            f"(gain so far {1 + g.gain:.2f}x" + (f" [{1 + g.low:.2f}, {1 + g.high:.2f}]"
                                                 if both else "") + ")")
        before = len(study.get_trials(deepcopy=False))
        run_repeats(study, cfg, pre, requests, pair, on_phase=on_phase, on_trial=on_trial,
                    start_at=at)
        new = records(study)[before:]
        spent["boots"] += sum(minutes(r, cfg) for r in new)
        if not any(r.measured for r in new):  # a boot that failed: no more certifying it
            c = Certification(NOT_CERTIFIED, pick, base.number, metric,
                              gain_doc(g, cfg.certify.coverage),
                              why="a certify boot was not measured (see `autotune trials`)",
                              minutes=spent)
            write_certification(cfg, c)
            return c
    gd = gain_doc(g, cfg.certify.coverage)
    if not (g.n > 1 and g.n_base > 1 and g.low > 0):
        why = (f"its interval holds no gain ({cfg.certify.max_boots} boots each)"
               if g.high >= 0 else "it is worse than the defaults beyond the noise")
        c = Certification(NOT_CERTIFIED, pick, base.number, metric, gd, why=why, minutes=spent)
        write_certification(cfg, c)
        return c
    ref = None
    if reference is not None:
        cost = costs()
        if left() < cost.reference:
            c = Certification(BUDGET_SPENT, pick, base.number, metric, gd,
                              remaining=f"the reference check of trial {pick} "
                                        f"(~{cost.reference:.1f} {cost.unit})", minutes=spent)
            write_certification(cfg, c)
            return c
        load = statistics.median(lo for lo, _ in boots_of(records(study), pick, cfg, where))
        say(f"certify: the reference check of trial {pick} at {load:g}")
        ref = reference(next(r for r in records(study) if r.number == pick), load)
        spent["reference"] = float(ref.get("minutes", 0.0))
    status = CERTIFIED if ref is None or ref.get("skipped") or ref["met"] else NOT_CERTIFIED
    c = Certification(status, pick, base.number, metric, gd, ref, minutes=spent,
                      why="" if status == CERTIFIED else
                      "`vllm bench serve` misses the SLOs at its capacity on a stock server")
    write_certification(cfg, c)
    return c


def check_load(recs: list[TrialRecord], number: int, cfg: StudyConfig) -> float | None:
    """Where a certify boot of the config starts: the median of the capacities its boots found
    (None: not a capacity study, the boot is a full measurement)."""
    if cfg.capacity is None or cfg.profiles:
        return None
    found = [lo for lo, _ in boots_of(recs, number, cfg)]
    return statistics.median(found) if found else None


def minutes(r: TrialRecord, cfg: StudyConfig) -> float:
    if r.started is None or r.completed is None:
        return 0.0
    return (r.completed - r.started).total_seconds() * (cfg.gpus_per_trial or 1) / 60
