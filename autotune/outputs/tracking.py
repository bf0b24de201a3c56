"""MLflow: one experiment per study, a parent run for the study, a child run per trial (what it
holds: mlflow_trial), and the Pareto front's artifacts on the parent.

Logging is a side effect at the edge of the study loop (an Optuna callback), never inside a
measurement. A failure to log never stops a study: it warns, the trial stays in the Optuna
storage, and `autotune sync` backfills MLflow from there later.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune import __version__
from autotune.config import weights
from autotune.config.study import StudyConfig
from autotune.outputs.artifacts import confirm_files, front_files, trial_files
from autotune.outputs.mlflow_trial import curve_metrics, trial_metrics, trial_params, trial_tags
from autotune.outputs.mlflow_view import (
    EXPERIMENT_KIND_TAG,
    GAIN_TAG,
    KIND_TAG,
    RANK,
    SHARED_VIEW_TAG,
    STUDY_RUN_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    VIEW_KEY,
    confirm_note,
    gain_tag,
    open_client,
    runs_view,
    shown,
    study_note,
)
from autotune.server.machine import hardware
from autotune.tuning.confirm import ConfirmResult
from autotune.tuning.record import study_facts
from autotune.tuning.summary import StudySummary, summarize

PICK_TAG = "autotune.recommended"  # on the study run: the recommended trial's number
TRIAL_PICK_TAG = "autotune.pick"  # on the recommended trial's run alone (moved, not added)


def default_tracking_uri(cfg: StudyConfig) -> str:
    return f"sqlite:///{Path(cfg.workdir).resolve() / 'mlflow.db'}"


class Tracker:
    """Writes a study to MLflow. Every public method warns instead of raising."""

    def __init__(self, cfg: StudyConfig, tracking_uri: str | None = None) -> None:
        self.cfg = cfg
        self.uri = tracking_uri or default_tracking_uri(cfg)
        if self.uri.startswith(("http://", "https://")):
            # MLflow's client retries a dead server 7 times with backoff (minutes per call);
            # a study must not wait on its tracking server, and `sync` repairs what was missed
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        self.client = open_client(self.uri)
        self.experiment_id: str | None = None
        self.parent_id: str | None = None
        self.seconds: list[float] = []  # time spent per logged trial
        self.failures = 0

    # -- plumbing ------------------------------------------------------------------------------
    def _guard(self, what: str, fn: Any, *args: Any) -> Any:
        # The one broad catch in autotune: MLflow raises many types (REST, SQLAlchemy, OS), and
        # none of them may stop a study. The warning names the failure; `sync` repairs it.
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001
            self.failures += 1
            warnings.warn(f"MLflow: could not {what} ({type(e).__name__}: {e}); the study goes "
                          "on, and `autotune sync` backfills MLflow later", stacklevel=2)
            return None

    def _experiment(self) -> str:
        exp = self.client.get_experiment_by_name(self.cfg.name)
        if exp is not None:
            eid = str(exp.experiment_id)
        elif self.uri.startswith("sqlite:///"):
            art = (Path(self.cfg.workdir).resolve() / "artifacts" / self.cfg.name).as_uri()
            eid = str(self.client.create_experiment(self.cfg.name, artifact_location=art))
        else:
            eid = str(self.client.create_experiment(self.cfg.name))
        # MLflow 3 opens an experiment of unknown kind on its GenAI overview (traces, judges);
        # this kind opens it on its runs, where the trials are
        self.client.set_experiment_tag(eid, EXPERIMENT_KIND_TAG, "custom_model_development")
        self.client.set_experiment_tag(eid, STUDY_TAG, self.cfg.name)
        return eid

    def _find(self, filter_string: str) -> str | None:
        assert self.experiment_id is not None
        runs = self.client.search_runs([self.experiment_id], filter_string, max_results=1)
        return runs[0].info.run_id if runs else None

    # -- study ---------------------------------------------------------------------------------
    def open_run(self, study: optuna.Study, extra: dict[str, Any]) -> None:
        self._guard("start the study's run", self._start, study, extra)

    def _start(self, study: optuna.Study, extra: dict[str, Any]) -> None:
        from mlflow.entities import Param, RunTag

        self.experiment_id = self._experiment()
        self.parent_id = self._find(f"tags.`{KIND_TAG}` = 'study'")
        if self.parent_id is not None:
            self._write_view()
            return
        shape = {weights.TAG: weights.STATEMENT} if self.cfg.server.shape_only else {}
        run = self.client.create_run(self.experiment_id, run_name=f"study {self.cfg.name}",
                                     tags={KIND_TAG: "study", STUDY_TAG: self.cfg.name, **shape})
        self.parent_id = run.info.run_id
        self._write_view()
        params = {
            "model": self.cfg.server.model, "profile": self.cfg.profile.name,
            "search_space": self.cfg.search_space, "sampler": self.cfg.sampler.name,
            "sampler_seed": str(self.cfg.sampler.seed), "n_trials": str(self.cfg.n_trials),
            "objectives": ", ".join(f"{o.direction} {o.metric}" for o in self.cfg.objectives),
            "slos": ", ".join(s.text() for s in self.cfg.slos) or "none",
            "autotune_version": __version__, "optuna_storage": self.cfg.storage_url(),
            **{k: str(v) for k, v in extra.items()}, **hardware(),
        }
        self.client.log_batch(self.parent_id, params=[Param(k, v[:6000])
                                                      for k, v in params.items()],
                              tags=[RunTag("mlflow.note.content",
                                           f"autotune study `{self.cfg.name}`")])
        self.client.log_dict(self.parent_id, self.cfg.model_dump(mode="json"), "study.yaml")
        from autotune.tuning.speculative import space_of

        space = space_of(self.cfg.search_space, self.cfg.server)[0]
        self.client.log_dict(self.parent_id, space.model_dump(mode="json"), "search_space.yaml")

    def _write_view(self) -> None:
        assert self.experiment_id is not None
        self.client.set_experiment_tag(self.experiment_id, SHARED_VIEW_TAG + VIEW_KEY,
                                       json.dumps(runs_view(self.cfg, self.parent_id)))

    # -- trials --------------------------------------------------------------------------------
    def log_trial(self, summary: StudySummary, trial: FrozenTrial) -> None:
        t0 = time.perf_counter()
        self._guard(f"log trial {trial.number}", self._log_trial, summary, trial)
        self.seconds.append(time.perf_counter() - t0)

    def _log_trial(self, summary: StudySummary, trial: FrozenTrial) -> None:
        from mlflow.entities import Metric, Param, RunTag

        if self.parent_id is None:
            raise RuntimeError("the study's parent run was not created")
        assert self.experiment_id is not None
        if self._find(f"tags.`{TRIAL_TAG}` = '{trial.number}'"):
            return  # logged already (sync after a resumed study)
        rec = next(r for r in summary.records if r.number == trial.number)
        # nested under the study's run; the view `autotune ui` opens (runs_view) expands it, so
        # every trial is listed with its metrics. A repeat boot nests under its config's run:
        # it is that config measured again, never a winner of its own
        parent = self.parent_id
        if rec.facts.repeat_of is not None:
            parent = self._find(f"tags.`{TRIAL_TAG}` = '{rec.facts.repeat_of}'") or parent
        tags = {STUDY_RUN_TAG: self.parent_id, "mlflow.parentRunId": parent,
                **trial_tags(rec, summary, self.cfg)}
        run = self.client.create_run(self.experiment_id, run_name=f"trial-{trial.number:04d}",
                                     tags=tags, start_time=_ms(rec.started))
        rid = run.info.run_id
        ts = _ms(rec.completed) or int(time.time() * 1000)
        self.client.log_batch(
            rid,
            metrics=[Metric(k, shown(float(v)), ts, 0)
                     for k, v in trial_metrics(rec, summary).items() if isinstance(v, int | float)]
            + [Metric(k, v, ts, step) for k, v, step in curve_metrics(rec)],
            params=[Param(k, v[:6000]) for k, v in trial_params(rec).items()],
            tags=[RunTag("autotune.trial_state", trial.state.name)],
        )
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            trial_files(rec, self.cfg, d)
            if any(d.iterdir()):
                self.client.log_artifacts(rid, str(d))
        status = "FINISHED" if rec.measured else "FAILED"
        self.client.set_terminated(rid, status=status, end_time=ts)

    # -- the front and the recommendation -----------------------------------------------------
    def log_front(self, summary: StudySummary, study: optuna.Study | None = None) -> None:
        self._guard("log the Pareto front", self._log_front, summary, study)

    def _log_front(self, summary: StudySummary, study: optuna.Study | None) -> None:
        from mlflow.entities import Metric, RunTag

        if self.parent_id is None:
            raise RuntimeError("the study's parent run was not created")
        recs = summary.records
        front = set(summary.front)
        if study is not None:
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                front_files(study, self.cfg, list(summary.pooled.values()), front, d)
                self.client.log_artifacts(self.parent_id, str(d), artifact_path="pareto")
        assert self.experiment_id is not None
        runs = {int(r.data.tags[TRIAL_TAG]): r for r in self.client.search_runs(
            [self.experiment_id], f"tags.`{KIND_TAG}` = 'trial'", max_results=5000)
            if TRIAL_TAG in r.data.tags}
        ids = {num: r.info.run_id for num, r in runs.items()}
        ts = int(time.time() * 1000)
        n = len(recs)
        pick = summary.recommendation.number
        self.client.log_batch(self.parent_id, metrics=[
            Metric("trials", float(n), ts, n),
            Metric("pareto_size", float(len(front)), ts, n),
            Metric("infeasible_trials", float(sum(not r.measured for r in recs)), ts, n),
        ], tags=[RunTag("mlflow.note.content",
                        study_note(self.cfg, summary, self.experiment_id, ids)),
                 RunTag(PICK_TAG, "none" if pick is None else str(pick)),
                 RunTag("autotune.recommendation", summary.headline()[:5000]),
                 *([RunTag(weights.TAG, weights.STATEMENT)] if weights.shape_only(
                     self.cfg.server, summary.picked.flags if summary.picked else None) else [])])
        # the runs view sorts by rank: the recommended config is its first row, the other
        # configs follow, and repeat boots (no rank) come after them all; each boot's gain is
        # its config's pooled one (every boot of its flags), the same text as the terminal's
        ranks = summary.rank()
        for num, rec in summary.pooled.items():
            if (rid := ids.get(num)) is None:
                continue
            tags = [RunTag(GAIN_TAG, gain_tag(rec, summary) or "-")]
            if num == pick:
                tags.append(RunTag(TRIAL_PICK_TAG, "recommended"))
            rank = [Metric(RANK, float(ranks[num]), ts, n)] if num in ranks else []
            self.client.log_batch(rid, metrics=rank, tags=tags)
        for num, r in runs.items():  # an earlier refresh's pick loses it: one run holds it
            if TRIAL_PICK_TAG in r.data.tags and num != pick:
                self.client.delete_tag(r.info.run_id, TRIAL_PICK_TAG)

    # -- the study's own numbers (the bill) ------------------------------------------------------
    def log_study_metrics(self, values: dict[str, float]) -> None:
        self._guard("log the study's bill", self._log_study_metrics, values)

    def _log_study_metrics(self, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        if self.parent_id is None:
            raise RuntimeError("the study's parent run was not created")
        ts = int(time.time() * 1000)
        self.client.log_batch(self.parent_id, metrics=[Metric(k, float(v), ts, 0)
                                                       for k, v in values.items()])

    # -- the confirm phase ----------------------------------------------------------------------
    def log_confirm(self, res: ConfirmResult) -> None:
        self._guard("log the confirm phase", self._log_confirm, res)

    def _log_confirm(self, res: ConfirmResult) -> None:
        from mlflow.entities import Metric, RunTag

        if self.parent_id is None:
            raise RuntimeError("the study's parent run was not created")
        ts = int(time.time() * 1000)
        metrics = [Metric("confirm_noise_floor", res.noise_floor, ts, 0)]
        for num, row in res.configs.items():
            numbers = {"median": row.median, "ci_low": row.ci_low, "ci_high": row.ci_high}
            if row.gain is not None:
                numbers.update(gain=row.gain.gain, gain_low=row.gain.low, gain_high=row.gain.high)
            metrics += [Metric(f"confirm_trial_{num}_{k}", float(v), ts, 0)
                        for k, v in numbers.items()]
        tags = [RunTag("autotune.confirm", confirm_note(res))]
        self.client.log_batch(self.parent_id, metrics=metrics, tags=tags)
        # on each finalist's own run too, so the runs view shows the interval beside the trial
        for num, row in res.configs.items():
            rid = self._find(f"tags.`{TRIAL_TAG}` = '{num}'")
            if rid is None:
                continue
            mine = [Metric("confirm_boots", float(len(row.values)), ts, 0),
                    Metric("confirm_median", float(row.median), ts, 0)]
            if row.gain is not None:
                mine += [Metric(f"confirm_gain{k}", v, ts, 0) for k, v in (
                    ("", row.gain.gain), ("_low", row.gain.low), ("_high", row.gain.high))]
            self.client.log_batch(rid, metrics=mine, tags=[
                RunTag("autotune.confirm", row.text or "baseline")])
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            confirm_files(res, d)
            self.client.log_artifacts(self.parent_id, str(d), artifact_path="confirm")

    def finish(self) -> None:
        if self.parent_id is not None:
            self._guard("close the study's run", self.client.set_terminated, self.parent_id)


def _ms(dt: Any) -> int | None:
    return int(dt.timestamp() * 1000) if dt is not None else None


def sync(cfg: StudyConfig, study: optuna.Study, tracking_uri: str | None = None) -> int:
    """Backfill MLflow from the Optuna storage; returns the number of trials now logged."""
    tr = Tracker(cfg, tracking_uri)
    tr.open_run(study, {"vllm_version": study_facts(study).vllm_version or "unknown"})
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    summary = summarize(study, cfg)
    for t in finished:
        tr.log_trial(summary, t)
    tr.log_front(summary, study)
    tr.finish()
    return len(finished) if tr.failures == 0 else -tr.failures
