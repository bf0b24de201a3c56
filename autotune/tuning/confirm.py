"""The confirm phase: the front's best configs and the baseline booted again, interleaved, on the
same requests; each config's median with a bootstrap interval, each gain with its interval, the
noise floor, and a recommendation on the lower confidence bound (`docs/noise.md`).

The repeats are trials of the study (`repeat_of` names the trial they repeat), created directly
in their interleaved order, never through the queue; the same command resumes from the repeats
already measured. Every reader pools a config's measurements by its served flags
(`config_gains`), so a gain printed anywhere carries its interval once repeats exist.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.study import StudyConfig
from autotune.errors import ConfigError, Unmeasured
from autotune.measure.runner import OnMeasured
from autotune.measure.stats import Gain, gain_ci, median_ci, pick, rel_sd
from autotune.tuning.front import front
from autotune.tuning.machines import note_machine
from autotune.tuning.objective import Objective, PhaseHook
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import TrialFacts, TrialRecord, baseline, records, write_facts
from autotune.tuning.study import fits_before

TrialHook = Callable[[optuna.Study, FrozenTrial], None]


def finalists(study: optuna.Study, cfg: StudyConfig, top: int) -> tuple[int, list[int]]:
    """(the baseline trial, the front's best `top` other configs by the first objective). When
    the defaults alone make the front (they measured better than every config, once each),
    the best other feasible configs stand in: the confirm phase then says whether the
    defaults' lead is real or one lucky boot."""
    recs = records(study)
    base = baseline(recs)
    if base is None:
        raise ConfigError("confirm: the study has no measured baseline trial to compare with")
    metric = cfg.metric_names()[0]
    maximize = cfg.objectives[0].direction == "maximize"

    def best(pool: list[TrialRecord]) -> list[int]:
        seen = {str(base.facts.flags_key)}
        out = []
        for r in sorted(pool, key=lambda r: r.values.get(metric, 0.0), reverse=maximize):
            if r.facts.repeat_of is None and str(r.facts.flags_key) not in seen:
                seen.add(str(r.facts.flags_key))
                out.append(r.number)
        return out[:top]

    out = best(front(study)) or best([r for r in recs if r.feasible])
    if not out:
        raise ConfigError("confirm: the study holds no feasible config other than the baseline")
    return base.number, out


def confirm_plan(study: optuna.Study, numbers: list[int], repeats: int) -> list[int]:
    """The confirm phase's boots still to run, interleaved (A B C A B C ...): `repeats` more
    measurements of each trial in `numbers` (the baseline and the finalists), less the repeats
    already measured (so the same command resumes it)."""
    done = Counter(r.facts.repeat_of for r in records(study)
                   if r.facts.repeat_of is not None and r.measured)
    need = {n: max(repeats - done[n], 0) for n in numbers}
    return [n for i in range(repeats) for n in numbers if need[n] > i]


def boot_estimate(study: optuna.Study) -> list[float]:
    """The seconds the study's measured trials took (the first left out once there are others:
    it boots cold), for judging whether another boot fits before a deadline."""
    took = [r.timings["total_s"] for r in records(study)
            if r.measured and "total_s" in r.timings]
    return took[1:] if len(took) > 1 else took


def run_repeats(study: optuna.Study, cfg: StudyConfig, pre: Preflight, requests: list[Any],
                plan: list[int], *, on_phase: PhaseHook | None = None,
                on_trial: TrialHook | None = None, deadline: float | None = None,
                trials_dir: Path | None = None,
                start_at: dict[int, float | None] | None = None,
                worker: dict[str, Any] | None = None,
                on_measured: dict[int, OnMeasured] | None = None) -> int:
    """Boot each trial of `plan` again with its own flags, in that order, as new trials of the
    study (`repeat_of`); with `start_at`, a capacity study's boot of a trial in it searches in
    tolerance steps from that load (a certify boot, `check_at`). They are created directly,
    not through the queue, so configs still waiting there (starts a study did not reach)
    cannot slip in between. With a `deadline` (time.monotonic()), no boot starts that the
    study's longest trial says would end after it; returns the boots run. Their folders go
    under `trials_dir` (default: the study's); `worker`: the worker that runs them;
    `on_measured`: run on a boot's server once measured, by the trial it repeats."""
    note_machine(study)  # a resume that only certifies runs no trial: its machine joins here
    objective = Objective(cfg, pre.space, requests, cfg.study_dir(), on_phase,
                          trials_dir=trials_dir, worker=worker, on_measured=on_measured)
    took = [max(boot_estimate(study), default=0.0)]
    for i, num in enumerate(plan):
        if deadline is not None and not fits_before(deadline, time.monotonic(), took):
            return i
        started = time.monotonic()
        # what Study.ask does, less popping the queue
        trial_id = study._storage.create_new_trial(study._study_id)
        trial = optuna.Trial(study, trial_id)
        write_facts(trial, TrialFacts(repeat_of=num, check_at=(start_at or {}).get(num)))
        try:
            values = objective(trial)
        except Unmeasured:  # a starved boot: no verdict; the same command boots it again
            study.tell(trial, state=TrialState.FAIL)
            took.append(time.monotonic() - started)
            if on_trial is not None:
                on_trial(study, study.get_trials(deepcopy=False)[trial.number])
            continue
        except BaseException:
            study.tell(trial, state=TrialState.FAIL)
            raise
        frozen = study.tell(trial, values)
        took.append(time.monotonic() - started)
        if on_trial is not None:
            on_trial(study, frozen)
    return len(plan)


def confirm_samples(study: optuna.Study, metric: str) -> dict[int, list[float]]:
    """Each repeated trial's measurements of `metric`: every boot of its config (its own, its
    repeats', and any other trial that served the same flags), pooled as `config_gains` pools
    them, so the confirm table and every other view count the same boots."""
    recs = records(study)
    by_number = {r.number: r for r in recs}
    pooled = _pool(recs, [metric])
    out: dict[int, list[float]] = {}
    for r in recs:
        src = r.facts.repeat_of
        if src is not None and src not in out and by_number[src].measured:
            vals = pooled[_key(by_number[src])].get(metric)
            if vals:
                out[src] = list(vals)
    return out


def _key(r: TrialRecord) -> str:
    return str(r.facts.flags_key if r.facts.flags_key is not None else r.number)


def _pool(recs: list[TrialRecord], metrics: list[str]) -> dict[str, dict[str, list[float]]]:
    """Each config's (served flags') measured values of each metric, over all its boots. A
    capacity search stopped early below the incumbent gave a lower bound: it counts only for a
    config with no full measurement."""
    full = {_key(r) for r in recs if r.measured and not r.bound_only}
    pooled: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in recs:
        if r.bound_only and _key(r) in full:
            continue
        for m in metrics:
            v = r.value(m)
            if r.measured and v is not None:
                pooled[_key(r)][m].append(float(v))
    return pooled


def config_boots(recs: list[TrialRecord], metrics: list[str]) -> dict[int, dict[str, list[float]]]:
    """For each config measured more than once, keyed by its first trial: every boot's values
    of each metric (for error bars)."""
    pooled = _pool(recs, metrics)
    out: dict[int, dict[str, list[float]]] = {}
    for r in recs:
        k = _key(r)
        if r.measured and r.facts.repeat_of is None and k in pooled and \
                max(len(v) for v in pooled[k].values()) > 1:
            out.setdefault(r.number, dict(pooled[k]))
    return out


def config_gains(recs: list[TrialRecord], metrics: list[str]) -> dict[int, dict[str, Gain]]:
    """For each measured trial, each metric's gain of its config over the baseline's config,
    both pooled over every boot of the same served flags (the first pass, repeats, a config
    sampled twice): one measurement each until repeats exist, then an interval."""
    base = baseline(recs)
    if base is None:
        return {}
    pooled = _pool(recs, metrics)
    out: dict[int, dict[str, Gain]] = {}
    memo: dict[tuple[str, str], Gain] = {}
    base_vals = pooled[_key(base)]
    for r in recs:
        if not r.measured:
            continue
        gains = {}
        for m in metrics:
            vals, bvals = pooled[_key(r)].get(m), base_vals.get(m)
            if vals and bvals and statistics.median(bvals):
                if (_key(r), m) not in memo:
                    memo[_key(r), m] = gain_ci(vals, bvals)
                gains[m] = memo[_key(r), m]
        out[r.number] = gains
    return out


@dataclass(frozen=True)
class ConfirmRow:
    """One config in the confirm phase: its boots' values, their median with its interval, and
    (for a finalist) its gain over the baseline's boots and whether it survives."""

    values: list[float]
    median: float
    ci_low: float
    ci_high: float
    gain: Gain | None = None  # None for the baseline
    # better than the defaults beyond the noise on this (the first) objective: a fact about
    # the row, not the recommendation, which weighs every objective (tuning/summary.py)
    survives: bool = False

    @property
    def text(self) -> str:
        """The gain as one reads it ("+12.3% [+4.0, +20.1]"); empty for the baseline."""
        return self.gain.text() if self.gain is not None else ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"values": self.values, "median": self.median,
                               "ci_low": self.ci_low, "ci_high": self.ci_high}
        if self.gain is not None:
            g = self.gain
            out.update(gain=g.gain, gain_low=g.low, gain_high=g.high,
                       significant=g.significant, text=g.text(), survives=self.survives,
                       n=g.n, n_base=g.n_base, noise_floor=g.noise_floor, log_sd=g.log_sd,
                       gain_of=g.value, gain_against=g.base_value)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ConfirmRow:
        gain = None
        if "gain" in d:
            gain = Gain(d["gain"], d["gain_low"], d["gain_high"], d.get("n", len(d["values"])),
                        d.get("n_base", 2), d.get("noise_floor", 0.0), d.get("gain_of"),
                        d.get("log_sd"), d.get("gain_against"))
        return cls(list(d["values"]), d["median"], d["ci_low"], d["ci_high"], gain,
                   bool(d.get("survives", False)))


