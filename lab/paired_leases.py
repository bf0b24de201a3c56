#!/usr/bin/env python3
"""Certifying on one-GPU leases (issue 66's note): what today's rule (the pick and the defaults
booted on one machine, stats.censored_gain) certifies when a lease pays only a few boots, and
what pairing the boots within each machine would (each lease boots the pick and the defaults in
turn; the gain is the mean over pairs of their log ratio, so a machine's own pace cancels).

Simulated boots as tests/unit/measure/test_certify_stats.py draws them: a boot's log capacity is
the config's plus the machine's effect (shared by every boot on that machine, `--machine-sd`),
plus a config-by-machine effect (`--interaction-sd`: the pick faster on one machine than
another, relative to the defaults) and the boot's own noise (`--boot-sd`); a search finds it to a
bracket [C, C x 1.1) on a grid anchored where the config was found before.

Designs, each over `--leases` leases of `--pairs` pairs:
  one_machine   today's rule: censored_gain over one lease's boots (a study spread over machines
                certifies on one machine's boots only)
  pooled        censored_gain over every lease's boots, the machines ignored
  paired_pairs  a t-interval over pairs (df = pairs - 1) of each pair's bracketed log ratio:
                exact when configs keep their ratio across machines (no interaction)
  paired_leases the same with each lease's mean ratio as the unit (df = leases - 1): holds with
                an interaction too

    PYTHONPATH=$PWD .venv/bin/python -m lab.paired_leases --out OUT.json
Prints and writes, per design, interaction and leases: the share certified at the true gain
(`--gain`), the interval's coverage of it, and the share certified when the pick is no better
than the defaults (a false certification; the rule's claim is at most 5%).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy.stats import t as student

from autotune.api.parts import CERTIFY_LEVEL, censored_gain

STEP = math.log1p(0.10)


def bracket(x: float, anchor: float) -> tuple[float, float]:
    """A boot at log capacity x as a search stepping x1.1 from `anchor` finds it."""
    lo = anchor + math.floor((x - anchor) / STEP) * STEP
    return math.exp(lo), math.exp(lo + STEP)


def paired(units: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Each unit: (lo_a - hi_b, mid_a - mid_b, hi_a - lo_b) in logs; a t-interval over units of
    the midpoints' ratio, widened by the brackets' mean width (as censored_gain does)."""
    lows, mids, highs = (np.array(v) for v in zip(*units, strict=True))
    n = len(mids)
    if n < 2:
        return -math.inf, math.inf
    half = float(student.ppf(0.5 + CERTIFY_LEVEL / 2, n - 1)) * float(mids.std(ddof=1)) / \
        math.sqrt(n)
    return float(lows.mean()) - half, float(highs.mean()) + half


def one_study(rng: np.random.Generator, gain: float, a: argparse.Namespace, inter: float,
              leases: int) -> dict[str, tuple[float, float]]:
    mu_b = math.log(75) + rng.uniform(0, STEP)
    mu_a = mu_b + math.log1p(gain)
    anchor_a, anchor_b = rng.normal(mu_a, a.boot_sd), rng.normal(mu_b, a.boot_sd)
    boots_a: list[list[tuple[float, float]]] = []
    boots_b: list[list[tuple[float, float]]] = []
    for _ in range(leases):
        m = rng.normal(0, a.machine_sd)
        i = rng.normal(0, inter)
        boots_a.append([bracket(mu_a + m + i + rng.normal(0, a.boot_sd), anchor_a)
                        for _ in range(a.pairs)])
        boots_b.append([bracket(mu_b + m + rng.normal(0, a.boot_sd), anchor_b)
                        for _ in range(a.pairs)])

    def unit(x: tuple[float, float], y: tuple[float, float]) -> tuple[float, float, float]:
        la, ha, lb, hb = (math.log(v) for v in (*x, *y))
        return la - hb, (la + ha) / 2 - (lb + hb) / 2, ha - lb

    pairs = [unit(x, y) for la, lb in zip(boots_a, boots_b, strict=True)
             for x, y in zip(la, lb, strict=True)]
    per_lease = []
    for k in range(leases):
        lo, mid, hi = zip(*pairs[k * a.pairs:(k + 1) * a.pairs], strict=True)
        per_lease.append((float(np.mean(lo)), float(np.mean(mid)), float(np.mean(hi))))
    one = censored_gain(boots_a[0], boots_b[0])
    pooled = censored_gain([x for la in boots_a for x in la], [y for lb in boots_b for y in lb])
    bounded = one.n > 1 and one.n_base > 1  # censored_gain's interval needs 2 boots a side
    return {"one_machine": (math.log1p(one.low), math.log1p(one.high)) if bounded else
            (-math.inf, math.inf),
            "pooled": (math.log1p(pooled.low), math.log1p(pooled.high)),
            "paired_pairs": paired(pairs),
            "paired_leases": paired(per_lease)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gain", type=float, default=0.25)
    p.add_argument("--boot-sd", type=float, default=0.07)
    p.add_argument("--machine-sd", type=float, default=0.06)
    p.add_argument("--interaction-sd", type=float, nargs="+", default=[0.0, 0.03])
    p.add_argument("--pairs", type=int, default=2, help="pairs a lease pays")
    p.add_argument("--leases", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    rows = []
    for inter in a.interaction_sd:
        for leases in a.leases:
            rng = np.random.default_rng(a.seed)
            tally: dict[str, dict[str, int]] = {}
            for _ in range(a.n):
                for gain, key in ((a.gain, "true"), (0.0, "null")):
                    for d, (lo, hi) in one_study(rng, gain, a, inter, leases).items():
                        t = tally.setdefault(d, {"cert": 0, "cover": 0, "false": 0})
                        if key == "true":
                            t["cert"] += lo > 0
                            t["cover"] += lo <= math.log1p(gain) <= hi
                        else:
                            t["false"] += lo > 0
            for d, t in tally.items():
                row = {"design": d, "interaction_sd": inter, "leases": leases,
                       "pairs": leases * a.pairs, "certified": t["cert"] / a.n,
                       "coverage": t["cover"] / a.n, "false_certified": t["false"] / a.n}
                rows.append(row)
                print(json.dumps(row))
    doc = {"what": __doc__.split("\n\n")[0], "gain": a.gain, "boot_sd": a.boot_sd,
           "machine_sd": a.machine_sd, "pairs_per_lease": a.pairs, "level": CERTIFY_LEVEL,
           "n": a.n, "seed": a.seed, "results": rows}
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
