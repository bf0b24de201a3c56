"""One trial: sampled params -> flags -> server -> load -> metrics -> values + constraints.

The objective returns numbers and sets constraints; it logs nothing (tracking is a callback).
An expected failure (the server does not boot, crashes, times out, or serves nothing) is a
COMPLETE trial that violates the `boot_ok` constraint, with worst-case values for the sampler
and its cause recorded: TPE and GP skip FAIL trials and would keep proposing the same region.
Flags that failed once are never booted again; the earlier trial's verdict is reused (what a
trial reads of the trials before it: tuning/earlier.py). A boot the machine spoiled is no
verdict on its config (tuning/failures.py). Anything else raised inside a trial is recorded on
it and stops the study (TrialError).
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.config.metric_names import PER_GPU, per_gpu
from autotune.config.study import SUITE_PREFIX, StudyConfig, gpus_per_replica, layout_text
from autotune.errors import (
    ClientProcessError,
    LoadError,
    MeasurementWarning,
    ServerBootError,
    ServerError,
    TrialError,
    Unmeasured,
)
from autotune.load.record import Request
from autotune.measure.runner import OnMeasured, run_boot
from autotune.server.refusals import refusal
from autotune.tuning.earlier import failed_before, flags_key, incumbent
from autotune.tuning.failures import failed_timings, unfixable_by, unless_machines, unmeasured
from autotune.tuning.machines import here
from autotune.tuning.preflight import request_limit
from autotune.tuning.quality import QUALITY_OK, Guard
from autotune.tuning.record import TrialFacts, facts_of, records, write_facts
from autotune.tuning.record import baseline as baseline_record
from autotune.tuning.search_space import SearchSpace
from autotune.tuning.spend import boot_facts
from autotune.tuning.suite import combine, ratio
from autotune.tuning.verdict import quality_metrics
from autotune.tuning.warmup import for_boot

_SHOWN: dict[Any, Any] = {}  # the warnings a trial's measurement gave, shown once a process
BOOT_OK = "boot_ok"
REQUESTS_OK = "requests_ok"
CAPACITY_OK = "capacity_ok"  # some load met the SLOs
# what the sampler learns from a trial without a measurement (never shown to a user)
WORST = {"maximize": 0.0, "minimize": 1e6}

# this command run, on each trial it measures (TrialFacts.process)
PROCESS = f"{socket.gethostname()}:{os.getpid()}"
# (trial number, phase, flags) -> None; phases: booting, benchmarking, stopping, reused
PhaseHook = Callable[[int, str, dict[str, Any]], None]


@dataclass
class Objective:
    cfg: StudyConfig
    space: SearchSpace
    requests: list[Request]
    study_dir: Path
    on_phase: PhaseHook | None = None
    worker: dict[str, Any] | None = None  # which worker ran the trial (id, host, devices)
    trials_dir: Path | None = None  # where each trial's folder goes (default: study_dir)
    # run on a repeat boot's server once measured, by the trial it repeats (certify's reference)
    on_measured: dict[int, OnMeasured] | None = None

    def __post_init__(self) -> None:
        self.guard = Guard(self.cfg, self.study_dir, self.requests)
        # the preflight's limit: a trial sends none of the requests the preflight dropped
        self.max_len = request_limit(self.cfg, self.space)[0]

    def constraint_names(self) -> list[str]:
        guard = [QUALITY_OK] if self.guard.on else []
        if self.cfg.capacity is not None:  # the SLOs judge each load point instead
            return [BOOT_OK, REQUESTS_OK, CAPACITY_OK, *guard]
        return [BOOT_OK, REQUESTS_OK, *(s.key for s in self.cfg.slos), *guard]

    def _judge(self, trial: optuna.Trial, flags: dict[str, Any], baseline: bool,
               found: dict[str, Any] | None, cause: str | None,
               metrics: dict[str, float]) -> str | None:
        """The quality guard's verdict, recorded (its figures also as metrics) and its constraint
        set; the cause to record: the guard's, then the measurement's (both, where both)."""
        facts, violation, why = self.guard.verdict(flags, baseline, found)
        if facts is not None:
            write_facts(trial, TrialFacts(quality=facts))
            metrics.update(quality_metrics(facts))
        if self.guard.on:
            trial.set_constraint(QUALITY_OK, violation)
        return "; ".join(c for c in (why, cause) if c) or None

    def __call__(self, trial: optuna.Trial) -> list[float]:
        mine = facts_of(trial)
        baseline = bool(mine.baseline)
        repeat = mine.repeat_of
        if repeat is not None:  # the confirm phase: the repeated trial's flags, as they were
            flags = dict(facts_of(trial.study.trials[int(repeat)]).flags or {})
        else:
            sampled = {} if baseline else self.space.suggest(trial)
            flags = {**self.space.fixed, **self.space.to_flags(sampled)}
        key = flags_key(flags)
        write_facts(trial, TrialFacts(flags=flags, flags_key=key, worker=self.worker,
                                      process=PROCESS, machine=here()))
        hook = self.on_phase or (lambda *_: None)

        prior = failed_before(trial.study, key)
        if prior is not None:
            hook(trial.number, "reused", flags)
            was = facts_of(prior)
            return self._fail(trial, TrialFacts(
                reused_from=prior.number, cause=was.cause or "failed before",
                failure=was.failure or "ServerError"))

        served = self.cfg.server.serve_flags(flags)
        gpus = gpus_per_replica(served)
        have = self.cfg.gpus_per_trial
        if have and gpus > have:  # a layout the trial's GPUs cannot hold: no boot
            hook(trial.number, "rejected", flags)
            return self._fail(trial, TrialFacts(
                cause=f"layout {layout_text(served)} needs {gpus} GPUs; the trial has {have} "
                      f"(--gpus-per-trial {have})",
                failure="LayoutError"))

        refused = refusal(served, self.cfg.server.model)
        if refused is not None:  # vLLM's own argument check, without a boot
            hook(trial.number, "rejected", flags)
            return self._fail(trial, TrialFacts(cause=refused[1], failure="ServerBootError",
                                                preboot=refused[0]))

        workdir = (self.trials_dir or self.study_dir) / f"trial-{trial.number:04d}"
        log_path = str(workdir / "server.log")
        phase = ["starting"]
        began: dict[str, float] = {}  # when the boot and what follows it began

        def on_phase(p: str) -> None:
            phase[0] = p
            began.setdefault("boot" if p.startswith("booting") else "after", time.monotonic())
            hook(trial.number, p, flags)

        try:
            if self.cfg.capacity is not None:
                return self._capacity(trial, flags, gpus, workdir, on_phase)
            if self.cfg.profiles:
                return self._suite(trial, flags, gpus, workdir, on_phase, baseline)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run = run_boot(self.cfg.server, [self.cfg.profile], flags, workdir,
                               requests=self.requests, on_phase=on_phase,
                               max_len=self.max_len, **self.guard.hooks(flags, baseline))
            caught = [w for w in caught if issubclass(w.category, MeasurementWarning)]
            for w in caught:  # kept with the trial, and shown once each as they would have been
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno,
                                       registry=_SHOWN)
        except KeyboardInterrupt:
            # Optuna marks the trial FAIL and re-raises; the server was stopped on the way out.
            # The next `autotune study` re-enqueues these params (study.requeue_interrupted).
            write_facts(trial, TrialFacts(interrupted=True,
                                          cause=f"interrupted while {phase[0]}"))
            raise
        except (ServerError, LoadError) as e:
            cause = getattr(e, "cause", None) or str(e)
            write_facts(trial, boot_facts(log_path, failed_timings(began).get("boot_s", 0.0)))
            unless_machines(e, trial, key, self.cfg.server.boot_timeout_s,
                            TrialFacts(log_path=log_path, timings=failed_timings(began)))
            fatal = baseline and isinstance(e, ServerBootError) and unfixable_by(self.space,
                                                                                  cause)
            return self._fail(trial, TrialFacts(log_path=log_path, cause=cause,
                                                failure=type(e).__name__, fatal=fatal or None,
                                                timings=failed_timings(began)))
        except Unmeasured:  # recorded as the machine's; the study loop enqueues it again
            raise
        except ClientProcessError as e:  # a client process died or never started: the machine's
            unmeasured(trial, f"{e} (the machine's, not the config's)",
                       TrialFacts(log_path=log_path, timings=failed_timings(began)), e)
        except Exception as e:  # not a verdict on the config: record it, stop the study
            write_facts(trial, TrialFacts(
                cause=f"{type(e).__name__}: {e}", log_path=log_path,
                error={"type": type(e).__name__, "message": str(e)[:2000], "phase": phase[0]}))
            raise TrialError(trial.number, e, log_path) from e

        write_facts(trial, boot_facts(run.log_path, run.timings.boot_s))
        pt = run.point
        metrics = pt.metrics.flat()
        metrics.update(per_gpu(metrics, gpus), gpus=float(gpus))
        cause = None
        if pt.metrics.errors:
            first = pt.metrics.root_error
            cause = f"{pt.metrics.failed} of {len(pt.records)} requests failed: {first}"
        cause = self._judge(trial, flags, baseline, run.quality, cause, metrics)
        write_facts(trial, TrialFacts(
            metrics=metrics, timings=asdict(run.timings), argv=run.argv,
            server_stats=pt.server_stats or None, log_path=run.log_path,
            request_errors=pt.metrics.errors or None, cause=cause,
            warnings=[str(w.message) for w in caught] or None))
        trial.set_constraint(BOOT_OK, 0.0)
        trial.set_constraint(REQUESTS_OK, float(pt.metrics.failed))
        for slo in self.cfg.slos:
            trial.set_constraint(slo.key, slo.violation(metrics[slo.metric]))
        return [float(metrics[o.metric]) for o in self.cfg.objectives]

    def _capacity(self, trial: optuna.Trial, flags: dict[str, Any], gpus: int, workdir: Path,
                  on_phase: Callable[[str], None]) -> list[float]:
        """Capacity mode: search the most load this config sustains within the SLOs, starting
        at the incumbent's capacity (and, except in a confirm-phase repeat, stopping early below
        it). When the study maximizes capacity per GPU, the incumbent is per GPU, scaled by this
        server's GPUs."""
        cap = self.cfg.capacity
        assert cap is not None
        by_gpu = any(o.metric.endswith(PER_GPU) for o in self.cfg.objectives)
        if self.cfg.profiles:
            return self._capacity_suite(trial, flags, gpus, workdir, on_phase, by_gpu)
        best = incumbent(trial.study, per_gpu=by_gpu)
        best, mine = best * gpus if best is not None and by_gpu else best, facts_of(trial)
        # a confirm-phase repeat measures the whole capacity: an early stop gives only a bound
        early, is_base = cap.early_stop and mine.repeat_of is None, bool(mine.baseline)
        if (at := mine.check_at) is not None:  # a certify boot: at C and a step above
            best, cap = at, cap.model_copy(update={"bracket": "step"})
        # a config that ran warm before on these caches: a short warm-up (tuning.warmup)
        warm = for_boot(records(trial.study), trial.number, str(mine.flags_key), here(),
                        self.cfg.server, workdir)
        if cap.warm_windows != 0:
            write_facts(trial, TrialFacts(warm_up=warm.facts()))
        hook = (self.on_measured or {}).get(-1 if mine.repeat_of is None else mine.repeat_of)
        run = run_boot(self.cfg.server, [self.cfg.profile], flags, workdir, capacity=cap,
                       slos=self.cfg.slos, starts=None if best is None else
                       {self.cfg.profile.key: best}, stop_below=best if early else None,
                       on_phase=on_phase, max_len=self.max_len, warm_enough=warm.enough,
                       on_measured=hook, **self.guard.hooks(flags, is_base))
        if run.checked is not None:
            write_facts(trial, TrialFacts(reference=run.checked))
        write_facts(trial, boot_facts(run.log_path, run.timings.boot_s))
        res = run.capacity
        metrics = res.summary()
        metrics.update(per_gpu(metrics, gpus), gpus=float(gpus))
        if res.at is None and any(pt.flag for pt in res.points):  # no load passed, and the
            # client, not the server, ended the search: its 0 is no capacity
            unmeasured(trial, f"no load passed before the load generator, not the server, "
                       f"ended the search ({res.stopped}): the machine's, not the config's",
                       TrialFacts(metrics=metrics, capacity=res.to_json(),
                                  timings=asdict(run.timings), argv=run.argv,
                                  log_path=run.log_path))
        cause = None
        if res.at is None:  # why the lowest load failed; an early stop is not a failure
            lowest = min(res.points, key=lambda p: p.load)
            cause = ": ".join(x for x in (res.stopped, "; ".join(lowest.misses)) if x)
        cause = self._judge(trial, flags, is_base, run.quality, cause, metrics)
        write_facts(trial, TrialFacts(
            metrics=metrics, capacity=res.to_json(), timings=asdict(run.timings),
            argv=run.argv, log_path=run.log_path, cause=cause))
        trial.set_constraint(BOOT_OK, 0.0)
        trial.set_constraint(REQUESTS_OK, 0.0)
        trial.set_constraint(CAPACITY_OK, 0.0 if res.at is not None else 1.0)
        return [float(metrics[o.metric]) for o in self.cfg.objectives]

    def _suite(self, trial: optuna.Trial, flags: dict[str, Any], gpus: int, workdir: Path,
               on_phase: Callable[[str], None], is_baseline: bool) -> list[float]:
        """A suite: every profile on one boot; each objective scored per profile as a ratio to
        the baseline trial's value, combined by `suite_score` (autotune.tuning.suite)."""
        profiles = self.cfg.workloads()
        run = run_boot(self.cfg.server, profiles, flags, workdir, on_phase=on_phase,
                       max_len=self.max_len, **self.guard.hooks(flags, is_baseline))
        write_facts(trial, boot_facts(run.log_path, run.timings.boot_s))
        metrics = run.metrics()
        for label, pt in run.points.items():
            metrics.update({f"{label}/{k}": v for k, v in per_gpu(pt.metrics.flat(),
                                                                  gpus).items()})
        self._score_suite(trial, metrics, is_baseline)
        failed = sum(pt.metrics.failed for pt in run.points.values())
        cause = self._judge(trial, flags, is_baseline, run.quality,
                            f"{failed} requests failed" if failed else None, metrics)
        write_facts(trial, TrialFacts(
            metrics=metrics, timings=asdict(run.timings), argv=run.argv, log_path=run.log_path,
            cause=cause))
        trial.set_constraint(BOOT_OK, 0.0)
        trial.set_constraint(REQUESTS_OK, float(failed))
        for slo in self.cfg.slos:  # an SLO holds on every profile
            trial.set_constraint(slo.key, max(slo.violation(pt.metrics.flat()[slo.metric])
                                              for pt in run.points.values()))
        return [float(metrics[SUITE_PREFIX + o.metric]) for o in self.cfg.objectives]

    def _score_suite(self, trial: optuna.Trial, metrics: dict[str, float],
                     is_baseline: bool) -> None:
        """Each objective's suite score (`suite_<metric>`): its per-profile ratios to the
        baseline trial's values, combined by `suite_score` (autotune.tuning.suite)."""
        profiles = self.cfg.workloads()
        base = None if is_baseline else baseline_record(records(trial.study))
        if not is_baseline and (base is None or not base.metrics):
            raise RuntimeError("a suite scores each config against the baseline trial, which "
                               "has no measurement (it failed, or another worker runs it)")
        weights = {p.key: p.weight for p in profiles}
        for o in self.cfg.objectives:
            ratios = {p.key: 1.0 if base is None else ratio(
                metrics[f"{p.key}/{o.metric}"], base.metrics[f"{p.key}/{o.metric}"])
                for p in profiles}
            metrics[SUITE_PREFIX + o.metric] = combine(ratios, weights, o.direction,
                                                       self.cfg.suite_score)

    def _capacity_suite(self, trial: optuna.Trial, flags: dict[str, Any], gpus: int,
                        workdir: Path, on_phase: Callable[[str], None], by_gpu: bool
                        ) -> list[float]:
        """A suite in capacity mode: each profile's capacity searched in turn on one boot
        (from the incumbent's capacity on that profile; no early stop, since the score weighs
        every profile), scored per profile against the baseline like any suite. A profile
        whose lowest load misses the SLOs makes the config infeasible, with its reason."""
        cap = self.cfg.capacity
        assert cap is not None
        profiles = self.cfg.workloads()
        starts = {}
        for p in profiles:
            best = incumbent(trial.study, per_gpu=by_gpu, key=f"{p.key}/capacity")
            if best is not None:
                starts[p.key] = best * gpus if by_gpu else best
        is_baseline = bool(facts_of(trial).baseline)
        run = run_boot(self.cfg.server, profiles, flags, workdir, capacity=cap,
                       slos=self.cfg.slos, starts=starts, on_phase=on_phase,
                       max_len=self.max_len, **self.guard.hooks(flags, is_baseline))
        write_facts(trial, boot_facts(run.log_path, run.timings.boot_s))
        metrics = run.metrics()
        for label, res in run.capacities.items():
            metrics.update({f"{label}/{k}": v for k, v in per_gpu(res.summary(), gpus).items()})
        metrics["gpus"] = float(gpus)
        self._score_suite(trial, metrics, is_baseline)
        missed = {k: r for k, r in run.capacities.items() if r.at is None}
        cause = self._judge(trial, flags, is_baseline, run.quality, "; ".join(
            f"{k}: {r.stopped}: {'; '.join(min(r.points, key=lambda p: p.load).misses)}"
            for k, r in missed.items()) or None, metrics)
        write_facts(trial, TrialFacts(
            metrics=metrics, capacity={"profiles": {k: r.to_json()
                                                    for k, r in run.capacities.items()}},
            timings=asdict(run.timings), argv=run.argv, log_path=run.log_path, cause=cause))
        trial.set_constraint(BOOT_OK, 0.0)
        trial.set_constraint(REQUESTS_OK, 0.0)
        trial.set_constraint(CAPACITY_OK, 1.0 if missed else 0.0)
        return [float(metrics[SUITE_PREFIX + o.metric]) for o in self.cfg.objectives]

    def _fail(self, trial: optuna.Trial, facts: TrialFacts) -> list[float]:
        write_facts(trial, facts)
        for name in self.constraint_names():
            trial.set_constraint(name, 1.0)
        return [WORST[o.direction] for o in self.cfg.objectives]
