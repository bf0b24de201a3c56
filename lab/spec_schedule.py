#!/usr/bin/env python3
"""Does vLLM follow a K-by-batch-size schedule? The speculative config export names for one
server on both sides of a line (outputs/by_load.schedule): K up to a batch, none above
(`speculative_config.num_speculative_tokens_per_batch_size`). One boot with the schedule and
one without, in a shuffled order, each running the study's workload at a concurrency at or
under the schedule's last batch and at one well above it; vLLM's spec_decode counters say how
many decode steps drafted at each. Followed, the schedule drafts at the low concurrency as the
plain config does, and (almost) never at the high one, where the plain config still drafts.

Each (boot, concurrency) row lands in OUT/runs.jsonl as it ends (lab/ngram_drafts.row_of's
fields, and the mean TPOT).

    python -m lab.spec_schedule --config STUDY.yaml --out DIR [--k 3] [--last 2] [--high 8]
"""

from __future__ import annotations

import json
import random
import time

from autotune.api import load_study_config
from autotune.api.parts import run_boot
from lab.ngram_drafts import parser, row_of

KEY = "num_speculative_tokens_per_batch_size"


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--last", type=int, default=2, help="the schedule's last batch with K")
    ap.add_argument("--high", type=int, default=8, help="the concurrency above it")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    cfg = load_study_config(a.config)
    spec = {"method": "ngram", "num_speculative_tokens": a.k, "prompt_lookup_max": 4,
            "prompt_lookup_min": 2}
    scheduled = {**spec, KEY: [[1, a.last, a.k], [a.last + 1, 1024, 0]]}
    base = cfg.workloads()[0]
    profiles = [base.model_copy(update={"max_concurrency": c, "label": f"c{c}"})
                for c in (1, a.high)]
    boots = [("plain", spec), ("schedule", scheduled)]
    random.Random(a.seed).shuffle(boots)
    a.out.mkdir(parents=True, exist_ok=True)
    for name, sc in boots:
        run_dir = a.out / "boots" / f"{name}-{time.time():.0f}"
        run_dir.mkdir(parents=True)
        res = run_boot(cfg.server, profiles, {"speculative_config": sc}, run_dir)
        for prof in profiles:
            pt = res.points[prof.key]
            m = pt.metrics
            row = {"boot": name, "speculative_config": sc, "concurrency": prof.max_concurrency,
                   **row_of(pt.server_stats, m.completed, m.total_output_tokens),
                   "mean_tpot_ms": round(m.tpot_ms.mean, 2)}
            print(json.dumps(row), flush=True)
            with (a.out / "runs.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
