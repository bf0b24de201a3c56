"""Issue 85 item 5: a one-GPU sitting's budget simulated as the product runs it
(autotune.tuning.certify_sim.sitting: the plan explores the defaults, then configs while the
fewest certify pairs and the reference check still fit, then the certify rule of
autotune.tuning.certify_rule), at given costs: how often a true gain of 1.2x, 1.4x and 1.6x
certifies at boot spreads of 4%, 8% and 12%, and how often a pick no better than the defaults
is falsely certified at spreads up to 40%, with the interval's coverage.

    .venv/bin/python -m lab.one_sitting --budget 25 --cold 8 --trial 6 --check 2.5 \\
        --reference 1 [--seeds 3000] [--out docs/results/one-sitting/simulation.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from autotune.api.parts import CertifyRule, Costs, certify_sitting

ROOT = Path(__file__).resolve().parents[1]


def cell(seed: int, n: int, ratios: list[float], spread: float, budget: float, cold: float,
         cost: Costs) -> dict[str, float | None]:
    rng = np.random.default_rng(seed)
    runs = [certify_sitting(rng, ratios, spread, CertifyRule(), budget, cold, cost)
            for _ in range(n)]
    cov = [c for r in runs if (c := r.covered) is not None]
    return {"certified": round(sum(r.certified for r in runs) / n, 4),
            "coverage": round(sum(cov) / len(cov), 4) if cov else None,
            "with_interval": len(cov), "mean_gpu_minutes": round(
                statistics.fmean(r.minutes for r in runs), 2),
            "certify_boots_each": round(statistics.fmean(r.boots for r in runs), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=25.0)
    ap.add_argument("--cold", type=float, required=True, help="the defaults' first trial")
    ap.add_argument("--trial", type=float, required=True, help="a later exploration trial")
    ap.add_argument("--check", type=float, required=True, help="a certify boot")
    ap.add_argument("--reference", type=float, required=True, help="the reference check")
    ap.add_argument("--seeds", type=int, default=3000)
    ap.add_argument("--source", default="", help="where the costs were measured")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/results/one-sitting/simulation.json")
    a = ap.parse_args()
    cost = Costs("GPU-min", a.trial, a.check, a.reference, True)
    power = {f"{g}x": {f"{s:.0%}": cell(int(g * 100 + s * 1000), a.seeds, [1.0, g], s,
                                         a.budget, a.cold, cost)
                       for s in (0.04, 0.08, 0.12)} for g in (1.2, 1.4, 1.6)}
    false = {f"{s:.0%}": {f"K={k}": cell(k * 7 + int(s * 1000), a.seeds, [1.0] * (k + 1), s,
                                          a.budget, a.cold, cost) for k in (1, 5)}
             for s in (0.04, 0.08, 0.12, 0.2, 0.3, 0.4)}
    doc = {"budget_gpu_minutes": a.budget, "costs_gpu_min": {
        "cold_trial": a.cold, "trial": a.trial, "certify_boot": a.check,
        "reference": a.reference, "source": a.source}, "studies_per_cell": a.seeds,
        "rule": "autotune.tuning.certify_rule (certify_sim.sitting: the product's loop)",
        "true_gain": power, "no_better_than_defaults": false,
        "max_false_certified": max(c["certified"] for row in false.values()
                                   for c in row.values())}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
