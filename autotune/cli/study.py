"""`autotune study`, `autotune create-study`, `autotune worker`: run a study here, or prepare one
that workers on several hosts share."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import click
import optuna
from optuna.trial import FrozenTrial
from rich.table import Table

from autotune.cli._options import (
    load_cfg,
    make_tracker,
    sampler_option,
    study_extra,
    study_options,
)
from autotune.config import StudyConfig
from autotune.errors import ConfigError
from autotune.present import StudyView, console, out, trials_table
from autotune.results import front, records


def print_tables(st: optuna.Study, cfg: StudyConfig) -> None:
    """Every trial, then the feasible Pareto front."""
    metrics = cfg.metric_names()
    out.print(trials_table(records(st), metrics, title=f"study {cfg.name}",
                           extra=cfg.profile_metrics()))
    out.print(trials_table(front(st), metrics, title="Pareto front (feasible)",
                           extra=cfg.profile_metrics()))


@click.command()
@study_options
@click.option("--n-trials", type=int, help="Trials the study should hold in all.")
@click.option("--timeout", "timeout_s", type=float,
              help="Seconds this run may take: no trial starts unless it is expected to end "
                   "in time (judged by the longest trial so far).")
@sampler_option
@click.option("--search-space", help="Search space name or file.")
@click.option("--seed", type=int, help="Sampler seed.")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--front-every", type=int, default=5, show_default=True,
              help="Refresh the Pareto artifacts in MLflow every N trials.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes on this host, one per GPU group (on CPU: per core group).")
@click.option("--warm-start", "warm_from", metavar="STUDY",
              help="Enqueue another study's Pareto configs first (NAME in this storage, or "
                   "NAME@STORAGE-URL), each re-checked against this space and this vLLM.")
@click.option("--gpus-per-trial", type=click.IntRange(min=0),
              help="GPUs each trial's server gets (default: 1 with GPUs, 0 on CPU); above 1, "
                   "trials run tensor-parallel unless the config sets a parallel size.")
def study(config_path: Path, study_name: str | None, storage: str | None, n_trials: int | None,
          timeout_s: float | None, sampler: str | None, search_space: str | None,
          seed: int | None, tracking_uri: str | None, no_mlflow: bool, front_every: int,
          workers: int, gpus_per_trial: int | None, warm_from: str | None) -> None:
    """Run (or resume) a multi-objective study over vLLM's flags."""
    from autotune.preflight import preflight
    from autotune.search_space import load_search_space
    from autotune.study import completed, open_study, prepare_study, run_study, warm_start
    from autotune.workers import run_pool, running_text, worker_config, worker_envs

    cfg = load_cfg(config_path, study_name, storage, n_trials=n_trials, timeout_s=timeout_s,
                   search_space=search_space, **{"sampler.name": sampler, "sampler.seed": seed})
    envs = None
    if workers > 1 and cfg.profiles:
        raise ConfigError("--workers: a suite scores every trial against the baseline trial, "
                          "so its trials run one at a time for now (drop --workers)")
    if workers > 1 or gpus_per_trial:
        envs = worker_envs(workers, gpus_per_trial)
        gpus_per_trial = sum(1 for g in envs[0].get("CUDA_VISIBLE_DEVICES", "").split(",") if g)
        cfg = worker_config(cfg, gpus_per_trial,
                            load_search_space(cfg.search_space).flag_names())
    console.print(f"study [bold]{cfg.name}[/bold]: checking the search space against vLLM...")
    pre = preflight(cfg)
    if pre.dataset:
        console.print(pre.dataset, highlight=False)
    if warm_from:
        n, skipped = warm_start(prepare_study(cfg, pre), cfg, pre, warm_from)
        console.print(f"--warm-start {warm_from}: {n} Pareto config(s) enqueued"
                      + (f", {len(skipped)} skipped" if skipped else ""), highlight=False)
        for why in skipped:
            console.print(f"  skipped: {why}", highlight=False)
    done = len(completed(open_study(cfg)))
    console.print(f"vLLM {pre.vllm.version}; space {pre.space.name!r} "
                  f"({len(pre.space.parameters)} parameters); {done} of {cfg.n_trials} trials "
                  f"done; storage {cfg.storage_url()}", highlight=False)
    tracker = make_tracker(cfg, tracking_uri, no_mlflow)

    def on_start(st: optuna.Study, requests: list[Any]) -> None:
        if tracker is not None:
            tracker.start(st, study_extra(cfg, pre, requests))

    with StudyView(cfg.n_trials, done, cfg.metric_names()) as view:

        def on_trial(st: optuna.Study, trial: FrozenTrial) -> None:
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
                st = run_pool(
                    cfg, pre, envs, gpus_per_trial or 0,
                    tracker.uri if tracker is not None else None, on_start=on_start,
                    on_trial=on_trial,
                    on_running=lambda running: view.on_running(running_text(running)),
                    on_pool=lambda pool: console.print(
                        f"{len(envs)} workers: " + "; ".join(
                            f"{i}: {' '.join(f'{k}={v}' for k, v in e.items())}"
                            for i, e in enumerate(envs)) + f"; logs in {pool.log_dir}",
                        highlight=False))
        finally:
            if tracker is not None and tracker.parent_id is not None:
                final = open_study(cfg, create=False)
                if envs is not None:  # whatever a worker could not log
                    for t in final.get_trials(deepcopy=False):
                        if t.state.is_finished():
                            tracker.log_trial(final, t)
                tracker.log_front(final)
                tracker.finish()
    print_tables(st, cfg)
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


