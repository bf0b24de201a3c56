"""The bill: the device-minutes a study's trials held, from its storage (so a resumed study and
every worker's trials count), split into boots, load and the rest of each trial, repeat boots
(the confirm phase's and the certify phase's), and the idle time between trials; an estimate
for the trials left; and the budget check that starts no trial expected to end past
`budget_gpu_minutes`.

Device-minutes are a trial's wall minutes times the GPUs it held (`gpus_per_trial`, 1 without
it); on a machine without GPUs the unit is the whole machine's minutes ("CPU-min").
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import dataclass

import optuna

from autotune.config.study import StudyConfig
from autotune.tuning.record import Status, TrialRecord, records

IDLE_GAP_S = 600.0  # a gap between trials longer than this is a stop (a resume later), not idle
# a warm trial against the study's cold first one: on an H100 the first took 8.96-9.83 GPU-min
# and the warm ones a median of 5.56 (0.57 of it, n=7; docs/results/warm-server-h100); on 2 CPU
# cores 2.4 and 0.9-1.0. A budget that judged the second trial by the first would stop a study
# that had room for it. (The timeout still judges by the first: a trial cut off by a machine's
# end is lost, one over a budget costs a few minutes.)
WARM_SHARE = 0.6


@dataclass(frozen=True)
class TrialCost:
    number: int
    confirm: bool  # a repeat boot of an earlier trial's config (confirm or certify phase)
    minutes: float  # device-minutes, start to end
    boot: float  # of which the server's boot (0 where the trial recorded no timings)
    load: float  # the benchmark or the capacity search's load points
    guard: float = 0.0  # the quality guard's readings (the reference, the floor, a verdict)


@dataclass(frozen=True)
class Bill:
    unit: str  # "GPU-min" or "CPU-min"
    devices: int  # per trial
    trials: tuple[TrialCost, ...]
    idle: float  # device-minutes between trials (the span less the trials; one worker)
    left: int  # trials of n_trials not run yet
    reference: float = 0.0  # the certify phase's reference checks (their own boots)

    @property
    def total(self) -> float:
        return sum(t.minutes for t in self.trials) + self.idle + self.reference

    def part(self, confirm: bool) -> float:
        return sum(t.minutes for t in self.trials if t.confirm == confirm)

    def next_trial(self) -> float:
        """Device-minutes the next trial may take: the longest first-pass trial, leaving out
        the first (a cold boot) once there are others; after the first alone, WARM_SHARE of
        it; 0 before any."""
        first = [t.minutes for t in self.trials if not t.confirm]
        if not first:
            return 0.0
        return max(first[1:]) if len(first) > 1 else first[0] * WARM_SHARE

    def estimate_left(self) -> float:
        first = [t.minutes for t in self.trials if not t.confirm]
        return statistics.median(first) * self.left if first else 0.0

    def lines(self) -> list[str]:
        if not self.trials:
            return []
        boot, load = sum(t.boot for t in self.trials), sum(t.load for t in self.trials)
        guard = sum(t.guard for t in self.trials)
        other = self.part(False) + self.part(True) - boot - load - guard
        n, c = sum(not t.confirm for t in self.trials), sum(t.confirm for t in self.trials)
        per = ", ".join(f"{t.number}: {t.minutes:.1f}" for t in self.trials)
        held = (f"{self.devices} GPU{'s' if self.devices > 1 else ''} per trial"
                if self.unit == "GPU-min" else "the machine's minutes")
        out = [f"bill: {self.total:.1f} {self.unit} ({held}): {n} trials "
               f"{self.part(False):.1f}" + (f", {c} repeat boots {self.part(True):.1f}"
                                             if c else "")
               + (f", reference check {self.reference:.1f}" if self.reference else "")
               + f", idle {self.idle:.1f}; boots {boot:.1f}, load {load:.1f}, "
               + (f"quality guard {guard:.1f}, " if guard else "")
               + f"the rest of the trials {other:.1f}",
               f"  per trial ({self.unit}): {per}"]
        if self.left:
            out.append(f"  {self.left} trials left: about {self.estimate_left():.1f} "
                       f"{self.unit} more (the median trial)")
        return out

    def metrics(self) -> dict[str, float]:
        """For MLflow: the study's totals."""
        return {"bill_total_min": self.total, "bill_trials_min": self.part(False),
                "bill_confirm_min": self.part(True), "bill_idle_min": self.idle,
                "bill_reference_min": self.reference,
                "bill_boot_min": sum(t.boot for t in self.trials),
                "bill_load_min": sum(t.load for t in self.trials),
                "bill_guard_min": sum(t.guard for t in self.trials),
                "bill_left_estimate_min": self.estimate_left()}


def device_unit() -> str:
    return "GPU-min" if shutil.which("nvidia-smi") else "CPU-min"


FINISHED = (Status.OK, Status.SLO_MISS, Status.INFEASIBLE)  # Optuna's COMPLETE
# and a trial the machine spoiled: its boot held the device, though no trial budget counts it
BILLED = (*FINISHED, Status.UNMEASURED)


def bill(study: optuna.Study | list[TrialRecord], cfg: StudyConfig, unit: str | None = None,
         reference: float = 0.0) -> Bill:
    """The study's bill (`study`: the study, or its records already read; `reference`: the
    device-minutes of its certify phase's reference checks, which are no trials)."""
    devices = cfg.gpus_per_trial or 1
    costs = []
    spans = []
    recs = study if isinstance(study, list) else records(study)
    for r in recs:
        if r.status not in BILLED or r.started is None or r.completed is None:
            continue
        wall = (r.completed - r.started).total_seconds()
        spans.append((r.started, r.completed, r.facts.process))
        tm = r.timings
        boot = min(tm.get("boot_s", 0.0), wall)
        load = min(tm.get("bench_s", 0.0), wall - boot)
        guard = min(tm.get("guard_s", 0.0), wall - boot - load)
        costs.append(TrialCost(r.number, r.facts.repeat_of is not None, wall * devices / 60,
                               boot * devices / 60, load * devices / 60, guard * devices / 60))
    idle, end = 0.0, None
    last = None
    for s, e, proc in sorted(spans, key=lambda x: (x[0], x[1])):
        # gaps between trials of one command run; a longer one, or one between two runs (a
        # user's pause between commands), is a machine not held
        if end is not None and 0 < (gap := (s - end).total_seconds()) < IDLE_GAP_S and \
                (proc is None or proc == last):
            idle += gap * devices / 60
        end = e if end is None else max(end, e)
        last = proc
    spoiled = {r.number for r in recs if r.status == Status.UNMEASURED}
    first = sum(not c.confirm and c.number not in spoiled for c in costs)
    return Bill(unit or device_unit(), devices, tuple(costs), idle,
                max(cfg.n_trials - first, 0), reference)


def over_budget(b: Bill, budget_minutes: float | None, reserve: float = 0.0,
                running: int = 0) -> str | None:
    """Why the next trial must not start under the budget, or None; `reserve`: device-minutes
    kept for what follows the trials (the certify phase); `running`: trials other workers run
    now, each counted as the next trial will cost (the bill holds finished trials only)."""
    if budget_minutes is None or not b.trials:
        return None
    nxt = b.next_trial()
    if b.total + nxt * (1 + running) + reserve <= budget_minutes:
        return None
    kept = f" with {reserve:.1f} kept to certify" if reserve else ""
    others = (f" and {running} trial{'s' if running > 1 else ''} running elsewhere"
              if running else "")
    return (f"budget: {b.total:.1f} of {budget_minutes:g} {b.unit} spent; the next trial "
            f"(about {nxt:.1f}) would end past it{kept}{others}")
