"""What the MLflow UI opens on: the tags autotune writes, the saved view of a study's runs (sort,
columns, expanded runs), the study run's Markdown note, and the addresses `autotune ui` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.config.paths import check_file
from autotune.config.study import StudyConfig
from autotune.errors import ConfigError
from autotune.server.command import params_to_args, shell_join
from autotune.tuning.confirm import ConfirmResult
from autotune.tuning.record import TrialRecord
from autotune.tuning.summary import StudySummary

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

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
RANK = "rank"  # a trial run's metric: 0 the recommended config, then the front, then the rest
FLAGS_TAG = "autotune.flags"  # the searched flags a trial sets away from vLLM's defaults


def shown(v: float) -> float:
    """A value as the terminal shows it: two decimals, four significant digits below 1."""
    return round(v, 2) if abs(v) >= 1 else float(f"{v:.4g}")


def objective_columns(cfg: StudyConfig) -> list[str]:
    """The metric names the runs view shows for the objectives: a suite's scores are logged as
    `objective_<name>`, a single profile's objectives under their own names."""
    return [f"objective_{m}" if cfg.profiles else m for m in cfg.metric_names()]


# how `autotune ui` says the saved view (runs_view) orders the runs: by the `rank` metric
VIEW_ORDER = ("sorted by rank: the recommended config first, then the Pareto front, then the "
              "other configs (repeat boots nested under theirs)")


def runs_view(cfg: StudyConfig, parent_id: str | None) -> dict[str, Any]:
    """The saved view of a study's runs (MLflow 3.17's shared view state): every trial, sorted
    by rank (the recommended config first, then the front), with the objectives, the gain
    against vLLM's defaults with its interval, the flags set away from the defaults, the SLO
    metrics, the state and each searched flag (empty = vLLM's default) as the first columns;
    a config's repeat boots are nested under its run."""
    from autotune.tuning.speculative import space_of

    objs = objective_columns(cfg)
    slos = [] if cfg.profiles else [s.metric for s in cfg.slos if s.metric not in objs]
    # MLflow logs a trial's flags (speculative_config, not its speculative_method parameter)
    flags = space_of(cfg.search_space, cfg.server)[0].searched_flags()
    cols = ([f"metrics.`{m}`" for m in objs] + [f"tags.`{GAIN_TAG}`", f"tags.`{FLAGS_TAG}`"]
            + [f"metrics.`{m}`" for m in dict.fromkeys(slos)] + ["tags.`autotune.state`"]
            + [f"params.`{p}`" for p in flags])
    return {
        # the search facets
        "searchFilter": "", "orderByKey": f"metrics.`{RANK}`",
        "orderByAsc": True, "startTime": "ALL",
        "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
        # the table
        "selectedColumns": cols, "columnOrder": cols,
        "columnWidths": {c: 190 if c in (f"tags.`{GAIN_TAG}`", f"tags.`{FLAGS_TAG}`") else 110
                         for c in cols},
        "runsExpanded": {parent_id: True} if parent_id else {},
        "runsHiddenMode": "SHOW_ALL", "runsPinned": [], "runsHidden": [],
        "viewMaximized": False, "runListHidden": False,
    }


def study_note(cfg: StudyConfig, summary: StudySummary, experiment_id: str,
               run_ids: dict[int, str]) -> str:
    """The study run's description (Markdown, shown on its page): the recommendation first,
    what was asked, the front (pooled values) with links to its trials, and where the whole
    table is."""
    objs = cfg.metric_names()
    recs = summary.records
    measured = [r for r in recs if r.measured]
    asked = ", ".join(f"{o.direction} {n}" for o, n in zip(cfg.objectives, objs, strict=True))
    slos = ", ".join(s.text() for s in cfg.slos) or "none"
    link = runs_url("", experiment_id)[1:]  # "#/experiments/..." on the same page
    lines = [f"**Recommended: {summary.headline()}**", "",
             f"autotune study `{cfg.name}`: {len(recs)} trials, {len(measured)} measured. "
             f"Objectives: {asked}. SLOs: {slos}.", "",
             f"[Every trial, the recommended first]({link})", "",
             "The Pareto front on each config's median over its boots (no config is better on "
             "every objective):", ""]
    head = ["| trial | " + " | ".join(objs) + " | vs vLLM's defaults | flags |",
            "|---|" + "---:|" * len(objs) + "---|---|"]

    def row(r: TrialRecord) -> str:
        name = f"trial {r.number}"
        if r.number in run_ids:
            name = f"[{name}]({run_url('', experiment_id, run_ids[r.number])[1:]})"
        flags = shell_join(params_to_args(r.flags)) or "vLLM's defaults"
        vals = " | ".join(f"{r.values[m]:,.2f}" if m in r.values else "-" for m in objs)
        return f"| {name} | {vals} | {gain_tag(r, summary) or '-'} | `{flags}` |"

    lines += [*head, *(row(r) for r in summary.front_rows)]
    if summary.off_front is not None and summary.picked is not None:
        # the recommendation apart: under the front's heading it would contradict it
        lines += ["", f"{summary.off_front}:", "", *head, row(summary.picked)]
    if summary.confirm is not None:
        lines += ["", confirm_note(summary.confirm)]
    lines += ["", "Plots and tables: this run's artifacts, `pareto/` (pareto.html, trials.csv)."]
    return "\n".join(lines)


