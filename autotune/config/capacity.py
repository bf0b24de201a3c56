"""The capacity mode's settings: how each trial searches the most load its server sustains
within the SLOs (the axis, the range, the bracketing steps, the requests and samples a load point
is judged on), and what that mode needs from the rest of a study file (`CapacityConfig.check`).
The search itself is autotune.measure.capacity."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from autotune.config.base import StrictModel
from autotune.config.metric_names import min_requests
from autotune.config.workload import ProfileConfig, SLOConfig

Axis = Literal["concurrency", "rate", "speedup"]
# how the capacity search steps while it brackets (autotune.measure.search.bracket_steps)
Bracket = Literal["near", "double", "step"]


class CapacityConfig(StrictModel):
    """Each trial searches the most load its server sustains within the SLOs
    (autotune.measure.capacity)."""

    axis: Axis = Field("concurrency", description="What the load is: requests in flight "
                       "(concurrency), Poisson arrivals per second (rate), or how many times "
                       "faster than recorded a trace profile's timeline is replayed (speedup).")
    low: float = Field(1.0, gt=0, description="The lowest load tried (the first, unless a "
                       "trial starts at the incumbent's capacity or at `start`).")
    high: float = Field(1024.0, gt=0, description="Never beyond this load.")
    start: float | None = Field(None, gt=0, description="The first load of a trial when no "
                                "incumbent is known (default: low).")
    tolerance: float = Field(0.05, gt=0, lt=1, description="Stop when the bracket "
                             "(lowest failing - highest passing) / highest passing is within it.")
    bracket: Bracket = Field(
        "near", description="How the search steps from its first load until one load meets the "
        "SLOs and one misses: near takes two steps of (1 + tolerance)^3 up or "
        "(1 + tolerance)^-2 down (x1.33 / x0.83 at 10%), then doubles or halves; double doubles "
        "or halves from the first step; step moves one tolerance at a time, x(1 + tolerance) "
        "up or down (a certify boot: meets or misses at a capacity already found and one step "
        "above).")
    requests_per_point: int = Field(200, ge=1, description="Measured requests per load point.")
    requests_per_slot: float = Field(
        2.0, ge=0, description="On the concurrency axis, at least this many requests per slot "
        "(so a point runs about this many waves).")
    min_duration_s: float = Field(
        20.0, ge=0, description="On the rate axis, at least load x this many requests, so "
        "arrivals last this long (a slowly growing queue shows in TTFT only over tens of "
        "seconds; on the speedup axis, a window of the trace that lasts this long once "
        "compressed); a point whose arrivals span under 10 s is a burst and ends the search.")
    warmup: int = Field(8, ge=0, description="Warm-up requests before each point (distinct "
                        "prompts, not measured).")
    warm_windows: int | Literal["auto"] = Field(
        "auto", description="Before a trial's first point, run that load in windows of a "
        "quarter of its requests until two in a row agree (mean TTFT and TPOT within 15%) with "
        "no kernel compiling in the later, at most this many; 0: off. auto: 4 with a GPU "
        "(kernels JIT-compile in a server's first loads there), 0 without one.")
    early_stop: bool = Field(True, description="Stop a trial's search once it cannot reach "
                             "the incumbent's capacity.")
    close_runs: int = Field(4, ge=2, description="A close point (an SLO inside its interval) "
                            "runs again, fresh requests pooled, until the interval clears the "
                            "SLOs or it ran this often; the pooled value decides (2: old rule).")
    samples: int | Literal["auto"] = Field(
        "auto", description="Fresh request samples (new prompts and arrivals) a load point is "
        "judged on: each SLO on the median of its value over them, a failed request in any is a "
        "miss; a point stops once the rest cannot move the median across a target. One sample's "
        "p99 TPOT on a GPU ranged over 30-66% of its rate's median (docs/capacity.md). auto: 3 "
        "with a GPU, 1 without (one sample: close points pool up to close_runs runs).")
    sample_early: float = Field(
        2.0, description="With samples over 1, a point's first sample decides alone where it "
        "is far from every SLO's line: each value under its target / this factor (a clear "
        "meet) or one over its target x this factor (a clear miss); nearer, more samples run. "
        "0: off. At 2 the first sample disagreed with the 3-sample median at most 1.5% of "
        "points at any distance from the line, simulated at the widest per-sample spread "
        "recorded on the GPU (docs/capacity.md).")
    settle: bool = Field(True, description="Stop a load point once its requests so far settle "
                         "a miss: more of them over an SLO than its percentile's interval allows, "
                         "whatever the rest do (the verdict is the same; docs/capacity.md).")

    @field_validator("warm_windows", "samples", mode="before")
    @classmethod
    def _count_or_auto(cls, v: Any, info: ValidationInfo) -> Any:
        what, least = {"warm_windows": ("windows", 0), "samples": ("samples", 1)}[
            str(info.field_name)]
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ValueError(f"must be a number of {what} ({least} or more) or auto")
        return v

    @field_validator("sample_early")
    @classmethod
    def _factor_or_off(cls, v: float) -> float:
        if v != 0 and not v > 1:
            raise ValueError("must be a factor over 1, or 0 (off)")
        return v

    @model_validator(mode="after")
    def _range(self) -> CapacityConfig:
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) must be <= high ({self.high:g})")
        if self.axis == "concurrency":
            for name in ("low", "high", "start"):
                v = getattr(self, name)
                if v is not None and (v != int(v) or v < 1):
                    raise ValueError(f"{name}: {v:g} is not a number of requests in flight "
                                     "(a whole number, 1 or more)")
        if self.start is not None and not self.low <= self.start <= self.high:
            raise ValueError(f"start ({self.start:g}) must lie between low and high")
        return self

    def requests_at(self, load: float) -> int:
        """Measured requests of the point at `load` (speedup: at least, as its window spans
        min_duration_s whatever the trace's rate, autotune.load.replay)."""
        per = {"concurrency": self.requests_per_slot, "rate": self.min_duration_s}
        return max(self.requests_per_point, math.ceil(per.get(self.axis, 0.0) * load))

    def check(self, profile: ProfileConfig, slos: list[SLOConfig], where: str = "capacity"
              ) -> None:
        """What the capacity mode needs from the rest of a study file (raises ValueError)."""
        if not slos:
            raise ValueError(f"{where}: the capacity mode needs slos (the targets each load "
                             "point is judged against), e.g. slos: [{metric: p99_ttft_ms, "
                             "max: 2000}]")
        if self.axis == "concurrency" and profile.max_concurrency is not None:
            raise ValueError(f"{where}.axis: concurrency sets the requests in flight; remove "
                             "profile.max_concurrency (or use axis: rate)")
        if self.axis == "rate" and not math.isinf(profile.request_rate):
            raise ValueError(f"{where}.axis: rate sets the arrival rate; remove "
                             "profile.request_rate (or use axis: concurrency)")
        if self.axis == "speedup" and profile.name != "trace":
            raise ValueError(f"{where}.axis: speedup compresses a trace's timeline; it needs "
                             f"the trace profile (name: trace, path: ...), not {profile.name!r}")
        if profile.name == "trace" and self.axis != "speedup":
            raise ValueError(f"{where}.axis: a trace's load is its own timeline; use axis: "
                             f"speedup (how many times its recorded rate), not {self.axis}")
        if self.axis == "speedup" and profile.speedup != 1.0:
            raise ValueError(f"{where}.axis: speedup sets it per point; remove profile.speedup")
        need = max(min_requests(s.metric) for s in slos)
        if self.requests_per_point < need:
            raise ValueError(f"{where}.requests_per_point: {self.requests_per_point} is fewer "
                             f"than the {need} successful requests a point needs to judge "
                             f"{', '.join(s.metric for s in slos)}")
