"""The `autotune` command: each subcommand parses, calls one library function, presents."""

from __future__ import annotations

import json
import signal
import sys
import time
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
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _profile_from(kw: dict[str, Any], base: dict[str, Any] | None = None) -> ProfileConfig:
    data = dict(base or {})
    if kw.get("profile_name") is not None:
        data["name"] = kw["profile_name"]
    for k in ("input_len", "output_len", "num_prompts", "max_concurrency", "request_rate",
              "warmup", "seed", "endpoint"):
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


@cli.command()
@_study_options
@click.option("--n-trials", type=int, help="Trials the study should hold in all.")
@click.option("--timeout", "timeout_s", type=float, help="Stop starting trials after this (s).")
@click.option("--sampler", type=click.Choice(["tpe", "nsga2", "gp", "random"]))
@click.option("--search-space", help="Search space name or file.")
@click.option("--seed", type=int, help="Sampler seed.")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--front-every", type=int, default=5, show_default=True,
              help="Refresh the Pareto artifacts in MLflow every N trials.")
def study(config_path: Path, study_name: str | None, storage: str | None, n_trials: int | None,
          timeout_s: float | None, sampler: str | None, search_space: str | None,
          seed: int | None, tracking_uri: str | None, no_mlflow: bool, front_every: int) -> None:
    """Run (or resume) a multi-objective study over vLLM's flags."""
    from autotune.datasets import requests_digest
    from autotune.present import StudyView, trials_table
    from autotune.study import completed, open_study, preflight, run_study, trial_rows

    cfg = _load_cfg(config_path, study_name, storage, n_trials=n_trials, timeout_s=timeout_s,
                    search_space=search_space, **{"sampler.name": sampler, "sampler.seed": seed})
    console.print(f"study [bold]{cfg.name}[/bold]: checking the search space against vLLM...")
    pre = preflight(cfg)
    done = len(completed(open_study(cfg)))
    console.print(f"vLLM {pre.vllm.version}; space {pre.space.name!r} "
                  f"({len(pre.space.parameters)} parameters); {done} of {cfg.n_trials} trials "
                  f"done; storage {cfg.storage_url()}", highlight=False)
    metrics = [o.metric for o in cfg.objectives]
    tracker = None
    if not no_mlflow:
        from autotune.tracking import Tracker

        tracker = Tracker(cfg, tracking_uri)
        console.print(f"MLflow: {tracker.uri} (experiment {cfg.name!r}; `autotune ui` shows it)",
                      highlight=False)

    def on_start(st: Any, requests: Any) -> None:
        if tracker is not None:
            tracker.start(st, {"vllm_version": pre.vllm.version,
                               "dataset_hash": requests_digest(requests),
                               "vllm_executable": " ".join(cfg.server.executable)})

    with StudyView(cfg.n_trials, done, metrics) as view:

        def on_trial(st: Any, trial: Any) -> None:
            view.on_trial(st, trial)
            if tracker is not None:
                tracker.log_trial(st, trial)
                if front_every and trial.number % front_every == front_every - 1:
                    tracker.log_front(st)

        try:
            st = run_study(cfg, on_phase=view.on_phase, on_trial=on_trial, pre=pre,
                           on_start=on_start)
        finally:
            if tracker is not None and tracker.parent_id is not None:
                tracker.log_front(open_study(cfg, create=False))
                tracker.finish()
    out.print(trials_table(trial_rows(st, metrics), metrics, title=f"study {cfg.name}"))
    _print_front(st, cfg)
    if tracker is not None and tracker.seconds:
        console.print(f"MLflow: {len(tracker.seconds)} trials logged, "
                      f"{sum(tracker.seconds) / len(tracker.seconds):.2f} s per trial"
                      + (f", {tracker.failures} failures (run `autotune sync`)"
                         if tracker.failures else ""), highlight=False)


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


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
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
