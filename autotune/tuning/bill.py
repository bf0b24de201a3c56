"""The bill: the device-minutes a study's trials held, from its storage (so a resumed study and
every worker's trials count), split into boots, load and the rest of each trial, repeat boots
(the confirm phase's and the certify phase's), and the idle time between trials; where every
device-minute went (`Bill.breakdown`: cold and warm boots, each boot by the phases vLLM's log
timed, the warm-up, the load points, the reference check, idle; tuning.spend); an estimate for
the trials left; and the budget check that starts no trial expected to end past
`budget_gpu_minutes`.

Device-minutes are a trial's wall minutes times the GPUs it held (`gpus_per_trial`, 1 without
it); on a machine without GPUs the unit is the whole machine's minutes ("CPU-min").
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import dataclass, field

import optuna

from autotune.config.study import StudyConfig
from autotune.tuning.record import Status, TrialRecord, records
from autotune.tuning.spend import BOOT_PHASES, cold_boots, trial_phases

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
    cold: bool = False  # its boot was cold (tuning.spend.cold_boots)
    # device-minutes by phase (tuning.spend.TRIAL_PHASES), summing to `minutes`
    phases: dict[str, float] = field(default_factory=dict)


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
        return out + self.breakdown_lines()

    def breakdown(self) -> dict[str, float]:
        """Where the study's device-minutes went, for a results file: `boot_cold`,
        `boot_warm` (tuning.spend.cold_boots), `warmup`, `points`, `reference` (its own boots,
        and the checks run on a certify boot's server), `idle` and the
        rest of the trials (`guard`, `stop`, `rest`), which sum to `total`; then the boots by
        phase (`boot_start`, `boot_weights`, `boot_compile`, `boot_graphs`,
        `boot_kernel_warmup`, `boot_engine`, `boot_unsplit`: tuning.spend), which sum to
        boot_cold + boot_warm."""
        def boots(cold: bool) -> float:
            return sum(v for t in self.trials if t.cold == cold
                       for k, v in t.phases.items() if k in BOOT_PHASES)

        def part(key: str) -> float:
            return sum(t.phases.get(key, 0.0) for t in self.trials)

        return {"boot_cold": boots(True), "boot_warm": boots(False),
                **{k: part(k) for k in ("warmup", "points", "guard", "stop", "rest")},
                "reference": self.reference + part("reference"), "idle": self.idle,
                "total": self.total,
                **{k: part(k) for k in BOOT_PHASES}}

    def breakdown_lines(self) -> list[str]:
        """The breakdown as the end of a study prints it, parts under 0.05 left out."""
        b = self.breakdown()
        n_cold = sum(t.cold for t in self.trials)
        n_warm = sum(not t.cold and any(k in BOOT_PHASES for k in t.phases)
                     for t in self.trials)
        parts = [(f"{n_cold} cold boot{'s' if n_cold != 1 else ''}", b["boot_cold"]),
                 (f"{n_warm} warm boot{'s' if n_warm != 1 else ''}", b["boot_warm"]),
                 ("warm-up", b["warmup"]), ("load points", b["points"]),
                 ("quality guard", b["guard"]), ("stops", b["stop"]),
                 ("the rest of the trials", b["rest"]), ("reference check", b["reference"]),
                 ("idle", b["idle"])]
        out = [f"  where it went ({self.unit}): "
               + ", ".join(f"{name} {v:.1f}" for name, v in parts if v >= 0.05)]
        names = {"boot_start": "start (imports, API server)", "boot_weights": "weights",
                 "boot_compile": "torch.compile", "boot_graphs": "CUDA graphs",
                 "boot_kernel_warmup": "kernel warm-up", "boot_engine": "the rest of engine init",
                 "boot_unsplit": "not split (no phase logged)"}
        shown = [k for k in BOOT_PHASES if b[k] >= 0.05]  # what rounds to 0.0 left out
        if shown and shown != ["boot_unsplit"]:
            out.append(f"  the boots by phase ({self.unit}): "
                       + ", ".join(f"{names[k]} {b[k]:.1f}" for k in shown))
        return out

    def metrics(self) -> dict[str, float]:
        """For MLflow: the study's totals, and its breakdown (`bill_<part>_min`)."""
        return {**{f"bill_{k}_min": v for k, v in self.breakdown().items()},
                "bill_total_min": self.total, "bill_trials_min": self.part(False),
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
    cold = cold_boots(r for r in recs if r.status in BILLED)
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
                               boot * devices / 60, load * devices / 60, guard * devices / 60,
                               r.number in cold, {k: v * devices / 60 for k, v in
                                                  trial_phases(r, wall).items()}))
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


def breakdown(study: optuna.Study | list[TrialRecord], cfg: StudyConfig,
              reference: float = 0.0) -> dict[str, float]:
    """Where the study's device-minutes went (Bill.breakdown), for a results file."""
    return bill(study, cfg, reference=reference).breakdown()


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
