"""A close load point (an SLO inside its interval) runs again with fresh requests, pooled, until
the pooled interval clears the SLOs or it has run `capacity.close_runs` times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.config.capacity import CapacityConfig
from autotune.config.workload import ProfileConfig, SLOConfig
from autotune.load import LoadSettings
from autotune.load.record import Request, RequestRecord
from autotune.measure import capacity, draw, on_server
from autotune.measure.metrics import compute_metrics
from autotune.measure.on_server import capacity_on
from autotune.measure.point import Point


def _run(slow: int, n: int = 200) -> Point:
    """n requests of 4 tokens, `slow` of them at 70 ms a token, the rest at 10 ms."""
    recs = []
    for i in range(n):
        tpot = 0.07 if i < slow else 0.01
        recs.append(RequestRecord(index=i, send_time=0.0, prompt_len=4, expected_output_len=4,
                                  first_token_time=0.05, end_time=0.05 + 3 * tpot,
                                  chunk_times=tuple(0.05 + k * tpot for k in range(4)),
                                  prompt_tokens=4, output_tokens=4))
    return Point(compute_metrics(recs, 1.0), recs, {}, LoadSettings())


def _search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[Point],
            **cap: Any) -> tuple[list[int], Any]:
    seeds: list[int] = []

    def fake_measure(url: str, model: str, profile: ProfileConfig, reqs: list[Request],
                     **kw: Any) -> Point:
        seeds.append(profile.seed)
        return runs[min(len(seeds), len(runs)) - 1]

    monkeypatch.setattr(on_server, "measure", fake_measure)
    monkeypatch.setattr(on_server, "load_tokenizer", lambda d: None)
    monkeypatch.setattr(draw, "sample_requests",
                        lambda prof, tok, n, seed, d, *_: [Request([1], 1, 4)] * n)
    c = CapacityConfig(axis="concurrency", low=4, high=4, settle=False, warm_windows=0, **cap)
    res = capacity_on("http://x", "m", "tok", ProfileConfig(name="random", input_len=1,
                                                             output_len=4), c,
                      [SLOConfig(metric="p99_tpot_ms", max=60)], tmp_path)
    return seeds, res.points[0]


def test_a_point_that_stays_close_runs_close_runs_times_and_the_pooled_value_decides(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1% of every run over the target: the interval keeps straddling it, so the point runs 4
    times (the default), each with its own requests, and the pooled p99 (under 60) decides."""
    seeds, point = _search(tmp_path, monkeypatch, [_run(2)])
    assert point.runs == 4 and len(seeds) == 4 and len(set(seeds)) == 4
    assert point.passed


def test_a_close_point_stops_once_the_pooled_interval_clears(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run is close, the later ones fast: it stops as soon as the pooled interval is
    under the target, before its fourth run."""
    seeds, point = _search(tmp_path, monkeypatch, [_run(1), _run(0)])
    assert 2 <= point.runs < 4 and len(seeds) == point.runs and point.passed


def test_close_runs_2_is_the_old_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One more run, pooled, decided on the pooled value; the second run's seed as before."""
    seeds, point = _search(tmp_path, monkeypatch, [_run(2), _run(3)], close_runs=2)
    assert point.runs == 2 and len(seeds) == 2
    assert seeds[1] == capacity.point_seed(seeds[0], 4.0)


def test_a_points_speculation_counters_are_summed_over_its_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's draft counters are deltas per run: a point that ran 4 times counts all four (on
    the H100 a point that ran twice had kept only its last run's 6,772 drafts)."""
    runs = []
    for i in range(4):
        pt = _run(2)
        runs.append(Point(pt.metrics, pt.records, {"server_spec_drafts": 100.0 + i,
                                                   "server_mean_ttft_ms": 5.0 + i},
                          pt.settings))
    _seeds, point = _search(tmp_path, monkeypatch, runs)
    assert point.runs == 4 and point.server["server_spec_drafts"] == 406.0
    assert point.server["server_mean_ttft_ms"] == 8.0  # a mean is the last run's, as before
    assert "server_spec_accepted_tokens" not in point.server