@click.command("create-study")
@study_options
@click.option("--tracking-uri", help="MLflow tracking URI the workers log to (a tracking "
              "server, http://HOST:5000, when workers run on several hosts).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
@click.option("--n-trials", type=int, help="Trials the study should hold in all.")
def create_study(config_path: Path, study_name: str | None, storage: str | None,
                 tracking_uri: str | None, no_mlflow: bool, n_trials: int | None) -> None:
    """Create a study and its tables once, before workers join it (`autotune worker`).

    On an existing study it updates the stored config (a larger --n-trials resumes it)."""
    from autotune.datasets import build_requests
    from autotune.preflight import preflight
    from autotune.study import prepare_study

    cfg = load_cfg(config_path, study_name, storage, n_trials=n_trials)
    pre = preflight(cfg)
    st = prepare_study(cfg, pre)
    tracker = make_tracker(cfg, tracking_uri, no_mlflow)
    if tracker is not None:
        tracker.start(st, study_extra(cfg, pre, build_requests(
            cfg.profile, cfg.server.tokenizer_dir, cfg.server.args.get("max_model_len"))))
        st.set_user_attr("tracking_uri", tracker.uri)
    console.print(f"study {cfg.name!r} ready in {cfg.storage_url()} ({cfg.n_trials} trials); "
                  "on each host, start workers with:", highlight=False)
    out.print(f"autotune worker --storage '{cfg.storage_url()}' --study-name '{cfg.name}'",
              highlight=False, soft_wrap=True, markup=False)


@click.command()
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
    from autotune.datasets import build_requests
    from autotune.preflight import preflight
    from autotune.schema import parse_model
    from autotune.search_space import SearchSpace
    from autotune.study import completed, run_trials
    from autotune.workers import load_worker_study, worker_config, worker_identity

    st, cfg, space_data = load_worker_study(storage, study_name)
    space = parse_model(SearchSpace, space_data, f"study {study_name!r}: search_space")
    cfg = worker_config(cfg, gpus_per_trial, space.flag_names())
    pre = preflight(cfg, space)
    requests = build_requests(cfg.profile, cfg.server.tokenizer_dir,
                              cfg.server.args.get("max_model_len"))
    ident = worker_identity(worker_id or f"{socket.gethostname()}-{os.getpid()}")
    uri = tracking_uri or st.user_attrs.get("tracking_uri")
    tracker = make_tracker(cfg, uri, no_mlflow or uri is None)
    if tracker is not None:
        tracker.start(st, study_extra(cfg, pre, requests))
    console.print(f"worker {ident['id']} on {ident['host']} (devices {ident['devices'] or '-'}) "
                  f"joined study {cfg.name!r}", highlight=False)

    with StudyView(cfg.n_trials, len(completed(st)), cfg.metric_names()) as view:

        def on_trial(s: optuna.Study, trial: FrozenTrial) -> None:
            view.on_trial(s, trial)
            if tracker is not None:
                tracker.log_trial(s, trial)

        ran = run_trials(st, cfg, pre, requests, on_phase=view.on_phase, on_trial=on_trial,
                         worker=ident)
    console.print(f"worker {ident['id']}: ran {ran} trials; the study holds "
                  f"{len(completed(st))} of {cfg.n_trials}", highlight=False)


@click.command()
@study_options
@click.option("--top", type=click.IntRange(min=1), default=2, show_default=True,
              help="Finalists: the front's best configs by the first objective.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="More boots of each finalist and of the baseline, interleaved.")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
@click.option("--no-mlflow", is_flag=True, help="Do not log to MLflow.")
def confirm(config_path: Path, study_name: str | None, storage: str | None, top: int,
            repeats: int, tracking_uri: str | None, no_mlflow: bool) -> None:
    """The confirm phase: boot the front's top configs and the baseline again, interleaved, on
    the same requests; report each gain with its bootstrap interval and the noise floor, and
    recommend on the lower confidence bound (resumable: the same command goes on)."""
    import json

    from autotune.datasets import build_requests
    from autotune.preflight import preflight
    from autotune.results import baseline
    from autotune.stats import gain_ci, median_ci, pick, rel_sd
    from autotune.study import confirm_plan, confirm_samples, open_study, run_repeats

    cfg = load_cfg(config_path, study_name, storage)
    st = open_study(cfg, create=False)
    recs = records(st)
    base = baseline(recs)
    if base is None or not base.measured:
        raise ConfigError("confirm: the study has no measured baseline trial to compare with")
    metric = cfg.metric_names()[0]
    maximize = cfg.objectives[0].direction == "maximize"
    seen: set[str] = {str(base.facts.flags_key)}
    finalists = []
    for r in sorted(front(st), key=lambda r: r.values.get(metric, 0.0), reverse=maximize):
        if r.facts.repeat_of is None and str(r.facts.flags_key) not in seen:
            seen.add(str(r.facts.flags_key))
            finalists.append(r.number)
    finalists = finalists[:top]
    if not finalists:
        raise ConfigError("confirm: the front holds no config other than the baseline")
    plan = confirm_plan(st, [base.number, *finalists], repeats)
    console.print(f"confirm: baseline (trial {base.number}) and finalists "
                  f"{', '.join(map(str, finalists))}, {repeats} more boots each, interleaved; "
                  f"{len(plan)} to run", highlight=False)
    if plan:
        pre = preflight(cfg)
        requests = build_requests(cfg.profile, cfg.server.tokenizer_dir,
                                  cfg.server.args.get("max_model_len"))
        tracker = make_tracker(cfg, tracking_uri, no_mlflow)
        if tracker is not None:
            tracker.start(st, study_extra(cfg, pre, requests))
        with StudyView(len(plan), 0, cfg.metric_names()) as view:
            def on_trial(s: optuna.Study, trial: FrozenTrial) -> None:
                view.on_trial(s, trial)
                if tracker is not None:
                    tracker.log_trial(s, trial)

            try:
                run_repeats(st, cfg, pre, requests, plan, on_phase=view.on_phase,
                            on_trial=on_trial)
            finally:
                if tracker is not None and tracker.parent_id is not None:
                    tracker.log_front(open_study(cfg, create=False))
                    tracker.finish()
    samples = confirm_samples(st, metric)
    base_s = samples.get(base.number, [])
    floor = rel_sd(base_s)
    t = Table(title=f"confirm: {metric} (noise floor {floor:.1%}, the baseline's relative sd)",
              header_style="bold")
    for col in ("trial", "boots", "median [95% CI]", "gain vs defaults"):
        t.add_column(col, justify="right")
    result: dict[str, Any] = {"metric": metric, "noise_floor": floor, "repeats": repeats,
                              "configs": {}}
    for num in [base.number, *finalists]:
        vals = samples.get(num, [])
        if not vals:
            continue
        med, lo, hi = median_ci(vals)
        g = gain_ci(vals, base_s) if num != base.number else None
        t.add_row(str(num) + (" (base)" if num == base.number else ""), str(len(vals)),
                  f"{med:,.2f} [{lo:,.2f}, {hi:,.2f}]", "" if g is None else g.text())
        result["configs"][str(num)] = {"values": vals, "median": med, "ci_low": lo, "ci_high": hi,
                                       **({} if g is None else {"gain": g.gain,
                                                                 "gain_low": g.low,
                                                                 "gain_high": g.high,
                                                                 "significant": g.significant})}
    out.print(t)
    cands = {str(k): samples[k] for k in finalists if len(samples.get(k, [])) > 1}
    if cands:
        best = pick(cands, "lower_bound", maximize)
        point = pick(cands, "point", maximize)
        result.update(recommended=int(best), by_point_estimate=int(point))
        out.print(f"recommended (best lower confidence bound): trial {best}"
                  + ("" if best == point else f"; the point estimate would pick {point}"),
                  highlight=False)
    path = cfg.study_dir() / "confirm.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"written to {path}", highlight=False)


COMMANDS = [confirm, study, create_study, worker]
