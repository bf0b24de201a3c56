"""One measurement: boot a vLLM server with some flags, run the profile's load, stop it.

This is the whole of a trial minus Optuna: `autotune bench` calls it directly and the study's
objective calls it per trial. Expected failures surface as `ServerError`s and `LoadError`s with
their cause.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.config.study import ServerConfig
from autotune.config.workload import CapacityConfig, ProfileConfig, SLOConfig
from autotune.errors import AutotuneError, LoadError, MeasurementWarning, ServerBootError
from autotune.load import LoadSettings, resolve_processes, run_load
from autotune.load.datasets import Request, build_requests, load_tokenizer, sample_requests
from autotune.load.record import RequestRecord
from autotune.measure.capacity import (
    CURVE_METRICS,
    CapacityResult,
    LoadPoint,
    Samples,
    before_engine,
    client_limit,
    intervals,
    judge,
    point_seed,
    search,
)
from autotune.measure.metrics import (
    BenchMetrics,
    compute_metrics,
    per_request,
    steady_share,
)
from autotune.server.command import serve_argv
from autotune.server.lifecycle import ServerProcess
from autotune.server.process import free_port

Phase = Callable[[str], None]
OnRequest = Callable[[RequestRecord], None]
OnPoint = Callable[[LoadPoint], None]


@dataclass(frozen=True)
class Timings:
    """Seconds spent in each part of a trial."""

    boot_s: float = 0.0
    bench_s: float = 0.0
    stop_s: float = 0.0
    total_s: float = 0.0


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


def server_env(server: ServerConfig, workdir: Path) -> dict[str, str]:
    """The server's environment: ours, the config's, and a VLLM_CACHE_ROOT shared by trials."""
    cache = server.cache_root or str(workdir.parent / "vllm-cache")
    return {**os.environ, **server.env, "VLLM_CACHE_ROOT": cache}


PORT_ATTEMPTS = 3
CLIENT_BUSY = 0.9  # client CPU fraction over which a measurement is suspect
# "Too short to measure" (docs/noise.md says how these were set): a closed-loop benchmark that
# gives each concurrency slot fewer than MIN_PER_SLOT requests is one wave of requests, and one
# that spends less than MIN_STEADY of its time with every slot busy measures its ramp and drain
MIN_PER_SLOT = 1.9
MIN_STEADY = 0.5


def too_short(records: list[RequestRecord], concurrency: int | None, duration_s: float
              ) -> str | None:
    """Why a closed-loop measurement is too short to trust, or None."""
    if not concurrency or not records or duration_s <= 0:
        return None
    per_slot = len(records) / concurrency
    steady = steady_share(records, concurrency, duration_s)
    why, enough = [], math.ceil(MIN_PER_SLOT * concurrency)
    if per_slot < MIN_PER_SLOT:
        why.append(f"{per_slot:.2f} requests per concurrency slot (< {MIN_PER_SLOT:g})")
    if steady < MIN_STEADY:
        why.append(f"all {concurrency} slots busy for only {steady:.0%} of its "
                   f"{duration_s:.1f} s (< {MIN_STEADY:.0%})")
        # the ramp and drain take about as long with more requests, so the steady part must
        # grow by `extra_s`; a closed loop's steady rate is its slots over a request's latency
        extra_s = (MIN_STEADY - steady) * duration_s / (1 - MIN_STEADY)
        took = [r.end_time - r.send_time for r in records if r.end_time is not None]
        latency = statistics.median(took) if took else 0.0
        rate = concurrency / latency if latency > 0 else len(records) / duration_s
        enough = max(enough, math.ceil((len(records) + rate * extra_s) * 1.05))
    if not why:
        return None
    return (f"benchmark too short to measure: {' and '.join(why)}; raise profile.num_prompts "
            f"to at least {enough} (docs/noise.md)")


def samples(records: list[RequestRecord]) -> Samples:
    """Per-request values in ms by metric stem, for the intervals of percentile SLOs."""
    return {k: [v * 1000 for v in vals] for k, vals in per_request(records).items()}


@contextmanager
def booted(server: ServerConfig, params: Mapping[str, Any], workdir: Path, phase: Phase,
           while_booting: Callable[[], None] = lambda: None) -> Iterator[ServerProcess]:
    """A healthy `vllm serve` with the fixed args plus `params`, stopped on the way out.
    `while_booting` runs once the process has started (work to overlap with the boot)."""
    argv = serve_argv(server.executable, server.model, server.serve_flags(dict(params)),
                      server.extra_args)
    phase("booting")
    for attempt in range(PORT_ATTEMPTS):
        proc = ServerProcess(argv, log_path=workdir / "server.log", port=free_port(server.host),
                             host=server.host, env=server_env(server, workdir))
        proc.start()
        try:
            if attempt == 0:
                while_booting()
            proc.wait_healthy(server.boot_timeout_s)
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
        yield proc
    finally:
        proc.stop()


@dataclass(frozen=True)
class Point:
    """One load applied to a running server: its metrics and what the server reported."""

    metrics: BenchMetrics
    records: list[RequestRecord]
    server_stats: dict[str, float]
    settings: LoadSettings


def measure(base_url: str, model: str, profile: ProfileConfig, requests: list[Request], *,
            max_concurrency: int | None = None, request_rate: float | None = None,
            on_request: OnRequest | None = None, alive: Callable[[], bool] | None = None,
            warm: list[Request] | None = None, check_length: bool = True) -> Point:
    """Run `requests` (after the warm-up) against a running server at the profile's load, or at
    the given concurrency / rate; warn when it is too short to measure (`too_short`; a
    capacity search's points have their own rule, `docs/capacity.md`)."""
    conc = profile.max_concurrency if max_concurrency is None else max_concurrency
    settings = LoadSettings(
        max_concurrency=conc,
        request_rate=profile.request_rate if request_rate is None else request_rate,
        seed=profile.seed,
        warmup=profile.warmup,
        endpoint=profile.endpoint,
        ignore_eos=True,
        request_timeout_s=profile.request_timeout_s,
        processes=resolve_processes(profile.client_processes, conc or len(requests)),
    )
    result = run_load(base_url, model, requests, settings, on_done=on_request, alive=alive,
                      warmup_requests=warm, scrape_metrics=True,
                      metrics_interval_s=profile.metrics_interval_s)
    metrics = compute_metrics(result.records, result.duration_s)
    busy = result.server_stats.get("client_cpu_fraction", 0.0)
    if busy > CLIENT_BUSY:
        warnings.warn(f"the load generator used {busy:.0%} of a CPU core: it may have limited "
                      "the server, and its latencies lag (profile.client_processes was "
                      f"{settings.processes}: raise it)", MeasurementWarning, stacklevel=2)
    short = too_short(result.records, None if settings.request_rate not in (None, float("inf"))
                      else conc, result.duration_s) if check_length else None
    if short:
        warnings.warn(short, MeasurementWarning, stacklevel=2)
    return Point(metrics, result.records, result.server_stats, settings)


def measure_profile(proc: ServerProcess, model: str, profile: ProfileConfig,
                    reqs: list[Request], *, label: str = "",
                    on_request: OnRequest | None = None) -> Point:
    """The profile's requests, after its warm-up (the requests past `num_prompts`), on a running
    server. A server that died raises its cause; a run in which every request failed raises
    with the first error."""
    pt = measure(proc.base_url, model, profile, reqs[:profile.num_prompts],
                 on_request=on_request, alive=proc.alive, warm=reqs[profile.num_prompts:])
    proc.check_alive()
    if pt.metrics.completed == 0:
        first = next(iter(pt.metrics.errors), "no request succeeded")
        raise LoadError(f"{label + ': ' if label else ''}every request failed: {first}")
    return pt


def run_bench(
    server: ServerConfig,
    profile: ProfileConfig,
    params: Mapping[str, Any],
    workdir: Path,
    *,
    on_phase: Phase | None = None,
    on_request: OnRequest | None = None,
    requests: list[Request] | None = None,
) -> BenchResult:
    """Boot `vllm serve` with the fixed args plus `params`, run the profile, stop the server."""
    t_start = time.monotonic()
    phase = on_phase or (lambda _p: None)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # Sample the workload while vLLM boots; a bad tokenizer path waits for the server's own
    # verdict, which names the real problem when the model path itself is wrong.
    pending: list[AutotuneError] = []
    have: list[list[Request]] = [requests] if requests is not None else []

    def sample() -> None:
        if not have:
            try:
                have.append(build_requests(profile, server.tokenizer_dir,
                                           server.args.get("max_model_len")))
            except AutotuneError as e:
                pending.append(e)

    with booted(server, params, workdir, phase, sample) as proc:
        assert proc.started_at is not None and proc.healthy_at is not None
        boot_s = proc.healthy_at - proc.started_at
        if pending:
            raise pending[0]
        phase("benchmarking")
        t_bench = time.monotonic()
        point = measure_profile(proc, server.model, profile, have[0], on_request=on_request)
        bench_s = time.monotonic() - t_bench
        phase("stopping")
        t_stop = time.monotonic()
    stop_s = time.monotonic() - t_stop
    i_len, o_len = profile.lengths()
    out = BenchResult(
        argv=proc.argv,
        params=dict(params),
        metrics=point.metrics,
        records=point.records,
        timings=Timings(boot_s, bench_s, stop_s, time.monotonic() - t_start),
        log_path=str(proc.log_path),
        server_stats=point.server_stats,
        workload={
            "profile": profile.name,
            "input_len": i_len,
            "output_len": o_len,
            "num_prompts": profile.num_prompts,
            "max_concurrency": profile.max_concurrency,
            "request_rate": str(profile.request_rate),
            "seed": profile.seed,
            "client_processes": point.settings.processes,
        },
    )
    (workdir / "result.json").write_text(json.dumps(out.to_json(), indent=2, default=str) + "\n")
    write_records(point.records, workdir / "requests.csv")
    return out


@dataclass(frozen=True)
class SuiteRun:
    """Several profiles measured one after another on one booted server."""

    points: dict[str, Point]  # by profile label
    timings: Timings
    argv: list[str]
    log_path: str

    def metrics(self) -> dict[str, float]:
        """Every profile's flat metrics as `<label>/<metric>`."""
        return {f"{k}/{m}": v for k, pt in self.points.items()
                for m, v in (pt.metrics.flat() | pt.server_stats).items()}


def run_suite(server: ServerConfig, profiles: list[ProfileConfig], params: Mapping[str, Any],
              workdir: Path, *, on_phase: Phase | None = None) -> SuiteRun:
    """Boot `vllm serve` with the fixed args plus `params`, run each profile in turn (its own
    warm-up first), stop the server. Per-request records go to requests-<label>.csv."""
    t_start = time.monotonic()
    phase = on_phase or (lambda _p: None)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    limit = server.args.get("max_model_len")
    reqs = {p.key: build_requests(p, server.tokenizer_dir, limit) for p in profiles}
    points: dict[str, Point] = {}
    with booted(server, params, workdir, phase) as proc:
        assert proc.started_at is not None and proc.healthy_at is not None
        boot_s = proc.healthy_at - proc.started_at
        t_bench = time.monotonic()
        for p in profiles:
            phase(f"benchmarking {p.key}")
            pt = measure_profile(proc, server.model, p, reqs[p.key], label=p.key)
            write_records(pt.records, workdir / f"requests-{p.key}.csv")
            points[p.key] = pt
        bench_s = time.monotonic() - t_bench
        phase("stopping")
        t_stop = time.monotonic()
    run = SuiteRun(points, Timings(boot_s, bench_s, time.monotonic() - t_stop,
                                   time.monotonic() - t_start), proc.argv, str(proc.log_path))
    (workdir / "result.json").write_text(json.dumps(
        {"argv": run.argv, "timings": asdict(run.timings), "log_path": run.log_path,
         "metrics": run.metrics()}, indent=2) + "\n")
    return run


@dataclass(frozen=True)
class CapacityRun:
    """A capacity search on one booted server."""

    result: CapacityResult
    timings: Timings
    argv: list[str]
    log_path: str

    def to_json(self) -> dict[str, Any]:
        return {"argv": self.argv, "timings": asdict(self.timings), "log_path": self.log_path,
                "summary": self.result.summary(), **self.result.to_json()}


def capacity_on(base_url: str, model: str, tokenizer_dir: str, profile: ProfileConfig,
                cap: CapacityConfig, slos: list[SLOConfig], workdir: Path, *,
                start: float | None = None, stop_below: float | None = None,
                on_phase: Phase | None = None, on_point: OnPoint | None = None,
                alive: Callable[[], bool] | None = None,
                check: Callable[[], None] = lambda: None) -> CapacityResult:
    """The capacity search against a running server (autotune.measure.capacity). Each point gets its
    own requests, drawn with a seed of the load (the same for every trial at that load) and
    its own warm-up; its per-request records go to points/load-<load>.csv."""
    phase = on_phase or (lambda _p: None)
    tok = load_tokenizer(tokenizer_dir)
    at_point = profile.model_copy(update={"warmup": cap.warmup})
    (workdir / "points").mkdir(parents=True, exist_ok=True)
    told: list[str] = []

    def run_at(load: float, seed: int) -> Point:
        n = cap.requests_at(load)
        # a dataset is drawn at random with the point's seed, so points do not share prompts
        drawn = profile.model_copy(update={"sample": "random"}) if profile.path else profile
        reqs = sample_requests(drawn, tok, n + cap.warmup, seed, tokenizer_dir)
        conc = int(load) if cap.axis == "concurrency" else profile.max_concurrency
        rate = load if cap.axis == "rate" else profile.request_rate
        pt = measure(base_url, model, at_point.model_copy(update={"seed": seed}), reqs[:n],
                     max_concurrency=conc, request_rate=rate, alive=alive, warm=reqs[n:],
                     check_length=False)
        check()  # the server died: its cause, not a failing verdict
        return pt

    def measure_at(load: float) -> LoadPoint:
        phase(f"load {load:g}")
        t0 = time.monotonic()
        seed = point_seed(profile.seed, load)
        runs = [run_at(load, seed)]
        flat = runs[0].metrics.flat()
        bounds = intervals(slos, samples(runs[0].records))
        state, misses, _close = judge(flat, slos, bounds)
        flag = client_limit(flat, len(runs[0].records), load, cap.axis)
        if state == "close" and flag is None:  # a second run with fresh requests decides
            phase(f"load {load:g} (close: again)")
            runs.append(run_at(load, point_seed(seed, load)))
            records = [r for pt in runs for r in pt.records]
            flat = compute_metrics(records, sum(pt.metrics.duration_s for pt in runs)).flat()
            bounds = intervals(slos, samples(records))
            _state, misses, _close = judge(flat, slos, {})  # the pooled value decides
            state = "missed" if misses else "met"
            flag = client_limit(runs[-1].metrics.flat(), len(runs[-1].records), load, cap.axis)
        server = dict(runs[-1].server_stats)
        point = LoadPoint(load, state == "met", tuple(misses),
                          {k: flat[k] for k in CURVE_METRICS}, time.monotonic() - t0, server,
                          {k: list(v) for k, v in bounds.items()}, len(runs), flag)
        write_records([r for pt in runs for r in pt.records],
                      workdir / "points" / f"load-{load:g}.csv")
        note = before_engine(load, flat, point.server, CLIENT_BUSY)
        if note is not None and not told:  # once a search: the cause is the server's
            told.append(note)
            warnings.warn(note, MeasurementWarning, stacklevel=2)
        if on_point is not None:
            on_point(point)
        return point

    result = search(measure_at, axis=cap.axis, low=cap.low, high=cap.high,
                    tolerance=cap.tolerance, start=start or cap.start, stop_below=stop_below)
    (workdir / "capacity.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return result


@dataclass(frozen=True)
class CapacitySuiteRun:
    """A capacity search per profile, one after another, on one booted server."""

    results: dict[str, CapacityResult]  # by profile label
    timings: Timings
    argv: list[str]
    log_path: str

    def metrics(self) -> dict[str, float]:
        """Every profile's capacity summary as `<label>/<metric>`."""
        return {f"{k}/{m}": v for k, r in self.results.items() for m, v in r.summary().items()}

    def to_json(self) -> dict[str, Any]:
        return {"argv": self.argv, "timings": asdict(self.timings), "log_path": self.log_path,
                "profiles": {k: {"summary": r.summary(), **r.to_json()}
                             for k, r in self.results.items()}}


def _labelled(phase: Phase, label: str) -> Phase:
    return lambda x: phase(f"{label}: {x}")


def run_capacities(server: ServerConfig, profiles: list[ProfileConfig], cap: CapacityConfig,
                   slos: list[SLOConfig], params: Mapping[str, Any], workdir: Path, *,
                   starts: Mapping[str, float] | None = None, stop_below: float | None = None,
                   on_phase: Phase | None = None, on_point: OnPoint | None = None
                   ) -> CapacitySuiteRun:
    """Boot `vllm serve` with the fixed args plus `params`, search each profile's capacity in
    turn (from `starts[label]` when given; files under `<workdir>/<label>/` and the suite's
    `result.json` when there are several), stop it."""
    t_start = time.monotonic()
    phase = on_phase or (lambda _p: None)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, CapacityResult] = {}
    with booted(server, params, workdir, phase) as proc:
        assert proc.started_at is not None and proc.healthy_at is not None
        boot_s = proc.healthy_at - proc.started_at
        t_bench = time.monotonic()
        for p in profiles:
            many = len(profiles) > 1
            where = workdir / p.key if many else workdir
            where.mkdir(parents=True, exist_ok=True)
            results[p.key] = capacity_on(
                proc.base_url, server.model, server.tokenizer_dir, p, cap, slos, where,
                start=(starts or {}).get(p.key), stop_below=stop_below,
                on_phase=_labelled(phase, p.key) if many else phase,
                on_point=on_point, alive=proc.alive, check=proc.check_alive)
        bench_s = time.monotonic() - t_bench
        phase("stopping")
        t_stop = time.monotonic()
    run = CapacitySuiteRun(results, Timings(boot_s, bench_s, time.monotonic() - t_stop,
                                            time.monotonic() - t_start),
                           proc.argv, str(proc.log_path))
    if len(profiles) > 1:  # one profile: run_capacity writes its own record
        (workdir / "result.json").write_text(json.dumps(run.to_json(), indent=2) + "\n")
    return run


def run_capacity(server: ServerConfig, profile: ProfileConfig, cap: CapacityConfig,
                 slos: list[SLOConfig], params: Mapping[str, Any], workdir: Path, *,
                 start: float | None = None, stop_below: float | None = None,
                 on_phase: Phase | None = None, on_point: OnPoint | None = None) -> CapacityRun:
    """Boot `vllm serve` with the fixed args plus `params`, search its capacity, stop it."""
    suite = run_capacities(server, [profile], cap, slos, params, workdir,
                           starts=None if start is None else {profile.key: start},
                           stop_below=stop_below, on_phase=on_phase, on_point=on_point)
    run = CapacityRun(suite.results[profile.key], suite.timings, suite.argv, suite.log_path)
    (Path(workdir) / "result.json").write_text(json.dumps(run.to_json(), indent=2) + "\n")
    return run
