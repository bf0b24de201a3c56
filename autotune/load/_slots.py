"""Sending the requests of one process: a closed loop over concurrency slots, or an open loop
that follows an arrival schedule.

Closed loop (no rate): each slot is one kept-alive connection (one `httpx.AsyncClient` of one
connection): httpcore's pool scans every one of its connections for each request and each read,
which with 512 connections in one pool cost 172 us of CPU per streamed token and capped the
client at ~5,800 tokens/s (docs/load-generator.md).

Open loop (a request rate): one dispatcher sends each request at its scheduled arrival, whatever
is in flight, on a kept-alive connection from the process's `Pool` (a new one only when none is
idle), as `vllm bench serve` does with aiohttp's connector. Before, every request of a rate run
had its own slot and so its own new connection (docs/load-generator.md, "Rate mode").

Which request is next, where its record goes and whether to stop are the `Control`'s: plain
state in one process (`LocalControl`), shared memory across processes
(autotune.load._processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx

from autotune.errors import ClientError
from autotune.load._reads import counting_transport
from autotune.load._request import TIMEOUT_PREFIX, OnFirst, RequestOptions, send
from autotune.load.placement import run_delay_s
from autotune.load.record import Request, RequestRecord

WATCH_S = 0.2  # how often a shard checks for an abort
# the error recorded on the requests a settled run did not send or cut off
SETTLED_REASON = "cancelled: settled"


class Abort(enum.IntEnum):
    """Why the remaining requests are cancelled (an int, so processes can share it)."""

    NONE = 0
    SERVER_EXITED = 1
    SERVER_HUNG = 2
    CLIENT_FAILED = 3
    SETTLED = 4  # the caller's `stop` said the run has told what it was for


    def reason(self, timeout_s: float) -> str:
        """The error recorded on each request this abort cancelled ('' for NONE)."""
        return {
            Abort.NONE: "",
            Abort.SERVER_EXITED: "cancelled: server exited",
            # a stream silent for request_timeout_s: the server hangs; waiting out every other
            # request the same way would take (requests x timeout) / concurrency
            Abort.SERVER_HUNG: f"cancelled: server hung (a stream was silent for {timeout_s:g} s)",
            Abort.CLIENT_FAILED: "cancelled: a load generator process failed",
            Abort.SETTLED: SETTLED_REASON,
        }[self]


class Control(Protocol):
    """How one shard of the load takes work, reports records and learns of an abort."""

    def take(self) -> int | None:
        """The next request to send, None when all are taken."""

    def emit(self, rec: RequestRecord) -> None:
        """A measured request's record."""

    def first(self, index: int, sent: float, first: float) -> None:
        """A measured request's first token (seconds from the clock's zero)."""

    def abort(self, why: Abort) -> None:
        """Stop every shard (the first reason wins)."""

    def aborted(self) -> Abort:
        """Why the remaining requests must be cancelled; Abort.NONE while they need not."""


class LocalControl:
    """The Control of a load that runs in this process only."""

    def __init__(self, n: int, on_done: Callable[[RequestRecord], None] | None,
                 alive: Callable[[], bool] | None, on_first: OnFirst | None = None,
                 settled: Callable[[], bool] | None = None) -> None:
        self.n, self.next, self.why = n, 0, Abort.NONE
        self.records: dict[int, RequestRecord] = {}
        self._on_done, self._alive = on_done, alive
        self._on_first, self._settled = on_first, settled

    def take(self) -> int | None:
        if self.next >= self.n:
            return None
        self.next += 1
        return self.next - 1

    def emit(self, rec: RequestRecord) -> None:
        self.records[rec.index] = rec
        if self._on_done is not None:
            self._on_done(rec)

    def first(self, index: int, sent: float, first: float) -> None:
        if self._on_first is not None:
            self._on_first(index, sent, first)

    def abort(self, why: Abort) -> None:
        self.why = self.why or why

    def aborted(self) -> Abort:
        if not self.why and self._alive is not None and not self._alive():
            self.why = Abort.SERVER_EXITED
        if not self.why and self._settled is not None and self._settled():
            self.why = Abort.SETTLED
        return self.why


@dataclass(frozen=True)
class ShardPlan:
    """What one shard sends: its slots, the warm-up share, and the whole request list (the
    Control hands out indices into it) with each request's send offset. `open_loop`: send
    each request at its offset over pooled connections, `slots` then being this shard's cap
    on requests in flight (0: none)."""

    base_url: str
    model: str
    requests: Sequence[Request]
    offsets: Sequence[float]
    options: RequestOptions
    slots: int
    warm: Sequence[Request] = ()
    open_loop: bool = False
    reuse: bool = True  # open loop: False opens a new connection for every request
    cpus: tuple[int, ...] | None = None  # where this shard's process runs (None: anywhere)
    realtime: bool = False  # as SCHED_FIFO, where the OS allows it


