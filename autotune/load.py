"""Async httpx load generator: streams requests at a server and returns one record per request.

Payloads and timing follow `vllm bench serve` (vllm/benchmarks/lib/endpoint_request_func.py):
streaming, `stream_options.include_usage` so token counts come from the server, a chunk with
`choices` is a token event (the first one is TTFT, the gaps between later ones are ITLs), and the
request ends at its last token event. Warm-up requests run before the clock starts.

One event loop reads every stream of its process. vLLM emits a token for every running request
at each engine step, so at concurrency 512 a burst of 512 events lands at once and the last of
them is read (and its next request sent) only after the other 511: `processes` spreads the
slots over several processes, each with its own loop (docs/load-generator.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import numpy as np

from autotune.datasets import Request
from autotune.metrics import RequestRecord
from autotune.scrape import ServerStats, poll, scrape_once

Endpoint = Literal["completions", "chat"]


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


@dataclass(frozen=True)
class LoadResult:
    records: list[RequestRecord]
    duration_s: float
    server_stats: dict[str, float] = field(default_factory=dict)  # and client_cpu_fraction


def _payload(model: str, req: Request, s: LoadSettings) -> tuple[str, dict[str, Any]]:
    common: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if s.ignore_eos:
        common["ignore_eos"] = True
    if s.endpoint == "chat":
        content = req.prompt if isinstance(req.prompt, str) else None
        if content is None:
            raise ValueError("the chat endpoint needs text prompts (use the completions endpoint)")
        return "/v1/chat/completions", {
            **common,
            "messages": [{"role": "user", "content": content}],
            "max_completion_tokens": req.output_len,
        }
    return "/v1/completions", {
        **common,
        "prompt": req.prompt,
        "max_tokens": req.output_len,
        "repetition_penalty": 1.0,
    }


def _is_token_event(data: dict[str, Any], endpoint: Endpoint) -> bool:
    choices = data.get("choices")
    if not choices:
        return False
    if endpoint == "chat":  # the first chat chunk carries only the role
        return "content" in (choices[0].get("delta") or {}) and bool(choices[0]["delta"]["content"])
    return True


async def _one(
    client: httpx.AsyncClient,
    model: str,
    index: int,
    req: Request,
    s: LoadSettings,
    t0: float,
) -> RequestRecord:
    path, body = _payload(model, req, s)
    send = time.perf_counter() - t0
    chunks: list[float] = []
    usage: dict[str, Any] = {}
    error: str | None = None
    try:
        async with client.stream("POST", path, json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                error = f"HTTP {resp.status_code}: {text[:300]}"
            else:
                # Split SSE on bytes, not text: generated text may hold characters that
                # str.splitlines treats as line breaks (U+2028, U+0085), which JSON leaves raw.
                buf = b""
                async for part in resp.aiter_bytes():
                    buf += part
                    *lines, buf = buf.split(b"\n")
                    now = time.perf_counter() - t0
                    for raw in lines:
                        if not raw.startswith(b"data: "):
                            continue  # blank separators and SSE comments
                        payload = raw[6:].rstrip(b"\r")
                        if payload == b"[DONE]":
                            break
                        data = json.loads(payload)
                        if _is_token_event(data, s.endpoint):
                            chunks.append(now)
                        if data.get("usage"):
                            usage = data["usage"]
                if not chunks:
                    error = "no token received"
    except httpx.TimeoutException as e:
        error = f"{TIMEOUT_PREFIX} no data for {s.request_timeout_s:g} s ({type(e).__name__})"
    except httpx.HTTPError as e:
        error = f"{type(e).__name__}: {e}"[:300] or type(e).__name__
    return RequestRecord(
        index=index,
        send_time=send,
        prompt_len=req.prompt_len,
        expected_output_len=req.output_len,
        first_token_time=chunks[0] if chunks else None,
        end_time=chunks[-1] if chunks else None,
        chunk_times=tuple(chunks),
        prompt_tokens=usage.get("prompt_tokens"),
        output_tokens=int(usage.get("completion_tokens") or len(chunks)),
        error=error,
    )


TIMEOUT_PREFIX = "timeout:"


def arrival_offsets(n: int, rate: float, seed: int) -> list[float]:
    """Send times in seconds from the start: all at 0 for rate=inf, else Poisson arrivals."""
    if math.isinf(rate):
        return [0.0] * n
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]).tolist() if n else []


class _Control:
    """How one shard of the load takes work, reports records and learns of an abort.

    In one process it is plain Python state; across processes `_SharedControl` keeps the same
    interface over a shared counter and a shared abort code.
    """

    def __init__(self, n: int, on_done: Callable[[RequestRecord], None] | None,
                 alive: Callable[[], bool] | None) -> None:
        self.n, self.next, self.reason = n, 0, ""
        self.records: dict[int, RequestRecord] = {}
        self._on_done, self._alive = on_done, alive

    def take(self) -> int | None:
        """The next request to send, None when all are taken."""
        if self.next >= self.n:
            return None
        self.next += 1
        return self.next - 1

    def emit(self, rec: RequestRecord) -> None:
        self.records[rec.index] = rec
        if self._on_done is not None:
            self._on_done(rec)

    def abort(self, reason: str) -> None:
        self.reason = self.reason or reason

    def aborted(self) -> str:
        """Why the remaining requests must be cancelled, '' while they need not."""
        if not self.reason and self._alive is not None and not self._alive():
            self.reason = SERVER_EXITED
        return self.reason


SERVER_EXITED = "cancelled: server exited"
WATCH_S = 0.2  # how often a shard checks for an abort


def _hung(timeout_s: float) -> str:
    # a stream silent for request_timeout_s: the server hangs; waiting out every other request
    # the same way would take (requests x timeout) / concurrency
    return f"cancelled: server hung (a stream was silent for {timeout_s:g} s)"


async def _shard(
    base_url: str,
    model: str,
    requests: Sequence[Request],
    offsets: Sequence[float],
    settings: LoadSettings,
    n_slots: int,
    warm: Sequence[Request],
    ctl: Any,  # _Control or _SharedControl
    start: Callable[[], Awaitable[float]],
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[float, float]:
    """Open `n_slots` connections, send `warm`, then, once `start()` returns the clock's zero,
    keep every slot busy with the next request `ctl.take()` gives until none is left.

    Returns (seconds from zero to the last record, CPU seconds of this process meanwhile).
    """
    # One client of one connection per concurrency slot: httpcore's pool scans every one of its
    # connections for each request and each read, which with 512 connections in one pool cost
    # 172 us of CPU per streamed token and capped the client at ~5,800 tokens/s
    # (docs/load-generator.md). Keep-alive shorter than uvicorn's 5 s: reusing a connection the
    # server is closing at the same moment fails with ReadError.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=2.0)
    timeout = httpx.Timeout(settings.request_timeout_s, connect=10.0, pool=None)
    ssl_context = httpx.create_ssl_context()  # once: each client would load the CA bundle
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(
            base_url=base_url, limits=limits, timeout=timeout, transport=transport,
            verify=ssl_context)) for _ in range(n_slots)]
        workers: list[asyncio.Task[None]] = []

        def stop_all(reason: str) -> None:
            ctl.abort(reason)
            for w in workers:
                if w is not asyncio.current_task():
                    w.cancel()

        async def send(client: httpx.AsyncClient, i: int, req: Request, t0: float) -> None:
            rec = await _one(client, model, i, req, settings, t0)
            if rec.error and rec.error.startswith(TIMEOUT_PREFIX):
                stop_all(_hung(settings.request_timeout_s))
            if i >= 0:
                ctl.emit(rec)

        async def watch() -> None:
            while not ctl.aborted():
                await asyncio.sleep(WATCH_S)
            stop_all(ctl.aborted())

        watcher = asyncio.create_task(watch())
        try:
            if warm:
                t_warm = time.perf_counter()
                workers = [asyncio.create_task(send(clients[j % n_slots], -1, r, t_warm))
                           for j, r in enumerate(warm)]
                await asyncio.gather(*workers, return_exceptions=True)
            t0 = await start()
            cpu0 = time.process_time()
            if ctl.aborted():  # the server hung or died during the warm-up: send nothing
                return 0.0, 0.0

            async def work(client: httpx.AsyncClient) -> None:
                while not ctl.aborted() and (i := ctl.take()) is not None:
                    delay = offsets[i] - (time.perf_counter() - t0)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await send(client, i, requests[i], t0)

            workers = [asyncio.create_task(work(c)) for c in clients]
            await asyncio.gather(*workers, return_exceptions=True)
            return time.perf_counter() - t0, time.process_time() - cpu0
        finally:  # also when interrupted: no task is left behind
            for w in [*workers, watcher]:
                w.cancel()
            await asyncio.gather(*workers, watcher, return_exceptions=True)


def _records(requests: Sequence[Request], got: dict[int, RequestRecord],
             reason: str) -> list[RequestRecord]:
    """One record per request: those never sent or cut off carry why."""
    return [got.get(i) or RequestRecord(index=i, send_time=0.0, prompt_len=r.prompt_len,
                                        expected_output_len=r.output_len,
                                        error=reason or "cancelled")
            for i, r in enumerate(requests)]


def auto_processes(concurrency: int, cpus: int | None = None) -> int:
    """Client processes for a concurrency: one per 128 slots, at most a quarter of the CPUs
    (the server needs the rest), at least one."""
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
    return max(1, min(math.ceil(concurrency / 128), cpus // 4))


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
) -> LoadResult:
    """Run the warm-up, then every request; returns records and the measured duration.

    Warm-up requests should differ from the measured ones (`warmup_requests`): with prefix
    caching on, repeating measured prompts in the warm-up would inflate the measurement.

    `alive` is polled while requests run; when it turns False (the server died) outstanding
    requests are cancelled and recorded as failed, so a crash ends the benchmark in about a second.

    With `settings.processes` > 1 the concurrency slots are spread over that many processes
    (not with a `transport`, which cannot leave this process).
    """
    conc = min(settings.max_concurrency or len(requests), len(requests)) or 1
    warm: list[Request] = []
    if settings.warmup and requests:
        pool = warmup_requests or requests
        warm = [pool[i % len(pool)] for i in range(settings.warmup)]
    offsets = arrival_offsets(len(requests), settings.request_rate, settings.seed)
    stats = ServerStats()
    # its own client: a scrape must not wait for one of the benchmark's connections
    scraper = httpx.AsyncClient(base_url=base_url) if scrape_metrics else None
    poller: asyncio.Task[None] | None = None

    async def start() -> float:
        """After the warm-up: the counters at the start, then the clock's zero."""
        nonlocal poller
        if scraper is not None:
            await scrape_once(scraper, stats)
            # Sampling gauges during the run is opt-in: each scrape is parsed in this event
            # loop, which may also read streams.
            if metrics_interval_s:
                poller = asyncio.create_task(poll(scraper, stats, metrics_interval_s))
        return time.perf_counter()

    processes = min(settings.processes, conc)
    try:
        if processes > 1 and transport is None:
            got, reason, duration, cpu = await _run_processes(
                base_url, model, requests, offsets, settings, conc, processes, warm, start,
                on_done, alive)
        else:
            ctl = _Control(len(requests), on_done, alive)
            duration, cpu = await _shard(base_url, model, requests, offsets, settings, conc,
                                         warm, ctl, start, transport)
            got, reason = ctl.records, ctl.reason
        if scraper is not None:  # the counters at the end
            await scrape_once(scraper, stats)
    finally:  # also when interrupted: no helper task is left with an unread exception
        if poller is not None:
            poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)
        if scraper is not None:
            await scraper.aclose()
    # the load generator's own CPU use (its busiest process): near 1.0 it is the bottleneck and
    # its latencies lag
    load_stats = {"client_cpu_fraction": cpu / duration if duration > 0 else 0.0,
                  "client_processes": float(max(processes, 1))}
    return LoadResult(records=_records(requests, got, reason), duration_s=duration,
                      server_stats=stats.summary() | load_stats)


