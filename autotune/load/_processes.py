"""The load spread over several client processes, each running `run_shard` over its share of
the slots.

One event loop reads every stream of its process. vLLM emits a token for every running request
at each engine step, so at concurrency 512 a burst of 512 events lands at once and the last of
them is read (and its next request sent) only after the other 511; several processes, each with
its own loop, read a burst in parallel (docs/load-generator.md). They take request indices from
one shared counter (so the concurrency is global, as with one process), start on one clock zero
(perf_counter is system-wide on Linux), and send their records back through a queue as they
finish, so progress is live. An abort is a shared `Abort` code that every shard polls.

Each shard's plan (the whole request list) travels in a file, not through `Process.start()`:
CPython's spawn writes the pickled target and arguments into the child's pipe while it still holds
that pipe's read end, so a child that dies before reading a payload larger than the pipe's buffer
(64 KiB) leaves the parent blocked in `start()` for good. That hung a GPU worker for 18 minutes
when its client processes could not import autotune (its files were being replaced under it);
with the plan in a file the payload is a few hundred bytes, and a child that dies or never says
it is ready (READY_S) fails the load with a ClientError.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import pickle
import queue
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from autotune.errors import ClientError, ClientProcessError
from autotune.load._request import OnFirst
from autotune.load._slots import WATCH_S, Abort, ShardPlan, run_shard
from autotune.load.placement import realtime
from autotune.load.record import RequestRecord


# -- the messages a shard process sends to the parent ------------------------------------------
@dataclass(frozen=True)
class Ready:
    shard: int


@dataclass(frozen=True)
class Record:
    record: RequestRecord


@dataclass(frozen=True)
class First:
    index: int
    sent: float
    first: float


@dataclass(frozen=True)
class Done:
    shard: int
    end_s: float
    cpu_s: float
    delay_s: float  # waiting for a CPU
    realtime: bool  # it ran as SCHED_FIFO


@dataclass(frozen=True)
class Failed:
    shard: int
    error: str
    process: bool = False  # the process itself failed (died, silent, no plan): the machine's


Message = Ready | Record | First | Done | Failed

READY_S = 120.0  # a client process that has not said Ready by then is stuck: the load fails


@dataclass(frozen=True)
class Shared:
    """What every shard process shares with the parent."""

    counter: Synchronized[int]  # the next request index
    code: Synchronized[int]  # an Abort
    go: Any  # multiprocessing.Event: the clock has started
    t0: Synchronized[float]  # the clock's zero (perf_counter)
    out: Any  # multiprocessing.Queue of Messages
    firsts: bool = False  # send First messages (someone listens)


class SharedControl:
    """The Control of one shard process."""

    def __init__(self, n: int, shared: Shared) -> None:
        self.n, self.shared = n, shared

    def take(self) -> int | None:
        with self.shared.counter.get_lock():
            i = int(self.shared.counter.value)
            if i >= self.n:
                return None
            self.shared.counter.value = i + 1
        return i

    def emit(self, rec: RequestRecord) -> None:
        self.shared.out.put(Record(rec))

    def first(self, index: int, sent: float, first: float) -> None:
        if self.shared.firsts:
            self.shared.out.put(First(index, sent, first))

    def abort(self, why: Abort) -> None:
        with self.shared.code.get_lock():
            if not self.shared.code.value:
                self.shared.code.value = int(why)

    def aborted(self) -> Abort:
        return Abort(int(self.shared.code.value))


def _shard_main(k: int, plan_path: str, shared: Shared) -> None:
    """Entry point of one client process: its ShardPlan is pickled at `plan_path`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us through `code`
    try:
        with open(plan_path, "rb") as f:
            plan: ShardPlan = pickle.load(f)
    except BaseException as e:
        shared.out.put(Failed(k, f"reading its plan: {type(e).__name__}: {e}", process=True))
        return
    if plan.cpus:
        os.sched_setaffinity(0, plan.cpus)
    rt = plan.realtime and realtime()
    ctl = SharedControl(len(plan.requests), shared)

    async def start() -> float:
        shared.out.put(Ready(k))
        while not await asyncio.to_thread(shared.go.wait, WATCH_S):
            if shared.code.value:
                break
        return float(shared.t0.value)

    try:
        end, cpu, delay = asyncio.run(run_shard(plan, ctl, start))
        shared.out.put(Done(k, end, cpu, delay, rt))
    except BaseException as e:  # reported, not printed: the parent names the failure
        ctl.abort(Abort.CLIENT_FAILED)
        shared.out.put(Failed(k, f"{type(e).__name__}: {e}"))


