"""What a trial is measured under: the benchmark profile (requests, concurrency, rate) and the
latency targets (SLOs) a measurement is judged against."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from autotune.metrics import METRIC_NAMES
from autotune.schema import StrictModel

ProfileName = Literal["sharegpt", "random", "throughput", "long-context", "generation-heavy"]
Endpoint = Literal["completions", "chat"]

# The presets users know from the field: (input tokens, output tokens) of random prompts.
PRESETS: dict[str, tuple[int, int]] = {
    "throughput": (1024, 128),
    "long-context": (32000, 100),
    "generation-heavy": (1000, 2000),
}
# profiles whose prompts are token ids, which only the completions endpoint takes
TOKEN_ID_PROFILES = ("random", *PRESETS)


def known_metric(v: str) -> str:
    if v not in METRIC_NAMES:
        raise ValueError(f"unknown metric {v!r}; known: {', '.join(METRIC_NAMES)}")
    return v


class ProfileConfig(StrictModel):
    """The fixed workload every trial is measured on."""

    name: ProfileName = Field("throughput", description="Dataset or preset.")
    input_len: int | None = Field(None, ge=1, description="Prompt tokens (random profiles).")
    output_len: int | None = Field(
        None, ge=1, description="Output tokens (random); for sharegpt, overrides the reply length.")
    num_prompts: int = Field(200, ge=1, description="Measured requests per trial.")
    max_concurrency: int | None = Field(None, ge=1, description="Requests in flight at most.")
    request_rate: float = Field(math.inf, gt=0, description="Requests/s (Poisson); inf = all.")
    seed: int = Field(0, description="Seed of sampling and arrivals.")
    warmup: int = Field(0, ge=0, description="Warm-up requests, excluded from the metrics.")
    endpoint: Endpoint = Field("completions", description="OpenAI endpoint the requests go to.")
    request_timeout_s: float = Field(600.0, gt=0, description="Seconds a stream may stay silent.")
    metrics_interval_s: float | None = Field(
        None, gt=0, description="Sample the server's /metrics gauges (KV-cache use, waiting "
        "requests) this often during the benchmark, for their peaks. Off by default: each "
        "scrape is parsed in the load generator's event loop, which also reads the streams.")
    client_processes: int | Literal["auto"] = Field(
        "auto", description="Processes the load generator spreads its concurrency slots over; "
        "auto: one per 128 slots, at most a quarter of this machine's CPUs.")

    @field_validator("client_processes", mode="before")
    @classmethod
    def _processes(cls, v: Any) -> Any:
        if v == "auto":
            return v
        try:
            n = int(v)
        except (TypeError, ValueError):
            n = 0
        if isinstance(v, bool) or n < 1 or str(n) != str(v).strip():
            raise ValueError("must be a number of processes (1 or more) or auto")
        return n

    @model_validator(mode="after")
    def _endpoint_takes_prompts(self) -> ProfileConfig:
        if self.endpoint == "chat" and self.name in TOKEN_ID_PROFILES:
            raise ValueError(f"endpoint: chat needs text prompts, and the {self.name!r} profile "
                             "sends token ids; use endpoint: completions, or a text profile "
                             "(sharegpt)")
        return self

    def lengths(self) -> tuple[int | None, int | None]:
        """(input_len, output_len) after presets; (None, None) lengths mean sharegpt's own."""
        if self.name in PRESETS:
            i, o = PRESETS[self.name]
            return self.input_len or i, self.output_len or o
        if self.name == "random":
            return self.input_len or 1024, self.output_len or 128
        return None, self.output_len

    def required_model_len(self) -> int:
        """Tokens one request can need, which max_model_len must allow."""
        i, o = self.lengths()
        return (i + o) if i is not None and o is not None else 2048


class SLOConfig(StrictModel):
    """A latency (or throughput) target a measurement must meet."""

    metric: str = Field(description="A measured metric, e.g. p99_ttft_ms.")
    max: float | None = Field(None, description="Met when metric <= max.")
    min: float | None = Field(None, description="Met when metric >= min.")

    _metric = field_validator("metric")(known_metric)

    @model_validator(mode="after")
    def _one_bound(self) -> SLOConfig:
        if (self.max is None) == (self.min is None):
            raise ValueError("give exactly one of max or min")
        return self

    @property
    def key(self) -> str:
        return f"slo_{self.metric}"

    def violation(self, value: float) -> float:
        """Optuna's convention: <= 0 is met."""
        if self.max is not None:
            return value - self.max
        assert self.min is not None
        return self.min - value

    def text(self) -> str:
        return f"{self.metric} {'<=' if self.max is not None else '>='} " \
               f"{self.max if self.max is not None else self.min:g}"
