"""The live side of a study command: its progress view and the hook each finished trial goes
through. After each trial event the study's summary (autotune.tuning.summary) is computed once
and handed to the view and to MLflow; `study`, `confirm` and `export --validate` share it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import optuna
from optuna.trial import FrozenTrial

from autotune.config.study import StudyConfig
from autotune.outputs.tables import StudyView
from autotune.outputs.tracking import Tracker
from autotune.tuning.summary import summarize

TrialHook = Callable[[optuna.Study, FrozenTrial], None]


@contextmanager
def tracked(cfg: StudyConfig, tracker: Tracker | None, total: int, done: int, *,
            log_trials: bool = True, front_every: int = 0, backfill: bool = False
            ) -> Iterator[tuple[StudyView, TrialHook]]:
    """The progress view and the trial hook every study command shares: each finished trial
    is printed and logged to MLflow (unless workers log their own), the front refreshed every
    `front_every` trials; on the way out (success or not) the front is logged and the study's
    run closed, after logging whatever workers could not (`backfill`)."""
    with StudyView(total, done, cfg.metric_names(), cfg) as view:

        def on_trial(st: optuna.Study, trial: FrozenTrial) -> None:
            summary = summarize(st, cfg)  # once per trial event: every surface reads it
            view.on_trial(summary, trial)
            if tracker is not None:
                if log_trials:
                    tracker.log_trial(summary, trial)
                if front_every and trial.number % front_every == front_every - 1:
                    tracker.log_front(summary, st)

        try:
            yield view, on_trial
        finally:
            if tracker is not None and tracker.parent_id is not None:
                from autotune.tuning.study import open_study

                final = open_study(cfg, create=False)
                summary = summarize(final, cfg)
                if backfill:
                    for t in final.get_trials(deepcopy=False):
                        if t.state.is_finished():
                            tracker.log_trial(summary, t)
                tracker.log_front(summary, final)
                tracker.finish()
