"""MLflow: one experiment per study, a parent run for the study, a child run per trial, and the
Pareto front's artifacts on the parent.

Logging is a side effect at the edge of the study loop (an Optuna callback), never inside a
measurement. A failure to log never stops a study: it warns, the trial stays in the Optuna
storage, and `autotune sync` backfills MLflow from there later.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune import __version__
from autotune.config.study import StudyConfig
from autotune.server.command import params_to_args, shell_join
from autotune.tuning.confirm import ConfirmResult
from autotune.tuning.record import (
    TrialRecord,
    baseline,
    curve_profiles,
    deltas,
    front_numbers,
    metric_deltas,
    records,
    study_facts,
)

# the per-point quantities of a capacity curve logged as metric histories
CURVE_KEYS = ("request_throughput", "total_token_throughput", "p99_ttft_ms", "p99_tpot_ms",
              "p99_itl_ms", "p99_e2el_ms")
STUDY_TAG = "autotune.study"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
STUDY_RUN_TAG = "autotune.study_run"  # on a trial's run: the run id of its study's run
KIND_TAG = "autotune.kind"
GAIN_TAG = "autotune.gain"  # on a trial's run: its first objective against vLLM's defaults, as text
# MLflow's runs view reads a saved view (sort, columns, expanded runs) from this experiment tag
# when the address carries `viewStateShareKey=<key>` (what its Share button writes)
SHARED_VIEW_TAG = "mlflow.sharedViewState."
VIEW_KEY = "autotune"
# the address parameter that keeps MLflow 3 in its model-training mode; without it, MLflow reads
# the mode from the browser's local storage, where it starts as GenAI
ML_MODE = "workflowType=machine_learning"
TRIAL_TAG = "autotune.trial_number"


def default_tracking_uri(cfg: StudyConfig) -> str:
    return f"sqlite:///{Path(cfg.workdir).resolve() / 'mlflow.db'}"


def hardware() -> dict[str, str]:
    """GPU name and driver where nvidia-smi answers, else the CPU model."""
    smi = shutil.which("nvidia-smi")
    if smi:
        p = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        if p.returncode == 0 and p.stdout.strip():
            first = p.stdout.strip().splitlines()
            name, driver = (x.strip() for x in first[0].split(",", 1))
            return {"gpu": name, "gpu_count": str(len(first)), "driver": driver}
    cpu = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"gpu": "none", "cpu": cpu}


class Tracker:
    """Writes a study to MLflow. Every public method warns instead of raising."""

    def __init__(self, cfg: StudyConfig, tracking_uri: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.cfg = cfg
        self.uri = tracking_uri or default_tracking_uri(cfg)
        if self.uri.startswith(("http://", "https://")):
            # MLflow's client retries a dead server 7 times with backoff (minutes per call);
            # a study must not wait on its tracking server, and `sync` repairs what was missed
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        self.client = MlflowClient(tracking_uri=self.uri)
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
    def start(self, study: optuna.Study, extra: dict[str, Any]) -> None:
        self._guard("start the study's run", self._start, study, extra)

    def _start(self, study: optuna.Study, extra: dict[str, Any]) -> None:
        from mlflow.entities import Param, RunTag

        self.experiment_id = self._experiment()
        self.parent_id = self._find(f"tags.`{KIND_TAG}` = 'study'")
        if self.parent_id is not None:
            self._write_view()
            return
        run = self.client.create_run(self.experiment_id, run_name=f"study {self.cfg.name}",
                                     tags={KIND_TAG: "study", STUDY_TAG: self.cfg.name})
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
        from autotune.tuning.search_space import load_search_space

        space = load_search_space(self.cfg.search_space)
        self.client.log_dict(self.parent_id, space.model_dump(mode="json"), "search_space.yaml")

    def _write_view(self) -> None:
        assert self.experiment_id is not None
        self.client.set_experiment_tag(self.experiment_id, SHARED_VIEW_TAG + VIEW_KEY,
                                       json.dumps(runs_view(self.cfg, self.parent_id)))

    # -- trials --------------------------------------------------------------------------------
    def log_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        t0 = time.perf_counter()
        self._guard(f"log trial {trial.number}", self._log_trial, study, trial)
        self.seconds.append(time.perf_counter() - t0)

    def _log_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        from mlflow.entities import Metric, Param, RunTag

        if self.parent_id is None:
            raise RuntimeError("the study's parent run was not created")
        assert self.experiment_id is not None
        if self._find(f"tags.`{TRIAL_TAG}` = '{trial.number}'"):
            return  # logged already (sync after a resumed study)
        recs = records(study)
        rec = next(r for r in recs if r.number == trial.number)
        facts = rec.facts
        # nested under the study's run; the view `autotune ui` opens (runs_view) expands it, so
        # every trial is listed with its metrics
        tags = {STUDY_RUN_TAG: self.parent_id, "mlflow.parentRunId": self.parent_id,
                KIND_TAG: "trial", STUDY_TAG: self.cfg.name,
                TRIAL_TAG: str(trial.number), "autotune.state": rec.status.value,
                "autotune.baseline": str(rec.baseline).lower()}
        gain = gain_tag(rec, baseline(recs), self.cfg.metric_names()[0])
        if gain:
            tags[GAIN_TAG] = gain
        if rec.cause:
            tags["autotune.cause"] = rec.cause[:5000]
        if facts.reused_from is not None:
            tags["autotune.reused_from"] = str(facts.reused_from)
        if facts.repeat_of is not None:
            tags["autotune.repeat_of"] = str(facts.repeat_of)
        if facts.warnings:
            tags["autotune.warnings"] = " | ".join(facts.warnings)[:5000]
        run = self.client.create_run(self.experiment_id, run_name=f"trial-{trial.number:04d}",
                                     tags=tags, start_time=_ms(rec.started))
        rid = run.info.run_id
        params = {k: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else str(v)
                  for k, v in rec.flags.items()}
        params["baseline"] = str(rec.baseline).lower()
        ts = _ms(rec.completed) or int(time.time() * 1000)
        # a trial without a measurement logs no metric values: the worst-case numbers the
        # sampler learns from are not measurements
        metrics: dict[str, float] = {}
        if rec.measured:
            metrics.update(rec.metrics)
            metrics.update(facts.server_stats or {})
            metrics.update({f"delta_{k}": v for k, v in deltas(rec, baseline(recs)).items()})
            metrics.update({f"delta_{k}": v for k, v in metric_deltas(
                rec, baseline(recs), self.cfg.profile_metrics()).items()})
            metrics.update({f"objective_{k}": v for k, v in rec.values.items()})
        metrics.update({f"timing_{k}": v for k, v in rec.timings.items()})
        metrics.update({f"constraint_{k}": v for k, v in rec.constraints.items()})
        # a capacity search's curve: a metric history per quantity, step = the point's rank by
        # load (so MLflow's charts draw each trial's curve)
        # (a capacity suite: one history per profile, `curve_<label>/<quantity>`)
        curve = [Metric(f"curve_{prof + '/' if prof else ''}{k}", float(v), ts, i)
                 for prof in rec.curve_profiles()
                 for i, pt in enumerate(rec.curve(prof))
                 for k, v in {"load": pt.load, "passed": float(pt.passed),
                              **{m: pt.metrics[m] for m in CURVE_KEYS}}.items()]
        self.client.log_batch(
            rid,
            metrics=[Metric(k, float(v), ts, 0) for k, v in metrics.items()
                     if isinstance(v, int | float)] + curve,
            params=[Param(k, v[:6000]) for k, v in params.items()],
            tags=[RunTag("autotune.trial_state", trial.state.name)],
        )
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            if facts.argv:
                (d / "argv.txt").write_text(" ".join(facts.argv) + "\n")
            log = Path(facts.log_path) if facts.log_path else None
            if log is not None and log.is_file():
                with log.open("rb") as src, gzip.open(d / "server.log.gz", "wb") as dst:
                    shutil.copyfileobj(src, dst)
            reqs = log.parent / "requests.csv" if log is not None else None
            if reqs is not None and reqs.is_file():
                shutil.copy(reqs, d / "requests.csv")
            if rec.curve_profiles() and self.cfg.capacity is not None:
                from autotune.outputs import plots

                for prof in rec.curve_profiles():
                    plots.capacity_png(rec, self.cfg.slos, self.cfg.capacity.axis,
                                       d / f"capacity{'-' + prof if prof else ''}.png", prof)
                (d / "capacity.json").write_text(json.dumps(facts.capacity, indent=2))
            if any(d.iterdir()):
                self.client.log_artifacts(rid, str(d))
        status = "FINISHED" if rec.measured else "FAILED"
        self.client.set_terminated(rid, status=status, end_time=ts)

    # -- the front -----------------------------------------------------------------------------
    def log_front(self, study: optuna.Study) -> None:
        self._guard("log the Pareto front", self._log_front, study)

    def _log_front(self, study: optuna.Study) -> None:
        from mlflow.entities import Metric

        from autotune.outputs import plots

        if self.parent_id is None:
            raise RuntimeError("the study's parent run was not created")
        metrics = self.cfg.metric_names()
        recs = records(study)
        front = front_numbers(study)
        df = plots.trials_frame(recs, metrics, front)
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            df.to_csv(d / "trials.csv", index=False)
            df[df.on_front].to_csv(d / "pareto_front.csv", index=False)
            if len(metrics) >= 2 and any(r.measured for r in recs):
                plots.pareto_html(study, d / "pareto.html", self.cfg.name)
                plots.pareto_png(study, d / "pareto.png", self.cfg.name)
                hv = plots.hypervolume_history(study)
                if hv is not None:
                    hv.to_csv(d / "hypervolume.csv", index=False)
            if self.cfg.capacity is not None:
                for prof in curve_profiles(recs):
                    plots.capacity_overlay_png(
                        recs, self.cfg.slos, self.cfg.capacity.axis,
                        d / f"capacity_curves{'-' + prof if prof else ''}.png", prof)
            imp = plots.importances(study, metrics)
            if imp:
                (d / "importances.json").write_text(json.dumps(imp, indent=2))
            self.client.log_artifacts(self.parent_id, str(d), artifact_path="pareto")
        assert self.experiment_id is not None
        ids = {int(r.data.tags[TRIAL_TAG]): r.info.run_id for r in self.client.search_runs(
            [self.experiment_id], f"tags.`{KIND_TAG}` = 'trial'", max_results=5000)
            if TRIAL_TAG in r.data.tags}
        self.client.set_tag(self.parent_id, "mlflow.note.content",
                            study_note(self.cfg, recs, front, self.experiment_id, ids))
        ts = int(time.time() * 1000)
        n = len(recs)
        self.client.log_batch(self.parent_id, metrics=[
            Metric("trials", float(n), ts, n),
            Metric("pareto_size", float(len(front)), ts, n),
            Metric("infeasible_trials", float(sum(not r.measured for r in recs)), ts, n),
        ])

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

        from autotune.outputs import plots

        if self.parent_id is None:
            raise RuntimeError("the study's parent run was not created")
        ts = int(time.time() * 1000)
        metrics = [Metric("confirm_noise_floor", res.noise_floor, ts, 0)]
        for num, row in res.configs.items():
            numbers = {"median": row.median, "ci_low": row.ci_low, "ci_high": row.ci_high}
            if row.gain is not None:
                numbers.update(gain=row.gain.gain, gain_low=row.gain.low,
                               gain_high=row.gain.high)
            metrics += [Metric(f"confirm_trial_{num}_{k}", float(v), ts, 0)
                        for k, v in numbers.items()]
        tags = [RunTag("autotune.recommended", str(res.recommended))] \
            if res.recommended is not None else []
        note = self.client.get_run(self.parent_id).data.tags.get("mlflow.note.content", "")
        if res.recommended is not None and "**Confirm phase**" not in note:
            tags.append(RunTag("mlflow.note.content", note + "\n\n" + confirm_note(res)))
        self.client.log_batch(self.parent_id, metrics=metrics, tags=tags)
        # on each finalist's own run too, so the runs view shows the interval beside the trial
        for num, row in res.configs.items():
            rid = self._find(f"tags.`{TRIAL_TAG}` = '{num}'")
            if rid is None:
                continue
            boots = len(row.values)
            mine = [Metric("confirm_boots", float(boots), ts, 0),
                    Metric("confirm_median", float(row.median), ts, 0)]
            if row.gain is not None:
                mine += [Metric("confirm_gain", row.gain.gain, ts, 0),
                         Metric("confirm_gain_low", row.gain.low, ts, 0),
                         Metric("confirm_gain_high", row.gain.high, ts, 0)]
            gain = (f"{row.text} ({boots} boots)" if row.gain is not None
                    else f"vLLM's defaults ({boots} boots)")
            self.client.log_batch(rid, metrics=mine, tags=[
                RunTag("autotune.confirm", row.text or "baseline"), RunTag(GAIN_TAG, gain)])
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            (d / "confirm.json").write_text(json.dumps(res.to_json(), indent=2) + "\n")
            plots.confirm_png(res, d / "confirm.png")
            self.client.log_artifacts(self.parent_id, str(d), artifact_path="confirm")

    def finish(self) -> None:
        if self.parent_id is not None:
            self._guard("close the study's run", self.client.set_terminated, self.parent_id)


def _ms(dt: Any) -> int | None:
    return int(dt.timestamp() * 1000) if dt is not None else None


def sync(cfg: StudyConfig, study: optuna.Study, tracking_uri: str | None = None) -> int:
    """Backfill MLflow from the Optuna storage; returns the number of trials now logged."""
    tr = Tracker(cfg, tracking_uri)
    tr.start(study, {"vllm_version": study_facts(study).vllm_version or "unknown"})
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    for t in finished:
        tr.log_trial(study, t)
    tr.log_front(study)
    tr.finish()
    return len(finished) if tr.failures == 0 else -tr.failures


def objective_columns(cfg: StudyConfig) -> list[str]:
    """The metric names the runs view shows for the objectives: a suite's scores are logged as
    `objective_<name>`, a single profile's objectives under their own names."""
    return [f"objective_{m}" if cfg.profiles else m for m in cfg.metric_names()]


