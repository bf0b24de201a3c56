"""The `autotune` command: each subcommand parses, calls one library function, presents."""

from __future__ import annotations

import json
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from autotune import __version__
from autotune.config import ProfileConfig, ServerConfig, parse_model
from autotune.errors import AutotuneError
from autotune.present import console, metrics_table, out, trial_progress


def _profile_options(f: Any) -> Any:
    opts = [
        click.option("--profile", "profile_name", default="throughput", show_default=True,
                     type=click.Choice(["sharegpt", "random", "throughput", "long-context",
                                        "generation-heavy"]), help="Benchmark workload."),
        click.option("--input-len", type=int, help="Prompt tokens (random profiles)."),
        click.option("--output-len", type=int, help="Output tokens."),
        click.option("--num-prompts", type=int, help="Measured requests."),
        click.option("--max-concurrency", type=int, help="Requests in flight at most."),
        click.option("--request-rate", type=float, help="Requests/s, Poisson (default: inf)."),
        click.option("--warmup", type=int, help="Warm-up requests, not measured."),
        click.option("--seed", type=int, help="Sampling and arrival seed."),
        click.option("--endpoint", type=click.Choice(["completions", "chat"])),
        click.option("--client-processes", help="Load generator processes: a number, or auto "
                     "(one per 128 in-flight requests, at most a quarter of the CPUs)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _profile_from(kw: dict[str, Any], base: dict[str, Any] | None = None) -> ProfileConfig:
    data = dict(base or {})
    if kw.get("profile_name") is not None:
        data["name"] = kw["profile_name"]
    for k in ("input_len", "output_len", "num_prompts", "max_concurrency", "request_rate",
              "warmup", "seed", "endpoint", "client_processes"):
        if kw.get(k) is not None:
            data[k] = kw[k]
    return parse_model(ProfileConfig, data, "profile")  # type: ignore[no-any-return]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autotune")
def cli() -> None:
    """Bayesian multi-objective auto-tuner for `vllm serve` configurations."""


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--model", required=True, help="Model directory or name to serve.")
@click.option("--tokenizer", help="Directory with tokenizer.json (default: the model's).")
@click.option("--vllm", "vllm_cmd", help="Command that runs vLLM's CLI (default: `vllm`).")
@click.option("--boot-timeout", type=float, default=600.0, show_default=True)
@_profile_options
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("mlruns/bench"),
              show_default=True, help="Where logs and results go.")
@click.option("--output", type=click.Path(path_type=Path), help="Write the result JSON here.")
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
def bench(model: str, tokenizer: str | None, vllm_cmd: str | None, boot_timeout: float,
          workdir: Path, output: Path | None, vllm_args: tuple[str, ...], **kw: Any) -> None:
    """Boot one vLLM server, benchmark it, stop it, print the metrics.

    Flags after the options go to `vllm serve` as they are, for example:

        autotune bench --model ./tiny --profile random -- --load-format dummy --enforce-eager
    """
    from autotune.bench import run_bench

    profile = _profile_from(kw)
    data: dict[str, Any] = {"model": model, "tokenizer": tokenizer, "boot_timeout_s": boot_timeout,
                            "extra_args": list(vllm_args)}
    if vllm_cmd:
        data["executable"] = vllm_cmd
    server = parse_model(ServerConfig, data, "bench")
    server.check_executable()
    run_dir = workdir / time.strftime("%Y%m%d-%H%M%S")
    with trial_progress("bench", profile.num_prompts) as tp:
        result = run_bench(server, profile, {}, run_dir, on_phase=tp.phase,
                           on_request=tp.request_done)
    out.print(metrics_table(result.metrics, title=f"autotune bench: {profile.name}"))
    t = result.timings
    console.print(f"boot {t.boot_s:.1f} s, benchmark {t.bench_s:.1f} s, stop {t.stop_s:.1f} s; "
                  f"log {result.log_path}")
    dest = output or run_dir / "result.json"
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    console.print(f"result written to {dest}")


def _study_options(f: Any) -> Any:
    opts = [
        click.option("--config", "config_path", required=True,
                     type=click.Path(path_type=Path), help="Study YAML file."),
        click.option("--study-name", help="Override the study's name."),
        click.option("--storage", help="Optuna storage URL (default: sqlite under mlruns/)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _load_cfg(config_path: Path, study_name: str | None, storage: str | None,
              **more: Any) -> Any:
    from autotune.config import load_study_config

    overrides = {k: v for k, v in {"name": study_name, "storage": storage, **more}.items()
                 if v is not None}
    return load_study_config(config_path, overrides)


def _study_extra(cfg: Any, pre: Any, requests: Any) -> dict[str, str]:
    from autotune.datasets import requests_digest

    return {"vllm_version": pre.vllm.version, "dataset_hash": requests_digest(requests),
            "vllm_executable": " ".join(cfg.server.executable)}


def _make_tracker(cfg: Any, tracking_uri: str | None, no_mlflow: bool) -> Any:
    if no_mlflow:
        return None
    from autotune.tracking import Tracker

    tracker = Tracker(cfg, tracking_uri)
    console.print(f"MLflow: {tracker.uri} (experiment {cfg.name!r}; `autotune ui` shows it)",
                  highlight=False)
    return tracker


@cli.command()
@_study_options
@click.option("--n-trials", type=int, help="Trials the study should hold in all.")
@click.option("--timeout", "timeout_s", type=float,
              help="Seconds this run may take: no trial starts unless it is expected to end "
                   "in time (judged by the longest trial so far).")
@click.option("--sampler", type=click.Choice(["tpe", "nsga2", "gp", "random"]))
@click.option("--search-space", help="Search space name or file.")
@click.option("--seed", type=int, help="Sampler seed.")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--front-every", type=int, default=5, show_default=True,
              help="Refresh the Pareto artifacts in MLflow every N trials.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes on this host, one per GPU group (on CPU: per core group).")
@click.option("--gpus-per-trial", type=click.IntRange(min=0),
              help="GPUs each trial's server gets (default: 1 with GPUs, 0 on CPU); above 1, "
                   "trials run tensor-parallel unless the config sets a parallel size.")
def study(config_path: Path, study_name: str | None, storage: str | None, n_trials: int | None,
          timeout_s: float | None, sampler: str | None, search_space: str | None,
          seed: int | None, tracking_uri: str | None, no_mlflow: bool, front_every: int,
          workers: int, gpus_per_trial: int | None) -> None:
    """Run (or resume) a multi-objective study over vLLM's flags."""
    from autotune.present import StudyView, trials_table
    from autotune.study import completed, open_study, preflight, run_study, trial_rows

    cfg = _load_cfg(config_path, study_name, storage, n_trials=n_trials, timeout_s=timeout_s,
                    search_space=search_space, **{"sampler.name": sampler, "sampler.seed": seed})
    envs = None
    if workers > 1 or gpus_per_trial:
        from autotune.workers import worker_config, worker_envs

        envs = worker_envs(workers, gpus_per_trial)
        gpus_per_trial = sum(1 for _ in envs[0].get("CUDA_VISIBLE_DEVICES", "").split(",") if _)
        cfg = worker_config(cfg, gpus_per_trial)
    console.print(f"study [bold]{cfg.name}[/bold]: checking the search space against vLLM...")
    pre = preflight(cfg)
    done = len(completed(open_study(cfg)))
    console.print(f"vLLM {pre.vllm.version}; space {pre.space.name!r} "
                  f"({len(pre.space.parameters)} parameters); {done} of {cfg.n_trials} trials "
                  f"done; storage {cfg.storage_url()}", highlight=False)
    metrics = [o.metric for o in cfg.objectives]
    tracker = _make_tracker(cfg, tracking_uri, no_mlflow)

    def on_start(st: Any, requests: Any) -> None:
        if tracker is not None:
            tracker.start(st, _study_extra(cfg, pre, requests))

    with StudyView(cfg.n_trials, done, metrics) as view:

        def on_trial(st: Any, trial: Any) -> None:
            view.on_trial(st, trial)
            if tracker is not None:
                if envs is None:  # workers log their own trials
                    tracker.log_trial(st, trial)
                if front_every and trial.number % front_every == front_every - 1:
                    tracker.log_front(st)

        try:
            if envs is None:
                st = run_study(cfg, on_phase=view.on_phase, on_trial=on_trial, pre=pre,
                               on_start=on_start)
            else:
                st = _run_pool(cfg, pre, envs, gpus_per_trial or 0, tracker, view, on_trial,
                               on_start)
        finally:
            if tracker is not None and tracker.parent_id is not None:
                final = open_study(cfg, create=False)
                if envs is not None:  # whatever a worker could not log
                    for t in final.get_trials(deepcopy=False):
                        if t.state.is_finished():
                            tracker.log_trial(final, t)
                tracker.log_front(final)
                tracker.finish()
    out.print(trials_table(trial_rows(st, metrics), metrics, title=f"study {cfg.name}"))
    _print_front(st, cfg)
    held = len(completed(st))
    if cfg.timeout_s and held < cfg.n_trials:
        console.print(f"stopped for --timeout {cfg.timeout_s:g} s: the next trial would have "
                      f"ended after it. {held} of {cfg.n_trials} trials done; the same command "
                      "resumes the study.", highlight=False)
    if tracker is not None and tracker.seconds:
        console.print(f"MLflow: {len(tracker.seconds)} trials logged, "
                      f"{sum(tracker.seconds) / len(tracker.seconds):.2f} s per trial"
                      + (f", {tracker.failures} failures (run `autotune sync`)"
                         if tracker.failures else ""), highlight=False)


def _run_pool(cfg: Any, pre: Any, envs: list[dict[str, str]], gpus_per_trial: int,
              tracker: Any, view: Any, on_trial: Any, on_start: Any) -> Any:
    """`autotune study --workers N`: prepare the study here, run trials in N worker processes."""
    from autotune.bench import build_requests
    from autotune.errors import StudyError
    from autotune.study import prepare_study
    from autotune.workers import Pool, running_text

    st = prepare_study(cfg, pre)
    on_start(st, build_requests(cfg.profile, cfg.server.tokenizer_dir))
    pool = Pool(cfg, envs, gpus_per_trial, tracker.uri if tracker is not None else None,
                cfg.study_dir() / "workers")
    console.print(f"{len(envs)} workers: " + "; ".join(
        f"{i}: {' '.join(f'{k}={v}' for k, v in e.items())}" for i, e in enumerate(envs))
        + f"; logs in {pool.log_dir}", highlight=False)
    with pool:
        try:
            pool.watch(st, on_trial, lambda running: view.progress.update(
                view.task, description=running_text(running)))
        except KeyboardInterrupt:
            console.print("stopping the workers (each stops its server and marks its trial)...")
            raise
    bad = pool.failed()
    if bad:
        w = bad[0]
        raise StudyError(f"worker {w.index} exited with code {w.proc.returncode}; the end of its "
                         f"log ({w.log_path}):\n{w.log_tail()}")
    return st


@cli.command("create-study")
@_study_options
@click.option("--tracking-uri", help="MLflow tracking URI the workers log to (a tracking "
              "server, http://HOST:5000, when workers run on several hosts).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--n-trials", type=int, help="Trials the study should hold in all.")
def create_study(config_path: Path, study_name: str | None, storage: str | None,
                 tracking_uri: str | None, no_mlflow: bool, n_trials: int | None) -> None:
    """Create a study and its tables once, before workers join it (`autotune worker`).

    On an existing study it updates the stored config (a larger --n-trials resumes it)."""
    from autotune.bench import build_requests
    from autotune.study import preflight, prepare_study

    cfg = _load_cfg(config_path, study_name, storage, n_trials=n_trials)
    pre = preflight(cfg)
    st = prepare_study(cfg, pre)
    tracker = _make_tracker(cfg, tracking_uri, no_mlflow)
    if tracker is not None:
        tracker.start(st, _study_extra(cfg, pre, build_requests(cfg.profile,
                                                                cfg.server.tokenizer_dir)))
        st.set_user_attr("tracking_uri", tracker.uri)
    console.print(f"study {cfg.name!r} ready in {cfg.storage_url()} ({cfg.n_trials} trials); "
                  "on each host, start workers with:", highlight=False)
    out.print(f"autotune worker --storage '{cfg.storage_url()}' --study-name '{cfg.name}'",
              highlight=False, soft_wrap=True, markup=False)


@cli.command()
@click.option("--storage", required=True, help="The study's Optuna storage URL.")
@click.option("--study-name", required=True, help="The study to join.")
@click.option("--worker-id", help="Name of this worker in the trials (default: host-pid).")
@click.option("--gpus-per-trial", type=click.IntRange(min=0), default=0, show_default=True,
              help="GPUs this worker's servers use (set CUDA_VISIBLE_DEVICES to pick them).")
@click.option("--tracking-uri", help="MLflow tracking URI (default: the study's).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
def worker(storage: str, study_name: str, worker_id: str | None, gpus_per_trial: int,
           tracking_uri: str | None, no_mlflow: bool) -> None:
    """Join a study and run its trials until it holds its trial count."""
    import os
    import socket

    from autotune.bench import build_requests
    from autotune.config import parse_model
    from autotune.present import StudyView
    from autotune.search_space import SearchSpace
    from autotune.study import completed, preflight, run_trials
    from autotune.workers import load_worker_study, worker_config, worker_identity

    st, cfg, space_data = load_worker_study(storage, study_name)
    cfg = worker_config(cfg, gpus_per_trial)
    space = parse_model(SearchSpace, space_data, f"study {study_name!r}: search_space")
    pre = preflight(cfg, space)
    requests = build_requests(cfg.profile, cfg.server.tokenizer_dir)
    ident = worker_identity(worker_id or f"{socket.gethostname()}-{os.getpid()}")
    uri = tracking_uri or st.user_attrs.get("tracking_uri")
    tracker = _make_tracker(cfg, uri, no_mlflow or uri is None)
    if tracker is not None:
        tracker.start(st, _study_extra(cfg, pre, requests))
    console.print(f"worker {ident['id']} on {ident['host']} (devices {ident['devices'] or '-'}) "
                  f"joined study {cfg.name!r}", highlight=False)
    metrics = [o.metric for o in cfg.objectives]

    def on_trial(s: Any, trial: Any) -> None:
        view.on_trial(s, trial)
        if tracker is not None:
            tracker.log_trial(s, trial)

    with StudyView(cfg.n_trials, len(completed(st)), metrics) as view:
        ran = run_trials(st, cfg, pre, requests, on_phase=view.on_phase, on_trial=on_trial,
                         worker=ident)
    console.print(f"worker {ident['id']}: ran {ran} trials; the study holds "
                  f"{len(completed(st))} of {cfg.n_trials}", highlight=False)


def _print_front(st: Any, cfg: Any) -> None:
    from autotune.present import trials_table
    from autotune.study import feasible_front, trial_rows

    metrics = [o.metric for o in cfg.objectives]
    front = {t.number for t in feasible_front(st)}
    rows = [r for r in trial_rows(st, metrics) if r["number"] in front]
    out.print(trials_table(rows, metrics, title="Pareto front (feasible)"))


@cli.command()
@_study_options
def trials(config_path: Path, study_name: str | None, storage: str | None) -> None:
    """Table of every trial, with deltas against the baseline."""
    from autotune.present import trials_table
    from autotune.study import open_study, trial_rows

    cfg = _load_cfg(config_path, study_name, storage)
    st = open_study(cfg, create=False)
    metrics = [o.metric for o in cfg.objectives]
    out.print(trials_table(trial_rows(st, metrics), metrics, title=f"study {cfg.name}"))


@cli.command()
@_study_options
def pareto(config_path: Path, study_name: str | None, storage: str | None) -> None:
    """Table of the feasible Pareto front."""
    from autotune.study import open_study

    cfg = _load_cfg(config_path, study_name, storage)
    _print_front(open_study(cfg, create=False), cfg)


@cli.command("export")
@_study_options
@click.option("--prefer", type=click.Choice(["throughput", "latency", "knee"]), default="knee",
              show_default=True, help="Which end of the front to take.")
@click.option("--max-tpot-ms", type=float, help="Best throughput with mean TPOT under this.")
@click.option("--trial", "trial_number", type=int, help="Export this trial instead.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Where to write vllm-config.yaml (default: the study's folder).")
@click.option("--validate", is_flag=True, help="Boot the chosen config again and re-measure.")
def export_cmd(config_path: Path, study_name: str | None, storage: str | None, prefer: str,
               max_tpot_ms: float | None, trial_number: int | None, out_dir: Path | None,
               validate: bool) -> None:
    """Print the chosen configuration's `vllm serve` command, config file and bench command."""
    from autotune.errors import StudyError
    from autotune.export import choose, export
    from autotune.study import open_study

    cfg = _load_cfg(config_path, study_name, storage)
    st = open_study(cfg, create=False)
    if trial_number is not None:
        matches = [t for t in st.get_trials(deepcopy=False) if t.number == trial_number]
        if not matches:
            raise StudyError(f"--trial: study {cfg.name!r} has no trial {trial_number}")
        trial = matches[0]
    else:
        trial = choose(st, cfg, prefer, max_tpot_ms)  # type: ignore[arg-type]
    res = export(st, cfg, trial, out_dir or cfg.study_dir() / "export")
    vals = ", ".join(f"{k} {v:,.2f}" for k, v in res["values"].items())
    console.print(f"trial {trial.number} ({vals})", highlight=False)
    console.print(f"vLLM config file: {res['config_path']}", highlight=False)
    console.print("benchmark it with:", highlight=False)
    console.print("  " + res["bench_command"], highlight=False, soft_wrap=True, markup=False)
    console.print("serve it with:", highlight=False)
    out.print(res["serve_command"], highlight=False, soft_wrap=True, markup=False)
    if validate:
        _validate(cfg, trial)


def _validate(cfg: Any, trial: Any) -> None:
    import time

    from autotune.bench import run_bench

    run_dir = cfg.study_dir() / f"validate-{trial.number:04d}-{time.strftime('%H%M%S')}"
    with trial_progress("validate", cfg.profile.num_prompts) as tp:
        res = run_bench(cfg.server, cfg.profile, trial.user_attrs.get("flags", {}), run_dir,
                        on_phase=tp.phase, on_request=tp.request_done)
    now = res.metrics.flat()
    t = Table(title="validation", header_style="bold")
    t.add_column("metric")
    t.add_column("study", justify="right")
    t.add_column("re-run", justify="right")
    t.add_column("change", justify="right")
    for i, o in enumerate(cfg.objectives):
        before, after = trial.values[i], now[o.metric]
        t.add_row(o.metric, f"{before:,.2f}", f"{after:,.2f}",
                  f"{(after - before) / before * 100:+.1f}%" if before else "-")
    out.print(t)


@cli.command()
@_study_options
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
def sync(config_path: Path, study_name: str | None, storage: str | None,
         tracking_uri: str | None) -> None:
    """Backfill MLflow from the Optuna storage (after MLflow was down or read-only)."""
    from autotune.errors import StudyError
    from autotune.study import open_study
    from autotune.tracking import sync as do_sync

    cfg = _load_cfg(config_path, study_name, storage)
    n = do_sync(cfg, open_study(cfg, create=False), tracking_uri)
    if n < 0:
        raise StudyError(f"MLflow sync: {-n} writes failed (see the warnings above)")
    console.print(f"MLflow holds the study's {n} finished trials")


@cli.command()
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("mlruns"),
              show_default=True, help="Folder with mlflow.db.")
@click.option("--port", type=int, default=5000, show_default=True)
@click.option("--tracking-uri", help="Backend store URI (default: sqlite:///WORKDIR/mlflow.db).")
def ui(workdir: Path, port: int, tracking_uri: str | None) -> None:
    """Start the MLflow UI on 127.0.0.1 for the studies under mlruns/ (Ctrl-C stops it)."""
    from autotune.mlflow_ui import MlflowUI

    uri = tracking_uri or f"sqlite:///{workdir.resolve() / 'mlflow.db'}"
    with MlflowUI(uri, port=port, log_path=workdir / "mlflow-ui.log") as server:
        took = server.wait_ready(120)
        console.print(f"MLflow UI ready in {took:.1f} s: {server.url}  (Ctrl-C stops it)",
                      highlight=False)
        server.wait()


@cli.command("make-tiny-model")
@click.argument("out_dir", type=click.Path(path_type=Path))
def make_tiny_model_cmd(out_dir: Path) -> None:
    """Write a tiny Qwen3 config and tokenizer (serve it with --load-format dummy)."""
    from autotune.tinymodel import make_tiny_model

    make_tiny_model(out_dir)
    out.print(str(out_dir))


def _sigterm(_sig: int, _frame: Any) -> None:
    # SIGTERM takes the Ctrl-C path: the running trial's server is stopped, the trial is marked
    # interrupted in the storage, and the same command resumes the study.
    raise KeyboardInterrupt


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """Warnings (MLflow unreachable, a busy load generator) as one line, not file:line source."""
    console.print("[yellow]warning:[/yellow] " + escape(str(message)), highlight=False,
                  soft_wrap=True)


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    warnings.showwarning = _show_warning
    try:
        cli.main(standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        console.print("[red]interrupted[/red]: a running trial's server was stopped and the "
                      "trial marked in the storage; the same command resumes a study")
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except AutotuneError as e:
        console.print("[bold red]error:[/bold red] " + escape(str(e)), highlight=False,
                      soft_wrap=True)
        log = getattr(e, "log_path", None)
        if log:
            console.print(f"server log: {log}", highlight=False, soft_wrap=True)
        sys.exit(1)
