"""Capacity under SLOs: the most load one server sustains while every SLO holds.

One boot, many load points: the search (autotune.measure.search) brackets the capacity and
bisects it; this module holds what it works on: each load point is judged by
`judge` (its point estimates alone: `meets`):

- every request of the point succeeded, and
- each SLO holds on the point's measured requests, a percentile SLO computed from at least
  `min_requests(metric)` successful requests (p99 needs 100: with fewer, the "p99" is the
  maximum of a small sample; p90 needs 10, the median 2), and
- with the requests' samples at hand (`judge`), each percentile carries a 95% order-statistic
  interval (stats.percentile_interval): an SLO is met when the whole interval is within its
  target, missed when the whole interval is beyond it, and close otherwise. A close point runs
  again with fresh requests, pooled, until the pooled interval clears the target or it ran
  capacity.close_runs times, and the pooled value decides
  (autotune.measure.point.PointPolicy.pool_close): a judgement one run's tail could flip gets
  more requests.

A point says nothing of the server when the load generator could not offer it: its p99
send lag (scheduled arrival -> sent) above MAX_SEND_LAG_MS, or its arrivals spanning less than
MIN_ARRIVALS_S (a burst). The search stops there and says so (`client_limit`).

The search assumes that a config meeting the SLOs at some load meets them at every lower load.
A measured point that contradicts it (noise near the knee) is kept in the curve; the bracket
uses the latest judgements.

Early stop: once the search has a failing load at or below the incumbent's capacity, this config
cannot beat the incumbent; the search ends there and reports the highest passing load it
measured (a lower bound, marked `stopped`: `EARLY_STOP`, `stopped_early`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from autotune.config.metric_names import FAILED, QUANTILES, min_requests
from autotune.config.workload import SLOConfig
from autotune.measure.stats import percentile_interval

# how a search stopped early below the incumbent begins its `stopped`: its capacity is a bound
EARLY_STOP = "cannot reach the incumbent"


def stopped_early(stopped: str | None) -> bool:
    """Whether a search's `stopped` says it ended early below the incumbent (a lower bound)."""
    return (stopped or "").startswith(EARLY_STOP)

# per-point metrics kept in a curve (the rest stays in the point's requests CSV)
CURVE_METRICS = (
    "completed", "failed", "duration_s", "request_throughput", "output_throughput",
    "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
    "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms", "mean_send_lag_ms", "p99_send_lag_ms",
    "late_read_share", "burst_requests",
)


# a point whose client TTFT is this much above the server's own is read as time spent before
# the engine (docs/capacity.md, "Where the time went")
BEFORE_ENGINE_MS = 500.0


def before_engine(load: float, metrics: dict[str, float], server: dict[str, float],
                  cpu_busy: float) -> str | None:
    """What to say when a point's TTFT went mostly before the engine saw its requests: the
    client's mean TTFT at least BEFORE_ENGINE_MS above vLLM's own (its histogram, from when
    its API server handed the request on) and more than twice it. On the H100 one API server
    process capped capacity this way while the engine had no request waiting. Else, vLLM's own
    TTFT mostly outside its engine core (server_mean_outside_engine_ms: TTFT less its queue and
    prefill times, at least BEFORE_ENGINE_MS and half of it). `cpu_busy`: the client CPU
    fraction over which the client is the likelier cause (bench.CLIENT_BUSY)."""
    client, engine = metrics.get("mean_ttft_ms"), server.get("server_mean_ttft_ms")
    outside = server.get("server_mean_outside_engine_ms")
    api = ("vLLM's API server, one process unless --api-server-count says otherwise: add "
           "api_server_count to the search space (or the server's args)")
    if client is None or engine is None:
        return None
    if client - engine < BEFORE_ENGINE_MS or client < 2 * engine:
        # vLLM's own TTFT, split: its engine's queue and prefill, and the rest outside the
        # engine core (server/scrape.py)
        if outside is None or outside < BEFORE_ENGINE_MS or 2 * outside < engine:
            return None
        return (f"at load {load:g} vLLM's own mean TTFT was {engine:,.0f} ms, of which its "
                f"engine queued {server.get('server_mean_queue_ms', 0.0):,.0f} and prefilled "
                f"{server.get('server_mean_prefill_ms', 0.0):,.0f}: {outside:,.0f} ms went "
                f"outside the engine core, most likely in {api}{split_from(server)}")
    busy = server.get("client_cpu_fraction", 0.0)
    who = (f"the load generator was busy ({busy:.0%} of a core): raise "
           "profile.client_processes" if busy > cpu_busy else api)
    return (f"at load {load:g} the mean TTFT was {client:,.0f} ms, of which vLLM's engine saw "
            f"{engine:,.0f} ms: the rest went before the engine, most likely in {who}")


