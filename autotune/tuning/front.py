"""Pareto fronts and picking on one: a study's feasible front of first-pass trials as Optuna
stores them (front_numbers), the front of records on given values, the knee, a suite's rank, and
the default pick for each kind of study (autotune.tuning.summary's recommendation rule)."""

from __future__ import annotations

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.study import StudyConfig
from autotune.errors import StudyError
from autotune.tuning.record import TrialRecord, facts_of, records


def front_numbers(study: optuna.Study) -> set[int]:
    """The trials on the feasible Pareto front among the first-pass trials: a confirm phase's
    repeats measure a config again, they are not configs of their own. Feasible as Optuna's
    best_trials has it (every constraint <= 0: infeasible trials carry violated constraints);
    on the front when no other feasible trial is at least as good in every objective and
    better in one (equal trials are all on it).

    A capacity search stopped early below the incumbent is left out: its capacity is a lower
    bound under the incumbent's, and its other objectives were measured at its floor load, not
    at its capacity, so a lower mean TPOT there is no trade-off (the H100 study put two such
    trials on the front that way)."""
    sign = [1.0 if d == optuna.study.StudyDirection.MAXIMIZE else -1.0
            for d in study.directions]

    def counts(t: FrozenTrial) -> bool:
        facts = facts_of(t)
        return facts.repeat_of is None and not facts.failure and not facts.bound_only

    first = [(t.number, [s * v for s, v in zip(sign, t.values, strict=True)])
             for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
             if t.values is not None and all(c <= 0.0 for c in t.constraints.values())
             and counts(t)]

    def dominated(v: list[float]) -> bool:
        return any(all(a >= b for a, b in zip(w, v, strict=True)) and w != v for _, w in first)

    return {n for n, v in first if not dominated(v)}


def front(study: optuna.Study) -> list[TrialRecord]:
    """The records of the trials on that front."""
    nums = front_numbers(study)
    return [r for r in records(study) if r.number in nums]


def pooled_front(cands: list[TrialRecord], metrics: list[str], directions: list[str]
                 ) -> list[TrialRecord]:
    """The records no other is at least as good as in every objective and better in one."""
    signs = [1.0 if d == "maximize" else -1.0 for d in directions]

    def key(t: TrialRecord) -> list[float]:
        return [s * t.values[m] for s, m in zip(signs, metrics, strict=True)]

    def dominated(t: TrialRecord) -> bool:
        a = key(t)
        return any(all(x >= y for x, y in zip(key(o), a, strict=True)) and key(o) != a
                   for o in cands if o is not t)

    return [t for t in cands if not dominated(t)]


def knee(front: list[TrialRecord], metrics: list[str], directions: list[str]) -> TrialRecord:
    """The trial closest to the utopia point (each objective's best on the front). Distances are
    relative: |log(value / best)| per objective, so a 0.2% throughput loss weighs 0.002 against
    a 30% TPOT gain's 0.26 whatever the front's spread (scaling each objective to [0, 1] over
    the front made any two-trial front a tie, each trial one unit from utopia). With a value
    <= 0 the objective is scaled to [0, 1] over the front instead."""
    values = np.array([[t.values[m] for m in metrics] for t in front], dtype=float)
    columns = []
    for i, d in enumerate(directions):
        col = values[:, i]
        best = col.max() if d == "maximize" else col.min()
        if (col > 0).all():
            columns.append(np.abs(np.log(col / best)))
        else:
            lo, hi = col.min(), col.max()
            scaled = (col - lo) / (hi - lo if hi > lo else 1.0)
            columns.append(1 - scaled if d == "maximize" else scaled)
    regret = np.stack(columns, axis=1)
    return front[int(np.argmin(np.linalg.norm(regret, axis=1)))]


def suite_rank(t: TrialRecord, cfg: StudyConfig, base: TrialRecord | None
               ) -> tuple[float, float]:
    """A suite's capacity ranking: its score (the worst or weighted ratio to the defaults),
    then, to break a tie (the worst profile unchanged), the mean ratio over its profiles."""
    o = cfg.objectives[0].metric
    ratios = [t.metrics[f"{p.key}/{o}"] / base.metrics[f"{p.key}/{o}"]
              for p in cfg.workloads() if base is not None
              and base.metrics.get(f"{p.key}/{o}") and f"{p.key}/{o}" in t.metrics]
    return t.values.get(cfg.metric_names()[0], 0.0), sum(ratios) / len(ratios) if ratios else 0.0


