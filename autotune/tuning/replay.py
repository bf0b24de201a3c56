"""Replay samplers against a measured table, to see which finds a good config in fewest boots.

A table is a study in which a grid was measured (`sampler: grid`), some configs more than once.
Each sampler runs, for many seeds, against the table instead of vLLM: a trial asks for a config,
gets a measurement drawn around the config's mean with the noise the repeats show (the pooled
relative standard deviation of the configs measured more than once), and the incumbent is the
config with the best measurement so far (what a tuner would recommend). The curve is the
incumbent's true mean (the mean of its measured repeats) over the table's best, against trials.

Samplers: the product's TPE (multivariate, grouped, never repeating a config, 5 start-up
trials), the same TPE with warm starts (`tpe-starts`: the given configs right after the
baseline), GP, NSGA-II, random, the grid in random order, and one knob at a time (from vLLM's
defaults, try each other value of the first knob, keep the best, go on to the next knob: how a
published H100 tuning lab tuned by hand). As in a study, every Optuna sampler's first trial is
the baseline (vLLM's defaults) unless `baseline=False`; a start or the baseline is a trial.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml

from autotune.config.metric_names import lower_is_better
from autotune.config.study import SamplerConfig, StudyConfig
from autotune.tuning.record import records
from autotune.tuning.sampler import NoRepeatSampler
from autotune.tuning.search_space import load_search_space

SAMPLERS = ("tpe", "tpe-starts", "gp", "nsga2", "random", "grid", "one-knob")


def key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


@dataclass
class Table:
    """Measured configs: each config's measurements of one objective (empty: infeasible)."""

    values: dict[str, list[float]]  # config key -> measurements
    params: dict[str, dict[str, Any]]  # config key -> params
    direction: str
    domain: dict[str, list[Any]] = field(default_factory=dict)  # param -> its values

    def __post_init__(self) -> None:
        if not self.domain:
            for p in self.params.values():
                for k, v in p.items():
                    if v not in self.domain.setdefault(k, []):
                        self.domain[k].append(v)

    def mean(self, k: str) -> float | None:
        v = self.values.get(k)
        return statistics.fmean(v) if v else None

    @property
    def best(self) -> float:
        means = [m for k in self.values if (m := self.mean(k)) is not None]
        return max(means) if self.direction == "maximize" else min(means)

    def noise(self) -> float:
        """Pooled relative standard deviation of the configs measured more than once."""
        rel = [statistics.stdev(v) / statistics.fmean(v) for v in self.values.values()
               if len(v) > 1 and statistics.fmean(v)]
        return math.sqrt(statistics.fmean([r * r for r in rel])) if rel else 0.0

    def quality(self, k: str | None) -> float:
        """How close a config's true mean is to the table's best: 1.0 is the best; an
        infeasible or missing config is 0."""
        m = self.mean(k) if k is not None else None
        if m is None or not m:
            return 0.0
        return m / self.best if self.direction == "maximize" else self.best / m


def table_from_study(study: optuna.Study, metric: str) -> Table:
    """The table of a study's measured trials (repeats of a config pooled)."""
    values: dict[str, list[float]] = {}
    params: dict[str, dict[str, Any]] = {}
    direction = "minimize" if lower_is_better(metric) else "maximize"  # when not an objective
    names = list(study.metric_names or [])
    if metric in names:
        direction = study.directions[names.index(metric)].name.lower()
    for r in records(study):
        if r.baseline or r.status.value in ("running", "waiting", "interrupted", "error"):
            continue
        k = key(r.params)
        params[k] = r.params
        values.setdefault(k, [])
        if r.feasible and metric in r.metrics:
            values[k].append(float(r.metrics[metric]))
    return Table(values, params, direction)


def table_from_json(path: str | Path, direction: str) -> Table:
    """A table written by `autotune replay --out` (table.json: each config's params and
    measurements), so a replay can run again without the study's storage."""
    try:
        rows = json.loads(Path(path).read_text())
        values = {key(r["params"]): [float(v) for v in r["values"]] for r in rows}
        params = {key(r["params"]): dict(r["params"]) for r in rows}
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"not a table.json (a list of {{params, values}}): {e}") from None
    return Table(values, params, direction)