# A point the load generator could not offer says nothing of the server (module docstring):
# a p99 send lag above this (ms), or arrivals spanning less than this (s)
MAX_SEND_LAG_MS = 50.0
MIN_ARRIVALS_S = 10.0
# ... or more than this share of its token gaps read in one socket read with the token before
# (metrics.late_read_share): its TPOT, ITL and TTFT are the client's reading, not the server's
# streaming. A client on vLLM-CPU's bound core read 0.82 of them so; one on a free core 0.0
# (docs/load-generator.md "Late reads").
MAX_LATE_READS = 0.1
LATE_READS = "late reads"  # how such a flag begins: the point is measured again once


def meets(metrics: dict[str, float], slos: Sequence[SLOConfig]) -> tuple[bool, list[str]]:
    """(passed, what was missed) for one load point's flat metrics (point estimates only)."""
    v = judge(metrics, slos, {})
    return v.state == "met", v.misses


Samples = dict[str, Sequence[float]]  # per-request values by metric stem (ttft, tpot, ...)


def intervals(slos: Sequence[SLOConfig], samples: Samples) -> dict[str, tuple[float, float]]:
    """The 95% interval of each percentile SLO's metric, from the point's per-request values
    in ms (`samples["ttft"]`, ...): p99_ttft_ms -> (low, high)."""
    out = {}
    for slo in slos:
        stat, _, rest = slo.metric.partition("_")
        q = QUANTILES.get(stat)
        stem = rest.removesuffix("_ms")
        if q is not None and samples.get(stem):
            out[slo.metric] = percentile_interval(samples[stem], q)
    return out


class Judgement(NamedTuple):
    """One point's judgement: its state, each miss in words and, in the same order, the metric
    it is on (an SLO's metric, or FAILED), so that a reader needs no parsing of the words."""

    state: str  # "met" | "missed" | "close"
    misses: list[str]
    close: list[str]
    missed: list[str]


def judge(metrics: dict[str, float], slos: Sequence[SLOConfig],
          bounds: dict[str, tuple[float, float]]) -> Judgement:
    """The judgement on one point's flat metrics and the intervals of its percentile metrics
    (`intervals`; a metric without one is judged on its value alone): "met", "missed" or
    "close" (an interval straddles a target)."""
    misses, missed, close = [], [], []
    failed, completed = int(metrics.get("failed", 0)), int(metrics.get("completed", 0))
    if failed:
        misses.append(f"{failed} of {failed + completed} requests failed")
        missed.append(FAILED)
    for slo in slos:
        need = min_requests(slo.metric)
        value = metrics.get(slo.metric, math.nan)
        lo, hi = bounds.get(slo.metric, (value, value))
        if completed < need:
            misses.append(f"{slo.metric}: {completed} successful requests, fewer than the "
                          f"{need} it needs")
            missed.append(slo.metric)
        elif slo.violation(lo) > 0 and slo.violation(hi) > 0:
            misses.append(f"{slo.text()} (got {value:,.1f}"
                          + (f", 95% [{lo:,.1f}, {hi:,.1f}])" if lo != hi else ")"))
            missed.append(slo.metric)
        elif slo.violation(lo) > 0 or slo.violation(hi) > 0:
            close.append(f"{slo.text()}: {value:,.1f}, 95% [{lo:,.1f}, {hi:,.1f}]")
    return Judgement("missed" if misses else "close" if close else "met", misses, close, missed)


