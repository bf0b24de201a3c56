"""The capacity search against a synthetic server with a known knee: bracketing, bisection,
tolerance, the verdict rule and the early stop."""

from __future__ import annotations

import pytest

from autotune.config.workload import SLOConfig
from autotune.measure.capacity import LoadPoint, meets, min_requests, point_seed
from autotune.measure.search import search

SLOS = [SLOConfig(metric="p99_ttft_ms", max=2000.0), SLOConfig(metric="p99_tpot_ms", max=60.0)]


def server(knee: float, n: int = 300):  # type: ignore[no-untyped-def]
    """p99 TTFT stays at 300 ms up to the knee and climbs 400 ms per unit of load after it;
    p99 TPOT grows slowly and stays within its SLO. Loads measured are logged."""
    seen: list[float] = []

    def measure(load: float) -> LoadPoint:
        seen.append(load)
        m = {"completed": float(n), "failed": 0.0, "request_throughput": load * 0.9,
             "total_token_throughput": load * 100.0,
             "p99_ttft_ms": 300.0 + max(0.0, load - knee) * 400.0,
             "p99_tpot_ms": 20.0 + load * 0.01}
        ok, misses = meets(m, SLOS)
        return LoadPoint(load, ok, tuple(misses), m, seconds=1.0)

    return measure, seen


def true_capacity(knee: float) -> float:
    return knee + (2000.0 - 300.0) / 400.0  # where p99 TTFT reaches 2000 ms


@pytest.mark.parametrize("knee", [10.0, 37.0, 150.0, 700.0])
def test_bisection_lands_within_the_tolerance(knee: float) -> None:
    measure, seen = server(knee)
    res = search(measure, axis="rate", low=1.0, high=2000.0, tolerance=0.05)  # from low
    true = true_capacity(knee)
    assert res.capacity <= true < res.fail  # type: ignore[operator]
    assert (res.fail - res.capacity) / res.capacity <= 0.05  # type: ignore[operator]
    assert res.at is not None and res.at.load == res.capacity and res.at.passed
    assert res.stopped is None and len(res.points) == len(seen)
    # bracketing doubles from `low` until the first miss
    first_fail = next(i for i, x in enumerate(seen) if x > true)
    assert seen[:first_fail + 1] == [2.0 ** i for i in range(first_fail + 1)]
    assert res.summary()["capacity_req_s"] == pytest.approx(res.capacity * 0.9)
    assert res.summary()["goodput_tok_s"] == pytest.approx(res.capacity * 100.0)


