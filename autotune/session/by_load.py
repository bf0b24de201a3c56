"""`autotune export --by-load`: where speculation stops paying, measured. The exported config and
the best config of the other kind (outputs/by_load.pair_of: speculative or not) are each booted
once more as a stock `vllm serve` and measured at one ladder of loads, from the capacity
search's low end to the higher of their capacities, each load as a capacity point is (its
warm-up, samples and SLO verdict), the two boots in a random order and each boot's loads
shuffled. The capacity searches alone measure a speculative config only near its capacity
(a search starts at the incumbent's), so their common loads miss the low ones where
speculation can win; here both configs are measured at every load of the ladder."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.config.study import StudyConfig
from autotune.errors import ConfigError, LoadError, ServerError
from autotune.measure.capacity import CapacityResult
from autotune.measure.crossover import Curve
from autotune.measure.on_server import capacity_on
from autotune.measure.runner import booted
from autotune.outputs.by_load import (
    METRIC,
    crossing_doc,
    pair_of,
    points_curve,
    schedule,
    spec_label,
)
from autotune.outputs.console import out
from autotune.tuning.record import TrialRecord

RUNGS = 5  # loads on the ladder, at most


def ladder(cfg: StudyConfig, capacities: list[float], rungs: int = RUNGS) -> list[float]:
    """`rungs` loads spread evenly on a log scale from capacity.low to the higher of the two
    capacities (the search's high end where neither met the SLOs); whole slots on the
    concurrency axis (fewer where they coincide)."""
    cap = cfg.capacity
    if cap is None:
        raise ConfigError("--by-load: a capacity study's loads; this study has no capacity: "
                          "section")
    lo, hi = cap.low, max([c for c in capacities if c > 0], default=cap.high)
    if hi <= lo:
        return [lo]
    xs = [lo * (hi / lo) ** (i / (rungs - 1)) for i in range(rungs)]
    if cap.axis == "concurrency":
        return sorted({float(max(1, round(x))) for x in xs})
    return [float(f"{x:.3g}") for x in xs]


def measure_by_load(cfg: StudyConfig, trial: TrialRecord, records: list[TrialRecord],
                    on_phase: Callable[[str], None], loads: list[float] | None = None,
                    seed: int = 0) -> dict[str, Any]:
    """Boot the pair (pair_of) one after the other in a random order, measure each at the
    ladder's loads in a shuffled order, and return (and write, in the study's folder
    by-load/by_load.json) each config's points and the crossover read from them."""
    pair = pair_of(cfg, trial, records)
    if pair is None or cfg.capacity is None:
        raise ConfigError(f"--by-load: trial {trial.number} has no config of the other kind "
                          "to compare with (a capacity study that measured a speculative "
                          "config and one without speculation)")
    spec, plain = pair
    rungs = loads or ladder(cfg, [float(r.value("capacity") or 0.0) for r in pair])
    rng = random.Random(seed)
    order = rng.sample(list(pair), 2)
    where = cfg.study_dir() / "by-load"
    server = cfg.server.model_copy(update={"preload": False})  # stock, as deployed
    capacity = cfg.capacity

    def measure(flags: dict[str, Any], name: str, folder: str) -> CapacityResult:
        run_dir = where / folder
        run_dir.mkdir(parents=True, exist_ok=True)

        def phase(p: str) -> None:
            on_phase(f"{name}: {p}")

        with booted(server, flags, run_dir, phase) as proc:
            return capacity_on(
                proc.base_url, server.model, server.tokenizer_dir, cfg.profile, capacity,
                list(cfg.slos), run_dir, on_phase=phase, alive=proc.alive,
                log_path=proc.log_path, loads=rng.sample(rungs, len(rungs)))

    found = {rec.number: measure(rec.flags, spec_label(rec) if rec is spec else
                                 f"trial {rec.number} (no speculation)",
                                 f"trial-{rec.number:04d}") for rec in order}
    a, b = points_curve(found[spec.number].curve()), points_curve(found[plain.number].curve())
    doc = crossing_doc(capacity.axis, spec, plain, a, b,
                       f"mean TPOT, both booted again and measured at {len(rungs)} loads")
    doc |= {"loads": rungs, "order": [r.number for r in order], "points": {
        str(n): _points(res) for n, res in found.items()}}
    path = where / "by_load.json"
    doc["path"] = str(path)
    plan = schedule(capacity.axis, spec, found[spec.number].curve(), doc, cfg.server.args)
    if plan is not None:  # one server for both sides of the line, booted after the pair
        doc["schedule"] = plan | {"measured": False}
        _write(path, doc)  # the pair's answer is kept whatever the third boot does
        try:
            res = measure({**spec.flags, "speculative_config": plan["speculative_config"]},
                          f"trial {spec.number}, K by batch size", "schedule")
        except (ServerError, LoadError) as e:
            doc["schedule"]["error"] = f"{type(e).__name__}: {e}"
        else:
            doc["schedule"] |= {"measured": True, "points": _points(res),
                                "slower_than_the_better": slower_than_better(
                                    points_curve(res.curve()), a, b)}
    _write(path, doc)
    return doc


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: v for k, v in doc.items() if k != "path"}, indent=2) + "\n")


