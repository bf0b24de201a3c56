"""`autotune study`, `create-study`, `worker`, `confirm`: parse, call the public API.

`study` calls run_session, `create-study` create_study, `worker` join_study and `confirm`
confirm_study (autotune.api, which loads each on first use: `autotune --help` loads neither
Optuna nor MLflow).
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from autotune import api
from autotune.cli._options import load_cfg, sampler_option, study_options

FORCE_NEW_HELP = ("Start the study afresh under its name: a study of that name (created for "
                  "another model or workload) is kept, renamed NAME.old-TIME with its folder "
                  "and MLflow experiment.")


@click.command()
@study_options
@click.option("--n-trials", type=click.IntRange(min=1), help="Trials the study should hold in all.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
              help="Seconds this run may take: no trial starts unless it is expected to end "
                   "in time (judged by the longest trial so far).")
@click.option("--budget-gpu-minutes", type=click.FloatRange(min=0, min_open=True),
              help="Device-minutes the study may hold in all, resumes included (GPU-minutes; "
                   "on a machine without GPUs, its minutes): no trial starts that would end "
                   "past it, judged by the longest trial so far. With certifying on, the study "
                   "ends certified (exit 0; 0 too when nothing explored beat the defaults), "
                   "not certified (3), budget spent before certification (4) or budget too "
                   "small to explore, only vLLM's defaults ran (5; docs/certify.md).")
@sampler_option
@click.option("--search-space", help="Search space name or file.")
@click.option("--seed", type=int, help="Sampler seed.")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--front-every", type=click.IntRange(min=0), default=5, show_default=True,
              help="Refresh the Pareto artifacts in MLflow every N trials.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes on this host, one per GPU group (on CPU: per core group).")
@click.option("--warm-start", "warm_from", metavar="STUDY",
              help="Enqueue another study's Pareto configs first (NAME in this storage, or "
                   "NAME@STORAGE-URL), each re-checked against this space and this vLLM.")
@click.option("--gpus-per-trial", type=click.IntRange(min=0),
              help="GPUs each trial's server gets (default: 1 with GPUs, 0 on CPU); above 1, "
                   "trials run tensor-parallel unless the config sets a parallel size.")
@click.option("--confirm/--no-confirm", "confirm_flag", default=None,
              help="End with the confirm phase (the front's top configs and the baseline "
                   "booted again, interleaved) or not; default: confirm.when in the config "
                   "(auto: when trials take minutes).")
@click.option("--certify/--no-certify", "certify_flag", default=None,
              help="With a budget or a timeout, keep a reserve to certify the pick and end "
                   "with the certify phase (docs/certify.md), or explore all of it (a run on a "
                   "machine held for less than the budget; the next run certifies); default: "
                   "certify.when in the config (auto: with a budget or a timeout).")
@click.option("--certify-here", is_flag=True,
              help="Certify on this machine too: resume a study whose pick was certified on "
                   "other machines without exploring more, boot pairs of the pick and the "
                   "defaults here, pooled with theirs, and check the reference here "
                   "(docs/certify.md).")
@click.option("--force-new", is_flag=True, help=FORCE_NEW_HELP)
def study(config_path: Path, study_name: str | None, storage: str | None, n_trials: int | None,
          timeout_s: float | None, budget_gpu_minutes: float | None, sampler: str | None,
          search_space: str | None, seed: int | None, tracking_uri: str | None,
          no_mlflow: bool, front_every: int, workers: int, gpus_per_trial: int | None,
          warm_from: str | None, confirm_flag: bool | None, certify_flag: bool | None,
          certify_here: bool, force_new: bool) -> None:
    """Run (or resume) a multi-objective study over vLLM's flags."""
    began = time.monotonic()
    if certify_here and certify_flag is False:
        raise click.UsageError("--certify-here certifies: drop --no-certify")
    when = "always" if certify_here else None if certify_flag is None else \
        "always" if certify_flag else "never"
    cfg = load_cfg(config_path, study_name, storage, n_trials=n_trials, timeout_s=timeout_s,
                   budget_gpu_minutes=budget_gpu_minutes, search_space=search_space,
                   **{"sampler.name": sampler, "sampler.seed": seed, "certify.when": when,
                      "certify.here": certify_here or None})
    api.run_session(cfg, api.SessionOptions(config_path, tracking_uri, no_mlflow, front_every,
                                            workers, gpus_per_trial, warm_from, confirm_flag,
                                            force_new), began)


