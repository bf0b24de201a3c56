"""The confirm phase as the commands run it: the front's top configs and the baseline booted
again, interleaved, on the same requests (autotune.tuning.confirm), at the end of `autotune
study` (`confirm_phase`, with the note said when it does not run: `confirm_now`) or on its own
(`confirm_study`, `autotune confirm`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import optuna

from autotune.config.study import StudyConfig
from autotune.outputs.console import command_hint, console, out
from autotune.outputs.ending import print_confirm
from autotune.outputs.live import TrialHook, tracked
from autotune.outputs.tables import StudyView
from autotune.outputs.tracking import Tracker
from autotune.session.open import open_session
from autotune.tuning.confirm import ConfirmResult, finalists, run_confirm, wanted
from autotune.tuning.study import completed, open_study
from autotune.tuning.summary import summarize


def confirm_phase(st: optuna.Study, cfg: StudyConfig, pre: Any, requests: list[Any],
                  top: int, repeats: int, on_trial: TrialHook, view: StudyView,
                  tracker: Tracker | None, deadline: float | None = None) -> ConfirmResult:
    """Run (or resume) the confirm phase in `view`; log its result to the study's run."""

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


def confirm_study(cfg: StudyConfig, *, top: int | None = None, repeats: int | None = None,
                  timeout_s: float | None = None, tracking_uri: str | None = None,
                  no_mlflow: bool = False) -> ConfirmResult:
    """`autotune confirm`: the confirm phase of a study that ran (`top` finalists, `repeats`
    more boots of each and of the baseline; default: the study file's confirm section), no
    boot started that would end after `timeout_s`; resumable. Prints the confirm table and
    the recommendation it leads to."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    st = open_study(cfg, create=False)
    finalists(st, cfg, 1)  # one clear error before any boot: no baseline, nothing to confirm
    opened = open_session(cfg, tracking_uri=tracking_uri, no_mlflow=no_mlflow, study=st)
    done = len(completed(st))
    with tracked(cfg, opened.tracker, done, done) as (view, on_trial):
        res = confirm_phase(st, cfg, opened.pre, opened.requests, top or cfg.confirm.top,
                            repeats or cfg.confirm.repeats, on_trial, view, opened.tracker,
                            deadline)
    print_confirm(res, cfg)
    out.print(f"recommended: {summarize(st, cfg, res).headline()}", highlight=False,
              soft_wrap=True)
    return res