def runs_view(cfg: StudyConfig, parent_id: str | None) -> dict[str, Any]:
    """The saved view of a study's runs (MLflow 3.17's shared view state): every trial, sorted
    by the first objective, with the objectives, the gain against vLLM's defaults, the SLO
    metrics, the state and the searched flags (empty = vLLM's default) as the first columns."""
    from autotune.tuning.search_space import load_search_space

    objs = objective_columns(cfg)
    slos = [] if cfg.profiles else [s.metric for s in cfg.slos if s.metric not in objs]
    flags = list(load_search_space(cfg.search_space).parameters)
    cols = ([f"metrics.`{m}`" for m in objs] + [f"tags.`{GAIN_TAG}`"]
            + [f"metrics.`{m}`" for m in dict.fromkeys(slos)] + ["tags.`autotune.state`"]
            + [f"params.`{p}`" for p in flags])
    return {
        # the search facets
        "searchFilter": "", "orderByKey": cols[0],
        "orderByAsc": cfg.objectives[0].direction == "minimize", "startTime": "ALL",
        "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
        # the table
        "selectedColumns": cols, "columnOrder": cols,
        "columnWidths": {c: 150 if c == f"tags.`{GAIN_TAG}`" else 110 for c in cols},
        "runsExpanded": {parent_id: True} if parent_id else {},
        "runsHiddenMode": "SHOW_ALL", "runsPinned": [], "runsHidden": [],
        "viewMaximized": False, "runListHidden": False,
    }


