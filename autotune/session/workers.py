"""A study run by workers on several hosts, as the commands run it: `create_study` makes the
study and its tables once (`autotune create-study`), `join_study` runs its trials in this
process until it holds its count (`autotune worker`), or boots one trial's config once more
as a certify boot of a round (the certify phase of `autotune study --workers`)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.config.base import parse_model
from autotune.config.study import StudyConfig
from autotune.outputs.console import command_hint, console, out
from autotune.outputs.tables import StudyView
from autotune.session.certify import Budget
from autotune.session.open import Opened, open_session
from autotune.tuning.confirm import run_repeats
from autotune.tuning.objective import PhaseHook
from autotune.tuning.record import StudyFacts, study_facts, write_study_facts
from autotune.tuning.search_space import SearchSpace
from autotune.tuning.study import completed, run_trials
from autotune.tuning.summary import summarize
from autotune.tuning.workers import barrier as round_barrier
from autotune.tuning.workers import load_worker_study, worker_config, worker_identity


def create_study(cfg: StudyConfig, *, tracking_uri: str | None = None, no_mlflow: bool = False,
                 force_new: bool = False) -> optuna.Study:
    """`autotune create-study`: create the study and its tables once, before workers join it
    (on an existing one, update its stored config: a larger n_trials resumes it); print the
    command each host's workers run."""
    opened = open_session(cfg, tracking_uri=tracking_uri, no_mlflow=no_mlflow, create=True,
                          force_new=force_new)
    if opened.tracker is not None:
        write_study_facts(opened.study, StudyFacts(tracking_uri=opened.tracker.uri))
    console.print(f"study {cfg.name!r} ready in {cfg.storage_url()} ({cfg.n_trials} trials); "
                  "on each host, start workers with:", highlight=False)
    out.print(command_hint(f"worker --storage '{cfg.storage_url()}' --study-name "
                           f"'{cfg.name}'"),
              highlight=False, soft_wrap=True, markup=False)
    return opened.study


@dataclass(frozen=True)
class WorkerOptions:
    """How `autotune worker` joins a study: its name in the trials, its GPUs, where it logs,
    the pool it belongs to; `repeat`: instead, boot trial N's config once more as a certify
    boot (starting its search at `check_at`, measuring once the round in `barrier` is up)."""

    worker_id: str | None = None
    gpus_per_trial: int = 0
    tracking_uri: str | None = None
    no_mlflow: bool = False
    pool: int = 1
    repeat: int | None = None
    check_at: float | None = None
    barrier: Path | None = None
    round_size: int = 1


def join_study(storage: str, study_name: str, opts: WorkerOptions) -> int:
    """`autotune worker`: join the study and run its trials until it holds its trial count (a
    study with a budget keeps its certify reserve), or the one certify boot of `repeat`.
    Returns the trials this worker ran."""
    st, cfg, space_data = load_worker_study(storage, study_name)
    space = parse_model(SearchSpace, space_data, f"study {study_name!r}: search_space")
    cfg = worker_config(cfg, opts.gpus_per_trial, space.flag_names())
    ident = worker_identity(opts.worker_id or f"{socket.gethostname()}-{os.getpid()}")
    uri = opts.tracking_uri or study_facts(st).tracking_uri
    opened = open_session(cfg, tracking_uri=uri, no_mlflow=opts.no_mlflow or uri is None,
                          study=st, space=space)
    console.print(f"worker {ident['id']} on {ident['host']} (devices {ident['devices'] or '-'}) "
                  f"joined study {cfg.name!r}", highlight=False)
    with StudyView(cfg.n_trials, len(completed(st)), cfg.metric_names()) as view:

        def on_trial(s: optuna.Study, trial: FrozenTrial) -> None:
            summary = summarize(s, cfg)  # once per trial event
            view.on_trial(summary, trial)
            if opened.tracker is not None:
                opened.tracker.log_trial(summary, trial)

        if opts.repeat is not None:
            certify_boot(opened, opts, ident, view, on_trial)
            return 1
        budget = None
        if cfg.planned():
            budget = Budget(cfg, time.monotonic(), workers=opts.pool)
            budget.open(st)
        ran = run_trials(st, cfg, opened.pre, opened.requests, on_phase=view.on_phase,
                         on_trial=on_trial, worker=ident,
                         reserve=budget.reserve if budget else None,
                         reference=(lambda: budget.reference_spent) if budget else None,
                         lanes=opts.pool)
    console.print(f"worker {ident['id']}: ran {ran} trials; the study holds "
                  f"{len(completed(st))} of {cfg.n_trials}", highlight=False)
    return ran


def certify_boot(opened: Opened, opts: WorkerOptions, ident: dict[str, Any], view: StudyView,
                 on_trial: Callable[[optuna.Study, FrozenTrial], None]) -> None:
    """One certify boot of trial `opts.repeat`'s config, measured once every boot of its
    round is up (`opts.barrier`)."""
    cfg, repeat = opened.cfg, opts.repeat
    assert repeat is not None
    on_phase: PhaseHook = view.on_phase
    done: Callable[[], None] = lambda: None  # noqa: E731
    if opts.barrier is not None:
        on_phase, done = round_barrier(view.on_phase, opts.barrier, str(ident["id"]),
                                       opts.round_size, cfg.server.boot_timeout_s)
    try:
        run_repeats(opened.study, cfg, opened.pre, opened.requests, [repeat],
                    on_phase=on_phase, on_trial=on_trial, start_at={repeat: opts.check_at},
                    worker=ident)
    finally:
        done()
    console.print(f"worker {ident['id']}: a certify boot of trial {repeat}", highlight=False)
