"""The typed trial and study records: what a trial or a study stores about itself, and how every
reader sees it. Optuna keeps a trial's and a study's facts as string-keyed user attributes; only
this module knows those keys (`TrialFacts`' and `StudyFacts`' fields; a study's `machine:` ones,
tuning.machines). A trial that was not measured (infeasible, interrupted, crashed) has no values
in its record: the worst-case numbers Optuna needs to learn from it never reach a user."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.quality import QUALITY_OK
from autotune.measure.capacity import CapacityResult, LoadPoint, stopped_early
from autotune.server.scrape import spec_counts, spec_rates


class Status(enum.StrEnum):
    OK = "ok"  # measured, every constraint met
    SLO_MISS = "slo_miss"  # measured, an SLO missed
    INFEASIBLE = "infeasible"  # no measurement: no boot, no service (the cause says why)
    INTERRUPTED = "interrupted"  # stopped by a signal, or its worker stopped beating
    UNMEASURED = "unmeasured"  # no measurement, not the config's doing (a starved boot)
    ERROR = "error"  # an unexpected exception (recorded; the study stopped)
    RUNNING = "running"
    WAITING = "waiting"  # enqueued, not started


@dataclass(frozen=True)
class TrialFacts:
    """What a trial stores about itself. Fields left None are not written."""

    flags: dict[str, Any] | None = None  # the sampled flags (space.fixed included)
    flags_key: str | None = None  # the flags as one canonical string
    baseline: bool | None = None  # vLLM's defaults (with the fixed args)
    metrics: dict[str, float] | None = None
    server_stats: dict[str, float] | None = None
    timings: dict[str, float] | None = None
    # the boot's seconds by phase from vLLM's log (server.bootlog.PHASES: start, weights,
    # compile, ...; they sum to timings' boot_s), and whether torch.compile compiled a graph in
    # it rather than loading every one from its cache (None: the log says neither)
    boot_phases: dict[str, float] | None = None
    compiled: bool | None = None
    argv: list[str] | None = None
    log_path: str | None = None
    request_errors: dict[str, int] | None = None
    cause: str | None = None  # the one line to read first
    failure: str | None = None  # the expected failure's exception type: no measurement
    fatal: bool | None = None  # a baseline failure no parameter of the space can change
    reused_from: int | None = None  # failed flags not booted again: the verdict of this trial
    interrupted: bool | None = None
    retry_of: int | None = None
    worker: dict[str, Any] | None = None
    capacity: dict[str, Any] | None = None  # the capacity search: axis, points, bracket
    error: dict[str, str] | None = None  # an unexpected exception: type, message, log
    preboot: str | None = None  # refused without a boot by this rule (autotune.server.refusals)
    repeat_of: int | None = None  # a confirm-phase repeat of this trial's config
    check_at: float | None = None  # a certify boot: searched in steps from this capacity
    warnings: list[str] | None = None  # what the measurement warned (too short, a busy client)
    grid: int | None = None  # enqueued as this config of a grid
    start: int | None = None  # enqueued as this start config
    warm_start: str | None = None  # enqueued from another study's front: "<study>#<trial>"
    quality: dict[str, Any] | None = None  # the quality guard's figures (tuning/quality.py)
    process: str | None = None  # "host:pid" of the run that measured it (between runs: a pause)
    unmeasured: str | None = None  # why nothing was measured, not the config's doing
    machine: str | None = None  # the machine's key (tuning/machines.py): capacities compare within
    warm_up: dict[str, Any] | None = None  # the warm-up size its boot ran, and why (tuning.warmup)
    reference: dict[str, Any] | None = None  # the reference check run on its server (certify)

    @property
    def bound_only(self) -> bool:
        """A capacity search stopped early below the incumbent: a lower bound, not to pool."""
        return any(stopped_early(s.stopped) for s in self.searches().values())

    def searches(self) -> dict[str | None, CapacityResult]:
        """The capacity searches it ran, by profile label (None: the study's one); or none."""
        cap = self.capacity or {}
        if "profiles" in cap:
            return {k: CapacityResult.from_json(v) for k, v in cap["profiles"].items()}
        return {None: CapacityResult.from_json(cap)} if cap else {}

    def to_attrs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> TrialFacts:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in attrs.items() if k in names})


def write_facts(trial: optuna.Trial, facts: TrialFacts) -> None:
    for k, v in facts.to_attrs().items():
        trial.set_user_attr(k, v)


def facts_of(t: FrozenTrial | optuna.Trial) -> TrialFacts:
    """What a trial (finished, running or being run) has stored about itself."""
    return TrialFacts.from_attrs(t.user_attrs)