def study_note(cfg: StudyConfig, recs: list[TrialRecord], front: set[int], experiment_id: str,
               run_ids: dict[int, str]) -> str:
    """The study run's description (Markdown, shown on its page): what was asked, the front
    with links to its trials, and where the whole table is."""
    objs = cfg.metric_names()
    measured = [r for r in recs if r.measured]
    base = baseline(recs)
    asked = ", ".join(f"{o.direction} {n}" for o, n in zip(cfg.objectives, objs, strict=True))
    slos = ", ".join(s.text() for s in cfg.slos) or "none"
    link = runs_url("", experiment_id)[1:]  # "#/experiments/..." on the same page
    lines = [f"**autotune study `{cfg.name}`**: {len(recs)} trials, {len(measured)} measured. "
             f"Objectives: {asked}. SLOs: {slos}.", "",
             f"[Every trial, sorted by {objs[0]}]({link})", "",
             "The Pareto front (no trial is better on every objective):", "",
             "| trial | " + " | ".join(objs) + " | vs vLLM's defaults | flags |",
             "|---|" + "---:|" * len(objs) + "---|---|"]
    for r in sorted((r for r in recs if r.number in front), key=lambda r: r.number):
        name = f"trial {r.number}"
        if r.number in run_ids:
            name = f"[{name}]({run_url('', experiment_id, run_ids[r.number])[1:]})"
        flags = shell_join(params_to_args(r.flags)) or "vLLM's defaults"
        vals = " | ".join(f"{r.values[m]:,.2f}" if m in r.values else "-" for m in objs)
        lines.append(f"| {name} | {vals} | {gain_tag(r, base, objs[0]) or '-'} | "
                     f"`{flags}` |")
    lines += ["", "Plots and tables: this run's artifacts, `pareto/` (pareto.html, trials.csv)."]
    return "\n".join(lines)


