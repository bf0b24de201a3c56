"""One answer, computed once: a study's summary (its records, the baseline, each config's values
pooled over its boots with a gain and its interval, the Pareto front on pooled values, the
measurement artefacts, and the recommendation with its reason).

Every surface reads a `StudySummary` instead of calling back into the records: the live view and
the end of a study, `trials`, `pareto`, `export` (its default is the recommendation), the report
and MLflow. The recommendation rule (`recommend`, docs/noise.md):

- after a certify phase (a study with a budget, tuning/certify.py): a certified pick; the pick
  still, marked uncertified, where the budget ran out first (the defaults where its certify
  boots so far read no gain); the defaults where the pick's gain was not certified;
- after a confirm phase: its pick (the finalist with the best lower confidence bound among those
  that beat the defaults beyond the noise, else the defaults);
- without one, on the pooled front: a capacity study's most capacity (a tie: the defaults if
  tied, else the most req/s at it; a suite's score), a throughput/latency study's knee;
- never a config whose per-token time is a measurement artefact (tuning/artefacts.py), nor one
  that gives up most of the first objective against the defaults (`MAX_LOSS`); with nothing
  left, the defaults. It and a preference pick from the front without artefacts (`fit`);
- with no measured feasible config at all, nothing, and one line per failed trial saying why.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna

from autotune.config.study import Preference, StudyConfig
from autotune.errors import StudyError
from autotune.measure.stats import Gain
from autotune.tuning import front as picking
from autotune.tuning.artefacts import artefact
from autotune.tuning.certify import BUDGET_SPENT, CERTIFIED, Certification, read_certification
from autotune.tuning.confirm import ConfirmResult, config_boots, config_gains
from autotune.tuning.front import by_kind, knee, metric_of, pooled_front, reason_of, sign_of
from autotune.tuning.plan import same_config
from autotune.tuning.record import TrialRecord, baseline, records

# a config that keeps less than this share of the defaults' first objective is never the default
# pick, whatever its other objectives (the knee credited a -59% throughput for a 0.01 ms TPOT)
MAX_LOSS = 0.5
@dataclass(frozen=True)
class Recommendation:
    """The config a study recommends (None: nothing to recommend), the rule that chose it and
    the reason in one line."""

    number: int | None
    baseline: bool
    rule: str  # "confirm", "capacity", "suite", "knee", "defaults", "none"
    reason: str
    gain: Gain | None = None  # its first objective against the defaults (None: the defaults)

    def to_json(self) -> dict[str, Any]:
        g = self.gain
        return {"trial": self.number, "baseline": self.baseline, "rule": self.rule,
                "reason": self.reason,
                "gain": None if g is None else {"gain": g.gain, "low": g.low, "high": g.high,
                                                "n": g.n, "n_base": g.n_base, "text": g.text()}}


@dataclass(frozen=True)
class StudySummary:
    """Everything a surface shows about a study, computed once (`summarize`)."""

    name: str
    metrics: list[str]  # the objectives' metric names
    directions: list[str]
    records: list[TrialRecord]
    base: TrialRecord | None
    pooled: dict[int, TrialRecord]  # measured trials, values as their config's pooled medians
    boots: dict[int, dict[str, list[float]]]  # configs booted more than once: every boot
    gains: dict[int, dict[str, Gain]]  # each measured trial's config against the defaults'
    front: list[int]  # first-pass trials on the feasible front of pooled values
    artefacts: dict[int, str]  # trials whose per-token figures are an artefact, and why
    recommendation: Recommendation
    confirm: ConfirmResult | None = None
    failures: list[str] = field(default_factory=list)  # one line per trial not measured
    profile_metrics: list[str] = field(default_factory=list)  # a suite's per-profile metrics
    profile_gains: dict[int, dict[str, Gain]] = field(default_factory=dict)  # and their gains
    fit: list[int] = field(default_factory=list)  # the front once artefacts are left out
    off_front: str | None = None  # why the recommendation is not on the front (None: it is)
    certification: Certification | None = None  # how a planned study ended (tuning/certify)
    # the front's rows, the recommended config first where it is on it; its record
    front_rows: list[TrialRecord] = field(init=False)
    picked: TrialRecord | None = field(init=False)

    def __post_init__(self) -> None:
        number = self.recommendation.number
        object.__setattr__(self, "front_rows", self.front_records())
        object.__setattr__(self, "picked", None if number is None else self.record(number))

    def record(self, number: int) -> TrialRecord:
        """A trial's record with its config's pooled values (as every surface shows it)."""
        if number in self.pooled:
            return self.pooled[number]
        found = [r for r in self.records if r.number == number]
        if not found:
            raise StudyError(f"--trial: study {self.name!r} has no trial {number}")
        return found[0]

    def front_records(self) -> list[TrialRecord]:
        """The front's members (pooled values), the recommended config first where it is one,
        then by the first objective. A recommendation off the front (the confirm phase kept
        the defaults, within the noise) is shown apart, with `off_front`."""
        sign, rec = -1.0 if self.directions[0] == "maximize" else 1.0, self.recommendation.number
        return sorted((self.pooled[n] for n in self.front), key=lambda r: (
            r.number != rec, sign * r.values.get(self.metrics[0], 0.0)))

    def rank(self) -> dict[int, int]:
        """Each first-pass measured config's place (0: the recommendation; then the front by the
        first objective; then the others by it); repeats are left out, under their config."""
        sign = -1.0 if self.directions[0] == "maximize" else 1.0
        first = [r for r in self.pooled.values() if r.facts.repeat_of is None]
        order = sorted(first, key=lambda r: (r.number != self.recommendation.number,
                                             r.number not in self.front,
                                             sign * r.values.get(self.metrics[0], 0.0)))
        return {r.number: i for i, r in enumerate(order)}

    def headline(self) -> str:
        """The recommendation in one line, as the end of a study, export and MLflow say it."""
        r = self.recommendation
        if r.number is None:
            return f"nothing to recommend: {r.reason}"
        who = f"vLLM's defaults (trial {r.number})" if r.baseline else f"trial {r.number}"
        if self.certification is not None and r.rule in CERTIFY_RULES:
            return self.certification.sentence()  # it names the trial and the defaults
        gain = f": {self.metrics[0]} {r.gain.text()} over vLLM's defaults" \
            if r.gain is not None and not r.baseline else ""
        return f"{who}{gain} ({r.reason})"

    def to_json(self) -> dict[str, Any]:
        return {"study": self.name, "recommendation": self.recommendation.to_json(),
                "headline": self.headline(), "front": self.front, "off_front": self.off_front,
                "certification": None if self.certification is None else
                self.certification.to_json(),
                "artefacts": {str(k): v for k, v in self.artefacts.items()},
                "failures": self.failures,
                "pooled": {str(n): r.values for n, r in self.pooled.items()}}


def pool_records(recs: list[TrialRecord], boots: dict[int, dict[str, list[float]]]
                 ) -> dict[int, TrialRecord]:
    """Each measured trial with each objective's value replaced by the median of its config's
    boots where the config was booted more than once (a repeat, the confirm phase, a config
    drawn twice): a choice made on these never rests on one lucky boot (the CPU demo's defaults
    read 13,518 tok/s on one boot and 8,268 as the median of three)."""
    out = {}
    for r in recs:
        if not r.measured:
            continue
        b = boots.get(r.number) or boots.get(r.facts.repeat_of if r.facts.repeat_of is not None
                                             else -1, {})
        out[r.number] = replace(r, values={m: statistics.median(b[m]) if b.get(m) else v
                                           for m, v in r.values.items()}) if b else r
    return out


def _loses_most(r: TrialRecord, base: TrialRecord | None, metric: str, maximize: bool) -> bool:
    if base is None or r.baseline:
        return False
    v, b = r.values.get(metric), base.values.get(metric)
    if v is None or not b or v <= 0:
        return v is not None and v <= 0 and maximize
    return (v / b if maximize else b / v) < 1 - MAX_LOSS


# the rules of a planned study's ending: its headline is the certification's sentence
CERTIFY_RULES = ("certified", "uncertified", "certify")


def recommend(cfg: StudyConfig, base: TrialRecord | None, front: list[TrialRecord],
              artefacts: dict[int, str], gains: dict[int, dict[str, Gain]],
              confirm: ConfirmResult | None, failures: list[str],
              certified: Certification | None = None) -> Recommendation:
    """The study's recommendation (the module's docstring states the rule)."""
    metric = cfg.metric_names()[0]
    maximize = cfg.objectives[0].direction == "maximize"

    def made(num: int, rule: str, reason: str) -> Recommendation:
        is_base = base is not None and num == base.number
        return Recommendation(num, is_base, rule, reason,
                              None if is_base else gains.get(num, {}).get(metric))

    c = certified
    if c is not None and c.pick is not None and c.base is not None:
        so_far = c.gain_obj()  # a budget-spent pick whose certify boots read no gain: the defaults
        if c.status == CERTIFIED or c.status == BUDGET_SPENT and (so_far is None
                                                                   or so_far.gain > 0):
            return Recommendation(c.pick, c.pick == c.base, "certified" if c.status == CERTIFIED
                                  else "uncertified", c.sentence(), c.gain_obj())
        return made(c.base, "certify", c.sentence())
    if confirm is not None and confirm.configs:
        # a finalist survives when, over every boot of it and of the defaults, it is better
        # beyond the noise on one objective and worse beyond it on none; among survivors, the
        # best lower bound of the first objective's gain; none: the defaults
        signs = {o.metric if not cfg.profiles else f"suite_{o.metric}":
                 1.0 if o.direction == "maximize" else -1.0 for o in cfg.objectives}
        better: dict[int, list[str]] = {}
        for n in confirm.configs:
            g = gains.get(n, {})
            if n == confirm.base or n in artefacts or not g:
                continue
            up = [m for m, s in signs.items() if m in g and g[m].significant and
                  s * g[m].gain > 0]
            down = [m for m, s in signs.items() if m in g and g[m].significant and
                    s * g[m].gain < 0]
            if up and not down:
                better[n] = up
        if not better:
            return made(confirm.base, "confirm", "the confirm phase: no finalist beat them "
                        "beyond the noise on an objective without losing on another")

        def low(n: int) -> float:
            g = gains[n][metric]
            return g.low if maximize else -g.high

        num = max(better, key=low)
        return made(num, "confirm", f"the confirm phase: better beyond the noise on "
                    f"{', '.join(better[num])}, worse on none")
    dropped: list[str] = []
    cands = []
    for r in front:
        if r.number in artefacts:
            dropped.append(f"trial {r.number}: artefact")
        elif _loses_most(r, base, metric, maximize):
            dropped.append(f"trial {r.number}: keeps < {1 - MAX_LOSS:.0%} of the defaults' "
                           f"{metric}")
        else:
            cands.append(r)
    note = f"; left out: {', '.join(dropped)}" if dropped else ""
    if cands:
        pick, rule = by_kind(cfg, cands, base)
        return made(pick.number, rule, reason_of(rule, cands, pick, base)
                    + "; one boot each unless repeated" + note)
    if base is not None and base.measured:
        return made(base.number, "defaults", "no other config on the front"
                    + (" is fit to recommend" + note if dropped else "")
                    + ("" if base.feasible else "; they missed the SLOs too"))
    why = "no trial was measured within the constraints" + (
        f" ({len(failures)} failed)" if failures else "")
    return Recommendation(None, False, "none", why)


def read_confirm(cfg: StudyConfig, recs: list[TrialRecord]) -> ConfirmResult | None:
    """The study's confirm phase, from its `confirm.json` (None: none ran, or it is of another
    study of the same name whose trials are gone)."""
    path: Path = cfg.study_dir() / "confirm.json"
    if not path.is_file():
        return None
    res = ConfirmResult.from_json(json.loads(path.read_text()))
    numbers = {r.number for r in recs if r.measured}
    return res if res.base in numbers and set(res.configs) <= numbers else None


def failure_line(r: TrialRecord) -> str:
    """A trial that was not measured, in one line: its status and the cause's first line."""
    cause = (r.cause or "").strip().splitlines()
    return f"trial {r.number}: {r.label()}" + (f": {cause[-1][:160]}" if cause else "")


