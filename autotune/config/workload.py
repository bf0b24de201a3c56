"""What a trial is measured under: the benchmark profile (requests, concurrency, rate) and the
latency targets (SLOs) a measurement is judged against."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from autotune.config.base import StrictModel
from autotune.config.metric_names import known_metric, min_requests

ProfileName = Literal["sharegpt", "random", "throughput", "long-context", "generation-heavy",
                      "dataset"]
Endpoint = Literal["completions", "chat"]

# The presets users know from the field: (input tokens, output tokens) of random prompts.
PRESETS: dict[str, tuple[int, int]] = {
    "throughput": (1024, 128),
    "long-context": (32000, 100),
    "generation-heavy": (1000, 2000),
}
# profiles whose prompts are token ids, which only the completions endpoint takes
TOKEN_ID_PROFILES = ("random", *PRESETS)


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
    client_cpus: Literal["auto", "any"] | list[int] = Field(
        "auto", description="CPUs the load generator runs on: auto, those no other process's "
        "thread (vLLM-CPU's OpenMP) is bound to; any: wherever the OS puts it; or 1,3 or 2-3.")
    client_realtime: bool = Field(
        True, description="Run the load generator's reading threads as SCHED_FIFO where the OS "
        "allows it (root or CAP_SYS_NICE), so that they read each token as it arrives even when "
        "the server's threads fill the CPUs; they sleep between reads.")
    label: str | None = Field(None, description="The profile's name in a suite (default: its "
                              "name); per-profile metrics are <label>/<metric>.")
    weight: float = Field(1.0, gt=0, description="Its weight in a suite's weighted score.")
    path: str | None = Field(
        None, description="dataset: a JSONL file, one request a line: {\"prompt\": \"...\"} or "
        "{\"messages\": [...]} (chat), optional \"output_tokens\" (else output_len, else 128).")
    sample: Literal["order", "random"] = Field(
        "order", description="dataset: take the first num_prompts lines in order, or sample "
        "them with the seed.")
    prefix_len: int = Field(0, ge=0, description="Random profiles: tokens of a shared prefix "
                            "before each prompt's input_len random tokens.")
    num_prefixes: int = Field(1, ge=1, description="Random profiles: distinct shared prefixes; "
                              "prompt i starts with prefix i mod num_prefixes.")
    range_ratio: float = Field(0.0, ge=0, lt=1, description="Random profiles: input and output "
                               "lengths drawn uniformly from [len x (1 - r), len x (1 + r)] with "
                               "the seed (vllm bench serve --random-range-ratio).")

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

    @field_validator("client_cpus", mode="before")
    @classmethod
    def _cpus(cls, v: Any) -> Any:
        if v in ("auto", "any"):
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            v = [v]
        if isinstance(v, str):
            parts = [p.strip() for p in v.split(",") if p.strip()]
            v = [c for p in parts for lo, _, hi in [p.partition("-")]
                 for c in range(int(lo), int(hi or lo) + 1)] \
                if all(re.fullmatch(r"\d+(-\d+)?", p) for p in parts) else None
        if not isinstance(v, list) or not v or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in v):
            raise ValueError("must be auto, any, or CPU numbers such as 1,3 or 2-3")
        return sorted(set(v))

    @model_validator(mode="after")
    def _endpoint_takes_prompts(self) -> ProfileConfig:
        if self.name == "dataset" and not self.path:
            raise ValueError("path: the dataset profile needs a JSONL file (path: requests.jsonl)")
        if self.path and self.name != "dataset":
            raise ValueError(f"path: only the dataset profile reads a file (name: dataset), not "
                             f"{self.name!r}")
        shaped = {"prefix_len": self.prefix_len > 0, "num_prefixes": self.num_prefixes > 1,
                  "range_ratio": self.range_ratio > 0}
        for key, used in shaped.items():
            if used and self.name not in TOKEN_ID_PROFILES:
                raise ValueError(f"{key}: shapes random prompts (random, throughput, "
                                 f"long-context, generation-heavy), not the {self.name!r} "
                                 "profile")
        if self.num_prefixes > 1 and not self.prefix_len:
            raise ValueError("num_prefixes: set prefix_len too (the tokens each prefix has)")
        if self.endpoint == "chat" and self.name in TOKEN_ID_PROFILES:
            raise ValueError(f"endpoint: chat needs text prompts, and the {self.name!r} profile "
                             "sends token ids; use endpoint: completions, or a text profile "
                             "(sharegpt)")
        return self

    @property
    def key(self) -> str:
        return self.label or self.name

    def lengths(self) -> tuple[int | None, int | None]:
        """(input_len, output_len) after presets; (None, None) lengths mean sharegpt's own."""
        if self.name in PRESETS:
            i, o = PRESETS[self.name]
            return self.input_len or i, self.output_len or o
        if self.name == "random":
            return self.input_len or 1024, self.output_len or 128
        return None, self.output_len

    def required_model_len(self) -> int:
        """Tokens one request can need, which max_model_len must allow (a dataset's requests
        that do not fit are dropped, counted, when it is read)."""
        if self.name == "dataset":
            return 0
        i, o = self.lengths()
        if i is None or o is None:
            return 2048
        return self.prefix_len + int(i * (1 + self.range_ratio)) + int(o * (1 + self.range_ratio))