class _Run:
    """One sampler's trials against the table, with one seed."""

    def __init__(self, table: Table, seed: int) -> None:
        self.table, self.rng = table, np.random.default_rng(seed)
        self.noise = table.noise()
        self.best_seen: float | None = None
        self.incumbent: str | None = None
        self.curve: list[float] = []

    def measure(self, params: dict[str, Any]) -> float | None:
        k = key(params)
        m = self.table.mean(k)
        if m is None:
            value = None
        else:
            value = float(m * (1 + self.rng.normal(0.0, self.noise)))
            better = self.best_seen is None or (
                value > self.best_seen if self.table.direction == "maximize"
                else value < self.best_seen)
            if better:
                self.best_seen, self.incumbent = value, k
        self.curve.append(self.table.quality(self.incumbent))
        return value


@dataclass(frozen=True)
class Plan:
    """What a study measures before its sampler: the baseline, then the starts (partial
    configs: a parameter left out is sampled)."""

    baseline: bool = True
    starts: tuple[dict[str, Any], ...] = ()
    # TPE's and GP's random start-up trials (the baseline and starts count among them, as in
    # Optuna); the product's default unless a replay asks for another
    startup: int = SamplerConfig.model_fields["n_startup_trials"].default


Runner = Callable[[Table, int, int, Plan], list[float]]


def _optuna(make: Callable[[int, Plan], optuna.samplers.BaseSampler], starts: bool = False
            ) -> Runner:
    def run(table: Table, seed: int, budget: int, plan: Plan) -> list[float]:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        r = _Run(table, seed)
        study = optuna.create_study(
            direction=optuna.study.StudyDirection.MAXIMIZE if table.direction == "maximize"
            else optuna.study.StudyDirection.MINIMIZE, sampler=make(seed, plan))
        if plan.baseline:
            study.enqueue_trial(default_config(table))
        for start in plan.starts if starts else ():
            study.enqueue_trial(start)
        dists: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.CategoricalDistribution(v)
                 for k, v in table.domain.items()}
        worst = -1e18 if table.direction == "maximize" else 1e18
        for _ in range(budget):
            t = study.ask(dists)
            value = r.measure(t.params)
            study.tell(t, worst if value is None else value)
        return r.curve
    return run


def _grid(table: Table, seed: int, budget: int, plan: Plan) -> list[float]:
    r = _Run(table, seed)
    order = list(table.params)
    random.Random(seed).shuffle(order)
    for k in order[:budget]:
        r.measure(table.params[k])
    while len(r.curve) < budget:  # the grid is done: the incumbent stays
        r.curve.append(r.curve[-1])
    return r.curve


def default_config(table: Table) -> dict[str, Any]:
    """vLLM's defaults within the table: each knob's null (left out) or auto/False value,
    else its first value."""
    out = {}
    for k, values in table.domain.items():
        out[k] = next((v for v in values if v in (None, "auto", False)), values[0])
    return out


def one_knob_order(table: Table) -> Generator[dict[str, Any], dict[str, Any] | None, None]:
    """The configs one-knob-at-a-time tuning tries, given the results so far (a generator fed
    the incumbent through `send`)."""
    current = default_config(table)
    best = yield dict(current)
    for k, values in table.domain.items():
        for v in values:
            if v == current[k]:
                continue
            cand = {**current, k: v}
            best = yield cand
        current = best if best is not None else current


def _one_knob(table: Table, seed: int, budget: int, plan: Plan) -> list[float]:
    r = _Run(table, seed)
    gen = one_knob_order(table)
    cand = next(gen)
    while len(r.curve) < budget:
        r.measure(cand)
        best = table.params.get(r.incumbent) if r.incumbent else None
        try:
            cand = gen.send(dict(best) if best is not None else None)
        except StopIteration:
            break
    while len(r.curve) < budget:
        r.curve.append(r.curve[-1])
    return r.curve


def _tpe(s: int, plan: Plan) -> optuna.samplers.BaseSampler:
    return NoRepeatSampler(optuna.samplers.TPESampler(
        seed=s, n_startup_trials=plan.startup, multivariate=True, group=True), seed=s)