def summarize(study: optuna.Study, cfg: StudyConfig,
              confirm: ConfirmResult | None | bool = True, certified: bool = True
              ) -> StudySummary:
    """The study's summary (`confirm`: a result, True to read `confirm.json`, False: none;
    `certified`: read `certify.json`, the certify phase's ending, or not: the first-pass
    pick the certify phase starts from)."""
    return summarize_records(study.study_name, records(study), cfg, confirm, certified)


def summarize_records(name: str, recs: list[TrialRecord], cfg: StudyConfig,
                      confirm: ConfirmResult | None | bool = True, certified: bool = True
                      ) -> StudySummary:
    """`summarize` on records already read."""
    metrics = cfg.metric_names()
    directions = [str(o.direction) for o in cfg.objectives]
    res = read_confirm(cfg, recs) if confirm is True else (confirm or None)
    cert = read_certification(cfg, recs) if certified else None
    base = baseline(recs)
    boots = config_boots(recs, metrics)
    pooled = pool_records(recs, boots)
    gains = config_gains(recs, metrics)
    arts = {r.number: why for r in recs if r.measured
            and (why := artefact(r, base)) is not None}
    cands = [pooled[r.number] for r in recs if r.feasible and r.measured
             and r.facts.repeat_of is None and not r.bound_only]
    front = pooled_front(cands, metrics, directions)
    fit = pooled_front([c for c in cands if c.number not in arts], metrics, directions)
    failures = [failure_line(r) for r in recs if not r.measured and r.status.value not in
                ("running", "waiting")]
    on = {r.number for r in front}  # the front's artefacts are named as left out
    rec = recommend(cfg, base, front + [r for r in fit if r.number not in on], arts, gains,
                    res, failures, cert)
    if cert is not None and cert.pick is not None and (g := cert.gain_obj()) is not None:
        # the pick's gain on every surface, its repeats' rows too, is the certified one
        mine = {r.number for r in same_config(recs, cert.pick)}
        gains = {**gains, **{n: {**gains.get(n, {}), metrics[0]: g} for n in mine}}
    extra, on_front = cfg.profile_metrics(), [r.number for r in front]
    return StudySummary(name, metrics, directions, recs, base, pooled, boots, gains, on_front,
                        arts, rec, res, failures, extra,
                        config_gains(recs, metrics + extra) if extra else {},
                        [r.number for r in fit], picking.off_front_line(
                            rec.number, rec.baseline, rec.reason, on_front, pooled, recs,
                            metrics, directions), cert)


