"""Sizing a deployment from a chosen trial: what one replica sustains within the SLOs, how many
replicas and GPUs a target load needs, and a Kubernetes Deployment that serves the config."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from autotune.command import params_to_args
from autotune.config import StudyConfig, gpus_per_replica
from autotune.errors import StudyError
from autotune.results import TrialRecord


@dataclass(frozen=True)
class Sizing:
    per_replica_req_s: float  # requests/s one replica sustains within the SLOs
    gpus_per_replica: int
    target_req_s: float | None = None
    binding: str | None = None  # a suite: the profile whose capacity sizes the replica

    @property
    def replicas(self) -> int | None:
        if self.target_req_s is None or self.per_replica_req_s <= 0:
            return None
        return math.ceil(self.target_req_s / self.per_replica_req_s - 1e-9)

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.replicas * self.gpus_per_replica

    def text(self, slos: str) -> str:
        line = (f"{self.per_replica_req_s:,.2f} req/s per replica within the SLOs ({slos})"
                + (f" on every profile of the suite (the lowest: {self.binding})"
                   if self.binding else "") + f"; {self.gpus_per_replica} GPU(s) per replica")
        if self.target_req_s is not None:
            line += (f"; for {self.target_req_s:g} req/s: {self.replicas} replicas, "
                     f"{self.gpus} GPUs")
        return line


def sizing(cfg: StudyConfig, trial: TrialRecord, target_req_s: float | None = None) -> Sizing:
    """What the trial's capacity search says one replica sustains (requests/s: the rate axis's
    capacity, or the request throughput at capacity on the concurrency axis)."""
    gpus = gpus_per_replica(cfg.server.serve_flags(trial.flags))
    key = "capacity" if cfg.capacity is not None and cfg.capacity.axis == "rate" else \
        "capacity_req_s"
    if cfg.capacity is not None and cfg.profiles:  # a suite: the profile that sustains least
        per = {p.key: trial.metrics[f"{p.key}/{key}"] for p in cfg.profiles
               if f"{p.key}/{key}" in trial.metrics}
        if per:
            low = min(per, key=lambda k: per[k])
            return Sizing(per[low], gpus, target_req_s, binding=low)
    if cfg.capacity is None or key not in trial.metrics:
        raise StudyError(f"trial {trial.number} has no capacity measurement: sizing needs a "
                         "study with a capacity: section")
    return Sizing(trial.metrics[key], gpus, target_req_s)


def k8s_deployment(cfg: StudyConfig, trial: TrialRecord, replicas: int,
                   image: str = "vllm/vllm-openai:latest", name: str | None = None) -> str:
    """A Deployment of `replicas` pods of vLLM's OpenAI server image with the trial's flags,
    ready when /health answers, each with the GPUs its parallel layout needs."""
    flags = cfg.server.serve_flags(trial.flags)
    name = name or f"vllm-{cfg.name}".lower().replace("_", "-")[:60]
    gpus = gpus_per_replica(flags)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": image,
        "args": ["--model", cfg.server.model, *params_to_args(flags), *cfg.server.extra_args,
                 "--port", "8000"],
        "ports": [{"containerPort": 8000, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000},
                           "periodSeconds": 5, "failureThreshold": 3},
        "startupProbe": {"httpGet": {"path": "/health", "port": 8000},
                         "periodSeconds": 10, "failureThreshold": 90},
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name},
                     "annotations": {"autotune/study": cfg.name,
                                     "autotune/trial": str(trial.number)}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [container]}}},
    }
    return yaml.safe_dump(doc, sort_keys=False)
