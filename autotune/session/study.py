"""A study as `autotune study` runs it, end to end, one step after another: the config for its
workers (`pooled_config`), the preflight, --force-new and --warm-start (`before_trials`), the
trials with their live view and MLflow (`Session.trials`), the certify phase of a study with a
budget (`Session.certify`) or the confirm phase (`Session.confirm`, session/confirm.py), and
the screens a study ends on (`Session.end`: the trials, the front, the confirm table, the
recommendation, the bill).

`run_session` is the library entry point the `study` command calls. The live view and its
trial hook are outputs/live.py's (after each trial event the study's summary is computed once
and handed to the view and MLflow), the screens a study ends on outputs/ending.py's, from the
same summary.
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
from autotune.outputs.mlflow_view import open_client, study_extra
from autotune.outputs.tables import StudyView
from autotune.outputs.tracking import Tracker
from autotune.session.certify import Budget, certified_minutes, certify_phase
from autotune.session.confirm import confirm_now, confirm_phase
from autotune.session.open import make_tracker, start_afresh
from autotune.tuning.bill import Bill, bill, over_budget
from autotune.tuning.certification import Certification
from autotune.tuning.confirm import ConfirmResult
from autotune.tuning.preflight import Preflight, preflight
from autotune.tuning.search_space import load_search_space
from autotune.tuning.study import completed, grid_done, open_study, prepare_study, run_study
from autotune.tuning.summary import summarize
from autotune.tuning.warm_start import warm_start
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


def run_session(cfg: StudyConfig, opts: SessionOptions, began: float | None = None) -> None:
    """Run (or resume) the study `cfg` as `autotune study` does, printing as it goes; raise
    StudyError when it has nothing to recommend, NotCertified when a planned study ends
    without certifying its pick (its exit code)."""
    began = time.monotonic() if began is None else began
    if opts.tracking_uri and not opts.no_mlflow:  # before the study's storage is made
        open_client(opts.tracking_uri)
    cfg, envs, gpus = pooled_config(cfg, opts)
    pre, done = before_trials(cfg, opts)
    if cfg.certify.here and not done:
        raise ConfigError(f"--certify-here: study {cfg.name!r} has no trials to certify "
                          "(it adds this machine's pairs to a study explored elsewhere): run "
                          "the same command without --certify-here first")
    s = Session(cfg, opts, pre, envs, gpus, make_tracker(cfg, opts.tracking_uri, opts.no_mlflow),
                Budget(cfg, began, workers=len(envs) if envs else 1), began)
    with tracked(cfg, s.tracker, cfg.n_trials, done, log_trials=envs is None,
                 front_every=opts.front_every, backfill=envs is not None) as (view, on_trial):
        st = s.trials(view, on_trial)
        held = len(completed(st))
        now, note = confirm_now(st, cfg, opts.confirm,
                                complete=held >= cfg.n_trials and s.requests is not None,
                                pooled=envs is not None, config_path=opts.config_path)
        res, cert = None, None
        if cfg.planned() and s.requests is not None:  # a budget's end: certify, not confirm
            now, note = None, ""
            cert = s.certify(st, view, on_trial)
        if now:
            res, note = s.confirm(st, now, view, on_trial)
    s.end(st, held, res, cert, note)


def pooled_config(cfg: StudyConfig, opts: SessionOptions
                  ) -> tuple[StudyConfig, list[dict[str, str]] | None, int | None]:
    """--workers and --gpus-per-trial: each worker's environment (its devices; None: trials
    run in this process), the config the trials run with, and the GPUs each trial gets."""
    gpus = opts.gpus_per_trial
    if opts.workers > 1 and cfg.profiles:
        raise ConfigError("--workers: a suite scores every trial against the baseline trial, "
                          "so its trials run one at a time for now (drop --workers)")
    if opts.workers > 1 and cfg.certify.here:
        raise ConfigError("--certify-here boots its pairs on this machine one at a time: drop "
                          "--workers")
    if opts.workers == 1 and not gpus:
        return cfg, None, gpus
    envs = worker_envs(opts.workers, gpus)
    gpus = sum(1 for g in envs[0].get("CUDA_VISIBLE_DEVICES", "").split(",") if g)
    return worker_config(cfg, gpus, load_search_space(cfg.search_space).flag_names()), envs, gpus


def before_trials(cfg: StudyConfig, opts: SessionOptions) -> tuple[Preflight, int]:
    """The preflight against the installed vLLM, --force-new, --warm-start and the line that
    says where the study stands: the preflight, and the trials done."""
    console.print(f"study [bold]{cfg.name}[/bold]: checking the search space against vLLM...")
    pre = preflight(cfg)
    if pre.dataset:
        console.print(pre.dataset, highlight=False)
    if opts.force_new:
        start_afresh(cfg, opts.tracking_uri, opts.no_mlflow)
    if opts.warm_from:
        n, skipped = warm_start(prepare_study(cfg, pre), cfg, pre, opts.warm_from)
        console.print(f"--warm-start {opts.warm_from}: {n} Pareto config(s) enqueued"
                      + (f", {len(skipped)} skipped" if skipped else ""), highlight=False)
        for why in skipped:
            console.print(f"  skipped: {why}", highlight=False)
    done = len(completed(open_study(cfg, pre=pre)))
    console.print(f"vLLM {pre.vllm.version}; space {pre.space.name!r} "
                  f"({len(pre.space.parameters)} parameters); {done} of {cfg.n_trials} trials "
                  f"done; storage {cfg.storage_url()}", highlight=False)
    return pre, done


@dataclass
class Session:
    """One `autotune study` run, as its steps share it: the config, the preflight, the
    workers' environments, the tracker, the budget, and the study's requests once its trials
    opened it."""

    cfg: StudyConfig
    opts: SessionOptions
    pre: Preflight
    envs: list[dict[str, str]] | None
    gpus: int | None
    tracker: Tracker | None
    budget: Budget
    began: float
    requests: list[Any] | None = None

    def on_start(self, st: optuna.Study, requests: list[Any]) -> None:
        """The study is open and its requests read: the budget and the study's run start."""
        self.requests = requests
        self.budget.open(st)
        if self.tracker is not None:
            self.tracker.open_run(st, study_extra(self.cfg, self.pre.vllm.version, requests))

    def deadline(self) -> float | None:
        return self.began + self.cfg.timeout_s if self.cfg.timeout_s else None

    def uri(self) -> str | None:
        return self.tracker.uri if self.tracker is not None else None

    def trials(self, view: StudyView, on_trial: TrialHook) -> optuna.Study:
        """The trials, in this process or in the workers, until the study holds its count
        (or the timeout, or the budget less the certify reserve, stops them)."""
        cfg, budget, envs = self.cfg, self.budget, self.envs
        if envs is None:
            return run_study(cfg, on_phase=view.on_phase, on_trial=on_trial, pre=self.pre,
                             on_start=self.on_start,
                             reserve=budget.reserve if cfg.planned() else None,
                             deadline=self.deadline(), reference=lambda: budget.reference_spent,
                             explore=not cfg.certify.here)
        return run_pool(
            cfg, self.pre, envs, self.gpus or 0, self.uri(), on_start=self.on_start,
            on_trial=on_trial, on_running=lambda running: view.on_running(running_text(running)),
            on_pool=lambda pool: console.print(
                f"{len(envs)} workers: " + "; ".join(
                    f"{i}: {' '.join(f'{k}={v}' for k, v in e.items())}"
                    for i, e in enumerate(envs)) + f"; logs in {pool.log_dir}",
                highlight=False))

    def certify(self, st: optuna.Study, view: StudyView, on_trial: TrialHook
                ) -> Certification | None:
        """The certify phase of a planned study, on its pick so far (None: nothing to pick)."""
        cfg, budget, envs = self.cfg, self.budget, self.envs
        first = summarize(st, cfg, confirm=False, certified=False).recommendation
        if first.number is None or self.requests is None:
            return None
        left = budget.left()
        console.print(f"certify phase: the pick so far is trial {first.number}"
                      + (f"; {left:.1f} {budget.bill().unit} left" if math.isfinite(left)
                         else ""), highlight=False)
        boots = None if envs is None else certify_boots(
            st, cfg, envs, self.gpus or 0, self.uri(), on_trial=on_trial,
            on_running=lambda running: view.on_running(running_text(running)))
        cert = certify_phase(st, cfg, self.pre, self.requests, first.number, budget,
                             view.on_phase, on_trial, view.step, boots=boots,
                             lanes=len(envs) if envs else 1)
        budget.reference_spent = certified_minutes(cert)  # every run's, summed
        return cert

    def confirm(self, st: optuna.Study, why: str, view: StudyView, on_trial: TrialHook
                ) -> tuple[ConfirmResult | None, str]:
        """The confirm phase (`why` it runs now): its result, or the note of why there is
        none (no baseline, or a front of the defaults only)."""
        console.print(f"confirm phase ({why})", highlight=False)
        cfg = self.cfg
        try:
            return confirm_phase(st, cfg, self.pre, self.requests or [], cfg.confirm.top,
                                 cfg.confirm.repeats, on_trial, view, self.tracker,
                                 self.deadline()), ""
        except ConfigError as e:  # nothing to confirm: no baseline, or a front of defaults
            return None, f"no confirm phase: {e}"

    def end(self, st: optuna.Study, held: int, res: ConfirmResult | None,
            cert: Certification | None, note: str) -> None:
        """The screens a study ends on, why it stopped short, and its ending: nothing to
        recommend (StudyError) or a certification that did not hold (NotCertified)."""
        cfg, tracker, pre = self.cfg, self.tracker, self.pre
        summary = summarize(st, cfg, res if res is not None else True)
        cost = bill(summary.records, cfg, reference=self.budget.reference_spent)
        if tracker is not None:
            tracker.log_study_metrics(cost.metrics())
        if pre.dataset and pre.dropped:  # what the study measured is not the whole file
            note = " ".join(filter(None, [note, f"Measured on the requests kept: {pre.dataset}."]))
        end_of_study(summary, cfg, res, note, cost.lines(), self.opts.config_path)
        if cert is None and held < cfg.n_trials:
            print_stopped(st, cfg, held, cost, self.opts.config_path)
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


def print_stopped(st: optuna.Study, cfg: StudyConfig, held: int, cost: Bill,
                  config_path: Path) -> None:
    """Why a study that holds fewer than its trials stopped: the budget, a grid done, or the
    timeout; and how to go on."""
    if spent := over_budget(cost, cfg.budget_gpu_minutes):
        console.print(f"stopped for --budget-gpu-minutes: {spent}. {held} of {cfg.n_trials} "
                      "trials done; a larger budget resumes the study.", highlight=False)
    if grid_done(st, cfg):
        console.print(f"The grid is done: each of its configs tried, {held} of "
                      f"{cfg.n_trials} trials. `{command_hint(f'replay --config {config_path}')} "
                      "--repeat N` enqueues N of them again; the same command then measures "
                      "them.", highlight=False)
    elif cfg.timeout_s:
        console.print(f"stopped for --timeout {cfg.timeout_s:g} s: the next trial would have "
                      f"ended after it. {held} of {cfg.n_trials} trials done; the same command "
                      "resumes the study.", highlight=False)
