"""The capacity search on the speedup axis against a synthetic server: each point replays a
window of the trace on its compressed timeline, fresh windows per sample, and the search finds
the speed-up at which the server's knee lies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.config.capacity import CapacityConfig
from autotune.config.workload import ProfileConfig, SLOConfig
from autotune.load import LoadSettings
from autotune.load.record import Request, RequestRecord
from autotune.load.trace import Trace, TraceEntry
from autotune.measure import on_server
from autotune.measure.capacity import capacity_sentence, capacity_words, client_limit
from autotune.measure.metrics import compute_metrics
from autotune.measure.on_server import capacity_on
from autotune.measure.point import Point

KNEE_RATE = 10.0  # the synthetic server keeps up with this many requests/s


class Vocab:
    """The two calls Blocks makes of a tokenizer."""

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return 1000

    def get_added_tokens_decoder(self) -> dict[int, Any]:
        return {}


# 2 requests/s recorded, in bursts: 4 requests 0.1 s apart, then 1.7 s of quiet
TRACE = Trace(tuple(TraceEntry(2.0 * (i // 4) + 0.1 * (i % 4), 8, 4, (i % 3, 100 + i))
                    for i in range(400)), "t.jsonl", 4, 400)


def served(reqs: list[Request]) -> Point:
    """A server that keeps up while the window's rate is under KNEE_RATE (TTFT 50 ms) and
    queues beyond it (TTFT 3 s)."""
    at = [r.arrival_s for r in reqs]
    assert all(a is not None for a in at)
    rate = (len(reqs) - 1) / (at[-1] - at[0])  # type: ignore[operator]
    ttft = 0.05 if rate < KNEE_RATE else 3.0
    recs = [RequestRecord(index=i, send_time=a, prompt_len=8, expected_output_len=4,  # type: ignore[arg-type]
                          first_token_time=a + ttft, end_time=a + ttft + 0.03,  # type: ignore[operator]
                          chunk_times=tuple(a + ttft + 0.01 * k for k in range(4)),  # type: ignore[operator]
                          prompt_tokens=8, output_tokens=4, scheduled_time=a)
            for i, a in enumerate(at)]
    return Point(compute_metrics(recs, at[-1] + 1.0), recs, {}, LoadSettings())  # type: ignore[operator]


def search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **cap: Any
           ) -> tuple[Any, list[list[Request]]]:
    sent: list[list[Request]] = []

    def fake_measure(url: str, model: str, profile: ProfileConfig, reqs: list[Request],
                     **kw: Any) -> Point:
        assert kw["request_rate"] == float("inf") and kw["max_concurrency"] is None
        sent.append(reqs)
        return served(reqs)

    monkeypatch.setattr(on_server, "measure", fake_measure)
    monkeypatch.setattr(on_server, "load_tokenizer", lambda d: Vocab())
    monkeypatch.setattr(on_server, "load_trace", lambda p, tok, d, *_: TRACE)
    c = CapacityConfig(axis="speedup", low=1, high=64, tolerance=0.1, settle=False,
                       warm_windows=0, requests_per_point=100, min_duration_s=15.0,
                       warmup=2, **cap)
    res = capacity_on("http://x", "m", "tok", ProfileConfig(name="trace", path="t.jsonl",
                                                             block_size=4), c,
                      [SLOConfig(metric="p99_ttft_ms", max=1000)], tmp_path)
    return res, sent


def test_the_search_finds_the_speedup_of_the_knee(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """2 req/s recorded, a server that keeps up to 10: the capacity is about 5x, within the
    tolerance; every point a window on its compressed timeline, at least min_duration_s long."""
    res, sent = search(tmp_path, monkeypatch)
    assert res.axis == "speedup"
    assert 5.0 / 1.1 <= res.capacity <= 5.0 and res.fail is not None and res.fail >= 5.0
    assert (res.fail - res.capacity) / res.capacity <= 0.1
    for p, reqs in zip(res.points, sent, strict=True):
        assert p.server["arrivals_s"] >= 15.0 and p.server["window_requests"] == len(reqs)
        assert len(reqs) >= 100 and reqs[0].arrival_s == 0.0
    # faster replays hold more of the trace in the same span
    by_load = {p.load: int(p.server["window_requests"]) for p in res.points}
    assert by_load[max(by_load)] > by_load[min(by_load)]


def test_fresh_windows_per_sample_and_per_load(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    res, sent = search(tmp_path, monkeypatch, samples=3)
    prompts = [tuple(r.prompt[:8]) for reqs in sent for r in reqs[:1]]  # type: ignore[index]
    assert len(set(prompts)) == len(prompts)  # every run its own window (or salt)
    assert all(p.server["samples"] >= 1 for p in res.points)


def test_a_trace_window_under_ten_seconds_is_a_burst_not_a_verdict() -> None:
    flat = {"p99_send_lag_ms": 1.0, "late_read_share": 0.0}
    assert client_limit(flat, 100, 3.0, "speedup", span_s=20.0) is None
    why = client_limit(flat, 100, 3.0, "speedup", span_s=4.0)
    assert why is not None and why.startswith("burst: a window of 100 requests in 4.0 s")
    late = client_limit({"p99_send_lag_ms": 80.0}, 100, 3.0, "speedup", span_s=20.0)
    assert late is not None and "send lag" in late


def test_the_answer_reads_as_a_speedup_of_the_users_traffic() -> None:
    assert capacity_sentence("speedup", 2.3, "p99_ttft_ms <= 500") == (
        "serves your traffic at up to 2.3x its recorded rate within the SLOs "
        "(p99_ttft_ms <= 500)")
    assert capacity_words("speedup", 2.345) == "2.35x its recorded rate"
    assert capacity_words("concurrency", 12) == "12 requests in flight"
    assert capacity_words("rate", 3.5) == "3.5 requests/s"
    assert capacity_sentence("speedup", 0.0, "x").startswith("meets the SLOs (x) at no load")


def test_a_speedup_point_is_sized_by_its_window_not_by_load_x_duration() -> None:
    """On the rate axis a point holds load x min_duration_s requests; a speed-up is no rate
    (a trace at 0.1 req/s replayed 50x is 5 req/s), so its window's span sizes it instead."""
    cap = CapacityConfig(axis="speedup", requests_per_point=100, min_duration_s=20)
    assert cap.requests_at(50.0) == 100
    assert CapacityConfig(axis="rate", requests_per_point=100,
                          min_duration_s=20).requests_at(50.0) == 1000
