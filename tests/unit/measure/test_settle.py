"""A point that stops once its miss is settled (autotune.measure.settle), against a synthetic
server with a known knee: a settled point is one the full point would have missed too, and the
capacity search finds the same capacity in less time."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.config.metric_names import FAILED
from autotune.config.workload import SLOConfig
from autotune.load import arrival_offsets
from autotune.load.record import Request, RequestRecord
from autotune.measure.capacity import LoadPoint, intervals, judge
from autotune.measure.metrics import compute_metrics
from autotune.measure.point import samples
from autotune.measure.search import search
from autotune.measure.settle import Settle, rules
from autotune.measure.stats import percentile_interval, percentile_ranks

SLOS = [SLOConfig(metric="p99_ttft_ms", max=2000.0), SLOConfig(metric="p99_tpot_ms", max=60.0)]
TICK_S = 0.2  # how often the load generator asks


def simulate(load: float, seed: int, n: int, knee: float = 50.0) -> list[RequestRecord]:
    """A server with one FIFO prefill queue of `knee` requests' worth of prompt tokens a second
    (its TTFT grows without bound above the knee) and a TPOT that grows with the load (60 ms
    at twice the knee): each request's timeline at `load` Poisson arrivals a second."""
    rng = np.random.default_rng(seed)
    prompts, outs = rng.integers(50, 400, n), rng.integers(20, 300, n)
    speed = 225.0 * knee  # prompt tokens a second (225: the mean prompt)
    free, out = 0.0, []
    for i, (t, p, o) in enumerate(zip(arrival_offsets(n, load, seed), prompts, outs,
                                      strict=True)):
        free = max(t, free) + p / speed
        tpot = (0.020 + 0.020 * load / knee) * (1 + 0.2 * rng.random())
        out.append(RequestRecord(index=i, send_time=t, prompt_len=int(p),
                                 expected_output_len=int(o), first_token_time=free,
                                 end_time=free + tpot * (o - 1), output_tokens=int(o),
                                 scheduled_time=t))
    return out


def requests_of(records: list[RequestRecord]) -> list[Request]:
    return [Request("x", r.prompt_len, r.expected_output_len) for r in records]


def full_state(records: list[RequestRecord]) -> str:
    """The full point's verdict: met, missed or close (judge, with the intervals)."""
    flat = compute_metrics(records, max(r.end_time or 0.0 for r in records)).flat()
    return judge(flat, SLOS, intervals(SLOS, samples(records)))[0]


def replay(records: list[RequestRecord], settle: Settle) -> float | None:
    """Feed a point's events to `settle` in time order, asking every TICK_S as the load
    generator does; the second it settled, or None."""
    events = sorted([(r.first_token_time, 0, r) for r in records]
                    + [(r.end_time, 1, r) for r in records], key=lambda e: (e[0], e[1]))
    t, k = 0.0, 0
    end = events[-1][0]
    while t <= end:
        while k < len(events) and events[k][0] <= t:
            _, kind, r = events[k]
            if kind == 0:
                settle.first(r.index, r.send_time, r.first_token_time)
            else:
                settle.record(r)
            k += 1
        if settle(t):
            return t
        t += TICK_S
    return None


def test_the_count_that_settles_a_p99_is_the_intervals_lower_rank() -> None:
    """`need` requests over the target put the interval's lower end over it; one fewer may
    not."""
    reqs = [Request("x", 10, 50)] * 1280
    need = rules(SLOS[:1], reqs)[0].need
    k = percentile_ranks(1280, 99.0)[0]
    assert need == 1280 - k + 1 == 21
    values = [1.0] * (1280 - need) + [3000.0] * need
    assert percentile_interval(values, 99.0)[0] > 2000.0
    values = [1.0] * (1280 - need + 1) + [3000.0] * (need - 1)
    assert percentile_interval(values, 99.0)[0] < 2000.0


