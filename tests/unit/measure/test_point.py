"""The point policy's steps, one by one (autotune.measure.point): each against a scripted run,
so a rule changed in one method is tested in one place."""

from __future__ import annotations

from typing import Any

from autotune.config.capacity import CapacityConfig
from autotune.config.workload import SLOConfig
from autotune.load import LoadSettings
from autotune.load.record import Request, RequestRecord
from autotune.measure.capacity import LATE_READS, point_seed
from autotune.measure.metrics import compute_metrics
from autotune.measure.point import Kept, Point, PointPolicy, PointRules
from autotune.measure.settle import Settle

SLOS = [SLOConfig(metric="p99_tpot_ms", max=60)]


def run_of(slow: int = 0, n: int = 200, tpot: float = 0.01, processes: int = 1,
           **stats: float) -> Point:
    """n requests of 4 tokens, `slow` of them at 70 ms a token, the rest at `tpot`."""
    recs = []
    for i in range(n):
        t = 0.07 if i < slow else tpot
        recs.append(RequestRecord(index=i, send_time=0.0, prompt_len=4, expected_output_len=4,
                                  first_token_time=0.05, end_time=0.05 + 3 * t,
                                  chunk_times=tuple(0.05 + k * t for k in range(4)),
                                  prompt_tokens=4, output_tokens=4))
    return Point(compute_metrics(recs, 1.0), recs, dict(stats),
                 LoadSettings(processes=processes))


class Script:
    """A run that hands out the scripted points in order (the last one again when done) and
    records each call's seed, request count and settling."""

    def __init__(self, *points: Point, settles: list[Settle | None] | None = None) -> None:
        self.points, self.settles = list(points), settles or []
        self.calls: list[tuple[float, int, int | None, bool, int | None]] = []

    def __call__(self, load: float, seed: int, n: int | None = None, settling: bool = True,
                 processes: int | None = None) -> tuple[Point, Settle | None]:
        i = min(len(self.calls), len(self.points) - 1)
        self.calls.append((load, seed, n, settling, processes))
        settle = self.settles[i] if i < len(self.settles) else None
        # a fresh copy of the stats each call: the policy marks the run it keeps
        pt = self.points[i]
        return Point(pt.metrics, pt.records, dict(pt.server_stats), pt.settings), settle


def policy(run: Script, limits: list[str | None] | None = None, **kw: Any) -> PointPolicy:
    said = list(limits or [])
    cap = CapacityConfig(axis="concurrency", low=4, high=4, settle=False, warm_windows=0,
                         **kw.pop("cap", {}))
    rules = PointRules(SLOS, cap, seed=7, windows=kw.pop("windows", 0),
                       samples=kw.pop("samples", 1), enough=kw.pop("enough", 0))
    return PointPolicy(rules, run, lambda pt, load: said.pop(0) if said else None,
                       more_processes=lambda p: 2 * p, counted=lambda name, n: {name: n}, **kw)


def test_a_run_a_kernel_compiled_in_runs_once_more_with_fresh_requests_marked() -> None:
    run = Script(run_of(jit_events=2.0), run_of())
    p = policy(run)
    first, _ = run(4.0, 11)
    kept = p.again_if_compiled(4.0, 11, Kept(first, None))
    assert [c[1] for c in run.calls] == [11, point_seed(12, 4.0)] and kept.settled is None
    assert kept.point.server_stats == {"jit_remeasured": 1.0, "jit_events_discarded": 2.0}


def test_a_run_without_a_kernel_compiling_is_kept() -> None:
    run = Script(run_of())
    first, _ = run(4.0, 11)
    kept = policy(run).again_if_compiled(4.0, 11, Kept(first, None))
    assert kept.point is first and len(run.calls) == 1


def test_a_run_read_late_runs_again_with_more_client_processes() -> None:
    run = Script(run_of(processes=2), run_of(processes=4))
    p = policy(run, limits=[f"{LATE_READS}: 30% of the gaps", None])
    first, _ = run(4.0, 11)
    kept = p.again_if_late(4.0, 11, Kept(first, None))
    assert p.processes == 4 and kept.flag is None  # the second run's limit: none
    assert run.calls[1][1] == point_seed(point_seed(11, 4.0), 4.0)
    assert kept.point.server_stats["late_reads_remeasured"] == 1.0
    p.again(4.0, 12)  # every later run of the boot starts at the raised processes
    assert [c[4] for c in run.calls] == [None, 4, 4]


def test_another_client_limit_is_kept_not_run_again() -> None:
    run = Script(run_of())
    p = policy(run, limits=["send lag 300 ms"])
    first, _ = run(4.0, 11)
    kept = p.again_if_late(4.0, 11, Kept(first, None))
    assert kept.point is first and kept.flag == "send lag 300 ms" and p.processes is None


def test_a_close_run_is_pooled_until_its_interval_clears() -> None:
    """One request of the first run over the target straddles it; fast runs pooled clear it."""
    run = Script(run_of(slow=1), run_of())
    p = policy(run)
    s = p.one_sample(4.0, 11, pool=True)
    assert 2 <= len(s.runs) < 4 and not s.misses and s.bounds["p99_tpot_ms"][1] <= 60
    assert all(not c[3] for c in run.calls[1:])  # pooled runs never settle alone


