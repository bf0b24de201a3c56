"""Does a server forked from the preloaded vLLM (server.preload) serve like one started directly?

Boots the same server with `autotune bench` again and again, forked (`--preload`) or direct, in
a shuffled order of pairs, with the same requests each time (the bench's seed), all under one
workdir so every boot shares one cache root (a workdir each would compile every boot cold).
Writes one JSON line a boot as it ends (launch, boot seconds, throughput, TTFT and TPOT) and,
at the end, the medians of each launch and their ratio.

    python -m lab.fork_ab --pairs 3 --vllm .venv/bin/vllm --model M OUT_DIR -- BENCH-ARGS
    (BENCH-ARGS: the load and the server flags, e.g. --profile random --input-len 128
     --output-len 32 --num-prompts 200 --max-concurrency 16 -- --load-format dummy)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

KEEP = ("request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms",
        "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vllm", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--warm", action="store_true", help="a first boot, not compared, that "
                    "pays a fresh machine's compile and JIT")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    rest = a.bench_args[1:] if a.bench_args[:1] == ["--"] else a.bench_args
    a.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(a.seed)
    order = [m for _ in range(a.pairs) for m in rng.sample(["direct", "forked"], 2)]
    if a.warm:
        order.insert(0, "warm")
    rows = []
    for i, mode in enumerate(order):
        name = f"{i}-{mode}"
        argv = [sys.executable, "-m", "autotune", "bench", "--vllm", a.vllm, "--model", a.model,
                "--workdir", str(a.out / "bench"), "--output", str(a.out / f"{name}.json"),
                *(["--preload"] if mode == "forked" else []), *rest]
        t0 = time.monotonic()
        with open(a.out / f"{name}.txt", "w") as log:
            rc = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT)
        row: dict[str, object] = {"boot": i, "launch": mode, "rc": rc,
                                  "wall_s": round(time.monotonic() - t0, 1)}
        if rc == 0:
            doc = json.loads((a.out / f"{name}.json").read_text())
            row["launch_seen"] = doc.get("launch")
            row["boot_s"] = round(doc["timings"]["boot_s"], 1)
            row |= {k: doc["metrics"][k] for k in KEEP if k in doc.get("metrics", {})}
        rows.append(row)
        with open(a.out / "boots.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    summary: dict[str, object] = {"order": order, "pairs": a.pairs}
    for k in KEEP:
        med = {m: statistics.median(float(r[k]) for r in rows  # type: ignore[arg-type]
                                    if r["launch"] == m and k in r)
               for m in ("direct", "forked") if any(r["launch"] == m and k in r for r in rows)}
        if len(med) == 2 and med["direct"]:
            summary[k] = med | {"forked_over_direct": round(med["forked"] / med["direct"], 4)}
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