@click.command("create-study")
@study_options
@click.option("--tracking-uri", help="MLflow tracking URI the workers log to (a tracking "
              "server, http://HOST:5000, when workers run on several hosts).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--n-trials", type=click.IntRange(min=1),
              help="Trials the study should hold in all.")
@click.option("--force-new", is_flag=True, help=FORCE_NEW_HELP)
def create_study(config_path: Path, study_name: str | None, storage: str | None,
                 tracking_uri: str | None, no_mlflow: bool, n_trials: int | None,
                 force_new: bool) -> None:
    """Create a study and its tables once, before workers join it (`autotune worker`).

    On an existing study it updates the stored config (a larger --n-trials resumes it)."""
    cfg = load_cfg(config_path, study_name, storage, n_trials=n_trials)
    api.create_study(cfg, tracking_uri=tracking_uri, no_mlflow=no_mlflow, force_new=force_new)


@click.command()
@click.option("--storage", required=True, help="The study's Optuna storage URL.")
@click.option("--study-name", required=True, help="The study to join.")
@click.option("--worker-id", help="Name of this worker in the trials (default: host-pid).")
@click.option("--gpus-per-trial", type=click.IntRange(min=0), default=0, show_default=True,
              help="GPUs this worker's servers use (set CUDA_VISIBLE_DEVICES to pick them).")
@click.option("--tracking-uri", help="MLflow tracking URI (default: the study's).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--pool", type=click.IntRange(min=1), default=1, show_default=True,
              help="Workers the study runs at once (a planned study's timeout buys each of "
                   "them its GPUs' minutes).")
@click.option("--repeat", type=click.IntRange(min=0), hidden=True,
              help="Boot trial N's config once more as a certify boot, then exit (the certify "
                   "phase of `autotune study --workers`).")
@click.option("--check-at", type=float, hidden=True, help="Where that certify boot's search "
              "starts (the capacity its boots found).")
@click.option("--barrier", type=click.Path(path_type=Path), hidden=True,
              help="The certify round's folder: measure once all its boots are up.")
@click.option("--round-size", type=click.IntRange(min=1), default=1, hidden=True)
def worker(storage: str, study_name: str, worker_id: str | None, gpus_per_trial: int,
           tracking_uri: str | None, no_mlflow: bool, pool: int, repeat: int | None,
           check_at: float | None, barrier: Path | None, round_size: int) -> None:
    """Join a study and run its trials until it holds its trial count (a study with a budget
    keeps its certify reserve)."""
    api.join_study(storage, study_name, api.WorkerOptions(
        worker_id, gpus_per_trial, tracking_uri, no_mlflow, pool, repeat, check_at, barrier,
        round_size))


@click.command()
@study_options
@click.option("--top", type=click.IntRange(min=1), help="Finalists: the front's best configs "
              "by the first objective (default: confirm.top, 2).")
@click.option("--repeats", type=click.IntRange(min=1), help="More boots of each finalist and "
              "of the baseline, interleaved (default: confirm.repeats, 3).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
              help="Seconds this run may take: no boot starts that the study's longest trial "
                   "says would end after it (the same command resumes).")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
def confirm(config_path: Path, study_name: str | None, storage: str | None, top: int | None,
            repeats: int | None, timeout_s: float | None, tracking_uri: str | None,
            no_mlflow: bool) -> None:
    """The confirm phase: boot the front's top configs and the baseline again, interleaved, on
    the same requests; report each gain with its bootstrap interval and the noise floor, and
    recommend on the lower confidence bound (resumable: the same command goes on)."""
    cfg = load_cfg(config_path, study_name, storage)
    api.confirm_study(cfg, top=top, repeats=repeats, timeout_s=timeout_s,
                      tracking_uri=tracking_uri, no_mlflow=no_mlflow)


COMMANDS = [confirm, study, create_study, worker]
