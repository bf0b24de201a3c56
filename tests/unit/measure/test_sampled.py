"""A load point judged on the median of several fresh samples (capacity.samples): the rule
bench/reference_check.py judges `vllm bench serve` by, on a synthetic server whose samples
differ as one H100 MoE server's did (one sample's p99 TPOT 30-66% off its rate's median)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.config.metric_names import FAILED
from autotune.config.workload import CapacityConfig, ProfileConfig, SLOConfig
from autotune.load.record import Request
from autotune.measure import draw, on_server
from autotune.measure.on_server import capacity_on
from autotune.measure.point import Point
from autotune.measure.sampled import Sample, decided, judge_samples, medians
from tests.unit.measure.test_jit import _point

TPOT = SLOConfig(metric="p99_tpot_ms", max=60)
TTFT = SLOConfig(metric="p99_ttft_ms", max=2000)


def s(tpot: float, ttft: float = 100.0, missed: tuple[str, ...] = (), failed: int = 0
      ) -> Sample:
    return Sample({"p99_tpot_ms": tpot, "p99_ttft_ms": ttft, "failed": failed,
                   "completed": 200}, missed)


def test_the_median_sample_decides_and_one_slow_sample_does_not() -> None:
    # the H100 MoE at 20.72 req/s: one fresh sample read 99.5 ms, the others 29.8 and 41.1
    met, misses, missed = judge_samples([s(99.5, missed=("p99_tpot_ms",)), s(29.8), s(41.1)],
                                  [TTFT, TPOT])
    assert met and misses == [] and missed == []
    met, misses, missed = judge_samples([s(99.5, missed=("p99_tpot_ms",)), s(29.8),
                                   s(66.1, missed=("p99_tpot_ms",))], [TTFT, TPOT])
    assert not met and missed == ["p99_tpot_ms"]
    assert "median of 3 samples 66.1" in misses[0] and "2 over" in misses[0]
    assert medians([s(99.5), s(29.8), s(41.1)], ["p99_tpot_ms"]) == {"p99_tpot_ms": 41.1}


def test_a_settled_sample_counts_over_the_target_and_a_failure_anywhere_misses() -> None:
    # settled early on TPOT: its partial p99 (35) is no reading, the miss is
    settled = s(35.0, missed=("p99_tpot_ms",))
    met, misses, missed = judge_samples([settled, s(70.0, missed=("p99_tpot_ms",)), s(20.0)],
                                  [TPOT])
    assert not met and "settled" in misses[0]
    met, misses, missed = judge_samples([s(20.0), s(20.0, failed=1, missed=(FAILED,)), s(20.0)],
                                  [TPOT])
    assert not met and missed == [FAILED] and "1 of 601 requests failed" in misses[0]


def test_a_point_stops_once_the_rest_cannot_move_a_median_across_its_target() -> None:
    over = s(80.0, missed=("p99_tpot_ms",))
    assert not decided([s(20.0)], [TPOT], 3)
    assert decided([s(20.0), s(30.0)], [TPOT], 3)  # 2 of 3 within: met whatever the third
    assert decided([over, over], [TPOT], 3)  # 2 of 3 over: missed
    assert not decided([over, s(20.0)], [TPOT], 3)
    assert decided([over, s(20.0), s(20.0)], [TPOT], 3)  # all ran
    # met needs every SLO within on a majority; one SLO over on a majority settles a miss
    assert not decided([s(20.0), s(20.0, ttft=3000.0, missed=("p99_ttft_ms",))],
                       [TTFT, TPOT], 3)
    assert decided([s(20.0, missed=(FAILED,))], [TPOT], 3)
    assert decided([s(20.0)], [TPOT], 1)
    assert not decided([s(20.0), s(20.0)], [TPOT], 4)  # 4: 3 must agree


def _fake(monkeypatch: pytest.MonkeyPatch, tpots: list[float]) -> list[int]:
    """A synthetic server whose successive runs read these per-token seconds."""
    seeds: list[int] = []

    def fake_measure(url: str, model: str, profile: ProfileConfig, reqs: list[Request],
                     **kw: Any) -> Point:
        seeds.append(profile.seed)
        return _point(tpots[len(seeds) - 1])

    monkeypatch.setattr(on_server, "measure", fake_measure)
    monkeypatch.setattr(on_server, "load_tokenizer", lambda d: None)
    monkeypatch.setattr(draw, "sample_requests",
                        lambda prof, tok, n, seed, d: [Request([1], 1, 4)] * n)
    monkeypatch.setattr(on_server, "has_gpu", lambda: False)
    return seeds


def _search(tmp_path: Path, samples: int | str) -> Any:
    cap = CapacityConfig(axis="concurrency", low=4, high=4, settle=False, warm_windows=0,
                         samples=samples)  # type: ignore[arg-type]
    return capacity_on("http://x", "m", "tok", ProfileConfig(name="random", input_len=1,
                                                             output_len=4), cap, [TPOT], tmp_path)


def test_one_slow_sample_of_three_does_not_fail_the_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = _fake(monkeypatch, [0.1, 0.01, 0.02])  # 100 ms, then 10 and 20 ms a token
    [point] = _search(tmp_path, 3).points
    assert point.passed and point.runs == 3 and point.server["samples"] == 3
    assert len(set(seeds)) == 3  # fresh prompts and arrivals each
    assert point.metrics["p99_tpot_ms"] == pytest.approx(20.0, rel=0.01)  # the median


def test_two_samples_that_agree_end_the_point(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = _fake(monkeypatch, [0.1, 0.09, 0.01])
    [point] = _search(tmp_path, 3).points
    assert not point.passed and point.runs == 2 and len(seeds) == 2
    assert point.missed == ("p99_tpot_ms",) and "2 over" in point.misses[0]


def test_auto_is_one_sample_without_a_gpu_and_three_with_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = _fake(monkeypatch, [0.1, 0.01, 0.01])
    [point] = _search(tmp_path, "auto").points  # no GPU: one sample, as before
    assert not point.passed and len(seeds) == 1
    seeds.clear()
    monkeypatch.setattr(on_server, "has_gpu", lambda: True)
    [point] = _search(tmp_path, "auto").points
    assert point.passed and len(seeds) == 3
    with pytest.raises(ValueError, match="number of samples"):
        CapacityConfig(samples=0)