class SLOConfig(StrictModel):
    """A latency (or throughput) target a measurement must meet."""

    metric: str = Field(description="A measured metric, e.g. p99_ttft_ms.")
    max: float | None = Field(None, description="Met when metric <= max.")
    min: float | None = Field(None, description="Met when metric >= min.")

    _metric = field_validator("metric")(known_metric)

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, data: Any) -> Any:
        if isinstance(data, str):  # the `--slo` form, written in a study file
            m = re.match(r"^\s*([a-z0-9_]+)\s*(<=|>=)\s*(\S+)\s*$", data)
            shown = (f"{{metric: {m.group(1)}, {'max' if m.group(2) == '<=' else 'min'}: "
                     f"{m.group(3)}}}") if m else "{metric: p99_ttft_ms, max: 2000}"
            raise ValueError(f"an SLO in a study file is a mapping: write {shown}")
        return data

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


Axis = Literal["concurrency", "rate"]
# how the capacity search steps while it brackets (autotune.measure.search.bracket_steps)
Bracket = Literal["near", "double", "step"]


class CapacityConfig(StrictModel):
    """Each trial searches the most load its server sustains within the SLOs
    (autotune.measure.capacity)."""

    axis: Axis = Field("concurrency", description="What the load is: requests in flight "
                       "(concurrency) or Poisson arrivals per second (rate).")
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
        "seconds); a point whose arrivals span under 10 s is a burst and ends the search.")
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
        """Measured requests of the point at `load`."""
        if self.axis == "concurrency":
            return max(self.requests_per_point, math.ceil(self.requests_per_slot * load))
        return max(self.requests_per_point, math.ceil(self.min_duration_s * load))

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
        need = max(min_requests(s.metric) for s in slos)
        if self.requests_per_point < need:
            raise ValueError(f"{where}.requests_per_point: {self.requests_per_point} is fewer "
                             f"than the {need} successful requests a point needs to judge "
                             f"{', '.join(s.metric for s in slos)}")


# Built-in suites (`profiles: field`), request counts multiplied by the study's suite_scale:
# field: the four profiles a published H100 tuning lab measured every config on; cpu-small: two
# shapes the CPU demo's tiny model serves in seconds.
SUITES: dict[str, list[dict[str, Any]]] = {
    "field": [
        {"label": "sharegpt", "name": "sharegpt", "num_prompts": 1000},
        {"label": "1024-128", "name": "throughput", "num_prompts": 1000},
        {"label": "32000-100", "name": "long-context", "num_prompts": 60, "request_rate": 1.0},
        {"label": "1000-2000", "name": "generation-heavy", "num_prompts": 60,
         "request_rate": 1.0},
    ],
    "cpu-small": [
        {"label": "short", "name": "random", "input_len": 64, "output_len": 32,
         "num_prompts": 40},
        {"label": "long-prompt", "name": "random", "input_len": 480, "output_len": 8,
         "num_prompts": 20},
    ],
}


def builtin_suite(name: str, scale: float) -> list[dict[str, Any]]:
    if name not in SUITES:
        raise ValueError(f"profiles: no built-in suite {name!r}; built in: "
                         f"{', '.join(SUITES)} (or a list of profiles)")
    return [{**p, "num_prompts": max(1, round(p["num_prompts"] * scale))} for p in SUITES[name]]