# --- several processes ---------------------------------------------------------------------
# Each process runs `_shard` over its share of the slots; they take request indices from one
# shared counter (so the concurrency is global, as with one process), start on one clock zero
# (perf_counter is system-wide on Linux), and send their records back through a queue as they
# finish, so progress is live. An abort (server exited or hung, a client process failed) is a
# shared code that every shard polls.

_ABORT_EXITED, _ABORT_HUNG, _ABORT_CLIENT = 1, 2, 3


class _SharedControl:
    def __init__(self, n: int, counter: Any, code: Any, timeout_s: float,
                 out: Any) -> None:
        self.n, self.counter, self.code, self.timeout_s, self.out = n, counter, code, \
            timeout_s, out

    def take(self) -> int | None:
        with self.counter.get_lock():
            i = int(self.counter.value)
            if i >= self.n:
                return None
            self.counter.value = i + 1
        return i

    def emit(self, rec: RequestRecord) -> None:
        self.out.put(("rec", rec))

    def abort(self, reason: str) -> None:
        code = _ABORT_HUNG if reason.startswith("cancelled: server hung") else _ABORT_EXITED
        with self.code.get_lock():
            if not self.code.value:
                self.code.value = code

    def aborted(self) -> str:
        return _reason(int(self.code.value), self.timeout_s)


