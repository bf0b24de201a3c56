"""Where speculation pays, by load, for an exported config: the exported trial against the best
config of the other kind (the best speculative one where the export does not speculate, the
best without where it does), their capacity searches' mean TPOT compared at every load both
measured (measure/crossover.py). Export prints it and writes it in export.json as `by_load`:
for example "speculative (ngram, K 3) up to 6 req/s, trial 2 (no speculation) above"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.config.study import StudyConfig
from autotune.measure.capacity import LoadPoint
from autotune.measure.crossover import Curve, crossover
from autotune.tuning.record import TrialRecord

METRIC = "mean_tpot_ms"  # what speculation cuts at low batch
# vLLM's speculative_config key for K by batch size: [[first, last, K], ...], K 0 drafting none
# (vLLM 0.26.0 and 0.32.0 have it; it runs CUDA graphs piecewise, and not with data parallel)
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


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
    if (plan := schedule(cfg.capacity.axis, spec, spec.curve(), doc,
                         cfg.server.args)) is not None:
        doc["schedule"] = plan | {"measured": False}
        doc["text"] += f"; {plan['text']}, not measured: `autotune export --by-load` measures it"
    return doc


def batch_at(axis: str, points: Sequence[LoadPoint], load: float) -> float | None:
    """The batch vLLM runs at `load` on a config's points: the requests in flight on the
    concurrency axis; on the rate axis, by Little's law, the rate times the time a request
    runs (its mean end-to-end latency less vLLM's mean queue wait: points without that wait
    are left out, since near capacity the queue is most of the latency), a mean over steps,
    read between the points around it. None where the points do not reach `load`."""
    if axis == "concurrency":
        return load
    pts = [(p.load, p.load * (p.metrics["mean_e2el_ms"] - p.server["server_mean_queue_ms"])
            / 1000.0) for p in points if not p.flag and "mean_e2el_ms" in p.metrics
           and "server_mean_queue_ms" in p.server]
    pts = [(x, y) for x, y in sorted(pts) if y > 0]
    return Curve([x for x, _ in pts], [y for _, y in pts]).at(load) if pts else None


def schedule(axis: str, spec: TrialRecord, points: Sequence[LoadPoint],
             found: dict[str, Any], fixed: Mapping[str, Any] | None = None
             ) -> dict[str, Any] | None:
    """One server for both sides of the line: the speculative config with K by batch size
    (SCHEDULE_KEY), its K up to the batch it runs at the load where it stops paying and none
    above. None where it pays at no load or at every load, its K is not set, that batch
    reaches its max_num_seqs (the K-0 range would never apply), or it runs data parallel
    (vLLM drops the key there); `fixed`: the study's fixed server args."""
    flags = {**(fixed or {}), **spec.flags}
    up, spec_cfg = found.get("pays_up_to"), flags.get("speculative_config")
    if not isinstance(spec_cfg, dict) or int(flags.get("data_parallel_size") or 1) > 1:
        return None
    k = spec_cfg.get("num_speculative_tokens")
    if up is None or found.get("everywhere") or not isinstance(k, int) or k < 1:
        return None
    at = batch_at(axis, points, up)
    seqs = int(flags.get("max_num_seqs") or 0)
    if at is None or at < 1 or (seqs and int(at) >= seqs):
        return None
    last = int(at)
    plan = [[1, last, k], [last + 1, max(last + 1, seqs or 1024), 0]]
    return {"batch_up_to": last, "speculative_config": {**spec_cfg, SCHEDULE_KEY: plan},
            "text": f"or one server, trial {spec.number}'s flags with K {k} up to a batch of "
                    f"{last} and none above: speculative_config.{SCHEDULE_KEY} "
                    f"{plan} (vLLM's K by batch size)"}


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
