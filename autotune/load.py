"""Async httpx load generator: streams requests at a server and returns one record per request.

Payloads and timing follow `vllm bench serve` (vllm/benchmarks/lib/endpoint_request_func.py):
streaming, `stream_options.include_usage` so token counts come from the server, a chunk with
`choices` is a token event (the first one is TTFT, the gaps between later ones are ITLs), and the
request ends at its last token event. Warm-up requests run before the clock starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
import time
from collections.abc import Callable, Sequence
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
    """
    conc = settings.max_concurrency or max(len(requests), 1)
    # One client of one connection per concurrency slot: httpcore's pool scans every one of its
    # connections for each request and each read, which with 512 connections in one pool cost
    # 172 us of CPU per streamed token and capped the client at ~5,800 tokens/s
    # (docs/load-generator.md). Keep-alive shorter than uvicorn's 5 s: reusing a connection the
    # server is closing at the same moment fails with ReadError.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=2.0)
    timeout = httpx.Timeout(settings.request_timeout_s, connect=10.0, pool=None)
    ssl_context = httpx.create_ssl_context()  # once: each client would load the CA bundle
    slots: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(conc):
            slots.put_nowait(await stack.enter_async_context(httpx.AsyncClient(
                base_url=base_url, limits=limits, timeout=timeout, transport=transport,
                verify=ssl_context)))

        abort: list[str] = []  # why the remaining requests were cancelled
        tasks: list[asyncio.Task[RequestRecord]] = []

        async def limited(i: int, req: Request, t0: float, at: float) -> RequestRecord:
            delay = at - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            client = await slots.get()
            try:
                rec = await _one(client, model, i, req, settings, t0)
            finally:
                slots.put_nowait(client)
            if rec.error and rec.error.startswith(TIMEOUT_PREFIX) and not abort:
                # a stream silent for request_timeout_s: the server hangs; waiting out every
                # other request the same way would take (requests x timeout) / concurrency
                abort.append("cancelled: server hung (a stream was silent for "
                             f"{settings.request_timeout_s:g} s)")
                for t in tasks:
                    if t is not asyncio.current_task():
                        t.cancel()
            if on_done is not None and t0 != warm_t0:
                on_done(rec)
            return rec

        warm_t0 = time.perf_counter()
        if settings.warmup and requests:
            pool = warmup_requests or requests
            warm = [pool[i % len(pool)] for i in range(settings.warmup)]
            await asyncio.gather(*(limited(-1, r, warm_t0, 0.0) for r in warm))

        offsets = arrival_offsets(len(requests), settings.request_rate, settings.seed)
        stats = ServerStats()
        # its own client: a scrape must not wait for one of the benchmark's connections
        scraper = httpx.AsyncClient(base_url=base_url) if scrape_metrics else None
        if scraper is not None:  # the counters at the start
            await scrape_once(scraper, stats)
        # Sampling gauges during the run is opt-in: each scrape is parsed in this event loop,
        # which also reads every stream.
        poller = (asyncio.create_task(poll(scraper, stats, metrics_interval_s))
                  if scraper is not None and metrics_interval_s else None)
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        tasks = [
            asyncio.create_task(limited(i, r, t0, at))
            for i, (r, at) in enumerate(zip(requests, offsets, strict=True))
        ]
        if abort:  # the server hung during the warm-up: send nothing more
            for t in tasks:
                t.cancel()
        watcher = asyncio.create_task(_watch(alive, tasks, abort)) if alive else None
        try:
            done = await asyncio.gather(*tasks, return_exceptions=True)
            duration = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            if scraper is not None:  # the counters at the end
                await scrape_once(scraper, stats)
        finally:  # also when interrupted: no helper task is left with an unread exception
            helpers = [t for t in (watcher, poller) if t is not None]
            for h in helpers:
                h.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            if scraper is not None:
                await scraper.aclose()
    records = [
        r
        if isinstance(r, RequestRecord)
        else RequestRecord(
            index=i,
            send_time=0.0,
            prompt_len=requests[i].prompt_len,
            expected_output_len=requests[i].output_len,
            error=(abort[0] if abort else "cancelled") if isinstance(r, asyncio.CancelledError)
            else repr(r),
        )
        for i, r in enumerate(done)
    ]
    # the load generator's own CPU use: near 1.0 it is the bottleneck and its latencies lag
    load_stats = {"client_cpu_fraction": cpu / duration if duration > 0 else 0.0}
    return LoadResult(records=records, duration_s=duration,
                      server_stats=stats.summary() | load_stats)


async def _watch(alive: Callable[[], bool], tasks: list[asyncio.Task[RequestRecord]],
                 abort: list[str]) -> None:
    while True:
        await asyncio.sleep(0.5)
        if not alive():
            abort.append("cancelled: server exited")
            for t in tasks:
                t.cancel()
            return


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
