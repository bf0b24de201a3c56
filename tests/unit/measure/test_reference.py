"""The reference client's command line and the reading of its result."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.workload import ProfileConfig
from autotune.errors import LoadError
from autotune.measure.reference import reference_argv, summarize


def test_argv_carries_the_profiles_load(tmp_path: Path) -> None:
    p = ProfileConfig(name="random", input_len=64, output_len=16, num_prompts=48,
                      max_concurrency=8, warmup=4, seed=3)
    argv = reference_argv(["vllm"], "http://h:1", "m", "tok", p, tmp_path / "r.json")
    s = " ".join(argv)
    for part in ("bench serve", "--base-url http://h:1", "--num-prompts 48",
                 "--max-concurrency 8", "--num-warmups 4", "--seed 3", "--ignore-eos",
                 "--random-input-len 64", "--random-output-len 16", "--backend vllm",
                 "--result-filename r.json"):
        assert part in s
    assert "--request-rate" not in s
    rate = reference_argv(["vllm"], "u", "m", "t", p.model_copy(update={
        "request_rate": 2.5, "max_concurrency": None, "endpoint": "chat"}), tmp_path / "r")
    assert "--request-rate 2.5" in " ".join(rate) and "openai-chat" in rate
    # a preset is random lengths (export --verify runs the study's own profile)
    preset = " ".join(reference_argv(["vllm"], "u", "m", "t", ProfileConfig(name="throughput"),
                                     tmp_path / "r"))
    assert "--random-input-len 1024 --random-output-len 128" in preset
    with pytest.raises(LoadError, match="random, preset, sharegpt and trace"):
        reference_argv(["vllm"], "u", "m", "t", ProfileConfig(name="dataset", path=str(
            tmp_path / "d.jsonl")), tmp_path)


def test_gaps_read_at_once_by_the_time_rule() -> None:
    doc = {"mean_tpot_ms": 5.0, "completed": 3, "itls": [
        [0.005, 0.005, 0.005],  # on time
        [0.00001, 0.00001, 0.00002],  # one read
        [0.005, 0.00001, 0.00001],  # two of three at once
    ], "ttfts": [0.1, 0.2, 0.3]}
    r = summarize(doc)
    assert r.metrics["mean_tpot_ms"] == 5.0 and "itls" not in r.metrics
    assert r.same_read_share == pytest.approx(5 / 9)
    assert r.burst_requests == 2
