"""How to split a GPU budget between exploring and certifying (docs/results/certified/split.json).

A simulated capacity study on a measured landscape: the 36 configs of the H100 grid
(docs/results/replay/h100-throughput/table.json: each config's mean over its boots, as a ratio to
vLLM's defaults'), each boot's capacity drawn around its config's with a boot-to-boot spread and
found to a bracket [C, C x 1.1), as the capacity search finds it. The study runs as the product
runs it (autotune.tuning.plan and certify, the same rules): vLLM's defaults, then configs in a
random order (a lower bound for TPE, which the replay found within 2% of the best in 2 trials
with the GPU start) while the budget less the reserve pays the next trial; then the certify
phase, pairs of boots of the first-pass pick and the defaults until the gain's lower bound
clears 0, or the budget cannot pay a pair and the reference check.

Costs (GPU-minutes, the H100 figures of docs/results/warm-server-h100): the first trial 9.5
(cold), a warm trial 5.5, a certify boot 3.5 at two load points (met at the capacity found, missed
a step above), 0.75 more for each further point its bracket steps through (the pick's first
boot, its luckiest, anchors its first certify boot high), the reference check 5.0. For each
reserve rule (certify.min_gain; "none": explore the whole budget, certify with what is left)
and spread, it reports the share of studies certified, the mean true gain of what the user
deploys (the pick when certified, else the defaults: 0), the boots, the trials explored and
the points a certify boot measured; `recommended_gain` counts, as the product recommends it, a
budget-spent pick whose certify boots read a gain (uncertified), `recommended_worse` how often
that is a config worse than the defaults.

With --workers W (W GPUs of one host, `autotune study --workers W`): every worker's first trial
is cold (each boots its own server; the compile caches on disk are written by all at once), a
worker starts a trial while the budget less the reserve pays it and the trials running on the
others (autotune.tuning.study.run_trials), and a certify round boots W // 2 pairs at once
(certify.round_pairs); `wall_min` is the study's wall time.

    .venv/bin/python -m lab.certify_split [--seeds 2000] [--workers 1,2,4]
        [--out docs/results/certified/split.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np

from autotune.api.parts import Costs, boots_for, censored_gain, fit_pairs, too_few

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs/results/replay/h100-throughput/table.json"
COLD, WARM, CHECK, REFERENCE = 9.5, 5.5, 3.5, 5.0
# a certify boot of 3.5: a warm boot and its warm-up, and two load points of 0.75 each
POINT = 0.75
# PRICED: the plan prices a certify boot at the points it expects (certify_points), not two, as
# autotune.tuning.plan does (False: the product's rule; --priced tries the other)
PRICED = False
# FUTILITY: the certify phase stops where the pairs its budget still pays cannot certify the
# pick at its estimate (autotune.tuning.plan.too_few), as the product does; --no-futility: not
FUTILITY = True
TOL = 0.1
MAX_BOOTS = 5


def landscape() -> list[float]:
    """Each config's mean as a ratio to the defaults' (the first row: no flag set)."""
    rows = json.loads(TABLE.read_text())
    means = [statistics.fmean(r["values"]) for r in rows if r["values"]]
    base = statistics.fmean(next(r["values"] for r in rows
                                 if not any(v is not None and v != "auto"
                                            for v in r["params"].values())))
    return [m / base for m in means]


def found(rng: np.random.Generator, true: float, spread: float, anchor: float,
          tol: float = TOL) -> tuple[float, float]:
    x = true * math.exp(rng.normal(0, spread))
    step = math.log1p(tol)
    lo = anchor * math.exp(math.floor(math.log(x / anchor) / step) * step)
    return lo, lo * (1 + tol)


def certify_points(noise: float, step: float) -> float:
    """Load points a certify boot is expected to measure, fitted to this simulation's certify
    phase at a 10% step (2.19 at a 4% spread, 2.34 at 6%, 2.81 at 12%)."""
    return 2.0 + 0.65 * noise / step


def points_from(anchor: float, bracket: tuple[float, float], tol: float) -> int:
    """Load points a certify boot measures ("step" bracket from `anchor`): met at the anchor
    and one per step up to the miss; or missed there and one per step down to the met."""
    k = round(math.log(bracket[0] / anchor) / math.log1p(tol))
    return 2 + k if k >= 0 else 1 - k


def study(rng: np.random.Generator, ratios: list[float], spread: float, budget: float,
          min_gain: float | None, explore: int, workers: int = 1,
          step: float = TOL) -> dict[str, float | None]:
    """One study, its reserve as autotune.tuning.plan sets it (min_gain None: no reserve), on
    `workers` GPUs at once."""
    base_true = 70.0
    order = [0, *rng.permutation(np.arange(1, len(ratios)))]
    # the plan prices a certify boot at two points (PRICED: at the points it expects)
    check = CHECK + POINT * (certify_points(spread, step) - 2) if PRICED else CHECK
    costs = Costs("GPU-min", WARM, check, REFERENCE, True)
    pairs = 0 if min_gain is None else fit_pairs(
        budget, costs, min(boots_for(min_gain, spread, TOL), MAX_BOOTS),
        COLD + (explore - 1) * WARM)
    reserve = costs.reserve(pairs) if pairs else 0.0
    spent, boots = 0.0, {}
    free = [0.0] * workers  # when each worker is free (wall minutes)
    ends: list[float] = []  # the running trials' ends
    for i, c in enumerate(order):
        w = min(range(workers), key=lambda k: free[k])
        now = free[w]
        running = sum(e > now for e in ends)
        cost = COLD if i < workers else WARM
        # before the first trial's bill, every worker starts (run_trials: no bill, no check)
        if i >= workers and spent + cost * (1 + running) + reserve > budget:
            break
        spent += cost
        free[w] = now + cost
        ends.append(now + cost)
        true = base_true * ratios[c]
        boots[c] = [found(rng, true, spread, true * math.exp(rng.normal(0, spread)))]
    explored = len(boots)
    wall = max(ends)
    pick = max(boots, key=lambda c: boots[c][0][0])
    if pick == 0:
        return {"certified": 0.0, "deployed_gain": 0.0, "recommended_gain": 0.0,
                "recommended_worse": 0.0, "stopped_decided": 0.0, "explored": explored, "boots": 1,
                "defaults_pick": 1.0, "points_per_certify_boot": None, "stopped_too_few": 0.0,
                "spent": spent,
                "wall_min": wall}
    # the pick's first boot chose it (its luckiest): as the product does, it does not count
    mine: list[tuple[float, float]] = []
    points: list[int] = []
    stopped = decided = False  # by too_few, with budget left; a not-certified verdict
    spent_out = False  # ended "budget spent" (the product deploys the pick, uncertified)
    g = censored_gain(mine, boots[0])
    while True:
        both = g.n > 1 and g.n_base > 1
        if both and (g.low > 0 or g.high < 0) or min(g.n, g.n_base) >= MAX_BOOTS:
            break
        k = max(1, workers // 2)  # pairs at once: certify.round_pairs
        k = min(k, MAX_BOOTS - min(g.n, g.n_base))
        while k > 0 and budget - spent < 2 * k * check + REFERENCE:
            k -= 1
        few = too_few(mine, boots[0], MAX_BOOTS - min(g.n, g.n_base), budget - spent,
                      costs) if k and FUTILITY else None
        if k == 0 or few:
            stopped, decided, spent_out = few is not None, few is not None and few.decided, \
                not (few is not None and few.decided)
            break
        # each certify boot starts at the median of the capacities its config's boots found
        # (certify.check_at), the pick's first pass included
        anchor = statistics.median(lo for lo, _ in boots[0])
        anchor_pick = statistics.median([boots[pick][0][0], *(lo for lo, _ in mine)])
        cost = 0.0
        for _ in range(k):
            mine.append(found(rng, base_true * ratios[pick], spread, anchor_pick, step))
            boots[0].append(found(rng, base_true, spread, anchor, step))
            n_pts = (points_from(anchor_pick, mine[-1], step),
                     points_from(anchor, boots[0][-1], step))
            points.extend(n_pts)
            cost += 2 * (CHECK - 2 * POINT) + POINT * sum(n_pts)
        spent += cost
        wall += cost / 2 / k if workers > 1 else cost
        g = censored_gain(mine, boots[0])
    certified = g.n > 1 and g.n_base > 1 and g.low > 0 and budget - spent >= REFERENCE
    spent_out = spent_out or g.low > 0 and not certified  # no minutes for the reference
    # what the product recommends: a certified pick; on budget spent the pick, uncertified,
    # where its certify boots so far read a gain (summary.recommend); else the defaults
    recommended = certified or spent_out and (g.n == 0 or g.gain > 0)
    return {"certified": float(certified),
            "deployed_gain": ratios[pick] - 1 if certified else 0.0,
            "recommended_gain": ratios[pick] - 1 if recommended else 0.0,
            "recommended_worse": float(recommended and ratios[pick] < 1.0),
            "stopped_decided": float(decided),
            "explored": explored, "boots": g.n, "defaults_pick": 0.0,
            "points_per_certify_boot": statistics.fmean(points) if points else None,
            "stopped_too_few": float(stopped),
            "spent": spent + (REFERENCE if certified else 0.0),
            "wall_min": wall + (REFERENCE if certified else 0.0)}


def mean_of(xs: list[float | None]) -> float | None:
    """The mean of the studies that have the figure (a certify boot's points: those that
    certified anything)."""
    got = [x for x in xs if x is not None]
    return round(statistics.fmean(got), 4) if got else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2000)
    ap.add_argument("--budgets", default="30,45,60")
    ap.add_argument("--workers", default="1", help="worker counts, comma-separated")
    ap.add_argument("--steps", default=str(TOL), help="a certify boot's bracket steps "
                    "(certify.step), comma-separated")
    ap.add_argument("--rules", default="all", help="'all', or min_gain:explore_trials pairs "
                    "(e.g. 0.2:3), comma-separated")
    ap.add_argument("--no-futility", action="store_true", help="the certify phase boots on "
                    "while the budget pays a pair, whether or not it could certify")
    ap.add_argument("--priced", action="store_true", help="the plan prices a certify boot at "
                    "the points it expects, not two")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/results/certified/split.json")
    args = ap.parse_args()
    global PRICED, FUTILITY
    PRICED, FUTILITY = args.priced, not args.no_futility
    ratios = landscape()
    rules: list[float | None] = [None, 0.1, 0.2, 0.3, 0.5]
    explores = (1, 2, 3, 4)
    out: dict[str, object] = {
        "landscape": {"source": str(TABLE.relative_to(ROOT)), "configs": len(ratios),
                      "best_ratio": max(ratios), "share_above_1_2": sum(
                          r > 1.2 for r in ratios) / len(ratios)},
        "costs_gpu_min": {"cold_trial": COLD, "warm_trial": WARM, "certify_boot": CHECK,
                          "certify_boot_point": POINT, "reference": REFERENCE},
        "seeds": args.seeds, "tolerance": TOL, "max_boots": MAX_BOOTS,
        "certify_boot_points": "each certify boot measures the points its step bracket takes "
                               "from the median of its config's boots (met at C and a step "
                               "above: 2; each step more: 1 more, POINT each)",
        "plan_prices_points": PRICED, "certify_stops_when_too_few": FUTILITY,
        "exploration_order": "the defaults, then random (a lower bound for TPE)",
        "workers_model": "each worker's first trial cold; a worker starts a trial while the "
                         "budget less the reserve pays it and the trials running elsewhere; a "
                         "certify round boots workers // 2 pairs at once",
        "results": []}
    pairs = [(None, 0), *((r, e) for r in rules[1:] for e in explores)] if args.rules == "all" \
        else [(float(r), int(e)) for r, e in (x.split(":") for x in args.rules.split(","))]
    cells = [(b, s, r, e, w, st) for w in (int(x) for x in args.workers.split(","))
             for b in (float(x) for x in args.budgets.split(",")) for s in (0.04, 0.12)
             for r, e in pairs for st in (float(x) for x in args.steps.split(","))]
    for budget, spread, rule, explore, workers, step in cells:
        rng = np.random.default_rng(0)
        runs = [study(rng, ratios, spread, budget, rule, explore, workers, step)
                for _ in range(args.seeds)]
        row = {"budget": budget, "spread": spread, "workers": workers, "certify_step": step,
               "min_gain": rule if rule is not None else "none", "explore_trials": explore,
               **{k: mean_of([r[k] for r in runs]) for k in runs[0]}}
        out["results"].append(row)  # type: ignore[attr-defined]
        print(json.dumps(row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
