"""`autotune report`, `autotune ui`, `autotune sync`, `autotune make-tiny-model`."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli._options import load_cfg, study_options
from autotune.errors import StudyError
from autotune.present import console, out


@click.command()
@study_options
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Folder for report.md and its plots (default: the study's folder/report).")
def report(config_path: Path, study_name: str | None, storage: str | None,
           out_dir: Path | None) -> None:
    """Write a study's report: Markdown with every trial, the front, the time split, plots."""
    from autotune.report import write_report
    from autotune.study import open_study

    cfg = load_cfg(config_path, study_name, storage)
    path = write_report(open_study(cfg, create=False), cfg, out_dir or cfg.study_dir() / "report")
    out.print(str(path))


@click.command()
@study_options
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
def sync(config_path: Path, study_name: str | None, storage: str | None,
         tracking_uri: str | None) -> None:
    """Backfill MLflow from the Optuna storage (after MLflow was down or read-only)."""
    from autotune.study import open_study
    from autotune.tracking import sync as do_sync

    cfg = load_cfg(config_path, study_name, storage)
    n = do_sync(cfg, open_study(cfg, create=False), tracking_uri)
    if n < 0:
        raise StudyError(f"MLflow sync: {-n} writes failed (see the warnings above)")
    console.print(f"MLflow holds the study's {n} finished trials")


@click.command()
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("mlruns"),
              show_default=True, help="Folder with mlflow.db.")
@click.option("--port", type=int, default=5000, show_default=True)
@click.option("--tracking-uri", help="Backend store URI (default: sqlite:///WORKDIR/mlflow.db).")
@click.option("--study", help="The study whose runs to open (default: the latest study).")
def ui(workdir: Path, port: int, tracking_uri: str | None, study: str | None) -> None:
    """Start the MLflow UI on 127.0.0.1 for the studies under mlruns/ and print the address of
    a study's runs (Ctrl-C stops it)."""
    from autotune.mlflow_ui import MlflowUI
    from autotune.tracking import find_study_experiment, runs_url

    uri = tracking_uri or f"sqlite:///{workdir.resolve() / 'mlflow.db'}"
    found = find_study_experiment(uri, study)
    if study is not None and found is None:
        raise StudyError(f"--study: MLflow at {uri} has no study {study!r}")
    with MlflowUI(uri, port=port, log_path=workdir / "mlflow-ui.log") as server:
        took = server.wait_ready(120)
        console.print(f"MLflow UI ready in {took:.1f} s (Ctrl-C stops it)", highlight=False)
        if found is not None:
            console.print(f"study {found[1]!r}, its trials and their curves:", highlight=False)
            out.print(runs_url(server.url, found[0]), highlight=False, soft_wrap=True)
        else:
            out.print(server.url, highlight=False)
        server.wait()


@click.command("make-tiny-model")
@click.argument("out_dir", type=click.Path(path_type=Path))
def make_tiny_model_cmd(out_dir: Path) -> None:
    """Write a tiny Qwen3 config and tokenizer (serve it with --load-format dummy)."""
    from autotune.tinymodel import make_tiny_model

    make_tiny_model(out_dir)
    out.print(str(out_dir))


COMMANDS = [report, sync, ui, make_tiny_model_cmd]
