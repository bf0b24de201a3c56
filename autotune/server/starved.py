"""Whether other work starved the machine while a server booted: a boot that times out then says
nothing of its config (issue 70: on a 2-core machine busy with other work, a config that had
booted in 34 s hit the 300 s boot timeout and was recorded infeasible).

The measure is the share of all CPUs' time that processes other than the server's own took
during the boot: the machine's busy time (/proc/stat) less the CPU time of the server's process
group (/proc/<pid>/stat, its reaped children included). Linux's CPU pressure (/proc/pressure/cpu,
the share of the time a runnable task waited for a CPU) is said beside it where the kernel has
it; it counts the server's own threads waiting for each other too, so it does not decide.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Other processes took at least this share of all CPUs during the boot. Measured: the demo's 9
# boots on a fresh clone (2 cores, 2026-11-28), other processes 2-3%, the server 1.05-1.08 CPUs;
# one other vLLM server under load (a test suite's usual neighbour) takes about half of 2
# cores; the newcomer's machine ran the fork server's imports 17-27x slower than usual (324 s
# against 12-19 s).
STARVED_SHARE = 0.75
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuClock:
    """One reading: when, the CPUs' busy and total time (ticks, /proc/stat; None elsewhere)
    and the CPU stall total (µs, /proc/pressure/cpu; None without it)."""

    at: float
    busy: float | None
    total: float | None
    stall_us: float | None

    @classmethod
    def now(cls) -> CpuClock:
        busy = total = None
        try:
            fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0]
                      .split()[1:9]]  # user nice system idle iowait irq softirq steal
            busy, total = sum(fields) - fields[3] - fields[4], sum(fields)
        except (OSError, ValueError, IndexError):
            pass
        return cls(time.monotonic(), busy, total, _stall_us())


def _stall_us() -> float | None:
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some"):
                return float(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def group_ticks(pids: Iterable[int]) -> float:
    """The CPU time (ticks) the processes `pids` and their reaped children have used."""
    used = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            used += sum(float(x) for x in fields[11:15])  # utime stime cutime cstime
        except (OSError, ValueError, IndexError):
            continue
    return used


def others_share(start: CpuClock, end: CpuClock, ours: float) -> float | None:
    """The share of all CPUs' time between two readings that processes other than ours (which
    used `ours` ticks, all of them since `start`) took; None without /proc/stat."""
    if None in (start.busy, start.total, end.busy, end.total):
        return None
    assert start.busy is not None and start.total is not None
    assert end.busy is not None and end.total is not None
    span = end.total - start.total
    return None if span <= 0 else max(0.0, end.busy - start.busy - ours) / span


def stall_share(start: CpuClock, end: CpuClock) -> float | None:
    """The share of the time between two readings in which a runnable task waited for a CPU."""
    if start.stall_us is None or end.stall_us is None or end.at <= start.at:
        return None
    return max(0.0, (end.stall_us - start.stall_us) / 1e6 / (end.at - start.at))


def cpu_text(start: CpuClock, end: CpuClock, ours: float) -> str:
    """What the CPUs did during a boot, in words (for its log and its cause)."""
    share, stall = others_share(start, end, ours), stall_share(start, end)
    return "; ".join(
        [f"other processes took {share:.0%} of the CPUs' time" if share is not None else "",
         f"the server {ours / TICK / max(end.at - start.at, 1e-9):.2f} CPUs",
         f"runnable tasks waited for a CPU {stall:.0%} of the time" if stall is not None
         else ""]).strip("; ").replace("; ; ", "; ")


def starved_since(start: CpuClock, pids: Iterable[int]) -> str | None:
    """Why the machine was starved by other work from `start` to now, while the processes
    `pids` (all started after `start`) booted; None when it was not (or nothing says so)."""
    end, ours = CpuClock.now(), group_ticks(pids)
    share = others_share(start, end, ours)
    if share is None or share < STARVED_SHARE:
        return None
    return f"{cpu_text(start, end, ours)} over the {end.at - start.at:.0f} s"