@dataclass
class ConfirmResult:
    """What `confirm.json` holds: each config's boots, median and interval, its gain over the
    baseline, and the noise floor. What the study recommends after it is the study summary's
    (tuning/summary.py, over every objective), never decided here."""

    metric: str
    repeats: int
    base: int
    noise_floor: float
    maximize: bool = True
    configs: dict[int, ConfirmRow] = field(default_factory=dict)
    by_point_estimate: int | None = None
    left: int = 0  # boots of the plan not run (stopped for a deadline; the same command resumes)

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "repeats": self.repeats, "baseline": self.base,
                "noise_floor": self.noise_floor, "maximize": self.maximize,
                "configs": {str(k): v.to_json() for k, v in self.configs.items()},
                "by_point_estimate": self.by_point_estimate,
                "boots_left": self.left}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ConfirmResult:
        """A `confirm.json` as `to_json` wrote it."""
        return cls(d["metric"], d["repeats"], d["baseline"], d["noise_floor"],
                   d.get("maximize", True),
                   {int(k): ConfirmRow.from_json(v) for k, v in d["configs"].items()},
                   d.get("by_point_estimate"), d.get("boots_left", 0))


def summarize(study: optuna.Study, cfg: StudyConfig, base: int, numbers: list[int],
              repeats: int) -> ConfirmResult:
    metric = cfg.metric_names()[0]
    maximize = cfg.objectives[0].direction == "maximize"
    samples = confirm_samples(study, metric)
    base_s = samples.get(base, [])
    res = ConfirmResult(metric, repeats, base, rel_sd(base_s), maximize)
    for num in [base, *numbers]:
        vals = samples.get(num, [])
        if not vals:
            continue
        med, lo, hi = median_ci(vals)
        g = gain_ci(vals, base_s) if num != base and base_s else None
        res.configs[num] = ConfirmRow(vals, med, lo, hi, g, g is not None and g.significant
                                      and (g.gain > 0) == maximize)
    cands = {str(k): samples[k] for k in numbers if len(samples.get(k, [])) > 1}
    if cands:
        # what the medians alone would pick, the defaults among them: a finalist whose median
        # is below theirs is no point-estimate pick either
        res.by_point_estimate = int(pick({**cands, str(base): base_s} if len(base_s) > 1
                                         else cands, "point", maximize))
    return res


