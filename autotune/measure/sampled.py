"""A load point judged on several fresh request samples (capacity.samples).

On one warm H100 MoE server, one sample's p99 TPOT at a fixed Poisson rate ranged over 30-66%
of that rate's median, more than a 10% step in rate moved the median
(docs/results/warm-server-h100, `verdict_wellposed`): a point judged on one sample is judged on
its prompts as much as on its load. So a point runs up to k samples, each with its own prompts
and arrivals, and each SLO is judged on the median of its value over them, the rule
lab/reference_check.py judges `vllm bench serve`'s samples by:

- a sample's value of an SLO's metric counts as above the target when the sample missed that
  SLO without a value above it (its miss was settled early, or it had too few requests);
- a failed request in any sample is a miss;
- the point stops once the samples still to run cannot move any median across its target:
  k // 2 + 1 samples above one target settle a miss, k // 2 + 1 within every target a meet;
- with `early` (capacity.sample_early, a factor F > 1) its first sample decides alone where it
  is far from the line (`far`): every SLO's value within target / F, or one beyond target x F.
  One sample's p99 spread (log sd) was 0.17 for TPOT and 0.26 for TTFT on that server and 0.36
  over every fresh-sample group recorded on H100s and H200s (docs/capacity.md); simulated at
  0.36, F = 2 disagrees with the 3-sample median at most 1.5% of points at any distance from
  the line (tests/unit/measure/test_sampled.py).

Pure: fed each sample's flat metrics and the metrics its own judgement missed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.config.metric_names import FAILED
from autotune.config.workload import SLOConfig

# a point's later samples: seeds this far apart from its first (warm-up windows use seed + 1..4)
SAMPLE_SEED_STEP = 1_000_003


@dataclass(frozen=True)
class Sample:
    """One sample of a point: its flat metrics and the metrics its own judgement missed
    (an SLO's metric, or FAILED)."""

    metrics: dict[str, float]
    missed: tuple[str, ...]


def value(sample: Sample, slo: SLOConfig) -> float:
    """The sample's value of the SLO's metric; inf where it missed the SLO without a value
    beyond the target (settled early, too few requests)."""
    v = sample.metrics.get(slo.metric, math.nan)
    if slo.metric in sample.missed and not (slo.violation(v) > 0):
        return math.inf
    return v


def above(sample: Sample, slo: SLOConfig) -> bool:
    v = value(sample, slo)
    return math.isnan(v) or slo.violation(v) > 0


def far(sample: Sample, slos: Sequence[SLOConfig], factor: float) -> bool:
    """Whether one sample is far enough from every SLO's line to decide its point alone: each
    value within its target by `factor` (a clear meet) or one beyond it by `factor` (a clear
    miss). A miss settled without a value beyond the target is not known to be far."""
    ratios = []
    for slo in slos:
        v = value(sample, slo)
        if math.isnan(v) or math.isinf(v) or v <= 0:
            return False
        ratios.append(v / slo.max if slo.max is not None else (slo.min or 0.0) / v)
    return all(r <= 1 / factor for r in ratios) or any(r >= factor for r in ratios)


def decided(samples: Sequence[Sample], slos: Sequence[SLOConfig], k: int,
            early: float = 0.0) -> bool:
    """Whether the point's judgement over k samples is known from these (see the module);
    `early` > 1: a first sample `far` from the line by that factor decides alone."""
    if len(samples) >= k or any(FAILED in s.missed for s in samples):
        return True
    if len(samples) == 1 and early > 1 and far(samples[0], slos, early):
        return True
    need = k // 2 + 1
    over = [sum(above(s, slo) for s in samples) for slo in slos]
    return any(n >= need for n in over) or all(len(samples) - n >= need for n in over)


def judge_samples(samples: Sequence[Sample], slos: Sequence[SLOConfig]
            ) -> tuple[bool, list[str], list[str]]:
    """(met, misses in words, the metric of each miss) on the samples' medians."""
    misses, missed = [], []
    failed = sum(int(s.metrics.get("failed", 0)) for s in samples)
    if failed:
        total = failed + sum(int(s.metrics.get("completed", 0)) for s in samples)
        misses.append(f"{failed} of {total} requests failed over {len(samples)} samples")
        missed.append(FAILED)
    for slo in slos:
        vals = [value(s, slo) for s in samples]
        med = statistics.median(vals)
        if math.isnan(med) or slo.violation(med) > 0:
            over = sum(above(s, slo) for s in samples)
            shown = "over it" if math.isinf(med) else f"{med:,.1f}"
            if len(samples) == 1:  # decided alone (far from the line, or a failure)
                misses.append(f"{slo.text()} (one sample: {shown})")
                missed.append(slo.metric)
                continue
            misses.append(f"{slo.text()} (median of {len(samples)} samples {shown}; "
                          f"{over} over: " + ", ".join(
                              "settled" if math.isinf(v) else f"{v:,.1f}" for v in vals) + ")")
            missed.append(slo.metric)
    return not misses, misses, missed


def medians(samples: Sequence[Sample], keys: Sequence[str]) -> dict[str, float]:
    """Each metric's median over the samples (the point's curve values)."""
    return {k: statistics.median(s.metrics.get(k, math.nan) for s in samples) for k in keys}
