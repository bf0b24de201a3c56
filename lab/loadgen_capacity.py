#!/usr/bin/env python3
"""How many streamed tokens per second the load generator can read, and what that costs it.

Starts a minimal streaming server that answers /v1/completions like vLLM (one SSE event per
token, `interval` seconds apart per stream, then a usage chunk), pinned to CPU 0, and drives it
from CPU 1 with autotune's load generator and, for reference, with vLLM's own request function
(aiohttp, what `vllm bench serve` uses). A client that keeps up measures a mean TPOT equal to the
server's interval; one that does not measures more, and sends its next requests late.

    python -m lab.loadgen_capacity [--requests 1000] [--concurrency 512] [--interval 0.02]

To measure another version of autotune, put its checkout first: PYTHONPATH=/path/to/it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import statistics
import time
from typing import Any

from autotune import api
from autotune.api.parts import LoadSettings, Request, compute_metrics, run_load

EVENT = ("data: " + json.dumps({
    "id": "cmpl-0123456789abcdef0123456789abcdef", "object": "text_completion", "created": 1,
    "model": "m", "choices": [{"index": 0, "text": " tok", "logprobs": None,
                               "finish_reason": None, "stop_reason": None}],
    "usage": None}) + "\n\n").encode()


def serve(port: int, interval: float, burst: bool) -> None:
    """HTTP/1.1 keep-alive server: each POST streams max_tokens events, chunked. With `burst`
    every open stream gets its token at the same tick, as from vLLM's engine steps."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    tick: list[asyncio.Future[None]] = []

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        tick.append(loop.create_future())
        while True:
            await asyncio.sleep(interval)
            done, tick[0] = tick[0], loop.create_future()
            done.set_result(None)

    async def wait_token() -> None:
        await (asyncio.shield(tick[0]) if burst else asyncio.sleep(interval))

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while line := await r.readline():
                n = 0
                while (h := await r.readline()) not in (b"\r\n", b"\n", b""):
                    if h.lower().startswith(b"content-length"):
                        n = int(h.split(b":")[1])
                body = json.loads(await r.readexactly(n)) if n else {}
                if not line.startswith(b"POST"):
                    w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    continue
                tokens = int(body.get("max_tokens", 16))
                w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                        b"transfer-encoding: chunked\r\n\r\n")
                for _ in range(tokens):
                    await wait_token()
                    w.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
                    await w.drain()
                usage = {"prompt_tokens": 1024, "completion_tokens": tokens}
                tail = (f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                        "data: [DONE]\n\n").encode()
                w.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
                await w.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass

    async def main() -> None:
        ticking = asyncio.create_task(ticker())  # noqa: F841 (kept alive by the loop)
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def cpu_now() -> float:
    """CPU seconds of this process and its finished children (autotune's client processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(name: str, fn: Any, n_events: int, interval: float) -> dict[str, Any]:
    t, c = time.perf_counter(), cpu_now()
    tpots = fn()
    wall, cpu = time.perf_counter() - t, cpu_now() - c
    return {"client": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "tokens_per_s": round(n_events / wall), "cpu_us_per_token": round(1e6 * cpu / n_events),
            "mean_tpot_ms": round(statistics.mean(tpots), 2), "true_tpot_ms": interval * 1000}


def autotune_client(url: str, a: argparse.Namespace) -> list[float]:
    reqs = [Request(prompt=[1] * 16, prompt_len=1024, output_len=a.tokens)
            for _ in range(a.requests)]
    res = run_load(url, "m", reqs, LoadSettings(max_concurrency=a.concurrency,
                                                processes=a.processes))
    m = compute_metrics(res.records, res.duration_s)
    assert m.completed == a.requests, m.errors
    return [1000 * (r.e2el - r.ttft) / (r.output_tokens - 1) for r in res.records]


def vllm_client(url: str, a: argparse.Namespace) -> list[float]:
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_completions,
    )

    async def main() -> list[Any]:
        sem = asyncio.Semaphore(a.concurrency)
        conn = aiohttp.TCPConnector(limit=a.concurrency, keepalive_timeout=60)
        async with aiohttp.ClientSession(connector=conn, trust_env=True) as session:
            async def one() -> Any:
                inp = RequestFuncInput(prompt=[1] * 16, api_url=f"{url}/v1/completions",
                                       prompt_len=1024, output_len=a.tokens, model="m",
                                       ignore_eos=True)
                async with sem:
                    return await async_request_openai_completions(inp, session)
            return await asyncio.gather(*(one() for _ in range(a.requests)))

    outs = asyncio.run(main())
    assert all(o.success for o in outs), next(o.error for o in outs if not o.success)
    return [1000 * (o.latency - o.ttft) / (a.tokens - 1) for o in outs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=128, help="streamed tokens per request")
    ap.add_argument("--interval", type=float, default=0.02,
                    help="seconds between a stream's tokens")
    ap.add_argument("--burst", action="store_true",
                    help="all streams' tokens at one tick (vLLM's engine steps)")
    ap.add_argument("--processes", type=int, default=1, help="autotune's client processes")
    ap.add_argument("--cpus", default="",
                    help="CPUs of the client, e.g. 1-4 (default: CPU 1; the server has CPU 0)")
    ap.add_argument("--clients", default="autotune,vllm")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = mp.get_context("spawn").Process(target=serve, args=(port, a.interval, a.burst),
                                             daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    lo, _, hi = (a.cpus or "1").partition("-")
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, set(range(int(lo), int(hi or lo) + 1)))
    offered = a.concurrency / a.interval
    where = os.path.dirname(os.path.dirname(api.__file__))  # the autotune package's folder
    print(f"autotune from {where}; {a.requests} requests x "
          f"{a.tokens} tokens, concurrency {a.concurrency}, one token per {a.interval * 1000:g} ms "
          f"per stream{' in bursts' if a.burst else ''} (offered up to {offered:,.0f} tokens/s); "
          f"client on CPUs {a.cpus or 1} ({a.processes} autotune processes), server on CPU 0")
    clients = {"autotune": autotune_client, "vllm bench (aiohttp)": vllm_client}
    for name, fn in clients.items():
        if name.split()[0] not in a.clients.split(","):
            continue
        row = measure(name, lambda fn=fn: fn(url, a), a.requests * a.tokens, a.interval)
        print(json.dumps(row), flush=True)
    server.terminate()


if __name__ == "__main__":
    main()
