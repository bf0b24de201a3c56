"""Would a short probe have been safe? Replays recorded full-length capacity points: a probe of
P seconds is the point's requests scheduled in its first P seconds, each with its recorded
latencies. The probe calls a point "far below the knee" (met, no full-length run needed) when
every SLO metric is under MARGIN x its target; that is safe only if the full point met.

    python -m lab.probe_replay OUT.json DIR [DIR ...]

Judged on each point's first run (a close point's second run is another sample). SLOs: p99
TTFT <= 2000 ms and p99 TPOT <= 60 ms, the H100 study's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from autotune.api.parts import RequestRecord, request_samples
from lab.settle_replay import records, runs

TARGETS = {"ttft": 2000.0, "tpot": 60.0}
PROBES_S = (4.0, 6.0, 8.0, 10.0)
MARGINS = (0.25, 0.5, 0.75)


def p99s(recs: list[RequestRecord]) -> dict[str, float] | None:
    """p99 TTFT and TPOT in ms, or None below 100 requests (no p99 from fewer)."""
    s = request_samples(recs)
    if min(len(s["ttft"]), len(s["tpot"])) < 100:
        return None
    return {k: float(np.percentile(s[k], 99.0)) for k in TARGETS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("dirs", nargs="+", type=Path)
    a = ap.parse_args()
    points: list[dict[str, Any]] = []
    for d in a.dirs:
        for csv in sorted(d.rglob("load-*.csv"), key=lambda p: float(p.stem[5:])):
            first = runs(records(csv))[0]
            full = p99s(first)
            if full is None:
                continue
            row: dict[str, Any] = {"dir": str(d), "load": float(csv.stem[5:]), "full": full,
                                   "full_met": all(full[k] <= t for k, t in TARGETS.items()),
                                   "full_s": max(r.end_time or r.send_time for r in first)}
            for p in PROBES_S:
                probe = [r for r in first
                         if (r.send_time if r.scheduled_time is None else r.scheduled_time) < p]
                row[f"probe_{p:g}s"] = {"p99": p99s(probe), "s": max(
                    (r.end_time or r.send_time for r in probe), default=0.0)}
            points.append(row)
    rules = []
    for p in PROBES_S:
        for m in MARGINS:
            far = [r for r in points if (pr := r[f"probe_{p:g}s"]["p99"]) is not None
                   and all(pr[k] <= m * t for k, t in TARGETS.items())]
            wrong = [r for r in far if not r["full_met"]]
            rules.append({
                "probe_s": p, "margin": m, "far": len(far), "full_not_met": len(wrong),
                "worst_full_over_target": round(max(
                    [max(r["full"][k] / t for k, t in TARGETS.items()) for r in wrong],
                    default=0.0), 2),
                "saved_s": round(sum(r["full_s"] - r[f"probe_{p:g}s"]["s"] for r in far), 1),
                "wrong": [[r["load"], round(r["full"]["ttft"]), round(r["full"]["tpot"], 1)]
                          for r in wrong]})
            print(f"probe {p:4.0f} s, margin {m:.2f}: far {len(far):3d}, full not met "
                  f"{len(wrong):3d}, saved {rules[-1]['saved_s']:6.0f} s")
    a.out.write_text(json.dumps({"targets_ms": TARGETS, "points": len(points),
                                 "full_s": round(sum(r["full_s"] for r in points), 1),
                                 "rules": rules, "per_point": points}, indent=1) + "\n")


if __name__ == "__main__":
    main()
