"""vLLM's /metrics read as the difference of two scrapes: its TTFT split into the engine's queue
and prefill and the time outside the engine core."""

from __future__ import annotations

import pytest

from autotune.server.scrape import ENGINES, ServerStats, last_split, parse


def scrape(n: float, ttft_s: float, queue_s: float, prefill_s: float | None) -> dict[str, float]:
    d = {"vllm:time_to_first_token_seconds_count": n, "vllm:time_to_first_token_seconds_sum":
         ttft_s, "vllm:request_queue_time_seconds_count": n,
         "vllm:request_queue_time_seconds_sum": queue_s}
    if prefill_s is not None:
        d |= {"vllm:request_prefill_time_seconds_count": n,
              "vllm:request_prefill_time_seconds_sum": prefill_s}
    return d


def test_ttft_splits_into_queue_prefill_and_outside_the_engine() -> None:
    stats = ServerStats()
    stats.add(scrape(100, 10.0, 0.0, 2.0))
    # 1,000 requests more: TTFT 605 ms each, no queue, 40 ms of prefill (two H200s, tp2 at 61.4)
    stats.add(scrape(1100, 10.0 + 605.0, 0.0, 2.0 + 40.0))
    out = stats.summary()
    assert out["server_mean_ttft_ms"] == pytest.approx(605.0)
    assert out["server_mean_queue_ms"] == 0.0
    assert out["server_mean_prefill_ms"] == pytest.approx(40.0)
    assert out["server_mean_outside_engine_ms"] == pytest.approx(565.0)


def test_no_split_without_the_prefill_histogram() -> None:
    stats = ServerStats()
    stats.add(scrape(0, 0.0, 0.0, None))
    stats.add(scrape(10, 5.0, 1.0, None))  # an older vLLM without vllm:request_prefill_time
    out = stats.summary()
    assert out["server_mean_ttft_ms"] == pytest.approx(500.0)
    assert "server_mean_outside_engine_ms" not in out


def test_a_point_keeps_the_last_split_that_held() -> None:
    """A point's last sample settled a miss (its cancelled requests have a TTFT but no queue or
    prefill: no split); the split of the full sample before it stands, whole, for the point.
    As on the H100 at 56 req/s (fp8, one API server, 2026-11-27): the failing point had lost
    the split the API-server warning reads."""
    full = {"server_mean_ttft_ms": 640.0, "server_mean_queue_ms": 0.02,
            "server_mean_prefill_ms": 52.0, "server_mean_outside_engine_ms": 588.0}
    settled = {"server_mean_ttft_ms": 1100.0, "server_mean_queue_ms": 0.03,
               "server_mean_prefill_ms": 50.0}
    assert last_split([full, settled]) == full | {"server_split_runs_back": 1.0}
    assert last_split([settled, full]) == full
    assert last_split([settled]) == {}
    assert last_split([]) == {}


def step_text(steps: float, tokens: float, engines: int = 1) -> str:
    """vLLM's tokens-a-step histogram as its /metrics writes it (labels as 0.26's), each engine
    with the given steps and tokens."""
    lines = ["# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.",
             "# TYPE vllm:iteration_tokens_total histogram"]
    for e in range(engines):
        labels = f'engine="{e}",model_name="m"'
        lines += [f'vllm:iteration_tokens_total_bucket{{{labels},le="+Inf"}} {steps}',
                  f"vllm:iteration_tokens_total_count{{{labels}}} {steps}",
                  f"vllm:iteration_tokens_total_sum{{{labels}}} {tokens}"]
    return "\n".join(lines) + "\n"


def test_engine_steps_their_tokens_and_wall_time_a_step() -> None:
    stats = ServerStats()
    stats.add(parse(step_text(500, 40_000)), at=100.0)
    # 60 s of load: 4,000 steps of 140 tokens each, 15 ms of wall time a step
    stats.add(parse(step_text(4_500, 40_000 + 4_000 * 140)), at=160.0)
    out = stats.summary()
    assert out["server_engine_steps"] == 4_000
    assert out["server_mean_step_tokens"] == pytest.approx(140.0)
    assert out["server_wall_ms_per_step"] == pytest.approx(15.0)


def test_no_step_figures_where_the_engine_did_not_step() -> None:
    stats = ServerStats()
    stats.add(parse(step_text(500, 40_000)), at=100.0)
    stats.add(parse(step_text(500, 40_000)), at=110.0)
    assert not {"server_engine_steps", "server_wall_ms_per_step"} & stats.summary().keys()
    older = ServerStats()  # a vLLM without the histogram
    older.add(scrape(0, 0.0, 0.0, None))
    older.add(scrape(10, 5.0, 1.0, None))
    assert "server_mean_step_tokens" not in older.summary()
    late = ServerStats()  # the histogram only in the last scrape: not its whole life as the run
    late.add(scrape(0, 0.0, 0.0, None), at=0.0)
    late.add(parse(step_text(500, 40_000)), at=10.0)
    assert "server_engine_steps" not in late.summary()


def test_data_parallel_engines_give_an_engines_steps() -> None:
    """Two engines (data parallel 2), each 2,000 steps of 140 tokens in 30 s: an engine's step
    takes 15 ms, not the 7.5 ms that the summed count would read."""
    stats = ServerStats()
    stats.add(parse(step_text(0, 0, engines=2)), at=0.0)
    stats.add(parse(step_text(2_000, 2_000 * 140, engines=2)), at=30.0)
    out = stats.summary()
    assert out["server_step_engines"] == 2
    assert out["server_engine_steps"] == 2_000
    assert out["server_mean_step_tokens"] == pytest.approx(140.0)
    assert out["server_wall_ms_per_step"] == pytest.approx(15.0)


def test_a_histogram_without_an_engine_label_is_one_engine() -> None:
    text = ("# TYPE vllm:iteration_tokens_total histogram\n"
            'vllm:iteration_tokens_total_count{model_name="m"} 100\n'
            'vllm:iteration_tokens_total_sum{model_name="m"} 5000\n')
    assert parse(text)[ENGINES] == 1
    stats = ServerStats()
    stats.add(parse(text.replace(" 100\n", " 0\n").replace(" 5000\n", " 0\n")), at=0.0)
    stats.add(parse(text), at=1.0)
    assert stats.summary()["server_wall_ms_per_step"] == pytest.approx(10.0)