def _points(res: CapacityResult) -> list[dict[str, Any]]:
    return [{"load": p.load, METRIC: round(p.metrics.get(METRIC, math.nan), 2),
             "met": p.passed} for p in res.curve()]


def slower_than_better(plan: Curve, a: Curve, b: Curve) -> list[dict[str, Any]]:
    """The schedule's METRIC at each of its loads against the better of the two configs there,
    of those that met the SLOs at that load (positive: the schedule's mean TPOT is higher by
    that share), where the schedule and at least one of them were read."""
    rows = []
    for x in plan.loads:
        met = [c.at(x) for c in (a, b) if c.capacity is not None and x <= c.capacity]
        mine, best = plan.at(x), min((v for v in met if v), default=None)
        if mine and best:
            rows.append({"load": x, "slower_by": round(mine / best - 1.0, 4)})
    return rows


def _listed(points: list[dict[str, Any]]) -> str:
    """A ladder's points as printed: "1 -> 12.3 ms, 2 -> 15.0 ms (misses)"."""
    return ", ".join(f"{p['load']:g} -> {p[METRIC]:.1f} ms{'' if p['met'] else ' (misses)'}"
                     for p in points)


def print_by_load(cfg: StudyConfig, trial: TrialRecord, records: list[TrialRecord],
                  loads: list[float] | None = None) -> dict[str, Any]:
    """`export --by-load`: measure_by_load with its progress, then its table and answer."""
    doc = measure_by_load(cfg, trial, records, lambda p: out.print(f"  by load: {p}",
                                                                   highlight=False), loads)
    for n, pts in doc["points"].items():
        out.print(f"  trial {n}: {_listed(pts)}", highlight=False, soft_wrap=True)
    out.print(f"by load (measured): {doc['text']}", highlight=False, soft_wrap=True)
    if (plan := doc.get("schedule")) is not None:
        if "error" in plan:
            out.print(f"  {plan['text']}: its boot failed ({plan['error']})",
                      highlight=False, soft_wrap=True)
        else:
            worst = max((r["slower_by"] for r in plan["slower_than_the_better"]),
                        default=None)
            out.print(f"  {plan['text']}: measured at {_listed(plan['points'])}"
                      + ("" if worst is None else f"; mean TPOT at most {worst:+.0%} "
                         "against the better of the two at each load"),
                      highlight=False, soft_wrap=True)
    out.print(f"written to {doc['path']}", highlight=False)
    return doc


def loads_option(text: str | None) -> list[float] | None:
    """--by-load-loads "1,2,4,8": the ladder given (positive numbers, each once)."""
    if text is None:
        return None
    try:
        xs = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ConfigError(f"--by-load-loads {text!r}: give loads as numbers separated by "
                          "commas, e.g. 1,2,4,8") from None
    if not xs or xs[0] <= 0:
        raise ConfigError(f"--by-load-loads {text!r}: every load above 0")
    return xs


__all__ = ["ladder", "loads_option", "measure_by_load", "print_by_load"]
