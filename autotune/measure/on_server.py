"""What is measured on a server that is already up: one load point (a profile's requests at its
concurrency or rate), or a capacity search (autotune.measure.capacity) that runs a point per load.

`runner.run_boot` calls these between a boot and a stop; `autotune bench --url` calls them against
a server someone else started. Expected failures surface as `LoadError`s with their cause.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autotune.config.workload import CapacityConfig, ProfileConfig, SLOConfig
from autotune.errors import LoadError, MeasurementWarning
from autotune.load import (
    SETTLED_REASON,
    LoadSettings,
    more_processes,
    resolve_processes,
    run_load,
)
from autotune.load.datasets import load_tokenizer, sample_requests
from autotune.load.placement import client_cpus
from autotune.load.record import Request, RequestRecord
from autotune.measure import sampled
from autotune.measure.capacity import (
    CURVE_METRICS,
    LATE_READS,
    MAX_LATE_READS,
    CapacityResult,
    LoadPoint,
    Samples,
    before_engine,
    client_limit,
    intervals,
    judge,
    late_fix,
    point_seed,
    points_file,
)
from autotune.measure.metrics import BenchMetrics, compute_metrics, per_request, too_short
from autotune.measure.search import search
from autotune.measure.settle import Settle
from autotune.server.jit import LogSpan
from autotune.server.lifecycle import ServerProcess
from autotune.server.machine import has_gpu
from autotune.server.scrape import last_split, spec_counts

Phase = Callable[[str], None]
OnRequest = Callable[[RequestRecord], None]
OnPoint = Callable[[LoadPoint], None]

CLIENT_BUSY = 0.9  # client CPU fraction over which a measurement is suspect
# warm-up windows (capacity.warm_windows): two in a row this close in mean TTFT and TPOT are a
# warm server; auto runs at most GPU_WARM_WINDOWS on a GPU, 2 without one for a certify boot
# (its first point is the boot's first load: docs/results/certified check_vs_full)
WARM_AGREE = 0.15
GPU_WARM_WINDOWS = 4
GPU_SAMPLES = 3  # capacity.samples auto: fresh samples a point is judged on with a GPU


def samples_of(cap: CapacityConfig) -> int:  # capacity.samples, auto resolved on this machine
    return cap.samples if cap.samples != "auto" else (GPU_SAMPLES if has_gpu() else 1)
CLOSE_SEED_STEP = 104_729  # a close point's later runs: seeds this far apart (fresh prompts)
WARMUP_TOKENS = 16  # the output of a capacity point's warm-up requests, at most
def samples(records: list[RequestRecord]) -> Samples:
    return {k: [v * 1000 for v in vals] for k, vals in per_request(records).items()}  # ms


def write_records(records: list[RequestRecord], path: Path) -> None:
    """Per-request records as a table (no chunk times: the ITLs summarise them)."""
    import pandas as pd

    rows = [{k: v for k, v in asdict(r).items() if k != "chunk_times"} | {
        "chunks": len(r.chunk_times),
        "ttft_ms": r.ttft * 1000 if r.success else None,
        "e2el_ms": r.e2el * 1000 if r.success else None,
    } for r in records]
    pd.DataFrame(rows).to_csv(path, index=False)


@dataclass(frozen=True)
class Point:
    """One load applied to a running server: its metrics and what the server reported."""

    metrics: BenchMetrics
    records: list[RequestRecord]
    server_stats: dict[str, float]
    settings: LoadSettings


@dataclass(frozen=True)
class Sampled:
    """One sample of a capacity point: its runs, flat metrics, intervals, misses, client limit."""

    runs: list[Point]
    flat: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    misses: list[str]
    missed: list[str]
    flag: str | None
    settled: Settle | None

    @property
    def sample(self) -> sampled.Sample:
        return sampled.Sample(self.flat, tuple(self.missed))


def measure(base_url: str, model: str, profile: ProfileConfig, requests: list[Request], *,
            max_concurrency: int | None = None, request_rate: float | None = None,
            on_request: OnRequest | None = None, alive: Callable[[], bool] | None = None,
            warm: list[Request] | None = None, check_length: bool = True,
            settle: Settle | None = None) -> Point:
    """Run `requests` (after the warm-up) against a running server at the profile's load, or at
    the given concurrency / rate; warn when it is too short to measure (`too_short`; a
    capacity search's points have their own rule, `docs/capacity.md`). With `settle`, the run
    stops once its verdict is a settled miss (autotune.measure.settle), and its metrics are
    those of the requests that ended before."""
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
        cpus=client_cpus(profile.client_cpus),
        realtime=profile.client_realtime,
    )
    def done(rec: RequestRecord) -> None:
        if settle is not None:
            settle.record(rec)
        if on_request is not None:
            on_request(rec)

    result = run_load(base_url, model, requests, settings, on_done=done, alive=alive,
                      warmup_requests=warm, scrape_metrics=True,
                      metrics_interval_s=profile.metrics_interval_s,
                      on_first=settle.first if settle else None, stop=settle,
                      on_schedule=settle.schedule if settle else None)
    records = result.records
    if settle is not None and settle.reason is not None:  # the cut-off ones tell nothing
        records = [r for r in records if r.error != SETTLED_REASON]
    metrics = compute_metrics(records, result.duration_s)
    busy = result.server_stats.get("client_cpu_fraction", 0.0)
    if busy > CLIENT_BUSY:
        warnings.warn(f"the load generator used {busy:.0%} of a CPU core: it may have limited "
                      "the server, and its latencies lag (profile.client_processes was "
                      f"{settings.processes}: raise it)", MeasurementWarning, stacklevel=2)
    late = metrics.late_read_share
    if late > MAX_LATE_READS:
        delay = result.server_stats.get("client_run_delay_share", 0.0)
        warnings.warn(f"the load generator read {late:.0%} of the token gaps late, in one read "
                      f"with the token before ({metrics.burst_requests} requests mostly so; it "
                      f"waited for a CPU {delay:.0%} of the run): TPOT and ITL read low and TTFT "
                      f"high; {late_fix(delay)}", MeasurementWarning, stacklevel=2)
    short = too_short(result.records, None if settings.request_rate not in (None, float("inf"))
                      else conc, result.duration_s) if check_length else None
    if short:
        warnings.warn(short, MeasurementWarning, stacklevel=2)
    return Point(metrics, records, result.server_stats, settings)


def watched(url: str, log: Path | None, model: str, profile: ProfileConfig,
            reqs: list[Request], *, fix: str = "a larger profile.warmup", **kw: Any) -> Point:
    """The profile's requests, after its warm-up (the requests past `num_prompts`), with the
    server's `log` read meanwhile (LogSpan.compiled: `jit_events`, none without a log)."""
    span = LogSpan(log).mark()
    pt = measure(url, model, profile, reqs[:profile.num_prompts],
                 warm=reqs[profile.num_prompts:], **kw)
    pt.server_stats.update(span.compiled(fix))
    return pt


def measure_profile(proc: ServerProcess, model: str, profile: ProfileConfig,
                    reqs: list[Request], *, label: str = "",
                    on_request: OnRequest | None = None) -> Point:
    """`watched` on a server autotune started: a dead server raises its cause; a run with every
    request failed, its first error."""
    pt = watched(proc.base_url, proc.log_path, model, profile, reqs, on_request=on_request,
                 alive=proc.alive)
    proc.check_alive()
    if pt.metrics.completed == 0:
        first = pt.metrics.root_error or "no request succeeded"
        raise LoadError(f"{label + ': ' if label else ''}every request failed: {first}")
    return pt


def capacity_on(base_url: str, model: str, tokenizer_dir: str, profile: ProfileConfig,
                cap: CapacityConfig, slos: list[SLOConfig], workdir: Path, *,
                start: float | None = None, stop_below: float | None = None,
                on_phase: Phase | None = None, on_point: OnPoint | None = None,
                alive: Callable[[], bool] | None = None,
                check: Callable[[], None] = lambda: None,
                log_path: Path | None = None) -> CapacityResult:
    """The capacity search against a running server (autotune.measure.capacity). Each point gets its
    own requests, drawn with a seed of the load (the same for every trial at that load) and
    its own warm-up; its per-request records go to points/load-<load>.csv. With the server's
    `log_path`, a point during which vLLM logged a kernel compiling (autotune.server.jit) is
    measured again with fresh requests; the point records how many it saw (`jit_events`, in
    the run kept) and whether it was measured again (`jit_remeasured`); no log, no field."""
    phase = on_phase or (lambda _p: None)
    tok = load_tokenizer(tokenizer_dir)
    at_point = profile.model_copy(update={"warmup": cap.warmup})
    (workdir / "points").mkdir(parents=True, exist_ok=True)
    told: list[str] = []
    span = LogSpan(log_path)
    raised: list[int] = []  # client processes raised for late reads (more_processes)

    def run_at(load: float, seed: int, n: int | None = None,
               settling: bool = True) -> tuple[Point, Settle | None]:
        t0 = time.monotonic()
        span.mark()
        n = n or cap.requests_at(load)
        # a dataset is drawn at random with the point's seed, so points do not share prompts
        drawn = profile.model_copy(update={"sample": "random"}) if profile.path else profile
        reqs = sample_requests(drawn, tok, n + cap.warmup, seed, tokenizer_dir)
        # a warm-up opens connections and wakes the server's paths: a few tokens do that, and
        # a long ShareGPT reply would only make every point wait for it
        warm = [Request(r.prompt, r.prompt_len, min(r.output_len, WARMUP_TOKENS))
                for r in reqs[n:]]
        sampled_s = time.monotonic() - t0
        conc = int(load) if cap.axis == "concurrency" else profile.max_concurrency
        rate = load if cap.axis == "rate" else profile.request_rate
        # the load generator hands settle its arrival schedule when it sends on it
        settle = Settle(slos, reqs[:n]) if cap.settle and settling else None
        update: dict[str, Any] = {"seed": seed}
        if raised:  # once a point was read late, later points start raised (or above)
            update["client_processes"] = max(raised[-1], resolve_processes(
                profile.client_processes, conc or n))
        pt = measure(base_url, model, at_point.model_copy(update=update), reqs[:n],
                     max_concurrency=conc, request_rate=rate, alive=alive, warm=warm,
                     check_length=False, settle=settle)
        pt.server_stats["point_sample_s"] = sampled_s
        pt.server_stats.update(span.counted())  # none without a log: unwatched is not 0
        check()  # the server died: its cause, not a failing verdict
        return pt, settle if settle is not None and settle.reason is not None else None

    windows = cap.warm_windows if cap.warm_windows != "auto" else \
        (GPU_WARM_WINDOWS if has_gpu() else 2 if cap.bracket == "step" else 0)
    warmed: list[dict[str, float]] = []

    def warm_up(load: float) -> dict[str, float]:
        """Run the first point's load in windows until two in a row agree and the later one
        overlapped no kernel compiling (at most `windows`): what it took, for the point."""
        t0, seen, last, stable, done = time.monotonic(), 0.0, None, False, 0
        while done < windows and not stable:
            done += 1
            phase(f"load {load:g} (warming, window {done})")
            pt, _ = run_at(load, point_seed(profile.seed + done, load),
                           max(cap.warmup, cap.requests_at(load) // 4), settling=False)
            m, jit = pt.metrics, pt.server_stats.get("jit_events", 0.0)
            seen += jit
            now = (m.ttft_ms.mean, m.tpot_ms.mean)
            stable = last is not None and not jit and all(
                abs(a - b) <= WARM_AGREE * b for a, b in zip(now, last, strict=True))
            last = now
        return {"warm_windows": float(done), "warm_s": time.monotonic() - t0,
                "warm_stable": float(stable), **span.counted("warm_jit_events", seen)}

    def one_sample(load: float, seed: int, pool: bool) -> Sampled:
        """A run with the seed's requests (fresh ones where a kernel compiled or the client read
        late); with `pool`, a close verdict runs again, fresh requests pooled, to close_runs."""
        first, settled = run_at(load, seed)
        if first.server_stats.get("jit_events"):  # a kernel compiled inside it: not its pace
            seen = first.server_stats["jit_events"]
            phase(f"load {load:g} (a kernel compiled during it: again)")
            first, settled = run_at(load, point_seed(seed + 1, load))
            first.server_stats["jit_remeasured"] = 1.0
            first.server_stats["jit_events_discarded"] = seen
        flag = client_limit(first.metrics.flat(), cap.requests_at(load), load, cap.axis)
        if flag is not None and flag.startswith(LATE_READS):  # the client's, not the server's
            raised.append(more_processes(first.settings.processes))
            phase(f"load {load:g} (read late: again" + (
                f", {raised[-1]} client processes)" if raised[-1] > first.settings.processes
                else ")"))
            first, settled = run_at(load, point_seed(point_seed(seed, load), load))
            first.server_stats["late_reads_remeasured"] = 1.0
            flag = client_limit(first.metrics.flat(), cap.requests_at(load), load, cap.axis)
        runs = [first]
        flat = first.metrics.flat()
        bounds = intervals(slos, samples(first.records)) if pool else {}
        state, misses, _close, missed = judge(flat, slos, bounds)
        if settled is not None:  # the requests sent already settle a miss: the rest would not
            state, misses, missed = "missed", [str(settled.reason)], [str(settled.metric)]
        # close: fresh runs, pooled, until the pooled interval clears the SLOs (or close_runs)
        while state == "close" and flag is None and len(runs) < cap.close_runs:
            phase(f"load {load:g} (close: run {len(runs) + 1})")
            k = len(runs) - 1  # the second run's seed as before; later ones apart from it
            # judged pooled: one run settling a miss alone would decide for all of them
            again, settled = run_at(load, (point_seed(seed, load) + CLOSE_SEED_STEP * k)
                                    % 2**32, settling=False)
            runs.append(again)
            records = [r for pt in runs for r in pt.records]
            flat = compute_metrics(records, sum(pt.metrics.duration_s for pt in runs)).flat()
            bounds = intervals(slos, samples(records))
            state, misses, _close, missed = judge(flat, slos, bounds)
            flag = client_limit(runs[-1].metrics.flat(), cap.requests_at(load), load, cap.axis)
        if state == "close":  # still close after close_runs: the pooled value decides
            _state, misses, _close, missed = judge(flat, slos, {})
        return Sampled(runs, flat, bounds, misses, missed, flag, settled)

    k = samples_of(cap)

    def measure_at(load: float) -> LoadPoint:
        carry = warm_up(load) if windows and not warmed else {}
        warmed.append(carry)
        phase(f"load {load:g}")
        t0 = time.monotonic()
        got: list[Sampled] = []
        while not got or (got[-1].flag is None and not sampled.decided(
                [g.sample for g in got], slos, k)):
            if got:
                phase(f"load {load:g} (sample {len(got) + 1} of {k})")
            got.append(one_sample(load, point_seed(
                profile.seed + sampled.SAMPLE_SEED_STEP * len(got), load), pool=k == 1))
        last, runs = got[-1], [pt for g in got for pt in g.runs]
        flat, bounds, misses, missed = last.flat, last.bounds, last.misses, last.missed
        if k > 1:
            _met, misses, missed = sampled.verdict([g.sample for g in got], slos)
            flat = sampled.medians([g.sample for g in got], CURVE_METRICS)
        stats = [pt.server_stats for pt in runs]  # the last run's (split: last held), spec summed
        server = dict(stats[-1]) | carry | spec_counts(stats) | last_split(stats)
        server["samples"] = float(len(got))
        settled = next((g.settled for g in got if g.settled is not None), None)
        point = LoadPoint(load, not misses, tuple(misses),
                          {k: flat[k] for k in CURVE_METRICS}, time.monotonic() - t0, server,
                          {k: list(v) for k, v in bounds.items()}, len(runs), last.flag,
                          settled.at_s if settled is not None else None, tuple(missed))
        write_records([r for pt in runs for r in pt.records], points_file(workdir, load))
        note = before_engine(load, flat, point.server, CLIENT_BUSY)
        if note is not None and not told:  # once a search: the cause is the server's
            told.append(note)
            warnings.warn(note, MeasurementWarning, stacklevel=2)
        if on_point is not None:
            on_point(point)
        return point

    result = search(measure_at, axis=cap.axis, low=cap.low, high=cap.high,
                    tolerance=cap.tolerance, start=start or cap.start, stop_below=stop_below,
                    bracket=cap.bracket)
    (workdir / "capacity.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return result
