"""Trials per hour with 1 and with N workers on one study (PostgreSQL storage, real vLLM).

On a PostgreSQL storage (--storage; docs/scale-out.md says how to start one) it runs the
same study config (default: examples/cpu-demo.yaml) once per worker count, each as a fresh study,
and prints a Markdown table: trials, wall time of `autotune study`, trials per hour, and the
mean boot and benchmark seconds per trial (boots slow down when servers share the cores).

    .venv/bin/python -m lab.scaleout --storage postgresql://postgres@HOST/at \
        --config examples/cpu-demo.yaml --n-trials 8 --workers 1 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from autotune.api import load_study_config, study_summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="examples/cpu-demo.yaml")
    ap.add_argument("--n-trials", type=int, default=8)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--storage", required=True,
                    help="a PostgreSQL URL (postgresql://USER@HOST:PORT/DB) to create "
                         "the studies in; docs/scale-out.md says how to start one")
    args = ap.parse_args()
    rows = []

    def run(url: str) -> None:
        for w in args.workers:
            name = f"scaleout-{w}w-{int(time.time())}"
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "autotune", "study", "--config",
                                args.config, "--storage", url, "--study-name", name,
                                "--n-trials", str(args.n_trials), "--workers", str(w)],
                               capture_output=True, text=True)
            wall = time.monotonic() - t0
            if p.returncode != 0:
                sys.exit(f"{w} workers failed:\n{p.stderr[-3000:]}")
            cfg = load_study_config(args.config, {"name": name, "storage": url})
            done = [r for r in study_summary(cfg).records
                    if r.status not in ("running", "waiting")]
            boots = [r.timings["boot_s"] for r in done if r.timings]
            benches = [r.timings["bench_s"] for r in done if r.timings]
            infeasible = sum(bool(r.facts.failure) for r in done)
            rows.append((w, len(done), infeasible, wall, len(done) / wall * 3600,
                         statistics.mean(boots) if boots else 0.0,
                         statistics.mean(benches) if benches else 0.0))
            print(f"{w} workers: {len(done)} trials in {wall:.0f} s", file=sys.stderr)

    run(args.storage)
    print(f"config {args.config}, {args.n_trials} trials per study, PostgreSQL storage\n")
    print("| workers | trials | of them infeasible | wall s | trials/hour | mean boot s "
          "(measured trials) | mean bench s |")
    print("|---|---|---|---|---|---|---|")
    for w, n, bad, wall, tph, boot, bench in rows:
        print(f"| {w} | {n} | {bad} | {wall:.0f} | {tph:.1f} | {boot:.1f} | {bench:.2f} |")


if __name__ == "__main__":
    main()