def test_bounds_from_first_tokens_and_from_arrivals_without_one() -> None:
    """TTFTs known at the first token settle before the requests end; with the schedule,
    requests still waiting for a first token count as late too; a TPOT bound grows while a
    request decodes; a mean settles on the sum of its bounds."""
    reqs = [Request("x", 10, 101)] * 200  # need = 6 for a p99 of 200
    ttft = Settle(SLOS[:1], reqs)
    for i in range(5):
        ttft.first(i, 0.0, 2.5)
    assert not ttft(3.0)
    ttft.first(5, 0.1, 2.2)
    assert ttft(3.0) and ttft.at_s == 3.0 and "6 of 200" in str(ttft.reason)
    assert ttft.metric == "p99_ttft_ms"  # what it settled, as data
    waiting = Settle(SLOS[:1], reqs, offsets=[0.01 * i for i in range(200)])
    assert not waiting(3.0)  # arrivals 0.00..0.05 are 3 s old, but the margin is 1 s
    assert waiting(3.06) and "6 of 200" in str(waiting.reason)
    tpot = Settle(SLOS[1:], reqs)
    for i in range(6):
        tpot.first(i, 0.0, 0.5)
    assert not tpot(1.5 + 100 * 0.060)  # (now - 1 - 0.5) / 100 = 60 ms: not over yet
    assert tpot(1.6 + 100 * 0.060) and tpot.metric == "p99_tpot_ms"
    mean = Settle([SLOConfig(metric="mean_ttft_ms", max=100.0)], reqs)
    for i in range(20):
        mean.first(i, 0.0, 1.0)
    assert not mean(2.0)  # 20 x 1 s / 200 = 100 ms: not above
    mean.first(20, 0.0, 0.01)
    assert mean(2.0)


def test_a_failed_request_settles_and_other_slos_do_not() -> None:
    reqs = [Request("x", 10, 5)] * 50
    other = Settle([SLOConfig(metric="p99_itl_ms", max=1.0),
                    SLOConfig(metric="total_token_throughput", min=1e9)], reqs)
    assert other.rules == []
    other.first(0, 0.0, 100.0)
    assert not other(200.0)
    other.record(RequestRecord(index=1, send_time=0.0, prompt_len=10, expected_output_len=5,
                               error="HTTP 500: boom"))
    assert other(200.0) and "HTTP 500" in str(other.reason) and other.metric == FAILED


@pytest.mark.parametrize("seed", range(4))
def test_a_settled_point_is_one_the_full_point_misses(seed: int) -> None:
    """Across loads from well under the knee (50) to far over it: every point that settled
    is missed by the full point's verdict; the points far over the knee settle in a fraction
    of their time."""
    settled_loads = []
    for load in (20, 35, 45, 50, 55, 60, 80, 120):
        n = 20 * load
        recs = simulate(load, seed * 1000 + load, n)
        at = replay(recs, Settle(SLOS, requests_of(recs),
                                 arrival_offsets(n, load, seed * 1000 + load)))
        if at is not None:
            settled_loads.append(load)
            assert full_state(recs) == "missed", (load, at)
            if load >= 80:
                assert at < 0.5 * max(r.end_time or 0.0 for r in recs)
    assert {80, 120} <= set(settled_loads)
    assert not {20, 35} & set(settled_loads)


def synthetic_measure(settle: bool, seed: int):  # type: ignore[no-untyped-def]
    """A capacity search's `measure` on the synthetic server: a point's seconds are its full
    length, or when it settled."""

    def measure(load: float) -> LoadPoint:
        n = int(20 * load)
        recs = simulate(load, seed, n)
        length = max(r.end_time or 0.0 for r in recs)
        at = replay(recs, Settle(SLOS, requests_of(recs), arrival_offsets(n, load, seed))) \
            if settle else None
        state = "missed" if at is not None else full_state(recs)
        return LoadPoint(load, state == "met", (), {}, seconds=length if at is None else at,
                         settled_s=at)

    return measure


@pytest.mark.parametrize("seed", range(3))
def test_settling_keeps_the_capacity_and_saves_time(seed: int) -> None:
    """The H100 study's search (start 64, tolerance 0.1) on the synthetic server, with and
    without settling: the same capacity, and the settled search takes less time."""
    kw = {"axis": "rate", "low": 4.0, "high": 512.0, "tolerance": 0.1, "start": 64.0}
    full = search(synthetic_measure(False, seed), **kw)  # type: ignore[arg-type]
    fast = search(synthetic_measure(True, seed), **kw)  # type: ignore[arg-type]
    assert fast.capacity == full.capacity and 20 <= full.capacity <= 60
    assert [p.load for p in fast.points] == [p.load for p in full.points]
    took = [sum(p.seconds for p in r.points) for r in (full, fast)]
    assert took[1] < 0.8 * took[0]
    assert any(p.settled_s is not None for p in fast.points)