def enqueue(study: optuna.Study, params: dict[str, Any], facts: TrialFacts | None = None) -> None:
    """Enqueue a config, with what the trial should know of itself (baseline, retry_of, ...)."""
    study.enqueue_trial(params, user_attrs=(facts or TrialFacts()).to_attrs() or None)


def queued_params(t: FrozenTrial) -> dict[str, Any]:
    """A trial's params; a waiting trial has none yet: the config enqueued for it."""
    return dict(t.system_attrs.get("fixed_params", {}) if t.state == TrialState.WAITING
                else t.params)


@dataclass(frozen=True)
class StudyFacts:
    """What a study stores about itself (fields left None are not written)."""

    config: dict[str, Any] | None = None  # the study file as run, for workers and reports
    search_space: dict[str, Any] | None = None
    vllm_version: str | None = None
    tracking_uri: str | None = None  # where its MLflow runs went
    requeued: list[int] | None = None  # interrupted trials already enqueued again
    grid_enqueued: int | None = None  # how many grid configs were enqueued
    starts_enqueued: int | None = None  # how many start configs were enqueued, and which
    starts_list: list[dict[str, Any]] | None = None  # (None: a study before 2026-11-29)
    warm_started: str | None = None  # the --warm-start source already enqueued
    identity: dict[str, Any] | None = None  # what its numbers mean (tuning/identity.py)

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> StudyFacts:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in attrs.items() if k in names})

    def merged(self, other: StudyFacts) -> StudyFacts:
        """These facts with `other`'s set fields over them: a study step gathers what its
        parts learnt and writes it once."""
        return replace(self, **{f.name: v for f in fields(other)
                                if (v := getattr(other, f.name)) is not None})


def study_facts(study: optuna.Study) -> StudyFacts:
    return StudyFacts.from_attrs(study.user_attrs)


def study_attrs(study: optuna.Study, prefix: str) -> dict[str, Any]:
    return {k: v for k, v in study.user_attrs.items() if k.startswith(prefix)}


def write_study_facts(study: optuna.Study, facts: StudyFacts,
                      keyed: dict[str, Any] | None = None) -> None:
    """Write the facts set, and `keyed` attributes as given (a `machine:` one)."""
    for name, v in [*((f.name, getattr(facts, f.name)) for f in fields(facts)),
                    *(keyed or {}).items()]:
        if v is not None:
            study.set_user_attr(name, v)


def _status(t: FrozenTrial, facts: TrialFacts) -> Status:
    if t.state == TrialState.RUNNING:
        return Status.RUNNING
    if t.state == TrialState.WAITING:
        return Status.WAITING
    if t.state != TrialState.COMPLETE:
        return Status.ERROR if facts.error else Status.UNMEASURED if facts.unmeasured \
            else Status.INTERRUPTED
    if facts.failure:
        return Status.INFEASIBLE
    return Status.OK if all(v <= 0 for v in t.constraints.values()) else Status.SLO_MISS