def choose(summary: StudySummary, cfg: StudyConfig, prefer: Preference | None = None,
           max_tpot_ms: float | None = None) -> TrialRecord:
    """The recommendation (prefer None), or the front's trial that best matches the stated
    preference, on pooled values; artefacts are never picked."""
    if prefer is None and max_tpot_ms is None:
        if summary.picked is None:
            raise StudyError(f"study {summary.name!r} has nothing to recommend: "
                             + "; ".join([summary.recommendation.reason.split(" (")[0],
                                          *summary.failures]))
        return summary.picked
    front_ = [summary.pooled[n] for n in summary.fit]
    if not front_ and summary.front:
        arts = "; ".join(f"trial {n}: {summary.artefacts[n]}" for n in summary.front)
        raise StudyError(f"study {summary.name!r}: every feasible trial's per-token figures are "
                         f"a measurement artefact (on the front: {arts}), so none can be picked"
                         " by preference. Measure again on a quieter machine or raise "
                         "profile.client_processes")
    if not front_:
        raise StudyError(f"study {summary.name!r} has no feasible complete trial yet")
    value: Callable[[TrialRecord, str], float] = metric_of
    if prefer == "capacity":
        if cfg.capacity is None:
            raise StudyError("--prefer capacity: this study measured no capacity (its config "
                             "has no capacity: section); prefer throughput, latency or knee")
        return by_kind(cfg, front_, summary.base)[0]
    thr = next((o for o in cfg.objectives if o.direction == "maximize"), cfg.objectives[0])
    lat = next((o for o in cfg.objectives if o.direction == "minimize"), cfg.objectives[-1])
    if max_tpot_ms is not None:
        ok = [t for t in front_ if value(t, "mean_tpot_ms") <= max_tpot_ms]
        if not ok:
            best = min(value(t, "mean_tpot_ms") for t in front_)
            raise StudyError(f"no feasible trial has mean TPOT <= {max_tpot_ms} ms "
                             f"(the lowest is {best:.2f} ms)")
        return max(ok, key=lambda t: value(t, thr.metric))
    if prefer == "throughput":
        return max(front_, key=lambda t: value(t, thr.metric) * sign_of(thr.direction))
    if prefer == "latency":
        return min(front_, key=lambda t: value(t, lat.metric) * sign_of(lat.direction, -1))
    return knee(front_, cfg.metric_names(), [o.direction for o in cfg.objectives])