def confirm_note(res: ConfirmResult) -> str:
    """What the confirm phase measured, on its first objective (the recommendation, over every
    objective, is the study's `autotune.recommendation` tag)."""
    rows = {n: r for n, r in res.configs.items() if n != res.base and r.gain is not None}
    beyond = [n for n, r in rows.items() if r.survives]
    return (f"**Confirm phase**: {len(rows)} finalist(s) against vLLM's defaults (trial "
            f"{res.base}); on {res.metric}, beyond the noise: "
            + (", ".join(f"trial {n} {rows[n].text} ({len(rows[n].values)} boots)"
                         for n in beyond) or "none") + ".")


def gain_tag(rec: TrialRecord, summary: StudySummary) -> str:
    """A config's first objective against vLLM's defaults, pooled over every boot of both, as
    the terminal prints it ("+12.3% [+4.0, +20.1], 3 boots" or "+5.0%, one measurement"); on
    the defaults' runs, the figure each gain divides by once they were booted more than once
    ("vLLM's defaults; geo. mean 14,610.58 of 3 boots")."""
    from autotune.outputs.tables import base_figure, gain_text

    base = summary.base
    g = summary.gains.get(rec.number, {}).get(summary.metrics[0])
    if rec.baseline or (base is not None and rec.facts.repeat_of == base.number):
        return "; ".join(filter(None, ["vLLM's defaults", base_figure(g)]))
    return "" if g is None else gain_text(g)


def flags_tag(rec: TrialRecord, cfg: StudyConfig) -> str:
    """The searched flags the trial sets away from vLLM's defaults (its command-line form)."""
    from autotune.tuning.speculative import space_of

    searched = set(space_of(cfg.search_space, cfg.server)[0].searched_flags())
    if rec.baseline:
        return "vLLM's defaults"
    if rec.facts.repeat_of is not None:
        return f"repeat of trial {rec.facts.repeat_of}"
    return shell_join(params_to_args({k: v for k, v in rec.flags.items() if k in searched
                                      and v is not None})) or "vLLM's defaults"


def runs_url(ui_url: str, experiment_id: str, shared_view: bool = True) -> str:
    """The MLflow UI page of a study's runs: the model-training table (not the GenAI overview
    MLflow 3 opens by default) in the study's saved view (runs_view), or, for a study logged
    before it had one, the table sorted by nothing in particular."""
    view = f"viewStateShareKey={VIEW_KEY}&" if shared_view else ""
    return f"{ui_url}/#/experiments/{experiment_id}/runs?{view}{ML_MODE}&compareRunsMode=TABLE"


def open_url(ui_url: str, experiment_id: str, shared_view: bool = True) -> str:
    """What `autotune ui` prints: autotune's page on MLflow's server (outputs/mlflow_app.py),
    which keeps the browser in the model-training mode, then opens `runs_url`."""
    from urllib.parse import quote

    return f"{ui_url}/autotune/open?to={quote(runs_url('', experiment_id, shared_view)[1:])}"


def run_url(ui_url: str, experiment_id: str, run_id: str) -> str:
    """One trial's page, kept in the model-training mode."""
    return f"{ui_url}/#/experiments/{experiment_id}/runs/{run_id}?{ML_MODE}"


def has_shared_view(tracking_uri: str, experiment_id: str) -> bool:
    from mlflow.tracking import MlflowClient

    exp = MlflowClient(tracking_uri=tracking_uri).get_experiment(experiment_id)
    return SHARED_VIEW_TAG + VIEW_KEY in exp.tags


def open_client(uri: str) -> MlflowClient:
    """An MlflowClient on `uri`, or one ConfigError naming --tracking-uri: an unknown scheme,
    MLflow's retired file store, or a sqlite file nobody may write (which MLflow retries for
    minutes before it raises)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    fix = "use sqlite:///PATH/mlflow.db or a tracking server, http://HOST:5000"
    if uri.startswith("sqlite:///"):
        check_file(uri.removeprefix("sqlite:///"), "--tracking-uri")
    try:
        return MlflowClient(tracking_uri=uri)
    except MlflowException as e:
        first = str(e).strip().split(". ")[0]
        raise ConfigError(f"--tracking-uri: MLflow cannot use {uri!r} ({first}); {fix}") from None


def find_study_experiment(tracking_uri: str, study: str | None = None) -> tuple[str, str] | None:
    """(experiment id, name) of the named study, else of the autotune study created last."""
    client = open_client(tracking_uri)
    if study is not None:
        exp = client.get_experiment_by_name(study)
        return (str(exp.experiment_id), exp.name) if exp is not None else None
    for exp in client.search_experiments(order_by=["creation_time DESC"]):
        if exp.name != "Default" and client.search_runs(
                [exp.experiment_id], f"tags.`{KIND_TAG}` = 'study'", max_results=1):
            return str(exp.experiment_id), exp.name
    return None


def rename_experiment(tracking_uri: str, name: str, new: str) -> bool:
    """Rename the experiment of study `name` to `new` (--force-new keeps the old study's runs
    under its new name); False where there is none."""
    client = open_client(tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return False
    client.rename_experiment(exp.experiment_id, new)
    client.set_experiment_tag(exp.experiment_id, STUDY_TAG, new)
    return True


def study_extra(cfg: StudyConfig, vllm_version: str, requests: list[Any]) -> dict[str, str]:
    """What the study's run records beside the config: vLLM, the requests' digest, the
    executable."""
    from autotune.load.datasets import requests_digest

    return {"vllm_version": vllm_version, "dataset_hash": requests_digest(requests),
            "vllm_executable": " ".join(cfg.server.executable)}
