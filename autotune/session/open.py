"""Opening a study, written once: the preflight against the installed vLLM, the study's
requests, its storage (created or joined) and its MLflow tracker. `create-study`, `worker`,
`confirm` and `export --validate` open a study this way; `study` does the same steps inside
`run_session`, where the requests come from the study's first trial."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna

from autotune.config.study import StudyConfig
from autotune.outputs.console import console
from autotune.outputs.mlflow_view import study_extra
from autotune.outputs.tracking import Tracker
from autotune.tuning.preflight import Preflight, preflight

if TYPE_CHECKING:
    from autotune.tuning.search_space import SearchSpace


@dataclass
class Opened:
    """A study ready to run trials in: its config, storage, preflight, requests and tracker."""

    cfg: StudyConfig
    study: optuna.Study
    pre: Preflight
    requests: list[Any]
    tracker: Tracker | None


def make_tracker(cfg: StudyConfig, tracking_uri: str | None, no_mlflow: bool) -> Tracker | None:
    """The study's tracker (None with --no-mlflow), saying where its runs go."""
    if no_mlflow:
        return None
    from autotune.outputs.console import command_hint

    tracker = Tracker(cfg, tracking_uri)
    console.print(f"MLflow: {tracker.uri} (experiment {cfg.name!r}; `{command_hint('ui')}` "
                  "shows it)", highlight=False)
    return tracker


def start_tracker(cfg: StudyConfig, study: optuna.Study, pre: Preflight, requests: list[Any],
                  tracking_uri: str | None, no_mlflow: bool) -> Tracker | None:
    """The study's tracker, its study run started (None with --no-mlflow)."""
    tracker = make_tracker(cfg, tracking_uri, no_mlflow)
    if tracker is not None:
        tracker.open_run(study, study_extra(cfg, pre.vllm.version, requests))
    return tracker


def start_afresh(cfg: StudyConfig, tracking_uri: str | None, no_mlflow: bool) -> None:
    """--force-new: set the study named `cfg.name` aside under a new name (tuning.identity's
    set_aside), its MLflow experiment renamed with it, so a fresh study starts under the name
    with nothing of the old one in it, and nothing of the old one is deleted."""
    from mlflow.exceptions import MlflowException

    from autotune.outputs.mlflow_view import rename_experiment
    from autotune.outputs.tracking import default_tracking_uri
    from autotune.tuning.identity import set_aside

    new = set_aside(cfg)
    if new is None:
        console.print(f"--force-new: no study {cfg.name!r} in {cfg.storage_url()} to set "
                      "aside", highlight=False)
        return
    kept = "its trials and its folder"
    uri = tracking_uri or default_tracking_uri(cfg)
    try:  # else the fresh study's runs would join the old study's run in its experiment
        if not no_mlflow and rename_experiment(uri, cfg.name, new):
            kept += f", its MLflow experiment in {uri}"
    except MlflowException as e:
        warnings.warn(f"MLflow: could not rename experiment {cfg.name!r} to {new!r} ({e}); "
                      "the fresh study would log into it beside the old one: rename it in "
                      "MLflow's UI first", stacklevel=2)
    console.print(f"--force-new: study {cfg.name!r} set aside as {new!r} ({kept}); a fresh "
                  f"study starts under {cfg.name!r}", highlight=False)


def open_session(cfg: StudyConfig, *, tracking_uri: str | None = None, no_mlflow: bool = False,
                 create: bool = False, study: optuna.Study | None = None,
                 space: SearchSpace | None = None, force_new: bool = False) -> Opened:
    """Preflight `cfg`, read its requests, open its study (`create`: create it, or update its
    stored config; `study`: this one, already open; `force_new`: set an existing study of its
    name aside first) and start its tracker."""
    from autotune.load.datasets import study_requests
    from autotune.tuning.study import open_study, prepare_study

    pre = preflight(cfg, space) if space is not None else preflight(cfg)
    if force_new:
        start_afresh(cfg, tracking_uri, no_mlflow)
    if study is None:
        study = prepare_study(cfg, pre) if create else open_study(cfg, create=False)
    requests = study_requests(cfg, pre.max_len)
    tracker = start_tracker(cfg, study, pre, requests, tracking_uri, no_mlflow)
    return Opened(cfg, study, pre, requests, tracker)
