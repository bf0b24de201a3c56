"""The reference client: `vllm bench serve` run against a server that is up, with a profile's
load, and what it measured.

Where autotune's numbers and these differ on the same server, autotune's are wrong until shown
otherwise (docs/load-generator.md). `run_reference` runs it as a subprocess (its own output to a
log file), optionally on given CPUs (the calling thread's affinity is what the child inherits),
and reads its `--save-result --save-detailed` JSON.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config.workload import PRESETS, ProfileConfig
from autotune.errors import LoadError
from autotune.load.datasets import sharegpt_json_for_vllm
from autotune.load.placement import pinned, realtime

# a gap between two token events under this was one read's events parsed one after another,
# not two engine steps (no vLLM engine step takes 0.2 ms; parsing an event takes ~20-50 us)
SAME_READ_S = 0.0002


@dataclass(frozen=True)
class ReferenceResult:
    metrics: dict[str, float]  # vllm bench serve's own names (mean_tpot_ms, p99_ttft_ms, ...)
    same_read_share: float  # the share of token gaps under SAME_READ_S
    burst_requests: int  # requests with at least half of their gaps so


def reference_argv(vllm: Sequence[str], url: str, model: str, tokenizer: str,
                   profile: ProfileConfig, out: Path) -> list[str]:
    """`vllm bench serve` with the profile's load; results to `out` (JSON)."""
    argv = [*vllm, "bench", "serve", "--base-url", url, "--model", model, "--tokenizer",
            tokenizer, "--ignore-eos", "--seed", str(profile.seed), "--num-prompts",
            str(profile.num_prompts), "--num-warmups", str(profile.warmup), "--disable-tqdm",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(out.parent),
            "--result-filename", out.name]
    argv += (["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
             if profile.endpoint == "chat" else ["--backend", "vllm"])
    if profile.max_concurrency:
        argv += ["--max-concurrency", str(profile.max_concurrency)]
    if not math.isinf(profile.request_rate):
        argv += ["--request-rate", f"{profile.request_rate:g}"]
    if profile.name == "random" or profile.name in PRESETS:  # a preset is random lengths
        i, o = profile.lengths()
        argv += ["--dataset-name", "random", "--random-input-len", str(i),
                 "--random-output-len", str(o),
                 "--random-range-ratio", f"{profile.range_ratio:g}"]
        if profile.prefix_len:
            argv += ["--random-prefix-len", str(profile.prefix_len)]
    elif profile.name == "trace":
        argv += trace_args(profile)
    elif profile.name == "sharegpt":
        argv += ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt_json_for_vllm())]
        if profile.output_len:
            argv += ["--sharegpt-output-len", str(profile.output_len)]
    else:
        raise LoadError(f"the reference client runs the random, preset, sharegpt and trace "
                        f"profiles, not {profile.name!r}")
    return argv


def trace_args(profile: ProfileConfig) -> list[str]:
    """`vllm bench serve`'s options that replay a trace profile whose path is a window written
    as vLLM's timed_trace dataset reads it (autotune.load.replay.write_vllm_trace: arrivals in
    seconds, hash ids covering every prompt), its timeline divided by the profile's speedup."""
    return ["--dataset-name", "timed_trace", "--dataset-path", str(profile.path),
            "--timed-trace-chunk-hash-size", str(profile.block_size),
            "--timed-trace-sec-multiplier", f"{1 / profile.speedup:.6g}"]


def same_read(itls: list[list[float]]) -> tuple[float, int]:
    """(share of gaps under SAME_READ_S, requests with at least half of their gaps so), for
    either client's per-request inter-token gaps in seconds."""
    gaps = sum(len(x) for x in itls)
    fast = [sum(g < SAME_READ_S for g in x) for x in itls]
    return (sum(fast) / gaps if gaps else 0.0,
            sum(2 * f >= len(x) >= 2 for f, x in zip(fast, itls, strict=True)))


def summarize(doc: dict[str, Any]) -> ReferenceResult:
    """The metrics of a `--save-detailed` result, and its gaps read at once."""
    metrics = {k: float(v) for k, v in doc.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    return ReferenceResult(metrics, *same_read([list(x) for x in doc.get("itls", []) if x]))


def run_reference(vllm: Sequence[str], url: str, model: str, tokenizer: str,
                  profile: ProfileConfig, out: Path, cpus: Sequence[int] | None = None,
                  rt: bool = False, timeout_s: float = 900.0) -> ReferenceResult:
    """Run `vllm bench serve` once (on `cpus` when given, as SCHED_FIFO with `rt` where the
    OS allows it, as autotune's client runs); its log beside `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = reference_argv(vllm, url, model, tokenizer, profile, out)
    log = out.with_suffix(".log")
    with log.open("w") as f, pinned(cpus):
        try:
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s,
                                check=False, preexec_fn=realtime if rt else None).returncode
        except subprocess.TimeoutExpired:
            raise LoadError(f"vllm bench serve ran past {timeout_s:g} s (its log: {log})") \
                from None
    if rc != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise LoadError(f"vllm bench serve exited with {rc}: {' | '.join(tail)}")
    return summarize(json.loads(out.read_text()))