def confirm_note(res: ConfirmResult) -> str:
    row = res.configs.get(res.recommended if res.recommended is not None else -1)
    if res.recommended == res.base or row is None:
        return (f"**Confirm phase**: keep vLLM's defaults (trial {res.base}); no finalist beat "
                f"them on {res.metric} beyond the noise.")
    return (f"**Confirm phase**: trial {res.recommended}, {res.metric} "
            f"{row.text} against vLLM's defaults over {len(row.values)} "
            "boots.")


def gain_tag(rec: TrialRecord, base: TrialRecord | None, metric: str) -> str:
    """A trial's first objective against vLLM's defaults, as the runs view shows it."""
    if rec.baseline:
        return "vLLM's defaults"
    d = deltas(rec, base).get(metric)
    return "" if d is None else f"{d * 100:+.1f}% (one boot)"


def runs_url(ui_url: str, experiment_id: str, shared_view: bool = True) -> str:
    """The MLflow UI page of a study's runs: the model-training table (not the GenAI overview
    MLflow 3 opens by default) in the study's saved view (runs_view), or, for a study logged
    before it had one, the table sorted by nothing in particular."""
    view = f"viewStateShareKey={VIEW_KEY}&" if shared_view else ""
    return f"{ui_url}/#/experiments/{experiment_id}/runs?{view}{ML_MODE}&compareRunsMode=TABLE"


def run_url(ui_url: str, experiment_id: str, run_id: str) -> str:
    """One trial's page, kept in the model-training mode."""
    return f"{ui_url}/#/experiments/{experiment_id}/runs/{run_id}?{ML_MODE}"


def has_shared_view(tracking_uri: str, experiment_id: str) -> bool:
    from mlflow.tracking import MlflowClient

    exp = MlflowClient(tracking_uri=tracking_uri).get_experiment(experiment_id)
    return SHARED_VIEW_TAG + VIEW_KEY in exp.tags


def find_study_experiment(tracking_uri: str, study: str | None = None) -> tuple[str, str] | None:
    """(experiment id, name) of the named study, else of the autotune study created last."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    if study is not None:
        exp = client.get_experiment_by_name(study)
        return (str(exp.experiment_id), exp.name) if exp is not None else None
    for exp in client.search_experiments(order_by=["creation_time DESC"]):
        if exp.name != "Default" and client.search_runs(
                [exp.experiment_id], f"tags.`{KIND_TAG}` = 'study'", max_results=1):
            return str(exp.experiment_id), exp.name
    return None