def test_a_close_point_still_close_after_close_runs_is_decided_by_the_pooled_value() -> None:
    run = Script(run_of(slow=2))
    s = policy(run, cap={"close_runs": 3}).one_sample(4.0, 11, pool=True)
    assert len(s.runs) == 3 and s.misses == []  # the pooled p99 is under 60


def test_a_settled_miss_is_the_samples_miss_and_nothing_is_pooled() -> None:
    settle = Settle(SLOS, [Request([1], 1, 4)] * 4)
    settle.reason, settle.metric = "p99_tpot_ms settled above 60", "p99_tpot_ms"
    run = Script(run_of(slow=2), settles=[settle])
    s = policy(run).one_sample(4.0, 11, pool=True)
    assert len(run.calls) == 1 and s.misses == ["p99_tpot_ms settled above 60"]
    assert s.missed == ["p99_tpot_ms"] and s.settled is settle


def test_the_warm_up_stops_at_two_agreeing_windows_without_a_kernel_compiling() -> None:
    run = Script(run_of(tpot=0.02), run_of(tpot=0.01, jit_events=1.0), run_of(tpot=0.0101))
    p = policy(run, windows=4)
    carry = p.warm_once(4.0)
    assert carry["warm_windows"] == 3.0 and carry["warm_stable"] == 1.0
    assert carry["warm_jit_events"] == 1.0 and all(not c[3] for c in run.calls)
    assert p.warm_once(4.0) == {} and len(run.calls) == 3  # later points: no warm-up


def test_without_warm_windows_nothing_runs_before_the_point() -> None:
    run = Script(run_of())
    assert policy(run).warm_once(4.0) == {} and run.calls == []


def test_several_samples_judge_the_point_on_their_medians() -> None:
    """Three fresh samples (a GPU's rule): two fast, one slow; the median is fast and meets."""
    run = Script(run_of(), run_of(slow=50), run_of())
    p = policy(run, samples=3, cap={"sample_early": 0})  # 10 ms alone is far: decides alone
    got = p.sampled(4.0)
    judged = p.judged(got, ["p99_tpot_ms"])
    assert len(got) == 3 and judged.misses == [] and judged.flat["p99_tpot_ms"] < 60
    assert len({c[1] for c in run.calls}) == 3  # each sample its own requests


def test_a_first_sample_far_from_the_line_decides_alone_and_is_marked() -> None:
    """capacity.sample_early 2 (the default): 10 ms against 60 is a clear meet; 150 ms a
    clear miss; 40 ms is near the line and two samples that agree run, as before."""
    for tpot, n, met in ((0.01, 1, True), (0.15, 1, False), (0.04, 2, True)):
        run = Script(run_of(tpot=tpot))
        p = policy(run, samples=3)
        got = p.sampled(4.0)
        assert len(got) == n and len(run.calls) == n
        assert p.far_alone(got) == (n == 1)
        assert (got[-1].runs[-1].server_stats.get("sample_far") == 1.0) == (n == 1)
        assert (p.judged(got, ["p99_tpot_ms"]).misses == []) == met
    run = Script(run_of(tpot=0.01))
    assert len(policy(run, samples=3, cap={"sample_early": 0}).sampled(4.0)) == 2  # off


def test_a_warm_up_stops_at_enough_windows_unless_the_last_compiled() -> None:
    p = policy(Script(run_of()), windows=4, enough=2)
    assert p.more_windows(0, False, False) and p.more_windows(1, False, True)
    assert not p.more_windows(2, False, False)  # two windows, the last clean: enough
    assert p.more_windows(2, False, True)  # a kernel compiled in the second: more
    assert not p.more_windows(4, False, True)  # never past `windows`
    assert not p.more_windows(1, True, False)
    full = policy(Script(run_of()), windows=4)
    assert full.more_windows(2, False, False) and not full.more_windows(4, False, False)


def test_a_short_warm_up_runs_two_windows_or_more_while_kernels_compile() -> None:
    # the first window compiled (warm caches still log it: docs/results/warm-server-h100) and
    # read slow; the second is clean: two windows, not yet agreeing, are enough
    run = Script(run_of(tpot=0.02, jit_events=2.0), run_of(tpot=0.01), run_of(tpot=0.0101))
    carry = policy(run, windows=4, enough=2).warm_once(4.0)
    assert len(run.calls) == 2 and carry["warm_windows"] == 2.0
    assert carry["warm_stable"] == 0.0 and carry["warm_enough"] == 2.0
    assert carry["warm_jit_events"] == 2.0 and carry["warm_jit_late"] == 0.0
    # a kernel compiled in the second window: a third, then two agree
    run = Script(run_of(tpot=0.02), run_of(tpot=0.01, jit_events=1.0), run_of(tpot=0.0101))
    carry = policy(run, windows=4, enough=2).warm_once(4.0)
    assert len(run.calls) == 3 and carry["warm_stable"] == 1.0
    assert carry["warm_jit_late"] == 1.0
    # the full warm-up: unchanged, up to `windows` until two agree
    run = Script(run_of(tpot=0.02), run_of(tpot=0.01), run_of(tpot=0.015), run_of(tpot=0.03))
    carry = policy(run, windows=4).warm_once(4.0)
    assert len(run.calls) == 4 and "warm_enough" not in carry and carry["warm_stable"] == 0.0