@dataclass(frozen=True)
class TrialRecord:
    number: int
    status: Status
    facts: TrialFacts
    params: dict[str, Any]
    values: dict[str, float]  # objective metric -> value; empty when not measured
    constraints: dict[str, float] = field(default_factory=dict)
    started: datetime | None = None
    completed: datetime | None = None

    @classmethod
    def of(cls, t: FrozenTrial, objective_names: list[str]) -> TrialRecord:
        facts = facts_of(t)
        status = _status(t, facts)
        measured = status in (Status.OK, Status.SLO_MISS) and t.values is not None
        values = dict(zip(objective_names, t.values, strict=False)) if measured else {}
        return cls(t.number, status, facts, queued_params(t), values, dict(t.constraints),
                   t.datetime_start, t.datetime_complete)

    @property
    def baseline(self) -> bool:
        return bool(self.facts.baseline)

    @property
    def measured(self) -> bool:
        return bool(self.values)

    @property
    def feasible(self) -> bool:
        return self.status == Status.OK

    @property
    def flags(self) -> dict[str, Any]:
        return self.facts.flags or {}

    @property
    def metrics(self) -> dict[str, float]:
        return (self.facts.metrics or {}) if self.measured else {}

    @property
    def cause(self) -> str | None:
        if self.facts.cause is None and self.status == Status.INTERRUPTED:
            # failed by the heartbeat check: its worker (or machine) stopped without a word
            return "its worker stopped beating (killed, or its machine lost); retried once"
        return self.facts.cause

    @property
    def timings(self) -> dict[str, float]:
        return self.facts.timings or {}

    @property
    def bound_only(self) -> bool:
        return self.facts.bound_only

    @property
    def speculation(self) -> dict[str, Any] | None:
        """vLLM's speculative-decoding counters: over the measured load where it drafted (a
        search's summed over its points), else over the guard's greedy run (`source`); or None."""
        s = {k.removeprefix("server_"): v for k, v in (self.facts.server_stats or {}).items()}
        if not s.get("spec_drafts"):
            s = {k.removeprefix("server_"): v for k, v in spec_counts(
                p.server for found in self.facts.searches().values() for p in found.points).items()}
        for src, counts in (("measured load", s), ("quality guard's greedy run",
                                                   self.facts.quality or {})):
            if counts.get("spec_drafts"):  # the figures as recorded, else from the counts
                rates = {**spec_rates(counts), **counts}
                return {"source": src, "drafts": counts["spec_drafts"],
                        "acceptance_rate": rates.get("spec_acceptance_rate"),
                        "mean_accepted_length": rates.get("spec_mean_accepted_len")}
        return None

    def lower_bound(self, metric: str) -> bool:
        """Whether `metric` is a bound: a capacity search stopped early below the incumbent (≥)."""
        return metric == "capacity" and self.bound_only

    def unjudged(self, metric: str) -> bool:
        """Whether `metric` (a suite's: <label>/metric) is a capacity no load point judged: every
        point of its search measured the load generator, not the server (LoadPoint.flag)."""
        label, _, name = metric.rpartition("/")
        points = getattr(self.facts.searches().get(label or None), "points", ())
        return name.startswith(("capacity", "goodput")) and bool(points) and \
            all(p.flag for p in points)

    def curve(self, profile: str | None = None) -> list[LoadPoint]:
        """The search's load points by load (none without one); in a capacity suite, `profile`'s."""
        found = self.facts.searches().get(profile)
        return found.curve() if found is not None else []

    def points(self, profile: str | None = None) -> list[LoadPoint]:
        """The same points in the order measured."""
        found = self.facts.searches().get(profile)
        return list(found.points) if found is not None else []

    def curve_profiles(self) -> list[str | None]:
        """Whose load curves the trial has: a suite's profiles, else [None] (one search) or []."""
        return [k for k, s in self.facts.searches().items() if s.points]

    def value(self, metric: str) -> float | None:
        """An objective's value, else a recorded metric; None when not measured."""
        if metric in self.values:
            return self.values[metric]
        return self.metrics.get(metric)

    def label(self) -> str:
        """The status as a table shows it ("quality miss": the quality guard alone failed it)."""
        miss = "quality miss" if {k for k, v in self.constraints.items() if v > 0} == {
            QUALITY_OK} else "SLO miss"
        return {Status.OK: "ok", Status.SLO_MISS: miss}.get(self.status, self.status.value)


def objective_names(study: optuna.Study) -> list[str]:
    names = study.metric_names
    return list(names) if names else [f"objective_{i}" for i in range(len(study.directions))]


def records(study: optuna.Study) -> list[TrialRecord]:
    names = objective_names(study)
    return [TrialRecord.of(t, names) for t in study.get_trials(deepcopy=False)]


def record_of(study: optuna.Study, trial: FrozenTrial) -> TrialRecord:
    return TrialRecord.of(trial, objective_names(study))


def baseline(recs: list[TrialRecord]) -> TrialRecord | None:
    """The measured baseline trial (vLLM's defaults), if any."""
    return next((r for r in recs if r.baseline and r.measured), None)


def delta(value: float, base: float) -> float:
    """Relative change of `value` against `base`."""
    return (value - base) / base if base else 0.0


def deltas(rec: TrialRecord, base: TrialRecord | None) -> dict[str, float]:
    """Each objective's relative change against the baseline's (empty: either not measured)."""
    if base is None or not rec.measured:
        return {}
    return {m: delta(v, base.values[m]) for m, v in rec.values.items() if m in base.values}


def metric_deltas(rec: TrialRecord, base: TrialRecord | None,
                  keys: list[str]) -> dict[str, float]:
    """The relative change of measured metrics (a suite's `<label>/<metric>`) vs the baseline's."""
    if base is None or not rec.measured:
        return {}
    return {k: delta(rec.metrics[k], base.metrics[k]) for k in keys
            if k in rec.metrics and k in base.metrics}


def curve_profiles(recs: list[TrialRecord]) -> list[str | None]:
    """Whose load curves a study's trials have (in order, once each)."""
    out: list[str | None] = []
    for r in recs:
        out += [p for p in r.curve_profiles() if p not in out]
    return out