@dataclass
class Outcome:
    records: dict[int, RequestRecord]
    why: Abort
    duration_s: float
    cpu_s: float  # of the busiest process
    delay_s: float  # the longest wait for a CPU of a process
    realtime: bool  # every process ran as SCHED_FIFO


async def run_processes(plans: list[ShardPlan], start: Callable[[], Awaitable[float]],
                        on_done: Callable[[RequestRecord], None] | None,
                        alive: Callable[[], bool] | None, on_first: OnFirst | None = None,
                        settled: Callable[[], bool] | None = None) -> Outcome:
    """Run one process per plan; raise ClientError when one of them failed. `settled` is
    polled as `alive` is, and stops every shard (Abort.SETTLED) once it says True."""
    ctx = mp.get_context("spawn")  # fork would copy this process's threads' locks
    shared = Shared(ctx.Value("q", 0), ctx.Value("i", 0), ctx.Event(), ctx.Value("d", 0.0),
                    ctx.Queue(), on_first is not None)
    tmp = tempfile.TemporaryDirectory(prefix="autotune-load-")
    paths = [os.path.join(tmp.name, f"shard-{k}.pickle") for k in range(len(plans))]
    for path, plan in zip(paths, plans, strict=True):
        with open(path, "wb") as f:
            pickle.dump(plan, f, protocol=pickle.HIGHEST_PROTOCOL)
    procs = [ctx.Process(target=_shard_main, args=(k, path, shared), name=f"autotune-load-{k}",
                         daemon=True) for k, path in enumerate(paths)]
    got: dict[int, RequestRecord] = {}
    ready: set[int] = set()
    ends: dict[int, tuple[float, float, float]] = {}
    rts: list[bool] = []
    failure = ""
    by_process = False  # the first failure was a Failed.process one

    def handle(msg: Message) -> None:
        nonlocal failure, by_process
        if isinstance(msg, Record):
            got[msg.record.index] = msg.record
            if on_done is not None:
                on_done(msg.record)
        elif isinstance(msg, First):
            if on_first is not None:
                on_first(msg.index, msg.sent, msg.first)
        elif isinstance(msg, Ready):
            ready.add(msg.shard)
        elif isinstance(msg, Done):
            ends[msg.shard] = (msg.end_s, msg.cpu_s, msg.delay_s)
            rts.append(msg.realtime)
        else:
            if not failure:
                by_process = msg.process
            failure = failure or f"load generator process {msg.shard} failed: {msg.error}"
            ends[msg.shard] = (0.0, 0.0, 0.0)
            shared.code.value = shared.code.value or int(Abort.CLIENT_FAILED)

    async def drain(until: Callable[[], bool]) -> None:
        while not until():
            try:
                handle(await asyncio.to_thread(shared.out.get, True, WATCH_S))
                while True:
                    handle(shared.out.get_nowait())
            except queue.Empty:
                pass
            if alive is not None and not alive() and not shared.code.value:
                shared.code.value = int(Abort.SERVER_EXITED)
            if settled is not None and not shared.code.value and settled():
                shared.code.value = int(Abort.SETTLED)
            for k, p in enumerate(procs):
                if k not in ends and p.exitcode is not None and shared.out.empty():
                    handle(Failed(k, f"exited with code {p.exitcode}", process=True))
                elif (k not in ready and k not in ends and not shared.go.is_set()
                      and time.monotonic() > ready_by):
                    handle(Failed(k, f"not ready after {READY_S:g} s (alive: {p.is_alive()})",
                                  process=True))

    ready_by = time.monotonic() + READY_S
    try:
        for p in procs:
            p.start()
        await drain(lambda: len(ready | set(ends)) == len(procs))
        shared.t0.value = await start()
        shared.go.set()
        await drain(lambda: len(ends) == len(procs))
    finally:
        shared.code.value = shared.code.value or int(Abort.SERVER_EXITED)  # stops any shard
        shared.go.set()
        for p in procs:
            if p.pid is None:  # never started (start() of an earlier one failed)
                continue
            await asyncio.to_thread(p.join, 10)
            if p.is_alive():
                p.kill()
                p.join()
        tmp.cleanup()
    if failure:
        raise (ClientProcessError if by_process else ClientError)(failure)
    n = len(plans[0].requests)
    why = Abort(int(shared.code.value)) if len(got) < n else Abort.NONE
    return Outcome(got, why, max(e for e, _, _ in ends.values()),
                   max(c for _, c, _ in ends.values()), max(d for _, _, d in ends.values()),
                   bool(rts) and all(rts))
