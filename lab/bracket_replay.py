"""Replay recorded capacity searches under both bracket rules (capacity.bracket: near, double).

Each recorded trial (a capacity.json) gives where its search started (its first load), whether
it could stop early (a trial after the first starts at the incumbent's capacity, which is also
its early-stop bound) and where its capacity lies: at or above its capacity and below its first
failing load. For thresholds spread log-evenly over that range, the search is run against a
server that meets the SLOs up to the threshold and misses above it, once with each rule. Out:
points per trial, met and missed points, the seconds they would take at the given met/missed
point costs, and a check that every replayed capacity lies within the tolerance below the
threshold. An estimate from records, not a measurement: a real point near the knee can flip.

    python -m lab.bracket_replay OUT.json [--met-s 35] [--missed-s 18] CAPACITY.json ...
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from autotune.api.parts import LoadPoint, capacity_search

THRESHOLDS = 9  # per trial, log-evenly over [capacity, fail)


def replay(start: float, incumbent: float | None, threshold: float, bracket: str,
           tolerance: float, low: float, high: float) -> dict[str, float]:
    seen: list[bool] = []

    def measure(load: float) -> LoadPoint:
        seen.append(load <= threshold)
        return LoadPoint(load, load <= threshold, (), {})

    res = capacity_search(measure, axis="rate", low=low, high=high, tolerance=tolerance,
                          start=start, stop_below=incumbent, bracket=bracket)
    within = res.capacity <= threshold and (
        res.stopped is not None or res.fail is None or
        (threshold < res.fail and (res.fail - res.capacity) / res.capacity <= tolerance))
    return {"points": len(seen), "met": sum(seen), "missed": len(seen) - sum(seen),
            "capacity": res.capacity, "within": within}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--met-s", type=float, default=35.0)
    ap.add_argument("--missed-s", type=float, default=18.0)
    ap.add_argument("--tolerance", type=float, default=0.1)
    ap.add_argument("--low", type=float, default=4.0)
    ap.add_argument("--high", type=float, default=512.0)
    a = ap.parse_args()
    trials = []
    for i, f in enumerate(sorted(a.files)):
        doc = json.loads(f.read_text())
        points = doc["points"]
        start = points[0]["load"]
        cap, fail = doc["capacity"], doc.get("fail")
        if not cap or fail is None:
            continue  # infeasible, or met at the highest load: no range to replay
        incumbent = None if i == 0 else start
        ts = [cap * math.exp(math.log(fail / cap) * (k + 0.5) / THRESHOLDS)
              for k in range(THRESHOLDS)]
        row: dict[str, object] = {"file": f.name, "start": start, "capacity": cap, "fail": fail,
                                  "recorded_points": len(points)}
        for bracket in ("near", "double"):
            runs = [replay(start, incumbent, t, bracket, a.tolerance, a.low, a.high) for t in ts]
            row[bracket] = {
                "points": statistics.mean(r["points"] for r in runs),
                "met": statistics.mean(r["met"] for r in runs),
                "missed": statistics.mean(r["missed"] for r in runs),
                "load_s": statistics.mean(r["met"] * a.met_s + r["missed"] * a.missed_s
                                          for r in runs),
                "all_within_tolerance": all(r["within"] for r in runs)}
        trials.append(row)

    def total(bracket: str, key: str) -> float:
        return round(sum(t[bracket][key] for t in trials), 1)  # type: ignore[index]

    out = {"what": __doc__.split("\n\n")[0], "met_s": a.met_s, "missed_s": a.missed_s,
           "tolerance": a.tolerance, "thresholds_per_trial": THRESHOLDS, "trials": trials,
           "near": {"points": total("near", "points"), "load_s": total("near", "load_s")},
           "double": {"points": total("double", "points"), "load_s": total("double", "load_s")}}
    out["all_within_tolerance"] = all(t[b]["all_within_tolerance"]  # type: ignore[index]
                                      for t in trials for b in ("near", "double"))
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("near", "double", "all_within_tolerance")}))


if __name__ == "__main__":
    main()
