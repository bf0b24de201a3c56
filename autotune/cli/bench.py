"""`autotune bench`: one config, one benchmark (or its capacity under SLOs), on a server it
boots or on one already running (`--url`)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.table import Table

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
from autotune.config.metric_names import FAILED
from autotune.config.paths import check_file, check_folder
from autotune.config.study import ServerConfig
from autotune.config.workload import SLOConfig
from autotune.errors import ConfigError, LoadError
from autotune.outputs.console import console, metrics_table, out, trial_progress
from autotune.server.health import still_serving

_SLO = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=)\s*([0-9.eE+-]+)\s*$")


def parse_slo(text: str) -> SLOConfig:
    """`p99_ttft_ms<=2000` -> SLOConfig."""
    m = _SLO.match(text)
    if not m:
        raise ConfigError(f"--slo: {text!r} is not METRIC<=VALUE or METRIC>=VALUE "
                          "(e.g. p99_ttft_ms<=2000)")
    bound = "max" if m.group(2) == "<=" else "min"
    return parse_model(SLOConfig, {"metric": m.group(1), bound: float(m.group(3))}, "--slo")


def points_table(points: list[Any], axis: str, slos: Sequence[SLOConfig] = ()) -> Table:
    """The load points by load; what each missed, in short (the SLO's metric): `miss_lines`
    gives the whole text, under the table, so the table fits 100 columns."""
    t = Table(title=f"load points ({axis})", header_style="bold")
    for col in ("load", "verdict", "req/s", "total tok/s", "p99 TTFT ms", "p99 TPOT ms",
                "p99 lag ms", "s", "missed"):
        t.add_column(col, justify="left" if col in ("verdict", "missed") else "right",
                     no_wrap=col == "verdict")
    target = {s.metric: s.max for s in slos if s.max is not None}
    for p in sorted(points, key=lambda p: p.load):
        m = p.metrics
        verdict = ("[yellow]client limit[/yellow]" if p.flag else
                   "[green]met[/green]" if p.passed else "[red]missed[/red]")
        if p.runs > 1:
            verdict += f" ({p.runs} runs)"
        if p.settled_s is not None:  # stopped once its requests settled the miss
            verdict += f" at {p.settled_s:.0f} s"
        what = ["failed requests" if x == FAILED else
                x.removesuffix("_ms").replace("_", " ") for x in p.missed]
        # a settled miss's metric: the requests still out are the slow ones, so the finished
        # requests' p99 reads low; the cell says what was settled instead ("> 2,000")
        settled = set(p.missed) if p.settled_s is not None else set()
        t.add_row(f"{p.load:g}", verdict,
                  f"{m['request_throughput']:,.2f}", f"{m['total_token_throughput']:,.0f}",
                  *(f"> {target[k]:,.0f}" if k in settled and k in target else f"{m[k]:,.1f}"
                    for k in ("p99_ttft_ms", "p99_tpot_ms")),
                  f"{m.get('p99_send_lag_ms', 0.0):,.1f}", f"{p.seconds:.1f}",
                  ", ".join([*what, *(["client"] if p.flag else [])]))
    return t


def miss_lines(points: list[Any]) -> list[str]:
    """What each point missed, whole: the SLO, the value and its interval, or the client's
    limit."""
    return [f"  {p.load:g}: " + "; ".join([*p.misses, *([p.flag] if p.flag else [])])
            for p in sorted(points, key=lambda p: p.load) if p.misses or p.flag]


def check_server(url: str, model: str) -> None:
    """A `--url` answers before any load is sent, and serves `--model` when it lists its models
    (vLLM's /v1/models): a dead address or a wrong model name is one error, not a table of
    failed requests."""
    import httpx

    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"--url: {url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)")
    try:
        r = httpx.get(url.rstrip("/") + "/v1/models", timeout=10)
    except httpx.HTTPError as e:
        raise ConfigError(f"--url: no server answered at {url} ({type(e).__name__}: {e}); "
                          "start the server, or fix --url") from None
    try:
        served = [m["id"] for m in r.json()["data"]] if r.status_code == 200 else []
    except (ValueError, KeyError, TypeError):
        served = []
    if served and model not in served:
        raise ConfigError(f"--model: the server at {url} does not serve {model!r}; it serves "
                          f"{', '.join(served)} (pass that name as --model, and the model's "
                          "folder as --tokenizer)")


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
    from autotune.measure import on_server
    from autotune.measure import runner as lib
    from autotune.measure.capacity import capacity_sentence, capacity_words

    profile = profile_from(kw)
    slos = [parse_slo(s) for s in slo_texts]
    cap = None
    if capacity_axis is not None:
        cap = capacity_from(capacity_axis, kw)
        try:
            cap.check(profile, slos, where="--capacity-axis")
        except ValueError as e:
            raise ConfigError(str(e).replace("slos: [{metric: p99_ttft_ms, max: 2000}]",
                                             "--slo 'p99_ttft_ms<=2000'")
                              .replace("slos", "--slo")) from None
    elif given := capacity_given(kw):
        raise ConfigError(f"{', '.join(capacity_option_name(k) for k in given)}: these set "
                          "a capacity search; add --capacity-axis concurrency (or rate) and "
                          "--slo")
    elif slos:
        raise ConfigError("--slo: the targets judge the load points of a capacity search; add "
                          "--capacity-axis concurrency (or rate), or leave --slo out")
    check_folder(workdir, "--workdir")
    if output is not None:
        check_file(output, "--output")
    data2: dict[str, Any] = {"model": model, "tokenizer": tokenizer,
                             "boot_timeout_s": boot_timeout, "extra_args": list(vllm_args),
                             "preload": preload}
    if vllm_cmd:
        data2["executable"] = vllm_cmd
    server = parse_model(ServerConfig, data2, "bench")
    if server_log is not None and url is None:
        raise ConfigError("--server-log: a server bench boots is read from its own log; it is "
                          "for a running server (--url): add --url, or leave --server-log out")
    if server_log is not None and not server_log.is_file():
        raise ConfigError(f"--server-log: {str(server_log)!r} is not a file; give the running "
                          "server's log (e.g. `vllm serve ... > server.log 2>&1`)")
    if url is None:
        server.check_executable()
    elif vllm_args:
        raise ConfigError("--url: the server is already running; vLLM flags after -- cannot "
                          "apply to it")
    if profile.name == "dataset":  # read it whole before any boot: a bad line is an error
        from autotune.load.datasets import load_dataset, load_tokenizer

        ds = load_dataset(profile, load_tokenizer(server.tokenizer_dir), server.tokenizer_dir)
        console.print(ds.note(str(profile.path)), highlight=False)
    if profile.name == "trace":  # so is a trace
        from autotune.load.datasets import load_tokenizer, load_trace

        console.print(load_trace(profile, load_tokenizer(server.tokenizer_dir),
                                 server.tokenizer_dir).note(), highlight=False, soft_wrap=True)
    if url is not None:  # after the checks that need no network
        check_server(url, model)
    run_dir = workdir / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    if url is not None and server_log is None:
        console.print("kernel compilations are not watched (no --server-log): a load that "
                      "overlaps one is kept as measured", highlight=False)
    if cap is not None:
        with trial_progress("capacity", 0) as tp:
            if url is None:
                run = lib.run_boot(server, [profile], {}, run_dir, capacity=cap, slos=slos,
                                   on_phase=tp.phase)
                result, doc = run.capacity, run.to_json()
            else:
                serving = still_serving(url, advice="read its log, restart it, and search again "
                                        f"(the points measured before: {run_dir / 'points'})")
                result = on_server.capacity_on(url, model, server.tokenizer_dir, profile, cap, slos,
                                         run_dir, on_phase=tp.phase, check=serving,
                                         log_path=server_log)
                doc = {"url": url, "summary": result.summary(), **result.to_json()}
        out.print(points_table(list(result.points), cap.axis, slos))
        for line in miss_lines(list(result.points)):
            out.print(line, highlight=False, soft_wrap=True)
        slo_text = ", ".join(s.text() for s in slos)
        line = capacity_sentence(cap.axis, result.capacity, slo_text) if cap.axis == "speedup" \
            else f"capacity: {capacity_words(cap.axis, result.capacity)} within {slo_text}"
        if result.at is not None:
            line += (f" ({result.at.metrics['request_throughput']:,.2f} req/s, "
                     f"{result.at.metrics['total_token_throughput']:,.0f} tok/s)")
        if result.stopped:
            line += f"; {result.stopped}"
        out.print(line, highlight=False)
    else:
        with trial_progress("bench", profile.num_prompts) as tp:
            if url is None:
                res = lib.run_boot(server, [profile], {}, run_dir, on_phase=tp.phase,
                                   on_request=tp.request_done)
                metrics, doc = res.point.metrics, res.to_json()
                t = res.timings
                console.print(f"boot {t.boot_s:.1f} s, benchmark {t.bench_s:.1f} s, stop "
                              f"{t.stop_s:.1f} s; log {res.log_path}")
            else:
                from autotune.load.datasets import build_requests

                tp.phase("benchmarking")
                reqs = build_requests(profile, server.tokenizer_dir,
                                      server.args.get("max_model_len"))
                pt = on_server.watched(url, server_log, model, profile, reqs,
                                       fix="a larger --warmup", on_request=tp.request_done)
                on_server.write_records(pt.records, run_dir / "requests.csv")
                metrics = pt.metrics
                if metrics.completed == 0:
                    raise LoadError(f"every request to {url} failed: "
                                    f"{metrics.root_error or 'no request succeeded'}")
                doc = {"url": url, "metrics": metrics.flat(), "errors": metrics.errors,
                       "server_stats": pt.server_stats}
        out.print(metrics_table(metrics, title=f"autotune bench: {profile.name}"))
    log = server_log if url is not None else doc.get("log_path")
    if log and (note := untuned_note(Path(log))):
        out.print(note, highlight=False, soft_wrap=True, markup=False)
    dest = output or run_dir / "result.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    console.print(f"result written to {dest}")


def untuned_note(log: Path) -> str | None:
    """One line when the server's log says vLLM's fused-MoE kernel ran without a tuned config
    for this GPU (autotune.server.jit.untuned_moe): a knob outside vLLM's flags."""
    from autotune.server.jit import untuned_moe

    try:
        names = untuned_moe(log.read_text(errors="replace"))
    except OSError:
        return None
    if not names:
        return None
    return (f"vLLM ran its fused-MoE kernel on default tile sizes: no tuned config "
            f"{', '.join(names)} for this GPU. One tuned for it (vLLM's "
            "benchmarks/kernels/benchmark_moe.py --tune, then serve with "
            "VLLM_TUNED_CONFIG_FOLDER=<its folder>) may serve faster; autotune does not tune it")


COMMANDS = [bench]
