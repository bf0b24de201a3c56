"""One measurement: boot a vLLM server with some flags, run the profile's load, stop it.

This is the whole of a trial minus Optuna: `autotune bench` calls it directly and the study's
objective calls it per trial. Expected failures surface as `ServerError`s with their cause.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.command import serve_argv
from autotune.config import ProfileConfig, ServerConfig
from autotune.datasets import Request, load_tokenizer, sample_random, sample_sharegpt
from autotune.errors import AutotuneError, LoadError, ServerBootError
from autotune.load import LoadSettings, run_load
from autotune.metrics import BenchMetrics, RequestRecord, compute_metrics
from autotune.server import ServerProcess, free_port

Phase = Callable[[str], None]


@dataclass(frozen=True)
class Timings:
    """Seconds spent in each part of a trial."""

    boot_s: float = 0.0
    bench_s: float = 0.0
    stop_s: float = 0.0
    total_s: float = 0.0

    @property
    def overhead_s(self) -> float:
        return self.total_s - self.boot_s - self.bench_s - self.stop_s


@dataclass(frozen=True)
class BenchResult:
    argv: list[str]
    params: dict[str, Any]
    metrics: BenchMetrics
    records: list[RequestRecord]
    timings: Timings
    log_path: str
    workload: dict[str, Any] = field(default_factory=dict)
    server_stats: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "params": self.params,
            "workload": self.workload,
            "timings": asdict(self.timings),
            "metrics": self.metrics.flat(),
            "errors": self.metrics.errors,
            "server_stats": self.server_stats,
            "log_path": self.log_path,
        }


def write_records(records: list[RequestRecord], path: Path) -> None:
    """Per-request records as a table (chunk times left out: the ITLs summarise them)."""
    import pandas as pd

    rows = [{k: v for k, v in asdict(r).items() if k != "chunk_times"} | {
        "chunks": len(r.chunk_times),
        "ttft_ms": r.ttft * 1000 if r.success else None,
        "e2el_ms": r.e2el * 1000 if r.success else None,
    } for r in records]
    pd.DataFrame(rows).to_csv(path, index=False)


def build_requests(profile: ProfileConfig, tokenizer_dir: str) -> list[Request]:
    """The measured requests followed by `profile.warmup` distinct warm-up requests."""
    tok = load_tokenizer(tokenizer_dir)
    i, o = profile.lengths()
    n = profile.num_prompts + profile.warmup
    if profile.name == "sharegpt":
        return sample_sharegpt(tok, n, profile.seed, output_len=o)
    assert i is not None and o is not None
    return sample_random(tok, n, i, o, profile.seed)


def server_env(server: ServerConfig, workdir: Path) -> dict[str, str]:
    """The server's environment: ours, the config's, and a VLLM_CACHE_ROOT shared by trials."""
    cache = server.cache_root or str(workdir.parent / "vllm-cache")
    return {**os.environ, **server.env, "VLLM_CACHE_ROOT": cache}


PORT_ATTEMPTS = 3
CLIENT_BUSY = 0.9  # client CPU fraction over which a measurement is suspect


def run_bench(
    server: ServerConfig,
    profile: ProfileConfig,
    params: Mapping[str, Any],
    workdir: Path,
    *,
    on_phase: Phase | None = None,
    on_request: Callable[[RequestRecord], None] | None = None,
    requests: list[Request] | None = None,
) -> BenchResult:
    """Boot `vllm serve` with the fixed args plus `params`, run the profile, stop the server."""
    t_start = time.monotonic()
    phase = on_phase or (lambda _p: None)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    argv = serve_argv(server.executable, server.model, {**server.args, **params}, server.extra_args)
    phase("booting")
    boot_s = bench_s = 0.0
    # Sample the workload while vLLM boots; a bad tokenizer path waits for the server's own
    # verdict, which names the real problem when the model path itself is wrong.
    pending: AutotuneError | None = None
    for attempt in range(PORT_ATTEMPTS):
        proc = ServerProcess(argv, log_path=workdir / "server.log", port=free_port(server.host),
                             host=server.host, env=server_env(server, workdir))
        proc.start()
        try:
            if requests is None and pending is None:
                try:
                    requests = build_requests(profile, server.tokenizer_dir)
                except AutotuneError as e:
                    pending = e
            boot_s = proc.wait_healthy(server.boot_timeout_s)
            break
        except ServerBootError as e:
            proc.stop()
            # the port was free when the kernel gave it, but another process took it before
            # vLLM bound it: boot again on another port
            if "address already in use" in (e.cause or "").lower() and \
                    attempt + 1 < PORT_ATTEMPTS:
                phase("booting (port taken, another port)")
                continue
            raise
        except BaseException:
            proc.stop()
            raise
    try:
        if pending is not None:
            raise pending
        assert requests is not None
        phase("benchmarking")
        i_len, o_len = profile.lengths()
        settings = LoadSettings(
            max_concurrency=profile.max_concurrency,
            request_rate=profile.request_rate,
            seed=profile.seed,
            warmup=profile.warmup,
            endpoint=profile.endpoint,
            ignore_eos=True,
            request_timeout_s=profile.request_timeout_s,
            processes=profile.processes(),
        )
        t_bench = time.monotonic()
        measured, warm = requests[: profile.num_prompts], requests[profile.num_prompts :]
        result = run_load(
            proc.base_url,
            server.model,
            measured,
            settings,
            on_done=on_request,
            alive=lambda: proc.proc is not None and proc.proc.poll() is None,
            warmup_requests=warm,
            scrape_metrics=True,
            metrics_interval_s=profile.metrics_interval_s,
        )
        bench_s = time.monotonic() - t_bench
        proc.check_alive()
        phase("stopping")
        t_stop = time.monotonic()
    finally:
        proc.stop()
    stop_s = time.monotonic() - t_stop
    metrics = compute_metrics(result.records, result.duration_s)
    if result.server_stats.get("client_cpu_fraction", 0.0) > CLIENT_BUSY:
        warnings.warn(f"the load generator used {result.server_stats['client_cpu_fraction']:.0%} "
                      "of a CPU core: it may have limited the server, and its latencies lag "
                      f"(profile.client_processes was {settings.processes}: raise it)",
                      stacklevel=2)
    if metrics.completed == 0:
        first = next(iter(metrics.errors), "no request succeeded")
        raise LoadError(f"every request failed: {first}")
    timings = Timings(boot_s, bench_s, stop_s, time.monotonic() - t_start)
    out = BenchResult(
        argv=proc.argv,
        params=dict(params),
        metrics=metrics,
        records=result.records,
        timings=timings,
        log_path=str(proc.log_path),
        server_stats=result.server_stats,
        workload={
            "profile": profile.name,
            "input_len": i_len,
            "output_len": o_len,
            "num_prompts": profile.num_prompts,
            "max_concurrency": profile.max_concurrency,
            "request_rate": str(profile.request_rate),
            "seed": profile.seed,
            "client_processes": settings.processes,
        },
    )
    (workdir / "result.json").write_text(json.dumps(out.to_json(), indent=2, default=str) + "\n")
    write_records(result.records, workdir / "requests.csv")
    return out