def run_confirm(study: optuna.Study, cfg: StudyConfig, pre: Preflight, requests: list[Any],
                top: int, repeats: int, *, on_phase: PhaseHook | None = None,
                on_trial: TrialHook | None = None,
                on_plan: Callable[[int, list[int], list[int]], None] | None = None,
                deadline: float | None = None) -> ConfirmResult:
    """Plan, run (or resume) and summarize the confirm phase; writes `confirm.json`."""
    base, numbers = finalists(study, cfg, top)
    plan = confirm_plan(study, [base, *numbers], repeats)
    if on_plan is not None:
        on_plan(base, numbers, plan)
    ran = run_repeats(study, cfg, pre, requests, plan, on_phase=on_phase, on_trial=on_trial,
                      deadline=deadline) if plan else 0
    res = summarize(study, cfg, base, numbers, repeats)
    res.left = len(plan) - ran
    path = cfg.study_dir() / "confirm.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res.to_json(), indent=2) + "\n")
    return res


def wanted(cfg: StudyConfig, study: optuna.Study, flag: bool | None) -> tuple[bool, str]:
    """Whether the study ends with its confirm phase, and why: `--confirm`/`--no-confirm`, else
    `confirm.when`; "auto" confirms when the study's median trial took at least
    `confirm.auto_min_trial_s` (trials that take minutes: a first-pass winner is worth a few
    more boots before anyone deploys it)."""
    if flag is not None:
        return flag, "--confirm" if flag else "--no-confirm"
    when = cfg.confirm.when
    if when != "auto":
        return when == "always", f"confirm.when: {when}"
    took = [r.timings["total_s"] for r in records(study)
            if r.measured and r.facts.repeat_of is None and "total_s" in r.timings]
    med = statistics.median(took) if took else 0.0
    on = med >= cfg.confirm.auto_min_trial_s
    return on, (f"the median trial took {med:.0f} s ({'>=' if on else '<'} "
                f"confirm.auto_min_trial_s {cfg.confirm.auto_min_trial_s:g})")