def _reason(code: int, timeout_s: float) -> str:
    return {0: "", _ABORT_EXITED: SERVER_EXITED, _ABORT_HUNG: _hung(timeout_s),
            _ABORT_CLIENT: "cancelled: a load generator process failed"}[code]


def _shard_process(k: int, args: tuple[Any, ...], shared: tuple[Any, ...]) -> None:
    """Entry point of one client process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us through `code`
    base_url, model, requests, offsets, settings, n_slots, warm = args
    counter, code, go, t0v, out = shared
    ctl = _SharedControl(len(requests), counter, code, settings.request_timeout_s, out)

    async def start() -> float:
        out.put(("ready", k))
        while not await asyncio.to_thread(go.wait, WATCH_S):
            if code.value:
                break
        return float(t0v.value)

    try:
        end, cpu = asyncio.run(_shard(base_url, model, requests, offsets, settings, n_slots,
                                      warm, ctl, start))
        out.put(("done", k, end, cpu))
    except BaseException as e:  # reported, not printed: the parent names the failure
        out.put(("failed", k, f"{type(e).__name__}: {e}"))


async def _run_processes(
    base_url: str,
    model: str,
    requests: Sequence[Request],
    offsets: Sequence[float],
    settings: LoadSettings,
    conc: int,
    processes: int,
    warm: Sequence[Request],
    start: Callable[[], Awaitable[float]],
    on_done: Callable[[RequestRecord], None] | None,
    alive: Callable[[], bool] | None,
) -> tuple[dict[int, RequestRecord], str, float, float]:
    """Records by index, abort reason, duration, CPU seconds of the busiest process."""
    ctx = mp.get_context("spawn")  # fork would copy this process's threads' locks
    counter, code = ctx.Value("q", 0), ctx.Value("i", 0)
    go, t0v, out = ctx.Event(), ctx.Value("d", 0.0), ctx.Queue()
    procs = []
    for k in range(processes):
        slots = conc // processes + (k < conc % processes)
        args = (base_url, model, list(requests), list(offsets), settings, slots,
                list(warm[k::processes]))
        procs.append(ctx.Process(target=_shard_process, args=(k, args, (counter, code, go,
                                                                       t0v, out)),
                                 name=f"autotune-load-{k}", daemon=True))
    got: dict[int, RequestRecord] = {}
    ready: set[int] = set()
    ends: dict[int, tuple[float, float]] = {}
    failure = ""

    def handle(msg: tuple[Any, ...]) -> None:
        nonlocal failure
        if msg[0] == "rec":
            got[msg[1].index] = msg[1]
            if on_done is not None:
                on_done(msg[1])
        elif msg[0] == "ready":
            ready.add(msg[1])
        elif msg[0] == "done":
            ends[msg[1]] = (msg[2], msg[3])
        else:
            failure = failure or f"load generator process {msg[1]} failed: {msg[2]}"
            ends[msg[1]] = (0.0, 0.0)
            code.value = code.value or _ABORT_CLIENT

    async def drain(until: Callable[[], bool]) -> None:
        while not until():
            try:
                handle(await asyncio.to_thread(out.get, True, WATCH_S))
                while True:
                    handle(out.get_nowait())
            except queue.Empty:
                pass
            if alive is not None and not alive() and not code.value:
                code.value = _ABORT_EXITED
            for k, p in enumerate(procs):
                if k not in ends and p.exitcode is not None and out.empty():
                    handle(("failed", k, f"exited with code {p.exitcode}"))

    try:
        for p in procs:
            p.start()
        await drain(lambda: len(ready | set(ends)) == processes)
        t0v.value = await start()
        go.set()
        await drain(lambda: len(ends) == processes)
    finally:
        code.value = code.value or _ABORT_EXITED  # stops any shard still running
        go.set()
        for p in procs:
            if p.pid is None:  # never started (start() of an earlier one failed)
                continue
            await asyncio.to_thread(p.join, 10)
            if p.is_alive():
                p.kill()
                p.join()
    reason = _reason(int(code.value), settings.request_timeout_s) if len(got) < len(requests) \
        else ""
    duration = max(e for e, _ in ends.values())
    return got, failure or reason, duration, max(c for _, c in ends.values())


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
