"""A realistic trace to replay when the user has none of their own (`autotune make-trace`):
bursty arrivals, ShareGPT's lengths, and system prompts that many requests share.

- Arrivals: a Gamma renewal process (gaps of shape `burstiness` and mean 1 / rate: 1 is
  Poisson, below 1 burstier, the coefficient of variation of the gaps being 1 / sqrt(shape)),
  or an on/off process: exponential on and off periods (means `on_s`, `off_s`), Poisson
  arrivals at a high rate while on and a tenth of it while off, the mean rate `rate`.
- Lengths: ShareGPT conversations as `vllm bench serve` samples them (datasets.sample_sharegpt:
  the first turn's tokens as the prompt, the reply's as the output), optionally clipped for a
  small machine (`max_input_len`, `max_output_len`).
- Shared prefixes: `system_prompts` system prompts of `system_len` tokens (whole blocks), each
  request starting with one of them, the first most popular (weights 1, 1/2, 1/3, ...); its
  hash ids are the system prompt's blocks, then blocks of its own (the Mooncake layout).

Rows are what autotune.load.trace reads: timestamp (seconds), input_length, output_length,
hash_ids.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

QUIET = 0.1  # the on/off process's rate while off, as a share of its rate while on


@dataclass(frozen=True)
class TraceSpec:
    requests: int = 1000
    rate: float = 1.0  # requests/s on average
    arrivals: Literal["gamma", "onoff"] = "gamma"
    burstiness: float = 0.5  # gamma: the gaps' shape
    on_s: float = 10.0  # onoff: mean seconds on
    off_s: float = 20.0  # onoff: mean seconds off
    system_prompts: int = 4
    system_len: int = 1024  # tokens, rounded up to whole blocks
    block_size: int = 512
    max_input_len: int | None = None  # the user's part of a prompt, at most
    max_output_len: int | None = None
    seed: int = 0


def arrivals(spec: TraceSpec, rng: np.random.Generator) -> list[float]:
    """`spec.requests` arrival times in seconds, the first at 0, scaled so that the mean rate
    is exactly `spec.rate` (as vllm bench serve scales its gamma arrivals)."""
    t = _raw_arrivals(spec, rng)
    scale = (spec.requests - 1) / spec.rate / t[-1] if t[-1] > 0 else 1.0
    return [x * scale for x in t]


def _raw_arrivals(spec: TraceSpec, rng: np.random.Generator) -> list[float]:
    n = spec.requests
    if spec.arrivals == "gamma":
        gaps = rng.gamma(spec.burstiness, 1.0 / (spec.rate * spec.burstiness), size=n - 1)
        return [0.0, *np.cumsum(gaps).tolist()]
    # mean rate = (on x r_on + off x QUIET r_on) / (on + off)
    r_on = spec.rate * (spec.on_s + spec.off_s) / (spec.on_s + QUIET * spec.off_s)
    out: list[float] = []
    t, on = 0.0, True
    while len(out) < n:
        d = rng.exponential(spec.on_s if on else spec.off_s)
        r = r_on if on else QUIET * r_on
        k = rng.poisson(r * d)
        out += sorted((t + rng.uniform(0, d, size=k)).tolist())
        t, on = t + d, not on
    out = out[:n]
    return [x - out[0] for x in out]


def rows(spec: TraceSpec, tokenizer: Any) -> list[dict[str, Any]]:
    """The trace's requests, in arrival order."""
    from autotune.load.datasets import sample_sharegpt

    rng = np.random.default_rng(spec.seed)
    times = arrivals(spec, rng)
    pairs = sample_sharegpt(tokenizer, spec.requests, spec.seed)
    b = spec.block_size
    sys_blocks = math.ceil(spec.system_len / b) if spec.system_prompts else 0
    weights = np.array([1.0 / (k + 1) for k in range(spec.system_prompts)])
    picks = rng.choice(spec.system_prompts, size=spec.requests, p=weights / weights.sum()) \
        if spec.system_prompts else np.zeros(spec.requests, dtype=int)
    fresh = spec.system_prompts * sys_blocks  # the next unused block id
    out = []
    for t, req, k in zip(times, pairs, picks, strict=True):
        own = min(req.prompt_len, spec.max_input_len or req.prompt_len)
        gen = min(req.output_len, spec.max_output_len or req.output_len)
        ids = list(range(int(k) * sys_blocks, (int(k) + 1) * sys_blocks))
        need = math.ceil((own + sys_blocks * b) / b) - sys_blocks
        ids += range(fresh, fresh + need)
        fresh += need
        out.append({"timestamp": round(t, 3), "input_length": sys_blocks * b + own,
                    "output_length": gen, "hash_ids": ids})
    return out


def write(rows_: list[dict[str, Any]], path: Path) -> None:
    """JSONL, or CSV for a .csv path (hash ids space-separated)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["timestamp", "input_length", "output_length", "hash_ids"])
            for r in rows_:
                w.writerow([r["timestamp"], r["input_length"], r["output_length"],
                            " ".join(map(str, r["hash_ids"]))])
        return
    path.write_text("".join(json.dumps(r) + "\n" for r in rows_))


def describe(rows_: list[dict[str, Any]]) -> dict[str, float]:
    """What a trace holds: requests, span, mean rate, the gaps' coefficient of variation (1:
    Poisson), the peak rate over 10 s windows against the mean, mean lengths, and the share
    of prompt blocks that repeat an earlier one (what a prefix cache can reuse)."""
    t = np.array([r["timestamp"] for r in rows_], dtype=float)
    gaps = np.diff(t)
    span = float(t[-1] - t[0])
    rate = (len(t) - 1) / span if span > 0 else math.inf
    per10 = np.histogram(t, bins=max(1, int(span // 10)))[0] / 10.0 if span >= 10 else None
    ids = [h for r in rows_ for h in r.get("hash_ids", [])]
    return {"requests": float(len(t)), "span_s": span, "rate": rate,
            "gap_cv": float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 0.0,
            "peak_10s_over_mean": float(per10.max() / rate) if per10 is not None else math.nan,
            "mean_input_len": float(np.mean([r["input_length"] for r in rows_])),
            "mean_output_len": float(np.mean([r["output_length"] for r in rows_])),
            "repeated_block_share": 1 - len(set(ids)) / len(ids) if ids else 0.0}
