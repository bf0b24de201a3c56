"""Pydantic models of what users write: the server to tune, the benchmark profile, the study.

Everything that comes from outside is validated here (`extra="forbid"`), so a typo in a key is an
error naming that key. Records produced inside autotune are frozen dataclasses instead.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from autotune.errors import ConfigError

ProfileName = Literal["sharegpt", "random", "throughput", "long-context", "generation-heavy"]

# The presets users know from the field: (input tokens, output tokens) of random prompts.
PRESETS: dict[str, tuple[int, int]] = {
    "throughput": (1024, 128),
    "long-context": (32000, 100),
    "generation-heavy": (1000, 2000),
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def default_executable() -> list[str]:
    """The `vllm` beside this Python (the project's venv), else the one on PATH."""
    here = Path(sys.executable).parent / "vllm"
    if here.exists():
        return [str(here)]
    return [shutil.which("vllm") or "vllm"]


class ServerConfig(_Model):
    """How to start `vllm serve` for every trial."""

    model: str = Field(description="Model path or name, passed to `vllm serve MODEL`.")
    tokenizer: str | None = Field(
        None, description="Directory with tokenizer.json for the load generator (default: model)."
    )
    executable: list[str] = Field(
        default_factory=default_executable,
        description="Command that runs vLLM's CLI, e.g. ['vllm'] or ['docker', 'exec', 'c', "
        "'vllm']; `serve MODEL flags...` is appended.",
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="Fixed `vllm serve` flags for every trial, snake_case names "
        "(e.g. {load_format: dummy, enforce_eager: true}).",
    )
    extra_args: list[str] = Field(default_factory=list, description="Raw argv appended as is.")
    env: dict[str, str] = Field(
        default_factory=lambda: {"VLLM_CPU_KVCACHE_SPACE": "1"},
        description="Environment for the server. VLLM_CPU_KVCACHE_SPACE (GiB) only matters to "
        "vLLM on CPU, which otherwise sizes its KV cache at most of the machine's memory.",
    )
    host: str = Field("127.0.0.1", description="Address the server binds to.")
    boot_timeout_s: float = Field(600.0, gt=0, description="Seconds to wait for /health.")
    cache_root: str | None = Field(
        None,
        description="VLLM_CACHE_ROOT shared by all trials, so torch.compile artifacts are "
        "reused across boots (default: <workdir>/vllm-cache).",
    )

    @field_validator("executable", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        if isinstance(v, str):
            import shlex

            return shlex.split(v)
        return v

    @property
    def tokenizer_dir(self) -> str:
        return self.tokenizer or self.model

    def check_executable(self) -> None:
        exe = self.executable[0] if self.executable else ""
        found = shutil.which(exe) if os.sep not in exe else (exe if os.path.exists(exe) else None)
        if not found:
            raise ConfigError(
                f"server.executable: {exe!r} was not found; install vLLM (scripts/install.sh) "
                "or point --vllm at its `vllm` command"
            )
        if not os.access(found, os.X_OK):
            raise ConfigError(f"server.executable: {found!r} is not executable (chmod +x it)")


class ProfileConfig(_Model):
    """The fixed workload every trial is measured on."""

    name: ProfileName = Field("throughput", description="Dataset or preset.")
    input_len: int | None = Field(None, ge=1, description="Prompt tokens (random profiles).")
    output_len: int | None = Field(
        None, ge=1, description="Output tokens (random); for sharegpt, overrides the reply length."
    )
    num_prompts: int = Field(200, ge=1, description="Measured requests per trial.")
    max_concurrency: int | None = Field(None, ge=1, description="Requests in flight at most.")
    request_rate: float = Field(math.inf, gt=0, description="Requests/s (Poisson); inf = all.")
    seed: int = Field(0, description="Seed of sampling and arrivals.")
    warmup: int = Field(0, ge=0, description="Warm-up requests, excluded from the metrics.")
    endpoint: Literal["completions", "chat"] = "completions"
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

    def processes(self) -> int:
        """`client_processes` resolved for this machine."""
        from autotune.load import auto_processes

        if self.client_processes != "auto":
            return self.client_processes
        return auto_processes(self.max_concurrency or self.num_prompts)

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


def format_validation_error(err: ValidationError, source: str) -> str:
    """One readable line per problem: `source: field.path: message (got value)`."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling)"
        got = f" (got {e['input']!r})" if e["type"] != "missing" and "input" in e else ""
        lines.append(f"{source}: {loc}: {msg}{got}")
    return "\n".join(lines)


def parse_model(cls: type[_Model], data: Any, source: str) -> Any:
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None


Direction = Literal["maximize", "minimize"]


def _known_metric(v: str) -> str:
    from autotune.metrics import METRIC_NAMES

    if v not in METRIC_NAMES:
        raise ValueError(f"unknown metric {v!r}; known: {', '.join(METRIC_NAMES)}")
    return v


class ObjectiveConfig(_Model):
    metric: str = Field(description="A measured metric, e.g. total_token_throughput, "
                        "mean_tpot_ms, p99_ttft_ms.")
    direction: Direction

    _metric = field_validator("metric")(_known_metric)


class SLOConfig(_Model):
    metric: str = Field(description="A measured metric, e.g. p99_ttft_ms.")
    max: float | None = Field(None, description="Feasible when metric <= max.")
    min: float | None = Field(None, description="Feasible when metric >= min.")

    _metric = field_validator("metric")(_known_metric)

    @model_validator(mode="after")
    def _one_bound(self) -> SLOConfig:
        if (self.max is None) == (self.min is None):
            raise ValueError("give exactly one of max or min")
        return self

    @property
    def key(self) -> str:
        return f"slo_{self.metric}"

    def violation(self, value: float) -> float:
        """Optuna's convention: <= 0 is feasible."""
        if self.max is not None:
            return value - self.max
        assert self.min is not None
        return self.min - value


class SamplerConfig(_Model):
    name: Literal["tpe", "nsga2", "gp", "random"] = "tpe"
    seed: int | None = 0
    n_startup_trials: int = Field(5, ge=0, description="Random trials before TPE/GP model.")
    population_size: int = Field(8, ge=2, description="NSGA-II population.")


DEFAULT_OBJECTIVES = [
    {"metric": "total_token_throughput", "direction": "maximize"},
    {"metric": "mean_tpot_ms", "direction": "minimize"},
]


class StudyConfig(_Model):
    """A study file: what to tune, on what workload, toward what."""

    name: str = Field(description="Study name in the storage (and MLflow experiment).")
    server: ServerConfig
    profile: ProfileConfig = Field(default_factory=lambda: ProfileConfig.model_validate({}))
    search_space: str = Field(description="A file in search_spaces/ by name, or a path.")
    objectives: list[ObjectiveConfig] = Field(
        default_factory=lambda: [ObjectiveConfig.model_validate(o) for o in DEFAULT_OBJECTIVES],
        min_length=1,
    )
    slos: list[SLOConfig] = Field(default_factory=list)
    sampler: SamplerConfig = Field(default_factory=lambda: SamplerConfig.model_validate({}))
    n_trials: int = Field(10, ge=1, description="Trials in the study, in all (resume included).")
    timeout_s: float | None = Field(None, gt=0, description="Seconds this run may take: a "
                                    "trial starts only if the longest so far would end in time.")
    baseline: bool = Field(True, description="Run vLLM's defaults as the first trial.")
    storage: str | None = Field(None, description="Optuna storage URL "
                                "(default: sqlite:///<workdir>/optuna.db).")
    workdir: str = Field("mlruns", description="Where the storage, logs and results go.")
    heartbeat_grace_s: float = Field(
        60.0, ge=20, description="Seconds without a heartbeat (sent every 10 s) after which a "
        "running trial counts as stale (its worker died) and is retried once.")

    def storage_url(self) -> str:
        if self.storage:
            return self.storage
        return f"sqlite:///{Path(self.workdir).resolve() / 'optuna.db'}"

    def study_dir(self) -> Path:
        return Path(self.workdir) / "studies" / self.name


def load_study_config(path: str | Path, overrides: dict[str, Any] | None = None) -> StudyConfig:
    """Read a study YAML, apply dotted-key overrides, validate."""
    from autotune.search_space import read_yaml

    data = read_yaml(Path(path))
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = value
    return parse_model(StudyConfig, data, str(path))  # type: ignore[no-any-return]
