#!/usr/bin/env python3
"""How short may a benchmark be? Repeats the CPU demo's workload at several lengths on the same
servers and measures the spread of total token throughput at each length, within a boot and
across boots. The thresholds of autotune's "too short to measure" warning come from this
(docs/noise.md).

Boots `--boots` servers one after another (the demo's fixed args, vLLM's defaults); on each,
`--rounds` rounds run every length in turn (16, 32, ... requests at concurrency 16), the same
requests each round (common random numbers), interleaved so drift hits every length alike.

    python -m lab.measure_short --out docs/results/noise/short-cpu [--boots 3 --rounds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from autotune.api import load_study_config
from autotune.api.parts import booted, build_requests, measure_load, steady_share


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/cpu-demo.yaml")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--lengths", default="16,32,64,128,256")
    a = ap.parse_args()
    cfg = load_study_config(a.config)
    lengths = [int(x) for x in a.lengths.split(",")]
    per_round = sum(lengths)
    prof = cfg.profile.model_copy(update={"num_prompts": per_round * a.rounds})
    reqs = build_requests(prof, cfg.server.tokenizer_dir, cfg.server.args.get("max_model_len"))
    warm = reqs[prof.num_prompts:]
    conc = prof.max_concurrency or 1
    rows = []
    a.out.mkdir(parents=True, exist_ok=True)
    for boot in range(a.boots):
        with tempfile.TemporaryDirectory() as tmp, \
                booted(cfg.server, {}, Path(tmp), lambda p: None) as proc:
            for rnd in range(a.rounds):
                at = rnd * per_round
                for n in lengths:
                    pt = measure_load(proc.base_url, cfg.server.model, prof, reqs[at:at + n],
                                 warm=warm)
                    at += n
                    m = pt.metrics
                    row = {"boot": boot, "round": rnd, "num_prompts": n,
                           "requests_per_slot": n / conc, "duration_s": m.duration_s,
                           "total_token_throughput": m.total_token_throughput,
                           "mean_tpot_ms": m.tpot_ms.mean,
                           "steady_share": steady_share(pt.records, conc, m.duration_s)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    (a.out / "raw.json").write_text(json.dumps(rows, indent=1) + "\n")
    summary = {"config": a.config, "concurrency": conc, "boots": a.boots, "rounds": a.rounds,
               "lengths": {}}
    for n in lengths:
        xs = [r for r in rows if r["num_prompts"] == n]
        tput = [r["total_token_throughput"] for r in xs]
        within = [statistics.stdev(v) / statistics.fmean(v) for b in range(a.boots)
                  if len(v := [r["total_token_throughput"] for r in xs if r["boot"] == b]) > 1]
        boot_means = [statistics.fmean(r["total_token_throughput"] for r in xs
                                       if r["boot"] == b) for b in range(a.boots)]
        summary["lengths"][str(n)] = {
            "requests_per_slot": n / conc,
            "duration_s_median": statistics.median(r["duration_s"] for r in xs),
            "steady_share_median": statistics.median(r["steady_share"] for r in xs),
            "rel_sd_all": statistics.stdev(tput) / statistics.fmean(tput),
            "rel_sd_within_boot": statistics.fmean(within) if within else None,
            "rel_sd_between_boot_means": (statistics.stdev(boot_means)
                                          / statistics.fmean(boot_means)
                                          if len(boot_means) > 1 else None),
        }
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
