"""Where and how the load generator runs: on CPUs that no other process's threads are bound to,
at a real-time priority where the OS allows it, and how long it waited for a CPU while it read.

vLLM on CPU binds each OpenMP thread of its worker to one core (VLLM_CPU_OMP_THREADS_BIND=auto
binds core 0 of a 2-core machine and leaves core 1 to the API server). A client the scheduler
puts on the bound core reads a stream only when that thread yields: on 2 cores, 24-35 of 48
requests had every token read in one go when the client was pinned to the bound core, 1-2 when
pinned to the other, and the same for `vllm bench serve` (docs/load-generator.md "Late reads").
The kernel saw every stream's packets spread out over 80-100 ms: the late reads were the
client's. On the free core the client still shares a CPU with vLLM's API server and engine
core, and 3 of 10 runs still read 12-21% of their token gaps late, in step with the share of
the run it waited for a CPU (0.10-0.23; the kernel's schedstat). As SCHED_FIFO it waits for none
(0.000-0.001 of the run in 6 runs, no late read): it sleeps in epoll between reads and uses
about 10% of a core, and the kernel caps real-time threads at 95% of each second anyway.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from autotune.errors import ConfigError

PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread (per-CPU by design)
ClientCpus = Literal["auto", "any"] | list[int]


def _cpus_of(status: str) -> set[int] | None:
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.split(":", 1)[1])
    return None


def parse_cpu_list(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _is_kernel_thread(pid_dir: Path) -> bool:
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return True  # gone: nothing to avoid
    fields = stat[stat.rfind(")") + 2:].split()
    return bool(int(fields[6]) & PF_KTHREAD)  # field 9 of stat: flags


def bound_cpus(allowed: set[int], skip: Iterable[int] = (), proc: Path = Path("/proc")
               ) -> set[int]:
    """The CPUs of `allowed` that some user thread outside `skip` (pids) is bound to: a thread
    whose affinity is a strict subset of `allowed`."""
    skip = set(skip)
    bound: set[int] = set()
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) in skip:
            continue
        if _is_kernel_thread(pid_dir):
            continue
        try:
            tasks = list((pid_dir / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                cpus = _cpus_of((task / "status").read_text())
            except OSError:
                continue
            if cpus is not None and cpus & allowed and cpus < allowed:
                bound |= cpus & allowed
    return bound


def client_cpus(choice: ClientCpus = "auto") -> tuple[int, ...] | None:
    """The CPUs the load generator should run on, None for anywhere: for "auto", the CPUs this
    process may use less those another process's threads are bound to (None when that leaves
    none, or when nothing is bound); "any": None; a list: those CPUs."""
    if choice == "any":
        return None
    allowed = os.sched_getaffinity(0)
    if choice != "auto":
        chosen = set(choice) & allowed
        if not chosen:
            raise ConfigError(f"profile.client_cpus: none of CPUs {sorted(choice)} is open to "
                              f"this process (it may use {sorted(allowed)}); pick from those "
                              "or use auto")
        return tuple(sorted(chosen))
    free = allowed - bound_cpus(allowed, skip={os.getpid()})
    return tuple(sorted(free)) if free and free != allowed else None


def realtime() -> bool:
    """Make the calling thread SCHED_FIFO (lowest real-time priority; processes it starts go
    back to the normal policy); False where the OS refuses (no CAP_SYS_NICE)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(1))
    except (OSError, AttributeError):
        return False
    return True


@contextlib.contextmanager
def pinned(cpus: Sequence[int] | None, rt: bool = False) -> Iterator[bool]:
    """Run the calling thread (and the threads it starts meanwhile) on `cpus`, and as a
    real-time thread with `rt` where allowed, then restore both. Yields whether it is
    real-time."""
    before = os.sched_getaffinity(0)
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    made_rt = rt and realtime()
    try:
        yield made_rt
    finally:
        if made_rt:
            os.sched_setscheduler(0, policy, param)
        if cpus:
            os.sched_setaffinity(0, before)


def run_delay_s() -> float:
    """Seconds the calling thread has spent runnable but waiting for a CPU (the kernel's
    schedstat), 0.0 where the kernel does not say."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
