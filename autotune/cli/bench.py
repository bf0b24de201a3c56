"""`autotune bench`: one config, one benchmark (or its capacity under SLOs), on a server it
boots or on one already running (`--url`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autotune import api
from autotune.cli._options import (
    capacity_from,
    capacity_given,
    capacity_option_name,
    capacity_options,
    choice,
    profile_from,
    profile_options,
)
from autotune.config.base import parse_model
from autotune.config.capacity import Axis
from autotune.config.study import ServerConfig
from autotune.config.workload import parse_slo


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.option("--model", required=True, help="Model directory or name to serve (with --url: "
              "the model name the running server serves).")
@click.option("--tokenizer", help="Directory with tokenizer.json (default: the model's).")
@click.option("--url", help="Measure this running OpenAI-compatible server instead of booting "
              "one (e.g. http://10.0.0.5:8000).")
@click.option("--server-log", type=click.Path(path_type=Path), help="With --url: the running "
              "server's log (vLLM's output). A load point during which vLLM logged a kernel "
              "compiling is then measured again, as on a server bench boots; without it no "
              "compilation is watched.")
@click.option("--vllm", "vllm_cmd", help="Command that runs vLLM's CLI (default: `vllm`).")
@click.option("--boot-timeout", type=float, default=600.0, show_default=True)
@click.option("--preload/--no-preload", default=False, show_default=True,
              help="Fork the server from a process that imported vLLM's CLI first, as a study "
              "does (server.preload); one boot gains nothing from it.")
@profile_options
@click.option("--capacity-axis", type=choice(Axis), help="Search the capacity under --slo on "
              "this axis instead of measuring one load.")
@capacity_options
@click.option("--slo", "slo_texts", multiple=True, help="A target such as p99_ttft_ms<=2000 "
              "(repeat it); with --capacity-axis, what each load point must meet.")
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("mlruns/bench"),
              show_default=True, help="Where logs and results go.")
@click.option("--output", type=click.Path(path_type=Path), help="Write the result JSON here.")
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
def bench(model: str, tokenizer: str | None, url: str | None, server_log: Path | None,
          vllm_cmd: str | None,
          boot_timeout: float, preload: bool, capacity_axis: str | None,
          slo_texts: tuple[str, ...], workdir: Path, output: Path | None,
          vllm_args: tuple[str, ...], **kw: Any) -> None:
    """Boot one vLLM server (or use --url), benchmark it, stop it, print the metrics.

    Flags after the options go to `vllm serve` as they are, for example:

        autotune bench --model ./tiny --profile random -- --load-format dummy --enforce-eager

    With --capacity-axis and --slo, it searches the most load the server sustains within the
    SLOs (one boot, many load points), as each trial of a capacity study does.
    """
    profile = profile_from(kw)
    slos = [parse_slo(s) for s in slo_texts]
    cap = None
    if capacity_axis is not None:
        cap = capacity_from(capacity_axis, kw)
        try:
            cap.check(profile, slos, where="--capacity-axis")
        except ValueError as e:
            raise api.ConfigError(str(e).replace("slos: [{metric: p99_ttft_ms, max: 2000}]",
                                                 "--slo 'p99_ttft_ms<=2000'")
                                  .replace("slos", "--slo")) from None
    elif given := capacity_given(kw):
        raise api.ConfigError(f"{', '.join(capacity_option_name(k) for k in given)}: these set "
                              "a capacity search; add --capacity-axis concurrency (or rate) "
                              "and --slo")
    elif slos:
        raise api.ConfigError("--slo: the targets judge the load points of a capacity search; "
                              "add --capacity-axis concurrency (or rate), or leave --slo out")
    data: dict[str, Any] = {"model": model, "tokenizer": tokenizer,
                            "boot_timeout_s": boot_timeout, "extra_args": list(vllm_args),
                            "preload": preload}
    if vllm_cmd:
        data["executable"] = vllm_cmd
    api.bench_config(api.BenchOptions(parse_model(ServerConfig, data, "bench"), profile, cap,
                                      slos, url, server_log, workdir, output))


COMMANDS = [bench]
