"""The `autotune` command: each subcommand parses, calls one library function, presents."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

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


@cli.command("make-tiny-model")
@click.argument("out_dir", type=click.Path(path_type=Path))
def make_tiny_model_cmd(out_dir: Path) -> None:
    """Write a tiny Qwen3 config and tokenizer (serve it with --load-format dummy)."""
    from autotune.tinymodel import make_tiny_model

    make_tiny_model(out_dir)
    out.print(str(out_dir))


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        console.print("[red]aborted[/red]")
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except AutotuneError as e:
        console.print(f"[bold red]error:[/bold red] {e}", highlight=False)
        log = getattr(e, "log_path", None)
        if log:
            console.print(f"server log: {log}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        console.print("[red]interrupted[/red]")
        sys.exit(130)
