"""`autotune bench`: one server, one benchmark, a metrics table and JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from autotune.cli._options import profile_from, profile_options
from autotune.config import ServerConfig
from autotune.present import console, metrics_table, out, trial_progress
from autotune.schema import parse_model


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.option("--model", required=True, help="Model directory or name to serve.")
@click.option("--tokenizer", help="Directory with tokenizer.json (default: the model's).")
@click.option("--vllm", "vllm_cmd", help="Command that runs vLLM's CLI (default: `vllm`).")
@click.option("--boot-timeout", type=float, default=600.0, show_default=True)
@profile_options
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

    profile = profile_from(kw)
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


COMMANDS = [bench]
