"""How many warm-up windows a capacity trial's boot needs, from the study's earlier boots of the
same config: the one decision, and the words recorded on the trial (`TrialFacts.warm_up`).

A boot's first point runs its load in windows until two agree with no kernel compiling in the
later (autotune.measure.point, `warm_up`; auto: up to 4 on a GPU). On an H200 a certify boot
spent 59 s there, 4 windows, against 52 s of boot and 123 s of load points (issue 85). A
config booted before on this machine, on the same caches (vLLM's torch.compile cache and
Triton's kernels under the study's `vllm-cache`), has its kernels on disk. When that boot's
warm-up saw no kernel compiling after its first window and none of its measured points did,
this boot warms in at most QUICK windows: two that agree are the fewest that still check a
server is warm, and a compilation vLLM's JIT monitor logs in the last window still runs more
(`PointPolicy.more_windows`). Every other boot warms as the study says. The monitor also logs
on a boot with warm caches (the MoE's 2 `fused_moe_kernel` lines came in the warm-up of every
boot, cold or warm: docs/results/warm-server-h100), so the rule reads where the lines fell,
not whether there were any.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config.study import ServerConfig
from autotune.measure.runner import cache_root
from autotune.tuning.record import TrialRecord

QUICK = 2  # windows at most (unless a kernel compiles) for a config that ran warm before


@dataclass(frozen=True)
class WarmUpSize:
    """The warm-up a boot runs: at most `enough` windows unless a kernel compiles (0: as the
    study's capacity.warm_windows says), why, and the earlier boot it rests on."""

    enough: int
    why: str
    of_trial: int | None = None

    def facts(self) -> dict[str, Any]:
        """As the trial records it (TrialFacts.warm_up)."""
        return {"size": "short" if self.enough else "full", "windows": self.enough or None,
                "of_trial": self.of_trial, "why": self.why}


def compiled_late(r: TrialRecord) -> bool | None:
    """Whether a boot saw a kernel compile after its warm-up's first window (or in a measured
    point); None where it cannot be told: no warm-up ran, or no log was watched."""
    search = r.facts.searches().get(None)
    if search is None or not search.points:
        return None
    first = search.points[0].server  # the points in the order measured: the first warmed
    if not first.get("warm_windows"):
        return None
    if any(p.server.get("jit_events") or p.server.get("jit_remeasured")
           for p in search.points):
        return True
    if "warm_jit_late" in first:
        return first["warm_jit_late"] > 0
    if "warm_jit_events" not in first:  # unwatched: no count is no proof of none
        return None
    if not first["warm_jit_events"]:
        return False
    # recorded before warm_jit_late: two windows that agreed had none in the second
    return False if first["warm_windows"] == 2 and first.get("warm_stable") else None


def warm_up_size(recs: Sequence[TrialRecord], number: int, flags_key: str, machine: str,
                 cache: Path, cache_of: Callable[[TrialRecord], Path | None]) -> WarmUpSize:
    """The warm-up of trial `number`'s boot of the config `flags_key` on `machine` with its
    caches at `cache`: short (QUICK) where the latest earlier boot of that config here, on those
    caches (`cache_of` a record), saw no kernel compile after its first warm-up window."""
    here = [r for r in recs if r.number < number and r.facts.flags_key == flags_key
            and r.facts.machine == machine and r.facts.searches()
            and cache_of(r) == cache]
    if not here or not cache.is_dir():
        return WarmUpSize(0, "no earlier boot of this config on this machine and its caches")
    last = max(here, key=lambda r: r.number)
    late = compiled_late(last)
    if late is None:
        return WarmUpSize(0, f"trial {last.number}'s boot of this config left no record of "
                          "where its kernels compiled (no warm-up, or no log read)",
                          last.number)
    if late:
        return WarmUpSize(0, f"a kernel compiled after the first warm-up window of trial "
                          f"{last.number}'s boot of this config", last.number)
    return WarmUpSize(QUICK, f"trial {last.number} booted this config on these caches and no "
                      f"kernel compiled after its first warm-up window: at most {QUICK} "
                      "windows, more while vLLM logs a kernel compiling", last.number)


def for_boot(recs: Sequence[TrialRecord], number: int, flags_key: str, machine: str,
             server: ServerConfig, workdir: Path) -> WarmUpSize:
    """`warm_up_size` for trial `number`'s boot in `workdir`, each boot's caches where the
    runner puts them (runner.cache_root: a boot's folder from its log's)."""
    def cache_of(r: TrialRecord) -> Path | None:
        return cache_root(server, Path(r.facts.log_path).parent) if r.facts.log_path else None

    return warm_up_size(recs, number, flags_key, machine, cache_root(server, workdir),
                        cache_of)
