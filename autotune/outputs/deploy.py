"""Sizing a deployment from a chosen trial: what one replica sustains within the SLOs, how many
replicas and GPUs a target load needs, and a Kubernetes Deployment that serves the config."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import yaml

from autotune.config.study import StudyConfig, gpus_per_replica
from autotune.errors import StudyError
from autotune.measure.stats import interval_name, median_ci
from autotune.server.command import params_to_args
from autotune.server.machine import launch_env
from autotune.tuning.confirm import config_boots
from autotune.tuning.record import TrialRecord


@dataclass(frozen=True)
class Sizing:
    per_replica_req_s: float  # requests/s one replica sustains within the SLOs (the median boot)
    gpus_per_replica: int
    target_req_s: float | None = None
    binding: str | None = None  # a suite: the profile whose capacity sizes the replica
    low_req_s: float | None = None  # the median's interval, when booted more than once
    high_req_s: float | None = None
    boots: int = 1

    @property
    def sized_on(self) -> float:
        """What the replica count divides by: the interval's low end once there is one."""
        return self.low_req_s if self.low_req_s is not None else self.per_replica_req_s

    @property
    def replicas(self) -> int | None:
        if self.target_req_s is None or self.sized_on <= 0:
            return None
        return math.ceil(self.target_req_s / self.sized_on - 1e-9)

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.replicas * self.gpus_per_replica

    def text(self, slos: str) -> str:
        sure = (f" (median of {self.boots} boots [{self.low_req_s:,.2f}, "
                f"{self.high_req_s:,.2f}]: {interval_name(self.boots)})"
                if self.low_req_s is not None else
                " (one boot: `autotune confirm` boots it again and gives it an interval)")
        line = (f"{self.per_replica_req_s:,.2f} req/s per replica within the SLOs ({slos})"
                + (f" on every profile of the suite (the lowest: {self.binding})"
                   if self.binding else "") + sure
                + f"; {self.gpus_per_replica} GPU(s) per replica")
        if self.target_req_s is not None:
            line += (f"; for {self.target_req_s:g} req/s: {self.replicas} replicas, "
                     f"{self.gpus} GPUs")
            if self.low_req_s is not None:
                line += " (sized on the interval's low end)"
        return line


def sizing(cfg: StudyConfig, trial: TrialRecord, target_req_s: float | None = None,
           recs: list[TrialRecord] | None = None) -> Sizing:
    """What the trial's capacity search says one replica sustains (requests/s: the rate axis's
    capacity, or the request throughput at capacity on the concurrency axis). With the study's
    records, every boot of the config counts: the median sizes the replica, and the replica
    count divides by its interval's low end."""
    gpus = gpus_per_replica(cfg.server.serve_flags(trial.flags))
    key = "capacity" if cfg.capacity is not None and cfg.capacity.axis == "rate" else \
        "capacity_req_s"
    names = {f"{p.key}/{key}": p.key for p in cfg.profiles} if cfg.profiles else {key: None}
    keys = list(names)
    boots = config_boots(recs or [], keys).get(trial.number, {})
    per = {k: boots.get(k) or [trial.metrics[k]] for k in keys if k in trial.metrics}
    if cfg.capacity is None or not per:
        raise StudyError(f"trial {trial.number} has no capacity measurement: sizing needs a "
                         "study with a capacity: section")
    low = min(per, key=lambda k: statistics.median(per[k]))  # a suite: the least sustained
    med, lo, hi = median_ci(per[low])
    many = len(per[low]) > 1
    return Sizing(med, gpus, target_req_s, binding=names[low], low_req_s=lo if many else None,
                  high_req_s=hi if many else None, boots=len(per[low]))


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
    if env := launch_env(cfg.server):  # what the servers ran with (as export's serve line)
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
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
