"""One trial: sampled params -> flags -> server -> load -> metrics -> values + constraints.

The objective returns numbers and sets constraints; it logs nothing (tracking is a callback).
An expected failure (the server does not boot, crashes, times out, or serves nothing) is a
COMPLETE trial that violates the `boot_ok` constraint, with worst-case values and its cause kept
on the trial: TPE and GP skip FAIL trials and would keep proposing the same region. Flags that
failed once are never booted again; the earlier trial's verdict is reused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.bench import run_bench
from autotune.config import StudyConfig
from autotune.datasets import Request
from autotune.errors import LoadError, ServerError
from autotune.search_space import SearchSpace

BOOT_OK = "boot_ok"
REQUESTS_OK = "requests_ok"
WORST = {"maximize": 0.0, "minimize": 1e6}

# (trial number, phase, flags) -> None; phases: booting, benchmarking, stopping, reused
PhaseHook = Callable[[int, str, dict[str, Any]], None]


def flags_key(flags: dict[str, Any]) -> str:
    return json.dumps(flags, sort_keys=True, separators=(",", ":"))


@dataclass
class Objective:
    cfg: StudyConfig
    space: SearchSpace
    requests: list[Request]
    study_dir: Path
    on_phase: PhaseHook | None = None
    worker: dict[str, Any] | None = None  # which worker ran the trial (id, host, devices)

    def constraint_names(self) -> list[str]:
        return [BOOT_OK, REQUESTS_OK, *(s.key for s in self.cfg.slos)]

    def __call__(self, trial: optuna.Trial) -> list[float]:
        baseline = bool(trial.user_attrs.get("baseline"))
        sampled = {} if baseline else self.space.suggest(trial)
        flags = {**self.space.fixed, **self.space.to_flags(sampled)}
        key = flags_key(flags)
        trial.set_user_attr("flags", flags)
        trial.set_user_attr("flags_key", key)
        if self.worker:
            trial.set_user_attr("worker", self.worker)
        hook = self.on_phase or (lambda *_: None)

        prior = self._failed_before(trial, key)
        if prior is not None:
            hook(trial.number, "reused", flags)
            trial.set_user_attr("reused_from", prior.number)
            return self._fail(trial, prior.user_attrs.get("cause", "failed before"),
                              prior.user_attrs.get("failure", "ServerError"))

        workdir = self.study_dir / f"trial-{trial.number:04d}"
        phase = ["starting"]

        def on_phase(p: str) -> None:
            phase[0] = p
            hook(trial.number, p, flags)

        try:
            result = run_bench(self.cfg.server, self.cfg.profile, flags, workdir,
                               requests=self.requests, on_phase=on_phase)
        except KeyboardInterrupt:
            # Optuna marks the trial FAIL and re-raises; the server was stopped on the way out.
            # The next `autotune study` re-enqueues these params (study.requeue_interrupted).
            trial.set_user_attr("interrupted", True)
            trial.set_user_attr("cause", f"interrupted while {phase[0]}")
            raise
        except (ServerError, LoadError) as e:
            trial.set_user_attr("log_path", str(workdir / "server.log"))
            return self._fail(trial, getattr(e, "cause", None) or str(e), type(e).__name__)

        metrics = result.metrics.flat()
        trial.set_user_attr("metrics", metrics)
        trial.set_user_attr("timings", {
            "boot_s": result.timings.boot_s, "bench_s": result.timings.bench_s,
            "stop_s": result.timings.stop_s, "total_s": result.timings.total_s,
        })
        trial.set_user_attr("argv", result.argv)
        if result.server_stats:
            trial.set_user_attr("server_stats", result.server_stats)
        trial.set_user_attr("log_path", result.log_path)
        if result.metrics.errors:
            trial.set_user_attr("request_errors", result.metrics.errors)
            first = next(iter(result.metrics.errors))
            trial.set_user_attr("cause", f"{result.metrics.failed} of "
                                f"{len(result.records)} requests failed: {first}")
        trial.set_constraint(BOOT_OK, 0.0)
        trial.set_constraint(REQUESTS_OK, float(result.metrics.failed))
        for slo in self.cfg.slos:
            trial.set_constraint(slo.key, slo.violation(metrics[slo.metric]))
        values = [float(metrics[o.metric]) for o in self.cfg.objectives]
        base = _baseline_values(trial)
        if base is not None:
            trial.set_user_attr("delta_vs_baseline", {
                o.metric: (v - b) / b if b else 0.0
                for o, v, b in zip(self.cfg.objectives, values, base, strict=True)
            })
        return values

    def _fail(self, trial: optuna.Trial, cause: str, kind: str) -> list[float]:
        trial.set_user_attr("cause", cause)
        trial.set_user_attr("failure", kind)
        for name in self.constraint_names():
            trial.set_constraint(name, 1.0)
        return [WORST[o.direction] for o in self.cfg.objectives]

    @staticmethod
    def _failed_before(trial: optuna.Trial, key: str) -> optuna.trial.FrozenTrial | None:
        for t in trial.study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.COMPLETE,)):
            if t.user_attrs.get("flags_key") == key and t.user_attrs.get("failure"):
                return t
        return None


def _baseline_values(trial: optuna.Trial) -> list[float] | None:
    for t in trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.user_attrs.get("baseline") and not t.user_attrs.get("failure"):
            return list(t.values)
    return None