class Pool:
    """One process's kept-alive connections for the open loop, each its own one-connection
    client (see the module's docstring), reused most recently returned first so that the
    idle ones are the ones that expire; a new one is opened only when none is idle."""

    def __init__(self, make: Callable[[], httpx.AsyncClient]) -> None:
        self._make = make
        self.idle: list[httpx.AsyncClient] = []
        self.every: list[httpx.AsyncClient] = []

    def take(self) -> httpx.AsyncClient:
        if self.idle:
            return self.idle.pop()
        c = self._make()
        self.every.append(c)
        return c

    def give(self, client: httpx.AsyncClient) -> None:
        self.idle.append(client)

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.every), return_exceptions=True)


def _raise_unexpected(results: Sequence[object]) -> None:
    """A slot's task that raised something other than a cancellation is a bug in the request
    path (for example a payload that cannot be built): surface it with its cause instead of
    recording every request as cancelled."""
    for r in results:
        if isinstance(r, Exception):
            raise ClientError(f"the load generator failed: {type(r).__name__}: {r}") from r


async def run_shard(plan: ShardPlan, ctl: Control, start: Callable[[], Awaitable[float]],
                    transport: httpx.AsyncBaseTransport | None = None
                    ) -> tuple[float, float, float]:
    """Open the plan's connections, send its warm-up, then, once `start()` returns the clock's
    zero, send every request `ctl.take()` gives until none is left: in a closed loop, each
    slot sends its next request when its last one ends; in an open loop, each request at its
    scheduled offset.

    Returns (seconds from zero to the last record, CPU seconds of this process meanwhile,
    seconds its event loop's thread waited for a CPU meanwhile).
    """
    # Keep-alive shorter than uvicorn's 5 s: reusing a connection the server is closing at the
    # same moment fails with ReadError.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=2.0)
    timeout = httpx.Timeout(plan.options.request_timeout_s, connect=10.0, pool=None)
    ssl_context = httpx.create_ssl_context()  # once: each client would load the CA bundle

    def make() -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=plan.base_url, limits=limits, timeout=timeout,
                                 transport=transport or counting_transport(limits, ssl_context))

    pool = Pool(make)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(pool.aclose)
        clients = [] if plan.open_loop else [pool.take() for _ in range(plan.slots)]
        workers: list[asyncio.Task[None]] = []
        sends: list[asyncio.Task[None]] = []

        def stop_all(why: Abort) -> None:
            ctl.abort(why)
            for w in [*workers, *sends]:
                if w is not asyncio.current_task():
                    w.cancel()

        async def one(client: httpx.AsyncClient, i: int, req: Request, t0: float,
                      scheduled: float | None = None) -> None:
            rec = await send(client, plan.model, i, req, plan.options, t0, scheduled,
                             ctl.first if i >= 0 else None)
            if rec.error and rec.error.startswith(TIMEOUT_PREFIX):
                stop_all(Abort.SERVER_HUNG)
            if i >= 0:
                ctl.emit(rec)

        async def pooled(i: int, req: Request, t0: float, scheduled: float | None,
                         cap: asyncio.Semaphore | None) -> None:
            client = pool.take()
            try:
                await one(client, i, req, t0, scheduled)
            finally:
                if plan.reuse:
                    pool.give(client)
                else:
                    await client.aclose()
                if cap is not None:
                    cap.release()

        async def watch() -> None:
            while not ctl.aborted():
                await asyncio.sleep(WATCH_S)
            stop_all(ctl.aborted())

        watcher = asyncio.create_task(watch())
        try:
            if plan.warm:
                t_warm = time.perf_counter()
                if plan.open_loop:  # through the pool: its connections serve the run
                    workers = [asyncio.create_task(pooled(-1, r, t_warm, None, None))
                               for r in plan.warm]
                else:
                    workers = [asyncio.create_task(one(clients[j % plan.slots], -1, r, t_warm))
                               for j, r in enumerate(plan.warm)]
                _raise_unexpected(await asyncio.gather(*workers, return_exceptions=True))
            t0 = await start()
            cpu0, delay0 = time.process_time(), run_delay_s()
            if ctl.aborted():  # the server hung or died during the warm-up: send nothing
                return 0.0, 0.0, 0.0

            async def work(client: httpx.AsyncClient) -> None:
                while not ctl.aborted() and (i := ctl.take()) is not None:
                    delay = plan.offsets[i] - (time.perf_counter() - t0)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await one(client, i, plan.requests[i], t0)

            async def dispatch() -> None:
                cap = asyncio.Semaphore(plan.slots) if plan.slots else None
                while not ctl.aborted() and (i := ctl.take()) is not None:
                    delay = plan.offsets[i] - (time.perf_counter() - t0)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if cap is not None:
                        await cap.acquire()
                    sends.append(asyncio.create_task(
                        pooled(i, plan.requests[i], t0, plan.offsets[i], cap)))
                _raise_unexpected(await asyncio.gather(*sends, return_exceptions=True))

            workers = [asyncio.create_task(dispatch())] if plan.open_loop else \
                [asyncio.create_task(work(c)) for c in clients]
            _raise_unexpected(await asyncio.gather(*workers, return_exceptions=True))
            return (time.perf_counter() - t0, time.process_time() - cpu0,
                    run_delay_s() - delay0)
        finally:  # also when interrupted: no task is left behind
            for w in [*workers, *sends, watcher]:
                w.cancel()
            await asyncio.gather(*workers, *sends, watcher, return_exceptions=True)
