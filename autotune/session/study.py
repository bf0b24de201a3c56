"""A study as `autotune study` runs it, end to end: workers or not, preflight, warm start, the
trials with their live view and MLflow, the confirm phase, and the screens a study ends on
(the trials, the front, the confirm table, the recommendation, the bill).

`run_session` is the library entry point the `study` command calls; `confirm_phase` is shared
with `confirm`. The live view and its trial hook are outputs/live.py's (after each trial event
the study's summary is computed once and handed to the view and MLflow), the screens a study
ends on outputs/ending.py's, from the same summary.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.config.study import StudyConfig
from autotune.errors import ConfigError, NotCertified, StudyError
from autotune.outputs.console import command_hint, console
from autotune.outputs.ending import end_of_study
from autotune.outputs.live import TrialHook, tracked
from autotune.outputs.mlflow_view import study_extra
from autotune.outputs.tables import StudyView
from autotune.outputs.tracking import Tracker
from autotune.session.certify import Budget, certified_minutes, certify_phase
from autotune.session.open import make_tracker, start_afresh
from autotune.tuning.bill import bill, over_budget
from autotune.tuning.confirm import ConfirmResult
from autotune.tuning.preflight import preflight
from autotune.tuning.search_space import load_search_space
from autotune.tuning.study import (
    completed,
    grid_done,
    open_study,
    prepare_study,
    run_study,
    warm_start,
)
from autotune.tuning.summary import summarize
from autotune.tuning.workers import (
    certify_boots,
    run_pool,
    running_text,
    worker_config,
    worker_envs,
)


@dataclass(frozen=True)
class SessionOptions:
    """How `autotune study` runs, beyond the study file (its command-line options)."""

    config_path: Path
    tracking_uri: str | None = None
    no_mlflow: bool = False
    front_every: int = 5
    workers: int = 1
    gpus_per_trial: int | None = None
    warm_from: str | None = None
    confirm: bool | None = None  # --confirm/--no-confirm; None: confirm.when
    force_new: bool = False  # --force-new: set a study of this name aside, start afresh


def confirm_phase(st: optuna.Study, cfg: StudyConfig, pre: Any, requests: list[Any],
                  top: int, repeats: int, on_trial: TrialHook, view: StudyView,
                  tracker: Tracker | None, deadline: float | None = None) -> ConfirmResult:
    """Run (or resume) the confirm phase in `view`; log its result to the study's run."""
    from autotune.tuning.confirm import run_confirm

    def on_plan(base: int, numbers: list[int], plan: list[int]) -> None:
        view.progress.update(view.task, total=view.progress.tasks[0].completed + len(plan))
        console.print(f"confirm: baseline (trial {base}) and finalists "
                      f"{', '.join(map(str, numbers))}, {repeats} more boots each, "
                      f"interleaved; {len(plan)} to run", highlight=False)

    res = run_confirm(st, cfg, pre, requests, top, repeats, on_phase=view.on_phase,
                      on_trial=on_trial, on_plan=on_plan, deadline=deadline)
    if tracker is not None:
        tracker.log_confirm(res)
    return res


def confirm_now(st: optuna.Study, cfg: StudyConfig, flag: bool | None, *, complete: bool,
                pooled: bool, config_path: Path) -> tuple[str | None, str]:
    """(why the confirm phase runs now, or None; the note to print when it does not): it runs
    when wanted (`--confirm`, or confirm.when) on a complete study that ran in this process.
    The note says plainly that every gain printed is one measurement, and how to confirm."""
    from autotune.tuning.confirm import wanted

    on, why = wanted(cfg, st, flag)
    if on and complete and not pooled:
        return why, ""
    how = f"`{command_hint(f'confirm --config {config_path}')}`"
    if on and pooled:
        how += " (its boots run one at a time, not in the workers)"
    if on:
        why += "; the study is not complete" if not complete else "; workers ran it"
    return None, (f"No confirm phase ({why}): "
                  "every gain above is one measurement of each config, and a difference "
                  "smaller than the boot-to-boot noise means nothing (docs/noise.md). "
                  f"{how} boots the best configs and the baseline again and gives each gain "
                  "an interval.")


