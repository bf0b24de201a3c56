"""A study with a budget, as a plan (autotune.tuning.certify): what the run may still spend, the
reserve its exploration keeps, and the certify phase with the reference check of the pick, as
`autotune study` runs them. The reference check boots a stock `vllm serve`, so it lives here
with `export --verify` (session/checks.py), not in tuning/.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.config.study import StudyConfig
from autotune.errors import ClientError, ConfigError, LoadError, ServerError, StudyError
from autotune.measure.reference import reference_client
from autotune.outputs.console import console
from autotune.server.machine import preloads
from autotune.tuning.bill import Bill, bill
from autotune.tuning.certify import (
    Boots,
    Certification,
    read_certification,
    run_certify,
)
from autotune.tuning.confirm import TrialHook
from autotune.tuning.objective import PhaseHook
from autotune.tuning.plan import BudgetPlan, Costs, plan, reference_on_boot
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import TrialRecord, records


@dataclass
class Budget:
    """What a planned run may spend in device-minutes: the study's budget less its bill (its
    reference checks included), and what its timeout leaves times its GPUs (every worker's);
    the smaller of the two, or unbounded."""

    cfg: StudyConfig
    began: float  # time.monotonic() when the run began
    reference_spent: float = 0.0  # device-minutes of the study's reference checks so far
    study: optuna.Study | None = None
    spent_before: float = 0.0  # the bill when this run opened the study
    shown: list[float] = field(default_factory=list)  # reserves printed
    workers: int = 1  # workers at once, each with gpus_per_trial GPUs

    def open(self, study: optuna.Study) -> None:
        """The study this run plans in: what its earlier runs spent, reference checks too."""
        self.study = study
        self.reference_spent = certified_minutes(read_certification(self.cfg, records(study)))
        self.spent_before = self.bill().total

    def bill(self) -> Bill:
        return bill(self.study if self.study is not None else [], self.cfg,
                    reference=self.reference_spent)

    def total(self) -> float:
        """The device-minutes of the plan: the budget, or what the timeout gives this run on
        top of what the study held before it, whichever is less."""
        b, t = self.cfg.budget_gpu_minutes, self.cfg.timeout_s
        by_time = self.spent_before + t * self.devices() / 60 if t else math.inf
        return min(b if b is not None else math.inf, by_time)

    def left(self) -> float:
        """Device-minutes this run may still spend."""
        return min(self._left())

    def _left(self) -> tuple[float, float]:
        by_budget = (self.cfg.budget_gpu_minutes - self.bill().total
                     if self.cfg.budget_gpu_minutes is not None else math.inf)
        by_time = ((self.began + self.cfg.timeout_s - time.monotonic())
                   * self.devices() / 60 if self.cfg.timeout_s else math.inf)
        return by_budget, by_time

    def final(self) -> bool:
        """Whether what `left` gives is all the study will have: its budget is the limit, not
        this run's timeout (a run again with the same timeout gets more)."""
        by_budget, by_time = self._left()
        return math.isfinite(by_budget) and by_budget <= by_time

    def devices(self) -> int:
        """GPUs (or, without them, machines) held at once: every worker's."""
        return (self.cfg.gpus_per_trial or 1) * self.workers

    def plan(self) -> BudgetPlan:
        total = self.total()
        recs = records(self.study) if self.study is not None else []
        return plan(recs, self.cfg, self.bill(), total if math.isfinite(total) else 0.0,
                    None, reference_on_boot(self.cfg, self.workers))

    def reserve(self) -> float:
        """The exploration's reserve (printed when it changes by a tenth of a minute)."""
        p = self.plan()
        if p.costs.measured and math.isfinite(self.total()) and (
                not self.shown or abs(self.shown[-1] - p.reserve) >= 0.1):
            console.print(p.text(), highlight=False, soft_wrap=True)
            if not self.shown and self.bill().total + p.costs.trial + p.reserve > p.budget:
                # with workers, the first plan comes once several trials have ended
                done = sum(r.measured for r in records(self.study)) \
                    if self.study is not None else 1  # not the starts still waiting
                what = ("vLLM's defaults", "the defaults") if done <= 1 else (
                    f"the {done} trials measured", "one of them")
                console.print(f"warning: {p.budget:.1f} {p.costs.unit} leaves no room to explore "
                              f"beyond {what[0]} once the certify boots and the reference "
                              f"check are kept ({p.reserve:.1f}): the study can only end on "
                              f"{what[1]}; a larger budget explores", highlight=False,
                              soft_wrap=True)
            self.shown.append(p.reserve)
        return p.reserve

    def costs(self) -> Costs:
        return self.plan().costs


def reference_check(cfg: StudyConfig, samples: int | None, on_phase: Callable[[str], None]
                    ) -> Callable[[TrialRecord, float], dict[str, Any]]:
    """The certify phase's reference check: `export --verify`'s (a stock `vllm serve` of the
    pick, `vllm bench serve` at its capacity with fresh samples), as the certification records
    it: the load, samples, the verdict at C and its median p99s, and its device-minutes."""
    from autotune.session.checks import verify_capacity

    def check(rec: TrialRecord, load: float) -> dict[str, Any]:
        t0 = time.monotonic()

        def took() -> float:
            return (time.monotonic() - t0) * (cfg.gpus_per_trial or 1) / 60

        try:
            doc = verify_capacity(cfg, rec, samples, on_phase, capacity=load, on_run=lambda
                                  line: console.print("  " + line, highlight=False))
        except (ServerError, LoadError, ClientError, StudyError, ConfigError) as e:
            # the stock server did not boot, or the reference could not run: no verdict,
            # its minutes billed, the study ends "not certified" saying why
            cause = getattr(e, "cause", None) or str(e)
            return {"error": f"{type(e).__name__}: {cause}"[:300], "load": load,
                    "minutes": took()}
        at = doc["rates"][0]
        m = at["metrics"]
        return {"load": at["rate"], "samples": at["samples_n"], "met": at["verdict"] == "meets",
                "p99_ttft_ms": m.get("p99_ttft_ms", math.nan),
                "p99_tpot_ms": m.get("p99_tpot_ms", math.nan), "misses": at["misses"],
                "above": [r["verdict"] for r in doc["rates"][1:]], "path": doc["path"],
                "minutes": took()}
    return check


def reference_up_check(cfg: StudyConfig) -> Callable[[str, Path, float], dict[str, Any]]:
    """The reference check on the pick's last certify boot's server (session.checks
    verify_on_server: `vllm bench serve` at the load, fresh samples), as the certification
    records it (reference_check's fields; its minutes are the certify boot's)."""
    from autotune.session.checks import verify_on_server

    def check(url: str, log: Path, load: float) -> dict[str, Any]:
        t0 = time.monotonic()
        where = cfg.study_dir() / f"reference-{int(time.time())}"
        try:
            doc = verify_on_server(cfg, url, log, load, None, where, on_run=lambda line:
                                   console.print("  " + line, highlight=False))
        except (ServerError, LoadError, ClientError, StudyError, ConfigError) as e:
            cause = getattr(e, "cause", None) or str(e)
            return {"error": f"{type(e).__name__}: {cause}"[:300], "load": load,
                    "minutes": (time.monotonic() - t0) / 60}
        at = doc["rates"][0]
        m = at["metrics"]
        return {"load": at["rate"], "samples": at["samples_n"], "met": at["verdict"] == "meets",
                "p99_ttft_ms": m.get("p99_ttft_ms", math.nan),
                "p99_tpot_ms": m.get("p99_tpot_ms", math.nan), "misses": at["misses"],
                "above": [], "path": doc["path"],
                "minutes": (time.monotonic() - t0) * (cfg.gpus_per_trial or 1) / 60}
    return check


def certify_phase(st: optuna.Study, cfg: StudyConfig, pre: Preflight, requests: list[Any],
                  pick: int, budget: Budget, on_phase: PhaseHook, on_trial: TrialHook,
                  on_step: Callable[[str], None], boots: Boots | None = None,
                  lanes: int = 1) -> Certification:
    """The certify phase of a planned study, within what its budget leaves (`boots`, `lanes`:
    the workers' boots at once, run_certify's)."""
    ref = reference_check(cfg, None, lambda p: on_phase(-1, p, {})) \
        if cfg.certify.reference else None
    up = reference_up_check(cfg) if cfg.certify.reference else None
    # the reference check's runs in one process of vLLM's Python (reference_client); where the
    # certify boots are stock launches (a GPU's) its import starts now, beside the first boot,
    # not beside a measured load (a preloaded server boots in seconds on a few cores)
    client = reference_client(cfg.server.executable, cfg.study_dir() / "reference-client.log",
                              start=not preloads(cfg.server)) \
        if cfg.certify.reference else contextlib.nullcontext(False)
    with client:
        return run_certify(st, cfg, pre, requests, pick, budget.left, budget.costs,
                           reference=ref, on_phase=on_phase, on_trial=on_trial,
                           on_step=on_step, boots=boots, lanes=lanes, final=budget.final,
                           reference_up=up)


def certified_minutes(c: Certification | None) -> float:
    """Device-minutes of a certification's reference check (the bill's own line)."""
    return float((c.minutes or {}).get("reference", 0.0)) if c is not None else 0.0
