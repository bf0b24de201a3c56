"""How a planned study ended (docs/certify.md): the certification record kept in
`certify.json` (its status, the pick and the defaults, the gain over certify boots with its
interval, the reference check's verdict, what is left to run, the device-minutes spent), the
sentence every surface says of it, and its exit code. autotune.tuning.certify runs the certify
phase that writes it; the study summary reads it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.config.study import StudyConfig
from autotune.measure.stats import Gain
from autotune.tuning.certify_rule import BUDGET_SPENT, CERTIFIED, DEFAULTS, NOT_CERTIFIED
from autotune.tuning.record import TrialRecord

TOO_SMALL = "too small to explore"
EXIT_CODES = {CERTIFIED: 0, DEFAULTS: 0, NOT_CERTIFIED: 3, BUDGET_SPENT: 4, TOO_SMALL: 5}
DECIDED = (CERTIFIED, DEFAULTS, NOT_CERTIFIED)  # a run again reads them, it measures nothing
FILE = "certify.json"


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
    basis: str = ""  # what the interval rests on: one machine, or several (certify_rule.basis)

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
        if n > 1 and nb > 1 and g["low"] < g["high"]:
            adj = (f"; {g['adjusted']:.2f}x adjusted for stopping once it cleared"
                   if g.get("adjusted") is not None
                   and f"{g['adjusted']:.2f}" != f"{g['ratio']:.2f}" else "")
            where = f"; {self.basis}" if self.basis and self.basis != "one machine" else ""
            return (f"{g['ratio']:.2f}x [{g['low']:.2f}, {g['high']:.2f}] ({g['coverage']:.0%}, "
                    f"{n} certify boots of it, {nb} of the defaults{where}{adj})")
        why = "" if n < 2 or nb < 2 else \
            " on any one machine" if self.basis and self.basis != "one machine" else ""
        return (f"{g['ratio']:.2f}x ({n} certify boot{'s' if n > 1 else ''} of it, {nb} of the "
                f"defaults: no interval yet{why})")

    def sentence(self) -> str:
        """The study's last word: certified, not certified, budget spent, or the defaults."""
        who, ratio, ref = f"trial {self.pick}", self.ratio_text(), reference_text(self.reference)
        if self.status == DEFAULTS:
            return f"vLLM's defaults (trial {self.base}): {self.why}"
        if self.status == TOO_SMALL:
            return f"budget too small to explore: only vLLM's defaults (trial {self.base}) " \
                f"ran; {self.why}"
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
