"""The files a study leaves beside its numbers: per trial (argv, the server log, per-request
CSV, capacity curves, TTFT through its capacity point), for the front (trials and front tables,
Pareto plots, hypervolume, importances, capacity overlays) and for the confirm phase. MLflow
logs them as artifacts (outputs/tracking.py); each function writes into a folder it is given."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import optuna

from autotune.config.study import StudyConfig
from autotune.outputs import plots
from autotune.tuning.confirm import ConfirmResult
from autotune.tuning.record import TrialRecord, curve_profiles


def trial_files(rec: TrialRecord, cfg: StudyConfig, d: Path) -> None:
    """A trial's command line, its server log (gzipped), its requests and capacity curves."""
    facts = rec.facts
    if facts.argv:
        (d / "argv.txt").write_text(" ".join(facts.argv) + "\n")
    log = Path(facts.log_path) if facts.log_path else None
    if log is not None and log.is_file():
        with log.open("rb") as src, gzip.open(d / "server.log.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    reqs = log.parent / "requests.csv" if log is not None else None
    if reqs is not None and reqs.is_file():
        shutil.copy(reqs, d / "requests.csv")
    if rec.curve_profiles() and cfg.capacity is not None:
        for prof in rec.curve_profiles():
            plots.capacity_png(rec, cfg.slos, cfg.capacity.axis,
                               d / f"capacity{'-' + prof if prof else ''}.png", prof)
        (d / "capacity.json").write_text(json.dumps(facts.capacity, indent=2))
        if log is not None:  # TTFT through its capacity point: a queue building or not
            from autotune.outputs.inside import inside_markdown

            lines = inside_markdown(rec, log.parent, cfg.slos, d)
            if lines:
                (d / "inside_points.md").write_text("\n".join(lines).lstrip() + "\n")


def front_files(study: optuna.Study, cfg: StudyConfig, recs: list[TrialRecord],
                front: set[int], d: Path) -> None:
    """Every trial and the front as tables, the Pareto plots and the capacity overlays."""
    metrics = cfg.metric_names()
    df = plots.trials_frame(recs, metrics, front)
    df.to_csv(d / "trials.csv", index=False)
    df[df.on_front].to_csv(d / "pareto_front.csv", index=False)
    if len(metrics) >= 2 and any(r.measured for r in recs):
        pooled = {r.number: r.values for r in recs if r.measured}  # the summary's pooled
        plots.pareto_html(study, d / "pareto.html", cfg.name, pooled)
        plots.pareto_png(study, d / "pareto.png", cfg.name, pooled)
        hv = plots.hypervolume_history(study)
        if hv is not None:
            hv.to_csv(d / "hypervolume.csv", index=False)
    if cfg.capacity is not None:
        for prof in curve_profiles(recs):
            plots.capacity_overlay_png(
                recs, cfg.slos, cfg.capacity.axis,
                d / f"capacity_curves{'-' + prof if prof else ''}.png", prof)
    imp = plots.importances(study, metrics)
    if imp:
        (d / "importances.json").write_text(json.dumps(imp, indent=2))


def confirm_files(res: ConfirmResult, d: Path) -> None:
    (d / "confirm.json").write_text(json.dumps(res.to_json(), indent=2) + "\n")
    plots.confirm_png(res, d / "confirm.png")