def test_near_brackets_take_fewer_points_and_land_within_the_tolerance() -> None:
    """From a start near the capacity (a study's incumbent), "near" steps of 1.1^3 up and 1.1^-2
    down bracket it in fewer points than doubling; both end within the tolerance, and from `low`
    "near" doubles as "double" does."""
    import math

    knees = [64.0 * math.exp(-0.35 + 0.7 * i / 59) - 4.25 for i in range(60)]  # x0.7-1.4
    counts = {}
    for bracket in ("near", "double"):
        n = 0
        for knee in knees:
            measure, seen = server(knee)
            res = search(measure, axis="rate", low=4.0, high=512.0, tolerance=0.1, start=64.0,
                         bracket=bracket)
            true = true_capacity(knee)
            assert res.capacity <= true < res.fail  # type: ignore[operator]
            assert (res.fail - res.capacity) / res.capacity <= 0.1  # type: ignore[operator]
            n += len(seen)
        counts[bracket] = n / len(knees)
    assert counts["near"] < counts["double"] - 0.75, counts  # 4.07 against 5.28
    measure, seen = server(100.0)
    search(measure, axis="rate", low=4.0, high=512.0, tolerance=0.1, start=64.0)
    assert seen[:3] == [64.0, 85.2, 113.0]  # 64 x 1.331 = 85.184 -> 85.2 (three digits)
    measure, seen = server(37.0)
    search(measure, axis="rate", low=1.0, high=2000.0, tolerance=0.1)  # no start: doubling
    assert seen[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    # a tolerance of 0.1%: a step of x1.003 from 150 rounds back to 150, so it keeps its
    # digits; the next one rounds to 151
    measure, seen = server(148.0)
    res = search(measure, axis="rate", low=4.0, high=512.0, tolerance=0.001, start=150.0)
    assert seen[:3] == [150.0, pytest.approx(150.45045), 151.0] and res.fail is not None
    assert (res.fail - res.capacity) / res.capacity <= 0.001
    measure, seen = server(41.0)  # the concurrency axis: whole steps, up and down
    search(measure, axis="concurrency", low=1, high=1024, tolerance=0.1, start=64)
    assert all(x == int(x) for x in seen) and seen[:3] == [64.0, 52.0, 42.0]


def test_concurrency_axis_finds_the_exact_integer() -> None:
    measure, seen = server(41.0)  # true capacity 45.25 -> 45 slots
    res = search(measure, axis="concurrency", low=8, high=1024, tolerance=0.001)
    assert res.capacity == 45 and res.fail == 46
    assert all(x == int(x) for x in seen) and len(set(seen)) == len(seen)


def test_starts_at_the_incumbent_and_stops_early_when_it_cannot_beat_it() -> None:
    full, seen_full = server(30.0)
    a = search(full, axis="rate", low=1.0, high=2000.0, tolerance=0.02)
    early, seen = server(30.0)
    b = search(early, axis="rate", low=1.0, high=2000.0, tolerance=0.02, start=100.0,
               stop_below=100.0)
    assert seen[0] == 100.0  # started at the incumbent's capacity
    assert seen[1] == 50.0  # missed at the incumbent: halving to a lower bound, no near step
    assert b.stopped is not None and "incumbent" in b.stopped
    assert b.capacity <= a.capacity  # a lower bound, never above the real answer
    assert len(seen) < len(seen_full)
    # a config that beats the incumbent is searched to the tolerance
    good, _ = server(300.0)
    c = search(good, axis="rate", low=1.0, high=2000.0, tolerance=0.02, start=100.0,
               stop_below=100.0)
    assert c.stopped is None and c.capacity > 100.0


def test_misses_at_the_lowest_load_and_passes_at_the_highest() -> None:
    measure, seen = server(-100.0)  # never meets p99 TTFT
    res = search(measure, axis="rate", low=2.0, high=64.0, tolerance=0.05, start=16.0,
                 bracket="double")
    assert res.capacity == 0.0 and res.at is None and seen == [16.0, 8.0, 4.0, 2.0]
    measure, seen = server(-100.0)  # "near": two steps of 1.05^-2, then halving, down to low
    res = search(measure, axis="rate", low=2.0, high=64.0, tolerance=0.05, start=16.0)
    assert seen == [16.0, 14.5, 13.2, 6.6, 3.3, 2.0] and res.capacity == 0.0
    assert res.stopped == "missed the SLOs at the lowest load (2)"
    assert res.summary()["capacity_req_s"] == 0.0
    measure, seen = server(1e9)
    res = search(measure, axis="rate", low=2.0, high=64.0, tolerance=0.05)
    assert res.capacity == 64.0 and res.fail is None and "highest load" in (res.stopped or "")


def test_verdict_rule() -> None:
    ok = {"completed": 300.0, "failed": 0.0, "p99_ttft_ms": 1999.0, "p99_tpot_ms": 60.0}
    assert meets(ok, SLOS) == (True, [])
    passed, misses = meets({**ok, "p99_ttft_ms": 2500.0}, SLOS)
    assert not passed and misses == ["p99_ttft_ms <= 2000 (got 2,500.0)"]
    passed, misses = meets({**ok, "failed": 3.0}, SLOS)
    assert not passed and misses == ["3 of 303 requests failed"]
    # a p99 from fewer than 100 requests is not judged: the point fails
    passed, misses = meets({**ok, "completed": 99.0}, SLOS)
    assert not passed and "fewer than the 100 it needs" in misses[0]
    assert [min_requests(m) for m in ("p99_ttft_ms", "p90_tpot_ms", "median_itl_ms",
                                      "mean_ttft_ms", "total_token_throughput")] == [
        100, 10, 2, 1, 1]
    assert meets({**ok, "total_token_throughput": 10.0},
                   [SLOConfig(metric="total_token_throughput", min=50.0)])[0] is False


def test_point_seeds_are_common_across_trials_and_distinct_across_loads() -> None:
    assert point_seed(0, 16.0) == point_seed(0, 16.0000000001)
    assert len({point_seed(0, x) for x in (1, 2, 4, 8, 16, 12, 14)}) == 7
    assert point_seed(0, 16.0) != point_seed(1, 16.0)


def test_before_engine_names_where_the_ttft_went() -> None:
    from autotune.measure.capacity import before_engine

    # trial 15 on the H100 at 168.75 req/s: the engine itself queued (client 3,843 ms, vLLM's
    # own 3,804): nothing to say
    assert before_engine(168.75, {"mean_ttft_ms": 3843.0}, {"server_mean_ttft_ms": 3804.0},
                         0.9) is None
    # small gaps are the HTTP round trip, not a bottleneck
    assert before_engine(84.4, {"mean_ttft_ms": 300.0}, {"server_mean_ttft_ms": 90.0},
                         0.9) is None
    # no server figure (an older vLLM, a failed scrape): nothing to say
    assert before_engine(84.4, {"mean_ttft_ms": 3000.0}, {}, 0.9) is None
    # seconds before the engine with an idle client: the API server
    note = before_engine(58.0, {"mean_ttft_ms": 3189.0},
                         {"server_mean_ttft_ms": 95.0, "client_cpu_fraction": 0.4}, 0.9)
    assert note is not None and "3,189 ms" in note and "95 ms" in note
    assert "api_server_count" in note
    # ... with a busy client: the client
    note = before_engine(58.0, {"mean_ttft_ms": 3189.0},
                         {"server_mean_ttft_ms": 95.0, "client_cpu_fraction": 0.97}, 0.9)
    assert note is not None and "client_processes" in note and "api_server" not in note
    # the client read about what vLLM did, but vLLM's own TTFT went mostly outside its engine
    # core (two H200s, tp2 at 61.4 req/s: TTFT grew through each sample, the queue stayed 0)
    split = {"server_mean_ttft_ms": 605.0, "server_mean_queue_ms": 0.0,
             "server_mean_prefill_ms": 40.0, "server_mean_outside_engine_ms": 565.0}
    note = before_engine(61.4, {"mean_ttft_ms": 485.0}, split, 0.9)
    assert note is not None and "605 ms" in note and "queued 0 and prefilled 40" in note
    assert "565 ms went outside the engine core" in note and "api_server_count" in note
    # most of it in the engine (its queue, on CPU past the knee): nothing to say
    assert before_engine(6, {"mean_ttft_ms": 900.0}, split | {
        "server_mean_ttft_ms": 800.0, "server_mean_queue_ms": 700.0,
        "server_mean_outside_engine_ms": 60.0}, 0.9) is None


def test_intervals_turn_a_percentile_into_met_missed_or_close() -> None:
    """The verdict rule with intervals: met when the whole 95% interval of the p99 is within
    the target, missed when the whole interval is beyond it, close when it straddles it."""
    import numpy as np

    from autotune.config.metric_names import FAILED
    from autotune.measure.capacity import Judgement, intervals, judge

    rng = np.random.default_rng(0)
    base = {"completed": 1000.0, "failed": 0.0, "p99_tpot_ms": 30.0}

    def point(scale: float) -> Judgement:
        ttft = list(rng.exponential(scale, size=1000))
        m = {**base, "p99_ttft_ms": float(np.percentile(ttft, 99))}
        return judge(m, SLOS, intervals(SLOS, {"ttft": ttft, "tpot": [30.0] * 1000}))

    assert point(200.0)[0] == "met"  # p99 ~ 920 ms, its interval far below 2 s
    state, misses, _, missed = point(1000.0)  # p99 ~ 4.6 s
    assert state == "missed" and "95% [" in misses[0] and missed == ["p99_ttft_ms"]
    state, _, close, missed = point(2000.0 / 4.6)  # p99 ~ 2 s: the target inside the interval
    assert state == "close" and close[0].startswith("p99_ttft_ms <= 2000: ") and missed == []
    # a metric without samples is judged on its value
    assert judge({**base, "p99_ttft_ms": 1999.0}, SLOS, {})[0] == "met"
    # each miss comes with the metric it is on, in order: failures first
    v = judge({**base, "failed": 2.0, "p99_ttft_ms": 2500.0, "p99_tpot_ms": 61.0}, SLOS, {})
    assert v.missed == [FAILED, "p99_ttft_ms", "p99_tpot_ms"] and len(v.misses) == 3


def test_a_point_the_client_could_not_offer_ends_the_search() -> None:
    """A flagged point (send lag, burst) is no verdict on the server: the search ends and says
    so, its capacity the highest passing load below."""
    from autotune.measure.capacity import MAX_SEND_LAG_MS, client_limit

    assert client_limit({"p99_send_lag_ms": 3.0}, 1200, 60.0, "rate") is None
    lag = client_limit({"p99_send_lag_ms": MAX_SEND_LAG_MS + 1}, 1200, 60.0, "rate")
    assert lag is not None and lag.startswith("client limit: p99 send lag")
    # the bench CLI's old default: 200 requests at 176 req/s arrive in 1.1 s
    assert client_limit({}, 200, 176.0, "rate") == (
        "burst: 200 requests in 1.1 s (< 10 s of arrivals); raise capacity.min_duration_s or "
        "requests_per_point")
    assert client_limit({"p99_send_lag_ms": 999.0}, 10, 64.0, "concurrency") is None

    def measure(load: float) -> LoadPoint:
        flag = client_limit({}, 200, load, "rate") if load > 16 else None
        return LoadPoint(load, True, (), {"request_throughput": load}, flag=flag)

    res = search(measure, axis="rate", low=4.0, high=512.0, tolerance=0.1, start=8.0)
    assert [p.load for p in res.points] == [8.0, 10.6, 14.1, 28.2]
    assert res.capacity == 14.1 and res.fail == 28.2
    assert res.stopped is not None and res.stopped.startswith("not a server verdict at 28.2: burst")


def test_capacity_defaults_measure_a_sustained_rate() -> None:
    """One set of defaults (bench and study): 20 s of arrivals per rate point."""
    from autotune.config.capacity import CapacityConfig

    cap = CapacityConfig(axis="rate", low=4, high=512)
    assert cap.min_duration_s == 20.0 and cap.requests_at(176.0) == 3520
    assert cap.requests_at(4.0) == cap.requests_per_point


def test_a_search_round_trips_through_the_trial_record() -> None:
    """A trial stores its search as JSON; every reader gets the typed search back."""
    from autotune.measure.capacity import CapacityResult
    from autotune.measure.search import search

    measure, _calls = server(40.0)
    res = search(measure, axis="rate", low=1, high=128, tolerance=0.1, start=16)
    back = CapacityResult.from_json(res.to_json())
    assert back.points == res.points and back.at == res.at and back.capacity == res.capacity
    assert back.curve() == res.curve() and back.summary() == res.summary()


def test_the_bracket_rule_is_a_setting_of_bench_and_study() -> None:
    """bench's --bracket and the study file's capacity.bracket: near by default, double as
    before, anything else one error naming the field."""
    from autotune.cli._options import capacity_from
    from autotune.errors import ConfigError

    assert capacity_from("rate", {}).bracket == "near"
    assert capacity_from("rate", {"bracket": "double"}).bracket == "double"
    with pytest.raises(ConfigError, match="bracket"):
        capacity_from("rate", {"bracket": "wide"})
