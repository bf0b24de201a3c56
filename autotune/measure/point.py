"""What one capacity load point does, as one object whose steps are named: the point policy.

`on_server.capacity_on` builds a `PointPolicy` from the point's rules (`PointRules`: the SLOs,
the capacity settings, the seed, the warm-up and sample counts) around how a run is made on its
server (`run`: a load, a seed, how many requests -> the run and the miss it settled, if any) and
the client's limit on a run (`limit`); the policy owns every rule between them, each a method
tested alone and answering with a named result (`Kept`, `Sampled`, `Judged`;
tests/unit/measure/test_point.py):

- `warm_up`: the boot's first point runs its load in windows until two in a row agree and the
  later one overlapped no kernel compiling (at most `windows`; `more_windows`: at most `enough`
  on a boot of a config that ran warm before, unless a kernel compiled in the last);
- `again_if_compiled`: a run inside which vLLM logged a kernel compiling is not its pace: once
  more, with fresh requests;
- `again_if_late`: a run the client read late (`LATE_READS`) is the client's, not the server's:
  once more, with more client processes where that is the fix;
- `pool_close`: a run whose percentile interval straddles an SLO ("close") runs again with fresh
  requests, pooled, until the pooled interval clears it or `capacity.close_runs`; still close,
  the pooled value decides;
- `sampled`: fresh samples until the point is decided; its first alone where it is far from
  every SLO's line (`far_alone`, capacity.sample_early);
- `judged`: the point's figures and misses: one sample's, or (with `samples` > 1, on a GPU)
  the median over fresh samples and each SLO judged on the samples (autotune.measure.sampled).

The word for what a point's SLOs say is "judgement" (`capacity.judge`); "verdict" is the
reference client's word (`export --verify`) and the quality guard's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from autotune.config.capacity import CapacityConfig
from autotune.config.metric_names import FAILED
from autotune.config.workload import SLOConfig
from autotune.load import LoadSettings
from autotune.load.record import RequestRecord
from autotune.measure import sampled
from autotune.measure.capacity import LATE_READS, Samples, intervals, judge, point_seed
from autotune.measure.metrics import BenchMetrics, compute_metrics, per_request
from autotune.measure.settle import Settle

Phase = Callable[[str], None]
# a close point's later runs: seeds this far apart (fresh prompts)
CLOSE_SEED_STEP = 104_729
# warm-up windows (capacity.warm_windows): two in a row this close in mean TTFT and TPOT are a
# warm server
WARM_AGREE = 0.15


@dataclass(frozen=True)
class Point:
    """One load applied to a running server: its metrics and what the server reported."""

    metrics: BenchMetrics
    records: list[RequestRecord]
    server_stats: dict[str, float]
    settings: LoadSettings


@dataclass(frozen=True)
class Sampled:
    """One sample of a capacity point: its runs, flat metrics, intervals, misses, client limit."""

    runs: list[Point]
    flat: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    misses: list[str]
    missed: list[str]
    flag: str | None
    settled: Settle | None

    @property
    def sample(self) -> sampled.Sample:
        return sampled.Sample(self.flat, tuple(self.missed))


class Run(Protocol):
    """One run at `load` with the seed's requests (`n` of them, else the point's), settling a
    miss early where `settling` and the config allow, its client starting at `processes`
    processes where a late read raised them (None: the profile's): the run, and the settle
    that stopped it."""

    def __call__(self, load: float, seed: int, n: int | None = None, settling: bool = True,
                 processes: int | None = None) -> tuple[Point, Settle | None]: ...


def samples(records: list[RequestRecord]) -> Samples:
    return {k: [v * 1000 for v in vals] for k, vals in per_request(records).items()}  # ms


@dataclass(frozen=True)
class PointRules:
    """The numbers a capacity point's rules read, from the study's capacity settings."""

    slos: list[SLOConfig]
    cap: CapacityConfig
    seed: int  # the profile's seed
    windows: int  # warm-up windows at most on a boot's first point (0: none)
    samples: int  # fresh samples a point is judged on
    # a boot of a config that ran warm before on these caches (tuning.warmup): its warm-up
    # stops after this many windows unless the last logged a kernel compiling (0: no such stop)
    enough: int = 0


@dataclass(frozen=True)
class Kept:
    """The run a rule keeps (the first, or the one it ran again), the settle that stopped it,
    and the client's limit on it (`again_if_late` asks; None otherwise)."""

    point: Point
    settled: Settle | None
    flag: str | None = None


@dataclass(frozen=True)
class Judged:
    """A point's figures, each percentile SLO's interval, its misses and the missed metrics."""

    flat: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    misses: list[str]
    missed: list[str]


@dataclass
class PointPolicy:
    """The rules of one capacity point (the module docstring), around a server's `run`: the
    client's limit on a run (`limit`), the client processes after a late read
    (`more_processes`) and a kernel-log count, named, or nothing (`counted`)."""

    rules: PointRules
    run: Run
    limit: Callable[[Point, float], str | None]
    more_processes: Callable[[int], int]
    counted: Callable[[str, float], dict[str, float]]
    phase: Phase = lambda _p: None
    # client processes raised for a late read: every later run of the boot starts there
    processes: int | None = None
    warmed: bool = False  # the boot's first point warmed up (later points do not)

    def again(self, load: float, seed: int, n: int | None = None, settling: bool = True
              ) -> tuple[Point, Settle | None]:
        """A run, its client at the processes a late read raised them to."""
        return self.run(load, seed, n, settling, self.processes)

    def more_windows(self, done: int, stable: bool, compiled: bool) -> bool:
        """Whether the warm-up runs another window after `done`: not once two agreed
        (`stable`) or `windows` ran, nor past `enough` unless the last one logged a kernel
        compiling (vLLM's JIT monitor: the server is not warm yet)."""
        if stable or done >= self.rules.windows:
            return False
        enough = self.rules.enough
        return not (enough and done >= enough and not compiled)

    def warm_up(self, load: float) -> dict[str, float]:
        """Run the first point's load in windows until two in a row agree and the later one
        overlapped no kernel compiling (at most `windows`, or `enough`: `more_windows`): what
        it took, for the point, with the compilations after its first window
        (`warm_jit_late`: a later boot of the config reads them, tuning.warmup)."""
        t0, seen, late, last, stable, done = time.monotonic(), 0.0, 0.0, None, False, 0
        jit = 0.0
        cap, enough = self.rules.cap, self.rules.enough
        while self.more_windows(done, stable, jit > 0):
            done += 1
            self.phase(f"load {load:g} (warming, window {done})")
            pt, _ = self.again(load, point_seed(self.rules.seed + done, load),
                               max(cap.warmup, cap.requests_at(load) // 4), settling=False)
            m, jit = pt.metrics, pt.server_stats.get("jit_events", 0.0)
            seen += jit
            late += jit if done > 1 else 0.0
            now = (m.ttft_ms.mean, m.tpot_ms.mean)
            stable = last is not None and not jit and all(
                abs(a - b) <= WARM_AGREE * b for a, b in zip(now, last, strict=True))
            last = now
        return {"warm_windows": float(done), "warm_s": time.monotonic() - t0,
                "warm_stable": float(stable),
                **({"warm_enough": float(enough)} if enough else {}),
                **self.counted("warm_jit_events", seen), **self.counted("warm_jit_late", late)}

    def warm_once(self, load: float) -> dict[str, float]:
        """The warm-up a point carries: the boot's first point's, later points none."""
        carry = self.warm_up(load) if self.rules.windows and not self.warmed else {}
        self.warmed = True
        return carry

    def again_if_compiled(self, load: float, seed: int, first: Kept) -> Kept:
        """A run inside which a kernel compiled, once more with fresh requests (marked)."""
        seen = first.point.server_stats.get("jit_events")
        if not seen:
            return first
        self.phase(f"load {load:g} (a kernel compiled during it: again)")
        again, settled = self.again(load, point_seed(seed + 1, load))
        again.server_stats["jit_remeasured"] = 1.0
        again.server_stats["jit_events_discarded"] = seen
        return Kept(again, settled)

    def again_if_late(self, load: float, seed: int, first: Kept) -> Kept:
        """A run the client read late, once more (more client processes where it helps, and
        for every later run of the boot): the run kept, its settle and the client's limit."""
        flag = self.limit(first.point, load)
        if flag is None or not flag.startswith(LATE_READS):
            return Kept(first.point, first.settled, flag)
        had = first.point.settings.processes
        self.processes = self.more_processes(had)
        self.phase(f"load {load:g} (read late: again" + (
            f", {self.processes} client processes)" if self.processes > had else ")"))
        again, settled = self.again(load, point_seed(point_seed(seed, load), load))
        again.server_stats["late_reads_remeasured"] = 1.0
        return Kept(again, settled, self.limit(again, load))

    def pool_close(self, load: float, seed: int, first: Kept) -> Sampled:
        """Fresh runs of a close point, pooled, until the pooled interval clears the SLOs or
        close_runs; still close, the pooled value decides. The runs pooled, their figures,
        intervals, misses and missed metrics, and the client's limit on the last run."""
        slos, runs, flag = self.rules.slos, [first.point], first.flag
        flat, bounds = self.pooled(runs)
        state, misses, _close, missed = judge(flat, slos, bounds)
        while state == "close" and flag is None and len(runs) < self.rules.cap.close_runs:
            self.phase(f"load {load:g} (close: run {len(runs) + 1})")
            k = len(runs) - 1  # the second run's seed as before; later ones apart from it
            # judged pooled: one run settling a miss alone would decide for all of them
            again, _ = self.again(load, (point_seed(seed, load) + CLOSE_SEED_STEP * k) % 2**32,
                                  settling=False)
            runs.append(again)
            flat, bounds = self.pooled(runs)
            state, misses, _close, missed = judge(flat, slos, bounds)
            flag = self.limit(runs[-1], load)
        if state == "close":
            _state, misses, _close, missed = judge(flat, slos, {})
        return Sampled(runs, flat, bounds, misses, missed, flag, None)

    def pooled(self, runs: list[Point]) -> tuple[dict[str, float],
                                                  dict[str, tuple[float, float]]]:
        """The runs' requests as one: their figures, and each percentile SLO's interval."""
        records = [r for pt in runs for r in pt.records]
        flat = compute_metrics(records, sum(pt.metrics.duration_s for pt in runs)).flat() \
            if len(runs) > 1 else runs[0].metrics.flat()
        return flat, intervals(self.rules.slos, samples(records))

    def one_sample(self, load: float, seed: int, pool: bool) -> Sampled:
        """A run with the seed's requests, again where a kernel compiled or the client read
        late; with `pool`, a close point pooled to close_runs (`pool_close`)."""
        kept = self.again_if_late(load, seed, self.again_if_compiled(
            load, seed, Kept(*self.again(load, seed))))
        first, settled = kept.point, kept.settled
        if settled is not None:  # the requests sent already settle a miss: the rest would not
            bounds = self.pooled([first])[1] if pool else {}
            return Sampled([first], first.metrics.flat(), bounds, [str(settled.reason)],
                           [str(settled.metric)], kept.flag, settled)
        if not pool:
            flat = first.metrics.flat()
            _state, misses, _close, missed = judge(flat, self.rules.slos, {})
            return Sampled([first], flat, {}, misses, missed, kept.flag, None)
        return self.pool_close(load, seed, kept)

    def sampled(self, load: float) -> list[Sampled]:
        """Fresh samples until the point is decided (`sampled.decided`) or the client limits
        it: one sample, pooled when close, with `samples` 1."""
        got: list[Sampled] = []
        n, rules = self.rules.samples, self.rules
        while not got or (got[-1].flag is None and not sampled.decided(
                [g.sample for g in got], rules.slos, n, rules.cap.sample_early)):
            if got:
                self.phase(f"load {load:g} (sample {len(got) + 1} of {n})")
            got.append(self.one_sample(load, point_seed(
                rules.seed + sampled.SAMPLE_SEED_STEP * len(got), load), pool=n == 1))
        if self.far_alone(got):
            got[0].runs[-1].server_stats["sample_far"] = 1.0
        return got

    def far_alone(self, got: list[Sampled]) -> bool:
        """Whether a point of several samples ended on its first because it was far from the
        line (capacity.sample_early), not for a failure or the client's limit."""
        one, early = got[0].sample, self.rules.cap.sample_early
        return (self.rules.samples > 1 and len(got) == 1 and got[0].flag is None
                and FAILED not in one.missed and early > 1
                and sampled.far(one, self.rules.slos, early))

    def judged(self, got: list[Sampled], metrics: Sequence[str]) -> Judged:
        """The point's figures (`metrics`), intervals, misses and missed metrics: its last
        sample's, or over several samples their medians and `sampled.judge_samples`."""
        last = got[-1]
        if self.rules.samples <= 1:
            return Judged(last.flat, last.bounds, last.misses, last.missed)
        _met, misses, missed = sampled.judge_samples([g.sample for g in got], self.rules.slos)
        return Judged(sampled.medians([g.sample for g in got], metrics), last.bounds, misses,
                      missed)
