"""Pydantic models of a study file: the server to tune, the workload (autotune.config.workload), the
objectives, the sampler and where results go; and reading one from YAML with overrides."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from autotune.config import acceptance as accept
from autotune.config import flags, hub, weights
from autotune.config.acceptance import AcceptanceProfile
from autotune.config.base import StrictModel, parse_model, read_yaml
from autotune.config.capacity import CapacityConfig
from autotune.config.metric_names import CAPACITY_METRICS, base_metric, objective_metric
from autotune.config.phases import CertifyConfig, ConfirmConfig
from autotune.config.quality import QualityConfig
from autotune.config.workload import ProfileConfig, SLOConfig, builtin_suite
from autotune.errors import ConfigError


def default_executable() -> list[str]:
    """The `vllm` beside this Python (the project's venv), else the one on PATH."""
    here = Path(sys.executable).parent / "vllm"
    if here.exists():
        return [str(here)]
    return [shutil.which("vllm") or "vllm"]


# the flags whose product is the GPUs one server uses: the flag registry's (config/flags.py)
PARALLEL_FLAGS = flags.PARALLEL_FLAGS


def gpus_per_replica(flags: dict[str, Any]) -> int:
    """GPUs one server with these flags uses: tensor x pipeline x data parallel sizes."""
    n = 1
    for f in PARALLEL_FLAGS:
        n *= int(flags.get(f) or 1)
    return n


def model_max_len(model: str, flags: dict[str, Any] | None = None) -> int | None:
    """The most tokens a request may hold: max_model_len when the flags set it, else the
    model's max_position_embeddings (its config.json; a hub id's cached one), else unknown."""
    if flags and flags.get("max_model_len"):
        return int(flags["max_model_len"])
    path = Path(hub.cached(model) or model) / "config.json"
    if path.is_file():
        mpe = json.loads(path.read_text()).get("max_position_embeddings")
        return int(mpe) if mpe else None
    return None


def layout_text(flags: dict[str, Any]) -> str:
    """'tp2-dp1' style name of a server's parallel layout (pipeline only when above 1)."""
    tp, pp, dp = (int(flags.get(f) or 1) for f in PARALLEL_FLAGS)
    return f"tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + f"-dp{dp}"


class ServerConfig(StrictModel):
    """How to start `vllm serve` for every trial."""

    model: str = Field(description="Model folder or hub id (org/name), for `vllm serve MODEL`.")
    tokenizer: str | None = Field(
        None, description="Folder or hub id of the load generator's tokenizer (default: model).")
    executable: list[str] = Field(
        default_factory=default_executable,
        description="Command that runs vLLM's CLI, e.g. ['vllm'] or ['docker', 'exec', 'c', "
        "'vllm']; `serve MODEL flags...` is appended.")
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="Fixed `vllm serve` flags for every trial, snake_case names "
        "(e.g. {load_format: dummy, enforce_eager: true}).")
    extra_args: list[str] = Field(default_factory=list, description="Raw argv appended as is.")
    shape_only: bool = Field(False, description=weights.FIELD_HELP)
    draft_models: list[str] = Field(
        default_factory=list, description="Draft models for speculative decoding (paths or "
        "names; each must share the model's tokenizer): a space with `speculative_method` then "
        "also searches method draft_model over them (docs/quality.md).")
    acceptance: dict[str, AcceptanceProfile] = Field(default_factory=dict,
                                                     description=accept.FIELD_HELP)
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment for the server, carried into the deploy line. Unset, on a "
        "machine without a GPU: VLLM_CPU_KVCACHE_SPACE=1 (GiB; vLLM on CPU otherwise sizes "
        "its KV cache at most of the machine's memory); on a GPU: nothing.")
    host: str = Field("127.0.0.1", description="Address the server binds to.")
    boot_timeout_s: float = Field(600.0, gt=0, description="Seconds to wait for /health.")
    cache_root: str | None = Field(
        None, description="One folder for every cache a boot can reuse, shared by all trials: "
        "VLLM_CACHE_ROOT (torch.compile) and the Triton, Inductor, FlashInfer and CUDA JIT "
        "caches under it; copy it to start a study on another machine warm (default: "
        "<workdir>/vllm-cache).")
    preload: bool | Literal["auto"] = Field(
        "auto", description="Import vLLM's CLI once, in a process that forks each server and "
        "has it fork its engine process: a boot after the first skips those imports (a warm "
        "H100 boot 27 s instead of 55). Only for an executable that is a Python console script "
        "(a venv's `vllm`). false starts every server as users do, a fresh `vllm serve`. auto: "
        "preloaded on a machine without a GPU, where the two served alike; a stock `vllm serve` "
        "on a GPU, where the preloaded one served faster than stock at high load "
        "(docs/results/warm-server-h100).")

    _shape_only = model_validator(mode="before")(weights.resolve)
    _methods = field_validator("acceptance")(accept.check_methods)

    @field_validator("executable", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        return shlex.split(v) if isinstance(v, str) else v

    @property
    def tokenizer_dir(self) -> str:
        return self.tokenizer or self.model

    def serve_flags(self, params: dict[str, Any]) -> dict[str, Any]:
        """The flags a server gets: the fixed args, then a trial's params over them."""
        return {**self.args, **params}

    def launch_flags(self, params: dict[str, Any]) -> dict[str, Any]:
        """serve_flags as a trial's server starts with them (acceptance.launch_flags)."""
        return accept.launch_flags(self, self.serve_flags(params))

    def check_executable(self) -> None:
        exe = self.executable[0] if self.executable else ""
        found = shutil.which(exe) if os.sep not in exe else (exe if os.path.exists(exe) else None)
        if not found:
            raise ConfigError(
                f"server.executable: {exe!r} was not found; install vLLM (scripts/install.sh) "
                "or point --vllm at its `vllm` command")
        if not os.access(found, os.X_OK):
            raise ConfigError(f"server.executable: {found!r} is not executable (chmod +x it)")


Direction = Literal["maximize", "minimize"]


class ObjectiveConfig(StrictModel):
    metric: str = Field(description="A measured metric, e.g. total_token_throughput, "
                        "mean_tpot_ms, p99_ttft_ms.")
    direction: Direction

    _metric = field_validator("metric")(objective_metric)


SamplerName = Literal["tpe", "nsga2", "gp", "random", "grid"]
# which Pareto config `autotune export --prefer` picks (outputs/export.py)
Preference = Literal["throughput", "latency", "knee", "capacity"]


class SamplerConfig(StrictModel):
    name: SamplerName = "tpe"
    seed: int | None = 0
    n_startup_trials: int = Field(5, ge=0, description="Random trials before TPE/GP model.")
    population_size: int = Field(8, ge=2, description="NSGA-II population.")


DEFAULT_OBJECTIVES = [
    {"metric": "total_token_throughput", "direction": "maximize"},
    {"metric": "mean_tpot_ms", "direction": "minimize"},
]


SUITE_PREFIX = "suite_"


class StudyConfig(StrictModel):
    """A study file: what to tune, on what workload, toward what."""

    name: str = Field(description="Study name in the storage (and MLflow experiment).")
    server: ServerConfig
    profile: ProfileConfig = Field(default_factory=lambda: ProfileConfig.model_validate({}))
    search_space: str = Field(description="A built-in search space by name, or a YAML path.")
    objectives: list[ObjectiveConfig] = Field(
        default_factory=lambda: [ObjectiveConfig.model_validate(o) for o in DEFAULT_OBJECTIVES],
        min_length=1)
    slos: list[SLOConfig] = Field(
        default_factory=list, description="Targets a measurement must meet: constraints of each "
        "trial, or with `capacity`, the verdict of each load point.")
    profiles: list[ProfileConfig] | None = Field(
        None, description="A suite: several profiles run one after another on each boot "
        "(instead of `profile`), or a built-in suite's name (field, cpu-small). Each objective "
        "is scored per profile against the baseline trial and combined by suite_score.")
    suite_score: Literal["worst", "weighted"] = Field(
        "worst", description="A suite's score per objective: the worst profile's ratio to the "
        "baseline, or the weighted mean of the ratios.")
    suite_scale: float = Field(1.0, gt=0, description="Multiplies a built-in suite's request "
                               "counts.")
    capacity: CapacityConfig | None = Field(
        None, description="Search each trial's capacity under the SLOs (one boot, many load "
        "points) instead of measuring one fixed load.")
    sampler: SamplerConfig = Field(default_factory=lambda: SamplerConfig.model_validate({}))
    confirm: ConfirmConfig = Field(default_factory=lambda: ConfirmConfig.model_validate({}))
    certify: CertifyConfig = Field(default_factory=lambda: CertifyConfig.model_validate({}))
    quality: QualityConfig = Field(default_factory=lambda: QualityConfig.model_validate({}),
                                   description="The quality guard (docs/quality.md).")
    n_trials: int = Field(10, ge=1, description="Trials in the study, in all (resume included).")
    timeout_s: float | None = Field(None, gt=0, description="Seconds this run may take: a "
                                    "trial starts only if the longest so far would end in time.")
    budget_gpu_minutes: float | None = Field(
        None, gt=0, description="Device-minutes the study may hold in all (GPU-minutes; on a "
        "machine without GPUs, its minutes): no trial starts that would end past it, judged "
        "by the longest trial so far (autotune.tuning.bill).")
    baseline: bool = Field(True, description="Run vLLM's defaults as the first trial.")
    starts: list[dict[str, Any]] = Field(
        default_factory=list, description="Configs (parameter values of the space) measured "
        "right after the baseline, before the space's own starts (a config in both runs once).")
    storage: str | None = Field(None, description="Optuna storage URL "
                                "(default: sqlite:///<workdir>/optuna.db).")
    workdir: str = Field("mlruns", description="Where the storage, logs and results go.")
    gpus_per_trial: int | None = Field(
        None, ge=0, description="GPUs each trial's server may use (set by --gpus-per-trial; "
        "a layout that needs more is infeasible without a boot).")
    heartbeat_grace_s: float = Field(
        60.0, ge=20, description="Seconds without a heartbeat (sent every 10 s) after which a "
        "running trial counts as stale (its worker died) and is retried once.")

    @model_validator(mode="before")
    @classmethod
    def _builtin_suite(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("profiles"), str):
            suite = builtin_suite(data["profiles"], float(data.get("suite_scale", 1.0)))
            capacity = data.get("capacity")
            axis = capacity.get("axis", "concurrency") if isinstance(capacity, dict) else None
            # in capacity mode the axis sets each profile's load: a built-in profile's own
            # rate (or concurrency) gives way to it
            drop = {"rate": "request_rate", "concurrency": "max_concurrency"}.get(axis or "")
            data = {**data, "profiles": [{k: v for k, v in p.items() if k != drop}
                                         for p in suite]}
        return data

    @model_validator(mode="after")
    def _suite(self) -> StudyConfig:
        if self.profiles is None:
            return self
        if not self.profiles:
            raise ValueError("profiles: an empty suite; list at least one profile (or use "
                             "profile: for one)")
        if "profile" in self.model_fields_set:
            raise ValueError("profile and profiles: set one (profiles is a suite)")
        keys = [p.key for p in self.profiles]
        if len(set(keys)) < len(keys):
            raise ValueError(f"profiles: two profiles share a label ({', '.join(keys)}); give "
                             "each a label")
        if not self.baseline:
            raise ValueError("baseline: a suite scores each config against the baseline trial "
                             "(vLLM's defaults); keep baseline: true")
        return self

    @model_validator(mode="after")
    def _capacity(self) -> StudyConfig:
        if self.capacity is not None:
            if self.profiles:
                for i, p in enumerate(self.profiles):
                    self.capacity.check(p, self.slos, f"capacity (profiles.{i}, {p.key})")
            else:
                self.capacity.check(self.profile, self.slos)
        else:
            for i, o in enumerate(self.objectives):
                if base_metric(o.metric) in CAPACITY_METRICS:
                    raise ValueError(f"objectives.{i}.metric: {o.metric} is what a capacity "
                                     "search finds; add a capacity: section (axis, low, high) "
                                     "and slos")
        return self

    def planned(self) -> bool:
        """Whether the study's budget is a plan with a certify phase (certify.when)."""
        when = self.certify.when
        return when == "always" or (when == "auto" and (
            self.budget_gpu_minutes is not None or self.timeout_s is not None))

    def storage_url(self) -> str:
        if self.storage:
            return self.storage
        return f"sqlite:///{Path(self.workdir).resolve() / 'optuna.db'}"

    def study_dir(self) -> Path:
        return Path(self.workdir) / "studies" / self.name

    def metric_names(self) -> list[str]:
        """The objectives' names in the study: `suite_<metric>` for a suite (the score)."""
        return [(SUITE_PREFIX if self.profiles else "") + o.metric for o in self.objectives]

    def workloads(self) -> list[ProfileConfig]:
        """The profiles each trial runs: the suite's, or the one profile."""
        return list(self.profiles) if self.profiles else [self.profile]

    def profile_metrics(self) -> list[str]:
        """Per-profile objective metrics of a suite (`<label>/<metric>`), for tables."""
        if not self.profiles:
            return []
        return [f"{p.key}/{o.metric}" for o in self.objectives for p in self.profiles]


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys (`sampler.name`) in a study file's data; None values are skipped."""
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = value
    return data


def load_study_config(path: str | Path, overrides: dict[str, Any] | None = None) -> StudyConfig:
    """Read a study YAML, apply dotted-key overrides, validate."""
    data = apply_overrides(read_yaml(Path(path)), overrides or {})
    return parse_model(StudyConfig, data, str(path))
