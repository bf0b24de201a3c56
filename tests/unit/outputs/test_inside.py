"""The report's look inside a capacity: each run's TTFT per fifth of its arrivals, from the
points' per-request records, and whether a queue built up."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.workload import SLOConfig
from autotune.measure.capacity import CapacityResult, LoadPoint
from autotune.measure.drift import GROWS, drift, point_drift
from autotune.outputs.inside import inside_markdown
from autotune.server.command import api_servers
from autotune.tuning.record import Status, TrialFacts, TrialRecord

SLOS = [SLOConfig(metric="p99_ttft_ms", max=2000.0)]


def write_point(path: Path, runs: list[list[float]]) -> None:
    """A points CSV as on_server.write_records writes it: runs one after another, each run's
    indexes from 0; request i of a run sent at i * 0.05 s with the TTFT given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = ["index,send_time,prompt_len,error,ttft_ms"]
    for ttfts in runs:
        rows += [f"{i},{i * 0.05},100,,{t}" for i, t in enumerate(ttfts)]
    rows.append("0,0.0,100,ReadTimeout,")  # a failed request starts a run and is left out
    path.write_text("\n".join(rows) + "\n")


def test_a_growing_ttft_reads_as_a_queue_building(tmp_path: Path) -> None:
    # near capacity on two H200s: TTFT grew from ~60 ms to ~1.5 s through a sample
    growing = [60.0 + 15.0 * i for i in range(100)]
    flat = [80.0 + (i % 7) for i in range(100)]
    write_point(tmp_path / "p.csv", [growing, flat])
    runs = point_drift(tmp_path / "p.csv")
    assert [r.requests for r in runs] == [100, 100]
    assert runs[0].ttft_p50_ms[0] < 400 < 1200 < runs[0].ttft_p50_ms[-1]
    assert runs[0].growth is not None and runs[0].growth >= GROWS
    assert runs[1].growth == pytest.approx(1.0, abs=0.1)
    assert drift([(0.0, 50.0)]).ttft_p50_ms == (50.0,) and drift([(0.0, 50.0)]).growth is None


def test_the_report_section_names_the_points_and_where_the_queue_was(tmp_path: Path) -> None:
    server = {"server_mean_ttft_ms": 605.0, "server_mean_queue_ms": 0.0,
              "server_mean_prefill_ms": 40.0, "server_mean_outside_engine_ms": 565.0,
              "server_engine_steps": 2979.0, "server_mean_step_tokens": 160.9,
              "server_wall_ms_per_step": 10.08}
    met = LoadPoint(57.325, True, (), {"p99_ttft_ms": 1120.0}, 88.0, server)
    missed = LoadPoint(61.4125, False, ("p99_ttft_ms",), {"p99_ttft_ms": 2100.0}, 80.0, {})
    search = CapacityResult("rate", 57.325, met, (missed, met), 61.4125, None)
    rec = TrialRecord(3, Status.OK, TrialFacts(capacity=search.to_json()), {},
                      {"capacity": 57.325})
    trial = tmp_path / "trial-0003"
    write_point(trial / "points" / "load-57.325.csv", [[60.0 + 15.0 * i for i in range(100)]])
    write_point(trial / "points" / "load-61.4125.csv", [[70.0 + 20.0 * i for i in range(50)]])
    (tmp_path / "report").mkdir()
    lines = inside_markdown(rec, trial, SLOS, tmp_path / "report")
    text = "\n".join(lines)
    assert "## Inside the load points of trial 3" in text
    assert "| capacity | 57.325 | 1 |" in text and "| missed above | 61.4125 | 1 |" in text
    assert "605 ms = queue 0 + prefill 40 + outside the engine 565" in text
    assert "not recorded" in text  # the failing point predates the split
    assert "| 161 tokens a step, 10.1 ms a step |" in text  # vLLM's engine at the capacity
    assert text.count("not recorded") == 2  # the failing point has neither
    assert "a queue was building through the point" in text and "57.325, 61.4125" in text
    assert (tmp_path / "report" / "inside_points.png").stat().st_size > 10_000
    # no per-request records (or no capacity search): no section
    assert inside_markdown(rec, tmp_path / "nothing", SLOS, tmp_path / "report") == []


def test_step_figures_of_several_api_servers_are_not_compared(tmp_path: Path) -> None:
    """With more than one API server vLLM counts a step once for each: the column says so."""
    server = {"server_engine_steps": 4814.0, "server_mean_step_tokens": 123.2,
              "server_wall_ms_per_step": 6.18}
    met = LoadPoint(86.425, True, (), {"p99_ttft_ms": 447.0}, 73.0, server)
    search = CapacityResult("rate", 86.425, met, (met,), None, None)
    argv = ["vllm", "serve", "m", "--tensor-parallel-size", "2", "--api-server-count", "2"]
    rec = TrialRecord(4, Status.OK, TrialFacts(capacity=search.to_json(), argv=argv), {},
                      {"capacity": 86.425})
    trial = tmp_path / "trial-0004"
    write_point(trial / "points" / "load-86.425.csv", [[60.0 + i for i in range(100)]])
    (tmp_path / "report").mkdir()
    text = "\n".join(inside_markdown(rec, trial, SLOS, tmp_path / "report"))
    assert "not comparable (2 API servers count a step once each)" in text
    assert "ms a step" not in text


@pytest.mark.parametrize(("argv", "n"), [
    (None, 1), (["vllm", "serve", "m"], 1), (["--api-server-count", "4"], 4),
    (["--api-server-count=3"], 3), (["-asc", "2"], 2),
    (["--data-parallel-size", "2"], 2),  # vLLM's default: one API server an engine
    (["-dp", "2", "--api-server-count", "1"], 1), (["--api-server-count"], 1),
    (["--api-server-count", "1", "--api-server-count", "4"], 4),  # argparse: the last one
    (["--api_server_count", "2"], 2), (["--data_parallel_size=2"], 2)])
def test_api_servers_from_the_serve_line(argv: list[str] | None, n: int) -> None:
    assert api_servers(argv) == n
