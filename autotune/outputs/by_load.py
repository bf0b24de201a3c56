"""Where speculation pays, by load, for an exported config: the exported trial against the best
config of the other kind (the best speculative one where the export does not speculate, the
best without where it does), their capacity searches' mean TPOT compared at every load both
measured (measure/crossover.py). Export prints it and writes it in export.json as `by_load`:
for example "speculative (ngram, K 3) up to 6 req/s, trial 2 (no speculation) above"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.config.study import StudyConfig
from autotune.measure.capacity import LoadPoint
from autotune.measure.crossover import Curve, crossover
from autotune.tuning.record import TrialRecord

METRIC = "mean_tpot_ms"  # what speculation cuts at low batch


def speculates(rec: TrialRecord) -> bool:
    return isinstance(rec.flags.get("speculative_config"), dict)


def curve_of(rec: TrialRecord) -> Curve:
    return points_curve(rec.curve())


def points_curve(points: Sequence[LoadPoint]) -> Curve:
    """METRIC over load from load points (a search's or a ladder's; the load generator's own
    limit is no reading of the server), with the highest load that met the SLOs."""
    pts = [p for p in points if not p.flag and METRIC in p.metrics]
    met = [p.load for p in pts if p.passed]
    return Curve([p.load for p in pts], [p.metrics[METRIC] for p in pts],
                 max(met) if met else None)


def spec_label(rec: TrialRecord) -> str:
    spec = rec.flags.get("speculative_config") or {}
    k = spec.get("num_speculative_tokens")
    return f"trial {rec.number} (speculative: {spec.get('method')}" + (
        f", K {k})" if k is not None else ")")


def pair_of(cfg: StudyConfig, trial: TrialRecord, records: list[TrialRecord]
            ) -> tuple[TrialRecord, TrialRecord] | None:
    """(the speculative one, the other) of `trial` and the best measured config of the other
    kind, by the study's first objective; None outside a capacity study (no load points) or
    where no config of the other kind was measured."""
    if cfg.capacity is None or cfg.profiles or not trial.curve():
        return None
    first = cfg.objectives[0]
    others = [r for r in records if r.measured and r.facts.repeat_of is None
              and speculates(r) != speculates(trial) and r.curve()
              and r.value(first.metric) is not None]
    if not others:
        return None
    sign = -1.0 if first.direction == "minimize" else 1.0
    other = max(others, key=lambda r: sign * float(r.value(first.metric) or 0.0))
    return (trial, other) if speculates(trial) else (other, trial)


def by_load(cfg: StudyConfig, trial: TrialRecord, records: list[TrialRecord]
            ) -> dict[str, Any] | None:
    """The crossover of `trial` against the best measured config of the other kind (pair_of),
    on their capacity searches' points; None where there is no such pair."""
    pair = pair_of(cfg, trial, records)
    if pair is None or cfg.capacity is None:
        return None
    spec, plain = pair
    a, b = curve_of(spec), curve_of(plain)
    doc = crossing_doc(cfg.capacity.axis, spec, plain, a, b,
                       "mean TPOT at each load both measured")
    if a.loads and b.loads and max(min(a.loads), min(b.loads)) > cfg.capacity.low:
        doc["text"] += (f"; below {max(min(a.loads), min(b.loads)):g} not measured for both: "
                        "`autotune export --by-load` measures them there")
    return doc


def crossing_doc(axis: str, spec: TrialRecord, plain: TrialRecord, a: Curve, b: Curve,
                 how: str) -> dict[str, Any]:
    """The crossover of the two curves as export prints and writes it."""
    found = crossover(a, b)
    unit = "in flight" if axis == "concurrency" else "req/s"
    return {"metric": METRIC, "speculative_trial": spec.number, "other_trial": plain.number,
            "pays_up_to": found.pays_up_to, "everywhere": found.everywhere,
            "edges": [{"load": x, "edge": e} for x, e in found.edges],
            "text": found.text(unit, spec_label(spec), f"trial {plain.number} (no "
                               f"speculation)") + f" ({how})"}