RUNNERS: dict[str, Runner] = {
    "tpe": _optuna(_tpe),
    "tpe-starts": _optuna(_tpe, starts=True),
    "gp": _optuna(lambda s, p: optuna.samplers.GPSampler(seed=s, n_startup_trials=p.startup)),
    "nsga2": _optuna(lambda s, _: optuna.samplers.NSGAIISampler(
        seed=s, population_size=SamplerConfig.model_fields["population_size"].default)),
    "random": _optuna(lambda s, _: optuna.samplers.RandomSampler(seed=s)),
    "grid": _grid,
    "one-knob": _one_knob,
}


def replay_starts(table: Table, given: tuple[str, ...] | list[str], cfg: StudyConfig | None
                  ) -> list[dict[str, Any]]:
    """The warm starts tpe-starts replays: each `given` 'k=v,k=v' (values read as YAML
    scalars: null, fp8, 512), else the starts a study of `cfg` enqueues (its own, then its
    space's). A start's parameters the table lacks are left out; a value the table never measured
    is a ValueError naming the start."""
    if given:
        starts = []
        for text in given:
            start: dict[str, Any] = {}
            for part in filter(None, (p.strip() for p in text.split(","))):
                name, eq, value = part.partition("=")
                if not eq or not name.strip():
                    raise ValueError(f"--start {text!r}: {part!r} is not K=V")
                start[name.strip()] = yaml.safe_load(value) if value.strip() else None
            starts.append(start)
        where = "--start"
    elif cfg is not None:
        starts = load_search_space(cfg.search_space).study_starts(cfg.starts)
        where = "starts"
    else:
        return []
    out = []
    for i, start in enumerate(starts):
        kept = {k: v for k, v in start.items() if k in table.domain}
        for k, v in kept.items():
            if v not in table.domain[k]:
                raise ValueError(f"{where} {i + 1}: {k}={v!r} was never measured in the table "
                                 f"(its values: {', '.join(map(repr, table.domain[k]))})")
        if kept:
            out.append(kept)
    return out


def trials_to(curve: list[float], within: float) -> int | None:
    """The first trial (1-based) whose incumbent is within `within` of the best."""
    return next((i + 1 for i, q in enumerate(curve) if q >= 1 - within), None)


@dataclass(frozen=True)
class SamplerSummary:
    median_trials_to_2pct: float | None
    median_trials_to_5pct: float | None
    share_within_2pct_at_16: float
    curves: list[list[float]]


def _median(xs: list[int | None]) -> float | None:
    """Median with a never-reached seed counted as infinitely late (None if the median is)."""
    vals = sorted(math.inf if x is None else float(x) for x in xs)
    m = statistics.median(vals)
    return None if math.isinf(m) else m


def replay(table: Table, samplers: list[str], seeds: int, budget: int,
           on_done: Callable[[str, int], None] | None = None, plan: Plan | None = None
           ) -> dict[str, SamplerSummary]:
    plan = plan or Plan()
    out = {}
    for name in samplers:
        curves = []
        for seed in range(seeds):
            curves.append(RUNNERS[name](table, seed, budget, plan))
            if on_done is not None:
                on_done(name, seed)
        at16 = [c[min(16, len(c)) - 1] >= 0.98 for c in curves]
        out[name] = SamplerSummary(
            _median([trials_to(c, 0.02) for c in curves]),
            _median([trials_to(c, 0.05) for c in curves]),
            sum(at16) / len(at16), curves)
    return out


def plot(summaries: dict[str, SamplerSummary], title: str, path: str) -> None:
    """Best-so-far (median and interquartile band over seeds) against trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, s in summaries.items():
        arr = np.array(s.curves)
        x = np.arange(1, arr.shape[1] + 1)
        med = np.median(arr, axis=0)
        lo, hi = np.percentile(arr, 25, axis=0), np.percentile(arr, 75, axis=0)
        ax.plot(x, med, label=name)
        ax.fill_between(x, lo, hi, alpha=0.15)
    ax.axhline(0.98, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("trials (boots)")
    ax.set_ylabel("incumbent's true mean / table's best")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
