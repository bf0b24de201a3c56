"""What is measured on a server that is already up: one load point (a profile's requests at its
concurrency or rate), or a capacity search (autotune.measure.capacity) that runs a point per load.

`runner.run_boot` calls these between a boot and a stop; `autotune bench --url` calls them against
a server someone else started. Expected failures surface as `LoadError`s with their cause.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autotune.config.capacity import CapacityConfig
from autotune.config.workload import ProfileConfig, SLOConfig
from autotune.errors import LoadError, MeasurementWarning
from autotune.load import (
    SETTLED_REASON,
    LoadSettings,
    more_processes,
    resolve_processes,
    run_load,
    schedule,
)
from autotune.load.datasets import load_tokenizer, load_trace
from autotune.load.placement import client_cpus
from autotune.load.record import Request, RequestRecord
from autotune.measure.capacity import (
    CURVE_METRICS,
    MAX_LATE_READS,
    CapacityResult,
    LoadPoint,
    before_engine,
    client_limit,
    late_fix,
    points_file,
)
from autotune.measure.draw import draw
from autotune.measure.metrics import compute_metrics, too_short
from autotune.measure.point import Judged, Point, PointPolicy, PointRules, Sampled
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
# warm-up windows (capacity.warm_windows, point.WARM_AGREE): auto runs at most GPU_WARM_WINDOWS
# on a GPU, 2 without one for a certify boot (its first point is the boot's first load:
# docs/results/certified check_vs_full)
GPU_WARM_WINDOWS = 4
GPU_SAMPLES = 3  # capacity.samples auto: fresh samples a point is judged on with a GPU


def samples_of(cap: CapacityConfig) -> int:  # capacity.samples, auto resolved on this machine
    return cap.samples if cap.samples != "auto" else (GPU_SAMPLES if has_gpu() else 1)


def write_records(records: list[RequestRecord], path: Path) -> None:
    """Per-request records as a table (no chunk times: the ITLs summarise them)."""
    import pandas as pd

    rows = [{k: v for k, v in asdict(r).items() if k != "chunk_times"} | {
        "chunks": len(r.chunk_times),
        "ttft_ms": r.ttft * 1000 if r.success else None,
        "e2el_ms": r.e2el * 1000 if r.success else None,
    } for r in records]
    pd.DataFrame(rows).to_csv(path, index=False)


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
        max_concurrency=conc, seed=profile.seed, warmup=profile.warmup,
        request_rate=profile.request_rate if request_rate is None else request_rate,
        endpoint=profile.endpoint, ignore_eos=True, request_timeout_s=profile.request_timeout_s,
        processes=resolve_processes(profile.client_processes, conc or len(requests)),
        cpus=client_cpus(profile.client_cpus), realtime=profile.client_realtime)
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
    # an open loop (a rate, or a trace's own arrivals) is not judged by the closed loop's rule
    closed = schedule(requests, settings) is None
    short = too_short(result.records, conc if closed else None, result.duration_s) \
        if check_length else None
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
                log_path: Path | None = None, max_len: int | None = None,
                warm_enough: int = 0, loads: Sequence[float] | None = None) -> CapacityResult:
    """The capacity search against a running server (autotune.measure.capacity). Each point gets its
    own requests, drawn with a seed of the load (the same for every trial at that load) and
    its own warm-up, a dataset's or a trace's within `max_len` tokens (the study's limit,
    which its preflight applied; None: the model's); its per-request records go to
    points/load-<load>.csv. With the server's
    `log_path`, a point during which vLLM logged a kernel compiling (autotune.server.jit) is
    measured again with fresh requests; the point records how many it saw (`jit_events`, in
    the run kept) and whether it was measured again (`jit_remeasured`); no log, no field.
    `warm_enough`: a config that ran warm before on these caches warms in at most this many
    windows, unless a kernel compiles in the last (PointPolicy.more_windows; 0: as configured).
    `loads`: measure these, in this order, instead of searching (a ladder: `export --by-load`);
    its capacity is the highest that met the SLOs."""
    phase = on_phase or (lambda _p: None)
    tok = load_tokenizer(tokenizer_dir)
    trace = load_trace(profile, tok, tokenizer_dir, max_len) if cap.axis == "speedup" else None
    (workdir / "points").mkdir(parents=True, exist_ok=True)
    span = LogSpan(log_path)
    runs = ServerRuns(base_url, model, tokenizer_dir, profile, cap, slos, tok, trace, span,
                      max_len, alive, check)
    windows = cap.warm_windows if cap.warm_windows != "auto" else \
        (GPU_WARM_WINDOWS if has_gpu() else 2 if cap.bracket == "step" else 0)
    rules = PointRules(slos, cap, profile.seed, windows, samples_of(cap), enough=warm_enough)
    policy = PointPolicy(rules, runs, runs.limit, more_processes, span.counted, phase)
    told: list[str] = []

    def measure_at(load: float) -> LoadPoint:
        carry = policy.warm_once(load)
        phase(f"load {load:g}")
        t0 = time.monotonic()
        got = policy.sampled(load)
        judged = policy.judged(got, CURVE_METRICS)
        point = load_point(load, got, judged, carry, time.monotonic() - t0)
        write_records([r for g in got for pt in g.runs for r in pt.records],
                      points_file(workdir, load))
        note = before_engine(load, judged.flat, point.server, CLIENT_BUSY)
        if note is not None and not told:  # once a search: the cause is the server's
            told.append(note)
            warnings.warn(note, MeasurementWarning, stacklevel=2)
        if on_point is not None:
            on_point(point)
        return point

    if loads is not None:
        pts = tuple(measure_at(x) for x in loads)
        met = [p for p in pts if p.passed]
        top = max(met, key=lambda p: p.load) if met else None
        over = [p.load for p in pts if not p.passed and (top is None or p.load > top.load)]
        result = CapacityResult(cap.axis, top.load if top else 0.0, top, pts,
                                min(over) if over else None, "a ladder of loads")
    else:
        result = search(measure_at, axis=cap.axis, low=cap.low, high=cap.high,
                        tolerance=cap.tolerance, start=start or cap.start,
                        stop_below=stop_below, bracket=cap.bracket)
    (workdir / "capacity.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return result


@dataclass
class ServerRuns:
    """How a capacity point's run is made on a running server (`point.Run`): the load's
    requests drawn with the seed, sent by the load generator, the kernel log counted over
    the run; and the client's limit on a run (`limit`)."""

    base_url: str
    model: str
    tokenizer_dir: str
    profile: ProfileConfig
    cap: CapacityConfig
    slos: list[SLOConfig]
    tok: Any
    trace: Any
    span: LogSpan
    max_len: int | None
    alive: Callable[[], bool] | None
    check: Callable[[], None]  # raises the server's cause where it died

    def __call__(self, load: float, seed: int, n: int | None = None, settling: bool = True,
                 processes: int | None = None) -> tuple[Point, Settle | None]:
        profile, cap = self.profile, self.cap
        t0 = time.monotonic()
        self.span.mark()
        got = draw(profile, cap, self.tok, self.tokenizer_dir, self.trace, load, seed, n,
                   self.max_len)
        reqs, sampled_s = got.requests, time.monotonic() - t0
        conc = int(load) if cap.axis == "concurrency" else profile.max_concurrency
        rate = load if cap.axis == "rate" else profile.request_rate
        # the load generator hands settle its arrival schedule when it sends on it
        settle = Settle(self.slos, reqs) if cap.settle and settling else None
        update: dict[str, Any] = {"seed": seed, "warmup": cap.warmup}
        if processes:  # once a point was read late, later points start raised (or above)
            update["client_processes"] = max(processes, resolve_processes(
                profile.client_processes, conc or len(reqs)))
        pt = measure(self.base_url, self.model, profile.model_copy(update=update), reqs,
                     max_concurrency=conc, request_rate=rate, alive=self.alive, warm=got.warm,
                     check_length=False, settle=settle)
        pt.server_stats["point_sample_s"] = sampled_s
        pt.server_stats.update(got.stats())
        pt.server_stats.update(self.span.counted())  # none without a log: unwatched is not 0
        self.check()  # the server died: its cause, not a failing verdict
        return pt, settle if settle is not None and settle.reason is not None else None

    def limit(self, pt: Point, load: float) -> str | None:
        """The client's limit on a run (a trace window's: its own span), or None."""
        return client_limit(pt.metrics.flat(), int(pt.server_stats.get(
            "window_requests", self.cap.requests_at(load))), load, self.cap.axis,
            pt.server_stats.get("arrivals_s"))


def load_point(load: float, got: list[Sampled], judged: Judged, carry: dict[str, float],
               seconds: float) -> LoadPoint:
    """A capacity point from its samples and their judgement: the last run's server figures
    (with the warm-up it carries, speculation summed over the runs, the last split held)."""
    runs = [pt for g in got for pt in g.runs]
    stats = [pt.server_stats for pt in runs]
    server = dict(stats[-1]) | carry | spec_counts(stats) | last_split(stats)
    server["samples"] = float(len(got))
    settled = next((g.settled for g in got if g.settled is not None), None)
    return LoadPoint(load, not judged.misses, tuple(judged.misses),
                     {k: judged.flat[k] for k in CURVE_METRICS}, seconds, server,
                     {k: list(v) for k, v in judged.bounds.items()}, len(runs), got[-1].flag,
                     settled.at_s if settled is not None else None, tuple(judged.missed))
