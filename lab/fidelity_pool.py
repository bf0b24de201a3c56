#!/usr/bin/env python3
"""How far apart are the two tools' p99 TTFTs, once the runs' own noise is counted?

Reads a fidelity run's directory (lab/fidelity.py: autotune-<mode>-<load>-<run>.csv and
vllm-<mode>-<load>-<run>.json saved with per-request TTFTs) and, per load, pools each tool's
requests over its runs and takes the ratio of the pooled p99 TTFTs (autotune / vllm bench
serve), with a 95% interval from resampling whole runs (the noise between runs of one tool is
the larger part: the reference's own p99 TTFT spread 4.7x over three runs at 56 req/s). Also the
ratio of mean TTFTs and of the runs' durations (the same requests and tokens on both sides, so
throughput's ratio is the inverse of the durations').

And, from every run's line in runs.jsonl (all loads, per-request files or not): the client's mean
TTFT over vLLM's own mean TTFT in that run (from its histogram, scraped before and after), per
tool. The server's TTFT moves 3-4x between runs of one tool at one rate; this ratio divides that
out and leaves what the client adds, the instrument's part.

    python -m lab.fidelity_pool OUT.json DIR [DIR ...] [--resamples 4000]

On the H100 data: docs/results/fidelity-h100/pooled.json.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

NAME = re.compile(r"(?P<tool>autotune|vllm)-(?P<mode>rate|concurrency)-(?P<load>[\d.]+)"
                  r"-(?P<run>\d+)")


def load_runs(dirs: list[Path]) -> dict[str, dict[str, list[tuple[np.ndarray, float]]]]:
    """{"rate-72": {"autotune": [(ttfts ms, duration s), ...], "vllm": [...]}}; a vllm JSON
    saved without per-request TTFTs is skipped."""
    out: dict[str, dict[str, list[tuple[np.ndarray, float]]]] = {}
    for d in dirs:
        for f in sorted(d.iterdir()):
            m = NAME.fullmatch(f.stem)
            if not m or f.suffix not in (".csv", ".json"):
                continue
            key = f"{m['mode']}-{m['load']}"
            if m["tool"] == "vllm":
                doc = json.loads(f.read_text())
                if "ttfts" not in doc:
                    continue
                run = (np.asarray(doc["ttfts"], dtype=float) * 1000, float(doc["duration"]))
            else:
                df = pd.read_csv(f)
                run = (df["ttft_ms"].dropna().to_numpy(),
                       float(df["end_time"].max() - df["send_time"].min()))
            out.setdefault(key, {}).setdefault(m["tool"], []).append(run)
    return {k: v for k, v in out.items() if len(v) == 2}


def pooled_p99(runs: list[tuple[np.ndarray, float]]) -> float:
    return float(np.percentile(np.concatenate([t for t, _ in runs]), 99))


def compare(tools: dict[str, list[tuple[np.ndarray, float]]], resamples: int,
            rng: np.random.Generator) -> dict[str, Any]:
    a, v = tools["autotune"], tools["vllm"]
    boot = []
    for _ in range(resamples):
        ra = [a[i] for i in rng.integers(0, len(a), len(a))]
        rv = [v[i] for i in rng.integers(0, len(v), len(v))]
        boot.append(pooled_p99(ra) / pooled_p99(rv))
    lo, hi = np.percentile(boot, [2.5, 97.5])
    ratio = pooled_p99(a) / pooled_p99(v)
    mean_a = np.concatenate([t for t, _ in a]).mean()
    mean_v = np.concatenate([t for t, _ in v]).mean()
    return {
        "runs": {"autotune": len(a), "vllm": len(v)},
        "pooled_p99_ttft_ms": {"autotune": round(pooled_p99(a), 1),
                               "vllm": round(pooled_p99(v), 1)},
        "p99_ttft_ratio": round(ratio, 3),
        "p99_ttft_ratio_95ci_runs": [round(float(lo), 3), round(float(hi), 3)],
        "within_10pct_shown": bool(lo >= 0.9 and hi <= 1.1),
        "mean_ttft_ratio": round(float(mean_a / mean_v), 3),
        "duration_s": {"autotune": [round(x, 2) for _, x in a],
                       "vllm": [round(x, 2) for _, x in v]},
        "throughput_ratio_of_medians": round(float(np.median([x for _, x in v])
                                                   / np.median([x for _, x in a])), 4),
    }


def over_server(dirs: list[Path]) -> dict[str, dict[str, Any]]:
    """Per load and tool: client mean TTFT / vLLM's mean TTFT, each run and the median; and
    autotune's median against the reference's, in percent."""
    per: dict[str, dict[str, list[float]]] = {}
    for d in dirs:
        for line in (d / "runs.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["tool"] not in ("autotune", "vllm") or not r.get("server_mean_ttft_ms"):
                continue
            key = f"{r['mode']}-{r['load']:g}"
            per.setdefault(key, {}).setdefault(r["tool"], []).append(
                r["mean_ttft_ms"] / r["server_mean_ttft_ms"])
    out: dict[str, dict[str, Any]] = {}
    for key, tools in sorted(per.items()):
        med = {t: float(np.median(x)) for t, x in tools.items()}
        row: dict[str, Any] = {t: {"runs": [round(v, 3) for v in x], "median": round(med[t], 3)}
                               for t, x in tools.items()}
        if len(med) == 2:
            row["diff_pct"] = round(100 * (med["autotune"] / med["vllm"] - 1), 2)
        out[key] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("dirs", type=Path, nargs="+")
    ap.add_argument("--resamples", type=int, default=4000)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    got = {k: compare(t, a.resamples, rng) for k, t in sorted(load_runs(a.dirs).items())}
    ratio = over_server(a.dirs)
    a.out.write_text(json.dumps({"pooled_p99_ttft": got, "mean_ttft_over_server": ratio},
                                indent=1) + "\n")
    for k, row in ratio.items():
        print(f"{k}: client mean TTFT / vLLM's own: autotune {row['autotune']['median']:.3f}, "
              f"vllm {row['vllm']['median']:.3f} ({row.get('diff_pct', float('nan')):+.1f}%)")
    for k, r in got.items():
        print(f"{k}: pooled p99 TTFT autotune {r['pooled_p99_ttft_ms']['autotune']:,.0f} ms, "
              f"vllm {r['pooled_p99_ttft_ms']['vllm']:,.0f} ms, ratio {r['p99_ttft_ratio']:.2f} "
              f"[{r['p99_ttft_ratio_95ci_runs'][0]:.2f}, {r['p99_ttft_ratio_95ci_runs'][1]:.2f}]")


if __name__ == "__main__":
    main()