# a client that waited for a CPU this share of a run was crowded out (vLLM-CPU's threads on
# its core); one that did not was busy reading (one process at 9-11 thousand tokens a second on
# the H100 waited 0.003-0.005% of the run)
CROWDED = 0.05


def late_fix(run_delay_share: float) -> str:
    """What to do about late reads, by whether the client waited for a CPU."""
    return ("give it a CPU of its own (profile.client_cpus)" if run_delay_share > CROWDED else
            "spread it over more processes (profile.client_processes)")


def client_limit(metrics: dict[str, float], requests: int, load: float, axis: str,
                 span_s: float | None = None) -> str | None:
    """Why a point measured the load generator rather than the server, or None: more than
    MAX_LATE_READS of its token gaps read late; on the rate and speedup axes (arrivals on a
    schedule), a p99 send lag above MAX_SEND_LAG_MS or arrivals spanning under MIN_ARRIVALS_S
    (`span_s`, a trace window's; else requests / load)."""
    late = metrics.get("late_read_share", 0.0)
    if late > MAX_LATE_READS:
        return (f"{LATE_READS}: {late:.0%} of the token gaps reached the client in one read "
                f"with the token before (> {MAX_LATE_READS:.0%}), so its TPOT and TTFT are "
                "the client's: give it more processes (profile.client_processes) or a CPU "
                "of its own (profile.client_cpus)")
    if axis == "concurrency":
        return None
    span = span_s if span_s is not None else requests / load
    if span < MIN_ARRIVALS_S:
        return (f"burst: {'a window of ' if span_s is not None else ''}{requests} requests in "
                f"{span:.1f} s (< {MIN_ARRIVALS_S:g} s of arrivals); raise "
                "capacity.min_duration_s or requests_per_point")
    lag = metrics.get("p99_send_lag_ms", 0.0)
    if lag > MAX_SEND_LAG_MS:
        return (f"client limit: p99 send lag {lag:,.0f} ms (> {MAX_SEND_LAG_MS:g} ms): the "
                "load generator sent late; raise profile.client_processes")
    return None


@dataclass(frozen=True)
class LoadPoint:
    load: float
    passed: bool
    misses: tuple[str, ...]
    metrics: dict[str, float]  # CURVE_METRICS of the point
    seconds: float = 0.0  # wall time of the point, warm-up included
    # what the server's /metrics and the client said about the point (server_mean_ttft_ms,
    # client_cpu_fraction, ...): where a client TTFT far above the server's went
    server: dict[str, float] = field(default_factory=dict)
    # the 95% interval of each percentile SLO metric: {"p99_ttft_ms": [low, high]}
    intervals: dict[str, list[float]] = field(default_factory=dict)
    runs: int = 1  # over 1: it was close, ran again, and was judged on every run's requests
    flag: str | None = None  # the load generator's limit (client_limit): no server judgement
    # seconds into the point when its miss was settled and the rest of its requests were not
    # sent (autotune.measure.settle); None: it ran to its end
    settled_s: float | None = None
    missed: tuple[str, ...] = ()  # the metric of each miss, in order (Judgement.missed)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LoadPoint:
        """A point as `to_json` stored it (a trial's record)."""
        return cls(float(d["load"]), bool(d["passed"]), tuple(d.get("misses", ())),
                   dict(d.get("metrics", {})), float(d.get("seconds", 0.0)),
                   dict(d.get("server", {})), dict(d.get("intervals", {})),
                   int(d.get("runs", 1)), d.get("flag"), d.get("settled_s"),
                   tuple(d.get("missed", ())))


