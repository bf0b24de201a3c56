#!/usr/bin/env python3
"""Our client against `vllm bench serve` on the same windows of a trace, on one server: each
window replayed at a speed-up by autotune's load generator (prompts built from the hash ids,
autotune.load.replay) and by vLLM's reference client (`--dataset-name timed_trace` on the same
window written as it reads it, its timeline divided by the speed-up), the two alternating.

    python -m lab.trace_reference --model DIR --trace trace.jsonl --block-size 64 \\
        --speedups 4,12 --pairs 3 --out ref.json -- --load-format dummy --enforce-eager

The same window means the same arrivals, lengths and block structure (which requests share
which prefix blocks); not the same tokens (vLLM draws a block's tokens with Python's salted
`hash`, a new draw in each run, as autotune draws new ones for each seed). vLLM warms up by
repeating the window's first request (`--num-warmups`); by default our client does the same
here (`--ours-warmup first`), so both start on the same cache (a study's point warms up on the
requests recorded before its window: `--ours-warmup before`).

The JSON: per speed-up, each run's figures from both clients and the median over the pairs of
each figure, with our client's relative difference to vLLM's; our p99 send lag and late-read
share against the trace's schedule. Exit 0 when it ran, 1 when the server or a client failed,
2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.api import AutotuneError, ConfigError, ProfileConfig
from autotune.api.parts import (
    ServerProcess,
    ServerStats,
    client_cpus,
    default_executable,
    free_port,
    load_tokenizer,
    load_trace,
    measure_load,
    run_reference,
    scrape_url,
    serve_argv,
    trace_window,
    write_vllm_trace,
)

FIGURES = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
           "p99_tpot_ms", "mean_itl_ms", "mean_e2el_ms", "request_throughput",
           "output_throughput", "duration", "completed")
OURS_ONLY = ("p99_send_lag_ms", "mean_send_lag_ms", "late_read_share")


# vLLM's own view of a run (/metrics): its TTFT, TPOT and prefix-cache hits, so a gap between
# the clients reads as the server's (it saw the same) or the client's (it did not)
SERVER = ("server_mean_ttft_ms", "server_mean_tpot_ms", "server_prefix_cache_hit_rate")


def ours(url: str, model: str, profile: ProfileConfig, reqs: list[Any], warm: list[Any]
         ) -> dict[str, float]:
    pt = measure_load(url, model, profile, reqs, warm=warm, check_length=False)
    flat = pt.metrics.flat() | {k: pt.server_stats[k] for k in SERVER if k in pt.server_stats}
    flat["duration"] = flat.get("duration_s", 0.0)
    return {k: flat[k] for k in (*FIGURES, *OURS_ONLY, *SERVER) if k in flat}


def theirs(vllm: list[str], url: str, model: str, tok_dir: str, profile: ProfileConfig,
           out: Path, cpus: Any) -> dict[str, float]:
    """vllm bench serve's figures, and the server's over its run (its warm-ups included: a few
    requests, the window's first one repeated)."""
    before = scrape_url(url)
    res = run_reference(vllm, url, model, tok_dir, profile, out, cpus=cpus, rt=True)
    after = scrape_url(url)
    got = {f: res.metrics[f] for f in FIGURES if f in res.metrics}
    if before and after:
        stats = ServerStats()
        stats.add(before)
        stats.add(after)
        got |= {k: v for k, v in stats.summary().items() if k in SERVER}
    return got


def run(a: argparse.Namespace) -> dict[str, Any]:
    tok_dir = a.tokenizer or a.model
    tok = load_tokenizer(tok_dir)
    profile = ProfileConfig(name="trace", path=str(a.trace), block_size=a.block_size,
                            time_unit=a.time_unit, warmup=a.warmup)
    trace = load_trace(profile, tok, tok_dir, a.max_len)
    if trace.has_text:
        raise ConfigError(f"--trace {a.trace}: prompts as text cannot go to vLLM's timed_trace")
    speedups = [float(x) for x in a.speedups.split(",")]
    out_dir = a.out.parent / (a.out.stem + "-runs")
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = serve_argv(shlex.split(a.vllm), a.model, {}, a.flags)
    doc: dict[str, Any] = {"model": a.model, "trace": trace.note(), "block_size": a.block_size,
                           "serve_argv": shlex.join(argv), "min_duration_s": a.min_duration_s,
                           "requests": a.requests, "warmup": a.warmup, "pairs": a.pairs,
                           "ours_warmup": a.ours_warmup,
                           "by_speedup": {}}
    cpus = client_cpus("auto")
    with ServerProcess(argv, log_path=out_dir / "server.log", port=free_port()) as proc:
        doc["boot_s"] = round(proc.wait_healthy(a.boot_timeout), 1)
        url = proc.base_url
        for s in speedups:
            runs: list[dict[str, Any]] = []
            for k in range(a.pairs):
                seed = a.seed + 1000 * k + int(s * 100)
                # a window drawn with the seed (the blocks' salt too; the trace's block size is
                # --block-size), its requests and the warm-up before it
                reqs, pre, win = trace_window(trace, tok, s, seed, a.requests, a.min_duration_s,
                                              a.warmup)
                if a.ours_warmup != "before":
                    pre = [reqs[0]] * a.warmup  # "first": as vLLM warms up
                warm = [r.__class__(r.prompt, r.prompt_len, min(r.output_len, 16)) for r in pre]
                path = write_vllm_trace(trace, win, out_dir / f"w-x{s:g}-{k}.jsonl")
                ref_profile = profile.model_copy(update={
                    "path": str(path), "num_prompts": len(reqs), "speedup": s, "seed": seed})
                row: dict[str, Any] = {"seed": seed, "requests": len(reqs),
                                       "span_s": round(win.span_s, 2)}
                order = ("ours", "vllm") if k % 2 == 0 else ("vllm", "ours")
                for who in order:
                    t0 = time.monotonic()
                    if who == "ours":
                        row["ours"] = ours(url, a.model, profile, reqs, warm)
                    else:
                        row["vllm"] = theirs(shlex.split(a.vllm), url, a.model, tok_dir,
                                             ref_profile, out_dir / f"ref-x{s:g}-{k}.json",
                                             cpus)
                    row[f"{who}_s"] = round(time.monotonic() - t0, 1)
                runs.append(row)
                print(f"x{s:g} pair {k}: ours p99 TTFT {row['ours']['p99_ttft_ms']:.0f} ms, "
                      f"vLLM {row['vllm']['p99_ttft_ms']:.0f} ms; ours mean TPOT "
                      f"{row['ours']['mean_tpot_ms']:.1f}, vLLM "
                      f"{row['vllm']['mean_tpot_ms']:.1f}", flush=True)
            med = {who: {f: statistics.median(r[who][f] for r in runs) for f in (
                *FIGURES, *SERVER) if all(f in r[who] for r in runs)} for who in ("ours", "vllm")}
            med["ours"] |= {f: statistics.median(r["ours"][f] for r in runs) for f in OURS_ONLY}
            diff = {f: med["ours"][f] / med["vllm"][f] - 1 for f in med["vllm"]
                    if f in med["ours"] and med["vllm"][f]}
            doc["by_speedup"][f"{s:g}"] = {"runs": runs, "median": med,
                                           "ours_vs_vllm": diff}
    return doc


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Flags after -- go to `vllm serve`.")
    p.add_argument("--model", required=True)
    p.add_argument("--tokenizer")
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--block-size", type=int, default=512)
    p.add_argument("--time-unit", choices=("s", "ms"), default="s")
    p.add_argument("--max-len", type=int, default=None, help="drop longer requests "
                   "(default: the model's limit)")
    p.add_argument("--speedups", default="1", help="comma-separated, e.g. 4,12")
    p.add_argument("--pairs", type=int, default=3, help="windows per speed-up, each run by "
                   "both clients (default 3)")
    p.add_argument("--requests", type=int, default=100, help="requests a window, at least")
    p.add_argument("--min-duration-s", type=float, default=20.0, help="a window's arrivals "
                   "once compressed, at least")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--ours-warmup", choices=("before", "first"), default="first",
                   help="our client's warm-up: the requests recorded before the window (as a "
                   "study's point), or the window's first repeated, as vllm bench serve's "
                   "--num-warmups does (default: first, the same server state for both)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vllm", default=shlex.join(default_executable()),
                   help="command that runs vLLM's CLI (default: this environment's)")
    p.add_argument("--boot-timeout", type=float, default=600.0)
    p.add_argument("--out", type=Path, required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    flags = args[args.index("--") + 1:] if "--" in args else []
    a = parser().parse_args(args[:args.index("--")] if "--" in args else args)
    a.flags = flags
    try:
        doc = run(a)
    except ConfigError as e:
        print(f"trace_reference: {e}", file=sys.stderr)
        return 2
    except (AutotuneError, subprocess.TimeoutExpired) as e:
        print(f"trace_reference: {e}", file=sys.stderr)
        return 1
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    for s, d in doc["by_speedup"].items():
        print(f"x{s}: ours vs vLLM (medians of {a.pairs}): " + ", ".join(
            f"{f} {v:+.1%}" for f, v in d["ours_vs_vllm"].items()))
    print(f"written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
