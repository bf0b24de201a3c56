"""One config, one benchmark, as `autotune bench` runs it (`bench_config`): a server booted for
it (or one already running, at `url`), one profile's load or a capacity search under SLOs, the
result printed and written as JSON. What it runs is the measurement every trial runs
(autotune.measure.runner, autotune.measure.on_server)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.config.capacity import CapacityConfig
from autotune.config.paths import check_file, check_folder
from autotune.config.study import ServerConfig
from autotune.config.workload import ProfileConfig, SLOConfig
from autotune.errors import ConfigError, LoadError
from autotune.load.datasets import build_requests, load_dataset, load_tokenizer, load_trace
from autotune.measure import on_server
from autotune.measure.capacity import capacity_sentence, capacity_words
from autotune.measure.runner import run_boot
from autotune.outputs.console import TrialProgress, console, metrics_table, out, trial_progress
from autotune.outputs.points import miss_lines, points_table
from autotune.server.health import still_serving
from autotune.server.jit import untuned_moe


@dataclass(frozen=True)
class BenchOptions:
    """What `autotune bench` measures: a server (booted from `server`, or running at `url`,
    its log at `server_log`), one `profile`, and with `capacity` the most load within `slos`;
    its files under `workdir`, the result JSON at `output` (default: the run's folder)."""

    server: ServerConfig
    profile: ProfileConfig
    capacity: CapacityConfig | None = None
    slos: list[SLOConfig] = field(default_factory=list)
    url: str | None = None
    server_log: Path | None = None
    workdir: Path = Path("mlruns/bench")
    output: Path | None = None

    def check(self) -> None:
        """One error for what cannot go together, before anything reads a file or a server."""
        check_folder(self.workdir, "--workdir")
        if self.output is not None:
            check_file(self.output, "--output")
        if self.server_log is not None and self.url is None:
            raise ConfigError("--server-log: a server bench boots is read from its own log; it "
                              "is for a running server (--url): add --url, or leave "
                              "--server-log out")
        if self.server_log is not None and not self.server_log.is_file():
            raise ConfigError(f"--server-log: {str(self.server_log)!r} is not a file; give the "
                              "running server's log (e.g. `vllm serve ... > server.log 2>&1`)")
        if self.url is None:
            self.server.check_executable()
        elif self.server.extra_args:
            raise ConfigError("--url: the server is already running; vLLM flags after -- cannot "
                              "apply to it")


def bench_config(opts: BenchOptions) -> dict[str, Any]:
    """`autotune bench`: check the options, read a dataset or a trace whole (a bad line is an
    error before any boot), measure, print the table, and write the result JSON; returns it."""
    opts.check()
    server, profile, url = opts.server, opts.profile, opts.url
    if profile.name == "dataset":
        ds = load_dataset(profile, load_tokenizer(server.tokenizer_dir), server.tokenizer_dir)
        console.print(ds.note(str(profile.path)), highlight=False)
    if profile.name == "trace":
        console.print(load_trace(profile, load_tokenizer(server.tokenizer_dir),
                                 server.tokenizer_dir).note(), highlight=False, soft_wrap=True)
    if url is not None:  # after the checks that need no network
        check_server(url, server.model)
    run_dir = opts.workdir / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    if url is not None and opts.server_log is None:
        console.print("kernel compilations are not watched (no --server-log): a load that "
                      "overlaps one is kept as measured", highlight=False)
    doc = capacity_run(opts, run_dir) if opts.capacity is not None else load_run(opts, run_dir)
    log = opts.server_log if url is not None else doc.get("log_path")
    if log and (note := untuned_note(Path(log))):
        out.print(note, highlight=False, soft_wrap=True, markup=False)
    dest = opts.output or run_dir / "result.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    console.print(f"result written to {dest}")
    return doc


def capacity_run(opts: BenchOptions, run_dir: Path) -> dict[str, Any]:
    """The capacity search, on a booted server or the one at `url`; its points and the
    capacity printed."""
    cap, slos, server = opts.capacity, opts.slos, opts.server
    assert cap is not None
    with trial_progress("capacity", 0) as tp:
        if opts.url is None:
            run = run_boot(server, [opts.profile], {}, run_dir, capacity=cap, slos=slos,
                           on_phase=tp.phase)
            result, doc = run.capacity, run.to_json()
        else:
            serving = still_serving(opts.url, advice="read its log, restart it, and search "
                                    f"again (the points measured before: {run_dir / 'points'})")
            result = on_server.capacity_on(opts.url, server.model, server.tokenizer_dir,
                                           opts.profile, cap, slos, run_dir, on_phase=tp.phase,
                                           check=serving, log_path=opts.server_log)
            doc = {"url": opts.url, "summary": result.summary(), **result.to_json()}
    assert result is not None
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
    return doc


def load_run(opts: BenchOptions, run_dir: Path) -> dict[str, Any]:
    """One profile's load, on a booted server or the one at `url`; its metrics printed."""
    server, profile = opts.server, opts.profile
    with trial_progress("bench", profile.num_prompts) as tp:
        if opts.url is None:
            res = run_boot(server, [profile], {}, run_dir, on_phase=tp.phase,
                           on_request=tp.request_done)
            metrics, doc = res.point.metrics, res.to_json()
            t = res.timings
            console.print(f"boot {t.boot_s:.1f} s, benchmark {t.bench_s:.1f} s, stop "
                          f"{t.stop_s:.1f} s; log {res.log_path}")
        else:
            metrics, doc = url_load(opts, opts.url, run_dir, tp)
    out.print(metrics_table(metrics, title=f"autotune bench: {profile.name}"))
    return doc


def url_load(opts: BenchOptions, url: str, run_dir: Path, tp: TrialProgress
             ) -> tuple[Any, dict[str, Any]]:
    """One profile's load on the server at `url`: its metrics and the result's document."""
    server, profile = opts.server, opts.profile
    tp.phase("benchmarking")
    reqs = build_requests(profile, server.tokenizer_dir, server.args.get("max_model_len"))
    pt = on_server.watched(url, opts.server_log, server.model, profile, reqs,
                           fix="a larger --warmup", on_request=tp.request_done)
    on_server.write_records(pt.records, run_dir / "requests.csv")
    metrics = pt.metrics
    if metrics.completed == 0:
        raise LoadError(f"every request to {url} failed: "
                        f"{metrics.root_error or 'no request succeeded'}")
    return metrics, {"url": url, "metrics": metrics.flat(), "errors": metrics.errors,
                     "server_stats": pt.server_stats}


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


def untuned_note(log: Path) -> str | None:
    """One line when the server's log says vLLM's fused-MoE kernel ran without a tuned config
    for this GPU (autotune.server.jit.untuned_moe): a knob outside vLLM's flags."""
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