def by_kind(cfg: StudyConfig, front: list[TrialRecord], base: TrialRecord | None
            ) -> tuple[TrialRecord, str]:
    """The default pick on a front (non-empty) for the kind of study, and the rule's name. In a
    capacity study several configs often share the most capacity (the search's bracket is its
    resolution: 4 of 6 trials of one H100 study held 157 slots): vLLM's defaults when they are
    among them (a tie is no gain), else the most requests a second at the capacity, whatever
    the trials' order."""
    if cfg.capacity is not None and cfg.profiles:
        return max(front, key=lambda t: suite_rank(t, cfg, base)), "suite"
    if cfg.capacity is not None:
        tied = capacity_ties(front)
        kept = next((t for t in tied if base is not None and t.number == base.number), None)
        return kept or max(tied, key=lambda t: t.metrics.get("capacity_req_s", 0.0)), "capacity"
    return knee(front, cfg.metric_names(), [o.direction for o in cfg.objectives]), "knee"


def capacity_ties(front: list[TrialRecord]) -> list[TrialRecord]:
    """The front's trials at its most capacity."""
    best = max(t.values.get("capacity", 0.0) for t in front)
    return [t for t in front if t.values.get("capacity", 0.0) == best]


RULE_TEXT = {"capacity": "the most capacity on the front of pooled values",
             "suite": "the best suite score on the front of pooled values",
             "knee": "the knee of the front of pooled values"}


def metric_of(t: TrialRecord, name: str) -> float:
    v = t.value(name)
    if v is None:
        raise StudyError(f"metric {name!r} was not recorded on trial {t.number}")
    return float(v)


def sign_of(direction: str, flip: int = 1) -> float:
    return flip * (1.0 if direction == "maximize" else -1.0)


def reason_of(rule: str, front: list[TrialRecord], pick: TrialRecord,
              base: TrialRecord | None) -> str:
    """The pick's rule in words; for a capacity pick that shares its capacity, how by_kind broke
    the tie."""
    others = [str(t.number) for t in capacity_ties(front) if t.number != pick.number] \
        if rule == "capacity" else []
    if not others:
        return RULE_TEXT[rule]
    why = ("a tie is no gain, so vLLM's defaults stay" if base is not None and pick.number ==
           base.number else f"trial {pick.number} served the most req/s at it")
    return (f"{RULE_TEXT[rule]}; tied at {pick.values.get('capacity', 0.0):g} with "
            f"trial{'s' * (len(others) > 1)} {', '.join(others)}: {why}")


def dominating(number: int, front: list[int], pooled: dict[int, TrialRecord],
               metrics: list[str], directions: list[str]) -> list[int]:
    """The front's trials whose pooled values are at least as good as trial `number`'s on every
    objective and better on one."""
    signs = [1.0 if d == "maximize" else -1.0 for d in directions]

    def key(t: TrialRecord) -> list[float]:
        return [s * t.values[m] for s, m in zip(signs, metrics, strict=True)]

    if number not in pooled:
        return []
    mine = key(pooled[number])
    return [n for n in front if n != number and key(pooled[n]) != mine
            and all(a >= b for a, b in zip(key(pooled[n]), mine, strict=True))]


def off_front_line(number: int | None, baseline: bool, reason: str, front: list[int],
                   pooled: dict[int, TrialRecord], records: list[TrialRecord],
                   metrics: list[str], directions: list[str]) -> str | None:
    """Why the recommendation (trial `number`, kept for `reason`) is not on the front, in one
    line (None: it is, or there is none): every surface shows it apart from the front."""
    if number is None or number in front:
        return None
    who = f"vLLM's defaults (trial {number}) are" if baseline else f"trial {number} is"
    rec = pooled.get(number) or next(r for r in records if r.number == number)
    better = dominating(number, front, pooled, metrics, directions)
    if better:
        where = (f"trial{'s' * (len(better) > 1)} {', '.join(map(str, better))} "
                 f"{'have' if len(better) > 1 else 'has'} better medians on every objective")
    elif not rec.feasible:
        where = "it missed the SLOs"
    else:
        where = "its capacity is a bound (its search stopped early)" if rec.bound_only \
            else "another config's medians are better"
    return f"{who} recommended but not on the Pareto front: {where} ({reason})"
