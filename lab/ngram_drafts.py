#!/usr/bin/env python3
"""Does n-gram speculation draft on random weights? One boot each of a study's model, on its own
weights and on random ones (`load_format: dummy`, optionally in more dtypes), with n-gram
speculation, in a shuffled order, each running the study's workload and a random-token one;
vLLM's spec_decode counters say how many decode steps drafted and how many tokens they got
accepted. A declared acceptance profile can be emulated only on drafts that are made
(docs/speculative.md): where random weights make none, a shape-only study cannot judge n-gram.

Each boot's row lands in OUT/runs.jsonl as it ends: weights, dtype, workload, requests, output
tokens, drafts, draft tokens, accepted tokens, decode steps (output tokens less each request's
first, from its prefill, less the accepted drafts: a step emits one token plus those it
accepted), the share of steps that drafted, and the mean accepted length.

    python -m lab.ngram_drafts --config STUDY.yaml --out DIR [--k 3] [--dummy-dtypes bfloat16]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from autotune.api import ProfileConfig, load_study_config
from autotune.api.parts import acceptance_profile_of, run_boot


def row_of(stats: dict[str, float], completed: int, output_tokens: int) -> dict[str, Any]:
    """One run's speculative counters (server_spec_* deltas) with the mean acceptance length and
    the share of decode steps that drafted, as the product's acceptance profile reads them."""
    accepted = stats.get("server_spec_accepted_tokens", 0.0)
    profile = acceptance_profile_of(stats, 0, output_tokens, completed) or {}
    return {"requests": completed, "output_tokens": output_tokens,
            "drafts": stats.get("server_spec_drafts", 0.0),
            "draft_tokens": stats.get("server_spec_draft_tokens", 0.0), "accepted": accepted,
            "decode_steps": output_tokens - completed - accepted,
            "draft_share": profile.get("draft_share"), "mean_length": profile.get("mean_length")}


def parser(doc: str) -> argparse.ArgumentParser:
    """The options these n-gram measurements share: the study, the output folder, K."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True,
                    help="a study file serving the model's own weights")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--k", type=int, default=3)
    return ap


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--lookup", default="4,2", help="prompt_lookup_max,prompt_lookup_min")
    ap.add_argument("--dummy-dtypes", default="", help="more dtypes for the random weights")
    ap.add_argument("--random-len", default="128,32", help="the random workload's in,out")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    cfg = load_study_config(a.config)
    hi, lo = (int(x) for x in a.lookup.split(","))
    spec = {"method": "ngram", "num_speculative_tokens": a.k, "prompt_lookup_max": hi,
            "prompt_lookup_min": lo}
    own = cfg.workloads()[0]
    n_in, n_out = (int(x) for x in a.random_len.split(","))
    rand = ProfileConfig.model_validate({"name": "random", "input_len": n_in,
                                         "output_len": n_out, "num_prompts": own.num_prompts})
    weights = [("own", None), ("random", None)] + [
        ("random", d) for d in a.dummy_dtypes.split(",") if d]
    cases = [(w, d, p) for w, d in weights for p in (own, rand)]
    random.Random(a.seed).shuffle(cases)
    a.out.mkdir(parents=True, exist_ok=True)
    for w, dtype, prof in cases:
        args = dict(cfg.server.args)
        if w == "random":
            args["load_format"] = "dummy"
        if dtype:
            args["dtype"] = dtype
        server = cfg.server.model_copy(update={"args": args})
        run_dir = a.out / "boots" / f"{w}-{dtype or 'as-set'}-{prof.name}-{time.time():.0f}"
        run_dir.mkdir(parents=True)
        res = run_boot(server, [prof], {"speculative_config": spec}, run_dir)
        m = res.point.metrics
        row = {"weights": w, "dtype": args.get("dtype", "model's"), "workload": prof.name,
               "speculative_config": spec,
               **row_of(res.point.server_stats, m.completed, m.total_output_tokens)}
        print(json.dumps(row), flush=True)
        with (a.out / "runs.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
