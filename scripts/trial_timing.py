#!/usr/bin/env python3
"""Where a study's time went, per trial: boot, benchmark, stop, and the tuner's own overhead.

    python scripts/trial_timing.py --config examples/cpu-demo.yaml

overhead = (trial wall time in the storage - boot - benchmark - stop)
         + (gap before the next trial starts: sampling, storage, MLflow logging, progress).
"""

from __future__ import annotations

import argparse
import statistics

from autotune.config import load_study_config
from autotune.study import open_study


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--study-name")
    a = ap.parse_args()
    cfg = load_study_config(a.config, {"name": a.study_name} if a.study_name else None)
    trials = [t for t in open_study(cfg, create=False).get_trials(deepcopy=False)
              if t.datetime_complete is not None]
    print(f"{'#':>3} {'state':<10} {'boot s':>7} {'bench s':>8} {'stop s':>7} {'in-trial':>9} "
          f"{'between':>8} {'overhead s':>10}")
    overheads = []
    for i, t in enumerate(trials):
        wall = (t.datetime_complete - t.datetime_start).total_seconds()
        tm = t.user_attrs.get("timings", {})
        boot, bench, stop = tm.get("boot_s", 0.0), tm.get("bench_s", 0.0), tm.get("stop_s", 0.0)
        inside = wall - boot - bench - stop
        nxt = trials[i + 1] if i + 1 < len(trials) else None
        gap = (nxt.datetime_start - t.datetime_complete).total_seconds() if nxt else None
        state = (t.state.name.lower() if t.state.name != "COMPLETE" else
                 "reused" if t.user_attrs.get("reused_from") is not None else
                 "infeasible" if t.user_attrs.get("failure") else "ok")
        over = inside + (gap or 0.0)
        if tm:
            overheads.append(over)
        print(f"{t.number:>3} {state:<10} {boot:>7.1f} {bench:>8.1f} {stop:>7.1f} {inside:>9.2f} "
              f"{gap if gap is not None else float('nan'):>8.2f} {over:>10.2f}")
    if overheads:
        print(f"tuner overhead per measured trial: mean {statistics.mean(overheads):.2f} s, "
              f"max {max(overheads):.2f} s ({len(overheads)} trials)")


if __name__ == "__main__":
    main()
