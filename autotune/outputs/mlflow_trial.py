"""What a trial's MLflow run holds, read from the study summary: its tags (state, flags set,
gain, cause, the quality guard's verdict), its params (the flags as set) and its metrics (the
measurement, the summary's gains, timings, where its seconds went, constraints, and a capacity
search's curve as metric histories). Pure: the tracker (tracking) writes what it builds."""

from __future__ import annotations

import json

from autotune.config.quality import QUALITY_OK
from autotune.config.study import StudyConfig
from autotune.outputs.mlflow_view import (
    CURVE_KEYS,
    FLAGS_TAG,
    GAIN_TAG,
    KIND_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    flags_tag,
    gain_tag,
)
from autotune.tuning.record import TrialRecord
from autotune.tuning.spend import trial_phases
from autotune.tuning.summary import StudySummary
from autotune.tuning.verdict import quality_tags


def trial_tags(rec: TrialRecord, summary: StudySummary, cfg: StudyConfig) -> dict[str, str]:
    """A trial run's tags, but for where it nests (its study's run, its parent run)."""
    facts = rec.facts
    tags = {KIND_TAG: "trial", STUDY_TAG: cfg.name,
            TRIAL_TAG: str(rec.number), "autotune.state": rec.status.value,
            "autotune.baseline": str(rec.baseline).lower(),
            FLAGS_TAG: flags_tag(rec, cfg)}
    gain = gain_tag(rec, summary)
    if gain:
        tags[GAIN_TAG] = gain
    if rec.number in summary.artefacts:
        tags["autotune.artefact"] = summary.artefacts[rec.number]
    if rec.cause:
        tags["autotune.cause"] = rec.cause[:5000]
    if facts.reused_from is not None:
        tags["autotune.reused_from"] = str(facts.reused_from)
    if facts.repeat_of is not None:
        tags["autotune.repeat_of"] = str(facts.repeat_of)
    if facts.warnings:
        tags["autotune.warnings"] = " | ".join(facts.warnings)[:5000]
    tags.update(quality_tags(facts.quality, rec.constraints.get(QUALITY_OK, 0.0) > 0))
    return tags


def trial_params(rec: TrialRecord) -> dict[str, str]:
    """The flags as set (a mapping or list as JSON), and whether they are vLLM's defaults."""
    params = {k: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else str(v)
              for k, v in rec.flags.items()}
    params["baseline"] = str(rec.baseline).lower()
    return params


def trial_metrics(rec: TrialRecord, summary: StudySummary) -> dict[str, float]:
    """A trial run's metrics, each logged once (step 0)."""
    # a trial without a measurement logs no metric values: the worst-case numbers the
    # sampler learns from are not measurements
    metrics: dict[str, float] = {}
    if rec.measured:
        metrics.update(rec.metrics)
        metrics.update(rec.facts.server_stats or {})
        # the summary's gains, as the gain tag says them (every boot of both pooled), not
        # this boot against the defaults' first
        mine = {**summary.gains.get(rec.number, {}),
                **summary.profile_gains.get(rec.number, {})}
        metrics.update({f"delta_{k}": g.gain for k, g in mine.items()})
        metrics.update({f"objective_{k}": v for k, v in rec.values.items()})
    metrics.update({f"timing_{k}": v for k, v in rec.timings.items()})
    if rec.started is not None and rec.completed is not None:  # where its seconds went
        metrics.update({f"phase_{k}_s": v for k, v in trial_phases(
            rec, (rec.completed - rec.started).total_seconds()).items()})
    metrics.update({f"constraint_{k}": v for k, v in rec.constraints.items()})
    return metrics


def curve_metrics(rec: TrialRecord) -> list[tuple[str, float, int]]:
    """A capacity search's curve as (name, value, step): a metric history per quantity, step =
    the point's rank by load (so MLflow's charts draw each trial's curve); a capacity suite
    has one history per profile, `curve_<label>/<quantity>`."""
    return [(f"curve_{prof + '/' if prof else ''}{k}", float(v), i)
            for prof in rec.curve_profiles()
            for i, pt in enumerate(rec.curve(prof))
            for k, v in {"load": pt.load, "passed": float(pt.passed),
                         **{m: pt.metrics[m] for m in CURVE_KEYS}}.items()]