def run_session(cfg: StudyConfig, opts: SessionOptions, began: float | None = None) -> None:
    """Run (or resume) the study `cfg` as `autotune study` does, printing as it goes."""
    began = time.monotonic() if began is None else began
    config_path, workers, gpus_per_trial = opts.config_path, opts.workers, opts.gpus_per_trial
    warm_from, confirm_flag = opts.warm_from, opts.confirm
    envs = None
    if workers > 1 and cfg.profiles:
        raise ConfigError("--workers: a suite scores every trial against the baseline trial, "
                          "so its trials run one at a time for now (drop --workers)")
    if workers > 1 or gpus_per_trial:
        envs = worker_envs(workers, gpus_per_trial)
        gpus_per_trial = sum(1 for g in envs[0].get("CUDA_VISIBLE_DEVICES", "").split(",") if g)
        cfg = worker_config(cfg, gpus_per_trial,
                            load_search_space(cfg.search_space).flag_names())
    console.print(f"study [bold]{cfg.name}[/bold]: checking the search space against vLLM...")
    pre = preflight(cfg)
    if pre.dataset:
        console.print(pre.dataset, highlight=False)
    if opts.force_new:
        start_afresh(cfg, opts.tracking_uri, opts.no_mlflow)
    if warm_from:
        n, skipped = warm_start(prepare_study(cfg, pre), cfg, pre, warm_from)
        console.print(f"--warm-start {warm_from}: {n} Pareto config(s) enqueued"
                      + (f", {len(skipped)} skipped" if skipped else ""), highlight=False)
        for why in skipped:
            console.print(f"  skipped: {why}", highlight=False)
    done = len(completed(open_study(cfg, pre=pre)))
    console.print(f"vLLM {pre.vllm.version}; space {pre.space.name!r} "
                  f"({len(pre.space.parameters)} parameters); {done} of {cfg.n_trials} trials "
                  f"done; storage {cfg.storage_url()}", highlight=False)
    tracker = make_tracker(cfg, opts.tracking_uri, opts.no_mlflow)
    planned = cfg.planned()
    budget = Budget(cfg, began, workers=len(envs) if envs else 1)

    got: list[Any] = []

    def on_start(st: optuna.Study, requests: list[Any]) -> None:
        got.append(requests)
        budget.open(st)
        if tracker is not None:
            tracker.open_run(st, study_extra(cfg, pre.vllm.version, requests))

    with tracked(cfg, tracker, cfg.n_trials, done, log_trials=envs is None,
                 front_every=opts.front_every, backfill=envs is not None) as (view, on_trial):
        if envs is None:
            st = run_study(cfg, on_phase=view.on_phase, on_trial=on_trial, pre=pre,
                           on_start=on_start, reserve=budget.reserve if planned else None,
                           deadline=began + cfg.timeout_s if cfg.timeout_s else None,
                           reference=lambda: budget.reference_spent)
        else:
            st = run_pool(
                cfg, pre, envs, gpus_per_trial or 0,
                tracker.uri if tracker is not None else None, on_start=on_start,
                on_trial=on_trial,
                on_running=lambda running: view.on_running(running_text(running)),
                on_pool=lambda pool: console.print(
                    f"{len(envs)} workers: " + "; ".join(
                        f"{i}: {' '.join(f'{k}={v}' for k, v in e.items())}"
                        for i, e in enumerate(envs)) + f"; logs in {pool.log_dir}",
                    highlight=False))
        held = len(completed(st))
        now, note = confirm_now(st, cfg, confirm_flag, complete=held >= cfg.n_trials and
                                bool(got), pooled=envs is not None, config_path=config_path)
        res, cert = None, None
        if planned and got:
            now, note = None, ""
            first = summarize(st, cfg, confirm=False, certified=False).recommendation
            if first.number is not None:
                left = budget.left()
                console.print(f"certify phase: the pick so far is trial {first.number}"
                              + (f"; {left:.1f} {budget.bill().unit} left"
                                 if math.isfinite(left) else ""), highlight=False)
                boots = None if envs is None else certify_boots(
                    st, cfg, envs, gpus_per_trial or 0,
                    tracker.uri if tracker is not None else None, on_trial=on_trial,
                    on_running=lambda running: view.on_running(running_text(running)))
                cert = certify_phase(st, cfg, pre, got[0], first.number, budget,
                                     view.on_phase, on_trial, view.step, boots=boots,
                                     lanes=len(envs) if envs else 1)
                budget.reference_spent = certified_minutes(cert)  # every run's, summed
        if now:
            console.print(f"confirm phase ({now})", highlight=False)
            try:
                res = confirm_phase(st, cfg, pre, got[0], cfg.confirm.top, cfg.confirm.repeats,
                                    on_trial, view, tracker,
                                    began + cfg.timeout_s if cfg.timeout_s else None)
            except ConfigError as e:  # nothing to confirm: no baseline, or a front of defaults
                note = f"no confirm phase: {e}"
    summary = summarize(st, cfg, res if res is not None else True)
    cost = bill(summary.records, cfg, reference=budget.reference_spent)
    cost_lines = cost.lines()
    if tracker is not None:
        tracker.log_study_metrics(cost.metrics())
    if pre.dataset and pre.dropped:  # what the study measured is not the whole file
        note = " ".join(filter(None, [note, f"Measured on the requests kept: {pre.dataset}."]))
    end_of_study(summary, cfg, res, note, cost_lines, config_path)
    if cert is None and held < cfg.n_trials and \
            (spent := over_budget(cost, cfg.budget_gpu_minutes)):
        console.print(f"stopped for --budget-gpu-minutes: {spent}. {held} of {cfg.n_trials} "
                      "trials done; a larger budget resumes the study.", highlight=False)
    if cert is None and held < cfg.n_trials and grid_done(st, cfg):
        console.print(f"The grid is done: each of its configs tried, {held} of "
                      f"{cfg.n_trials} trials. `{command_hint(f'replay --config {config_path}')} "
                      "--repeat N` enqueues N of them again; the same command then measures "
                      "them.",
                      highlight=False)
    elif cert is None and cfg.timeout_s and held < cfg.n_trials:
        console.print(f"stopped for --timeout {cfg.timeout_s:g} s: the next trial would have "
                      f"ended after it. {held} of {cfg.n_trials} trials done; the same command "
                      "resumes the study.", highlight=False)
    if tracker is not None and tracker.seconds:
        console.print(f"MLflow: {len(tracker.seconds)} trials logged, "
                      f"{sum(tracker.seconds) / len(tracker.seconds):.2f} s per trial"
                      + (f", {tracker.failures} failures (run `{command_hint('sync')}`)"
                         if tracker.failures else ""), highlight=False)
    if summary.recommendation.number is None:
        for line in summary.failures:
            console.print("  " + line, highlight=False, soft_wrap=True)
        raise StudyError(f"study {cfg.name!r} has nothing to recommend: "
                         f"{summary.recommendation.reason}")
    if cert is not None and cert.exit_code:
        raise NotCertified(cert.sentence(), cert.exit_code)