@dataclass(frozen=True)
class CapacityResult:
    axis: str
    capacity: float  # the highest passing load (0: none passed)
    at: LoadPoint | None  # the point at capacity
    points: tuple[LoadPoint, ...]  # in the order measured
    fail: float | None  # the lowest failing load above capacity (None: `high` passed)
    stopped: str | None = None  # why the search ended before the tolerance, if it did
    extra: dict[str, float] = field(default_factory=dict)

    def curve(self) -> list[LoadPoint]:
        """The points by load."""
        return sorted(self.points, key=lambda p: p.load)

    def summary(self) -> dict[str, float]:
        """Flat numbers for the trial record: capacity, capacity_req_s, goodput_tok_s, the
        metrics at capacity (at the lowest load tried when none passed), the number of points
        and the seconds they took."""
        out = {"capacity": self.capacity, "capacity_points": float(len(self.points)),
               "capacity_seconds": sum(p.seconds for p in self.points)}
        if self.at is not None:
            out.update(self.at.metrics)
            out["capacity_req_s"] = self.at.metrics["request_throughput"]
            out["goodput_tok_s"] = self.at.metrics["total_token_throughput"]
        else:  # nothing passed: the lowest load tried stands for the rest
            out.update(min(self.points, key=lambda p: p.load).metrics if self.points else {})
            out["capacity_req_s"] = out["goodput_tok_s"] = 0.0
        return out | self.extra

    def to_json(self) -> dict[str, Any]:
        return {"axis": self.axis, "capacity": self.capacity, "fail": self.fail,
                "stopped": self.stopped, "points": [p.to_json() for p in self.points]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CapacityResult:
        """A search as `to_json` stored it; the point at capacity is the passing point there."""
        points = tuple(LoadPoint.from_json(p) for p in d.get("points", []))
        cap = float(d.get("capacity", 0.0))
        at = next((p for p in points if p.passed and p.load == cap), None)
        return cls(str(d.get("axis", "concurrency")), cap, at, points, d.get("fail"),
                   d.get("stopped"))


def capacity_words(axis: str, load: float) -> str:
    """A load as the user reads it: 12 requests in flight, 3.5 requests/s, or 2.3x a trace's
    recorded rate."""
    if axis == "speedup":
        return f"{load:.3g}x its recorded rate"
    return f"{load:g} requests/s" if axis == "rate" else f"{load:g} requests in flight"


def capacity_sentence(axis: str, capacity: float, slos: str) -> str:
    """What a capacity means, in one sentence (every surface that shows one says it so): on
    the speedup axis, "serves your traffic at up to 2.3x its recorded rate within the SLOs"."""
    if capacity <= 0:
        return f"meets the SLOs ({slos}) at no load the search tried"
    if axis == "speedup":
        return (f"serves your traffic at up to {capacity:.3g}x its recorded rate within the "
                f"SLOs ({slos})")
    return f"sustains up to {capacity_words(axis, capacity)} within the SLOs ({slos})"


def point_seed(seed: int, load: float) -> int:
    """The seed of a load point's requests: the same for every trial at that load (common
    random numbers), different between loads (no prefix cached by one point serves the next)."""
    digest = hashlib.sha256(f"{seed}:{round(load, 6)}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def split_from(server: dict[str, float]) -> str:
    """Said after a point's TTFT split when it is an earlier sample's (scrape.last_split): the
    last one settled a miss, and its split did not hold."""
    return (" (an earlier sample's split: the last one settled a miss)"
            if server.get("server_split_runs_back") else "")


def points_file(workdir: Path, load: float) -> Path:
    """Where a capacity point's per-request records are written (measure/on_server.py) and
    read (outputs/inside.py): points/load-<load>.csv in the bench's or trial's folder."""
    return workdir / "points" / f"load-{load:g}.csv"
