"""Issue 80: a certification pooled over sittings on different machines, simulated as the
product runs it (autotune.tuning.certify_sim.across: the certify rule of
autotune.tuning.certify_rule, each machine's boots of the pick compared with its own of the
defaults, pooled; the machine as the unit where the pick's gain differs between machines): the
share certified at a true 1.25x, the interval's coverage, and false certifications of a pick no
better than the defaults, by sittings (1-4, two pairs each), boot spread (4/8/12%) and
config-by-machine interaction (none, 3%, 10%), machines 6% apart in pace.

    .venv/bin/python -m lab.across_machines [--seeds 1000]
        [--out docs/results/across-machines/simulation.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from autotune.api.parts import CertifyRule, certify_across

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--out", type=Path,
                    default=ROOT / "docs/results/across-machines/simulation.json")
    a = ap.parse_args()
    rule = CertifyRule(max_boots=20)  # the sittings, not max_boots, end it here
    cells = []
    for inter in (0.0, 0.03, 0.10):
        for spread in (0.04, 0.08, 0.12):
            for sittings in (1, 2, 3, 4):
                rng = np.random.default_rng(int(inter * 1000 + spread * 100) * 10 + sittings)
                runs = [certify_across(rng, 1.25, spread, rule, sittings, interaction_sd=inter)
                        for _ in range(a.seeds)]
                cov = [c for r in runs if (c := r.covered) is not None]
                none = [certify_across(rng, 1.0, spread, rule, sittings, interaction_sd=inter)
                        for _ in range(a.seeds)]
                cov0 = [c for r in none if (c := r.covered) is not None]
                row = {"interaction_sd": inter, "boot_spread": spread, "sittings": sittings,
                       "certified_at_1_25x": round(sum(r.certified for r in runs) / a.seeds, 4),
                       "coverage_at_1_25x": round(sum(cov) / len(cov), 4) if cov else None,
                       "false_certified_at_1_0x": round(
                           sum(r.certified for r in none) / a.seeds, 4),
                       "coverage_at_1_0x": round(sum(cov0) / len(cov0), 4) if cov0 else None}
                cells.append(row)
                print(json.dumps(row), flush=True)
    doc = {"model": "certify_sim.across: first pass on machine 1 (its boots left out); each "
                    "sitting a new machine, pace log-normal sd 6% for both configs, the pick's "
                    "gain log-normal sd `interaction_sd` around its true gain; two pairs a "
                    "sitting (the defaults, then the pick), a look after every pair",
           "studies_per_cell": a.seeds, "rule": "autotune.tuning.certify_rule (basis, next_step)",
           "cells": cells,
           "max_false_certified": max(c["false_certified_at_1_0x"] for c in cells),
           "min_coverage": min(min(c["coverage_at_1_25x"] or 1, c["coverage_at_1_0x"] or 1)
                               for c in cells)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
