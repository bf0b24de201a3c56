"""Several workers on one study: one process per GPU group on this host, or per host.

`autotune study --workers N` prepares the study, then starts N `autotune worker` processes, each
with its own `CUDA_VISIBLE_DEVICES` (or, on CPU, its own cores through vLLM's
`VLLM_CPU_OMP_THREADS_BIND`), and watches the storage until they are done. A worker on another
host runs the same `autotune worker --storage URL --study-name S`: everything it needs (config,
search space) is read from the study, and trials are claimed through the storage, so no trial is
run twice. Each server gets a port the kernel hands out, so servers on one host never collide.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.base import parse_model
from autotune.config.study import PARALLEL_FLAGS, StudyConfig
from autotune.errors import ConfigError, StudyError
from autotune.load.datasets import study_requests
from autotune.server.process import ProcessGroup
from autotune.tuning.certify import Boots
from autotune.tuning.objective import PhaseHook
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import facts_of, study_facts
from autotune.tuning.storage import make_storage
from autotune.tuning.study import TrialHook, prepare_study


def _smi_gpus() -> list[str] | None:
    """nvidia-smi's GPU indices and UUIDs, or None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    p = subprocess.run([smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        return None
    return [part.strip() for line in p.stdout.splitlines() for part in line.split(",")
            if part.strip()]


def visible_gpus(env: str | None = None, smi: list[str] | None = None) -> list[str]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES when set (each id checked against
    nvidia-smi's indices and UUIDs when it is there), else nvidia-smi's list."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES") if env is None else env
    known = _smi_gpus() if smi is None else smi
    if env is not None:
        ids = [g.strip() for g in env.split(",") if g.strip()]
        if known is not None:
            bad = [g for g in ids if g not in known and not g.startswith("MIG-")]
            if bad:
                indices = [g for g in known if g.isdigit()]
                raise ConfigError(
                    f"CUDA_VISIBLE_DEVICES={env}: no GPU {', '.join(bad)} on this host "
                    f"(nvidia-smi lists {', '.join(indices) or 'none'}); set it to GPUs it lists")
        return ids
    return [g for g in (known or []) if g.isdigit()]


def worker_envs(n: int, gpus_per_trial: int | None, gpus: list[str] | None = None,
                cpus: list[int] | None = None) -> list[dict[str, str]]:
    """The environment of each of `n` workers: disjoint GPU groups of `gpus_per_trial`, or on a
    host without GPUs (gpus_per_trial 0), disjoint groups of CPU cores for vLLM's OpenMP threads.
    """
    if n < 1:
        raise ConfigError(f"--workers: {n} is not a worker count (1 or more)")
    gpus = visible_gpus() if gpus is None else gpus
    k = (1 if gpus else 0) if gpus_per_trial is None else gpus_per_trial
    if k < 0:
        raise ConfigError(f"--gpus-per-trial: {k} is negative")
    if k > 0:
        if n * k > len(gpus):
            where = ("CUDA_VISIBLE_DEVICES gives" if "CUDA_VISIBLE_DEVICES" in os.environ
                     else "this host has")
            raise ConfigError(
                f"--workers {n} --gpus-per-trial {k} needs {n * k} GPUs; {where} "
                f"{len(gpus)} ({', '.join(gpus) or 'none'}): lower --workers or --gpus-per-trial"
                + (" or list more GPUs in CUDA_VISIBLE_DEVICES"
                   if "CUDA_VISIBLE_DEVICES" in os.environ else ""))
        return [{"CUDA_VISIBLE_DEVICES": ",".join(gpus[i * k:(i + 1) * k])} for i in range(n)]
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
    if n > len(cpus):
        raise ConfigError(f"--workers {n}: this host has {len(cpus)} CPU cores for vLLM on CPU "
                          "(one worker per core at most)")
    per = len(cpus) // n
    return [{"VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in cpus[i * per:(i + 1) * per])}
            for i in range(n)]


def worker_config(cfg: StudyConfig, gpus_per_trial: int, space_flags: set[str]) -> StudyConfig:
    """The config a worker's trials run under: its GPU count recorded (layouts that need more
    are infeasible without a boot), and a trial that spans several GPUs runs tensor-parallel
    unless the fixed args or the search space (`space_flags`) set a parallel size."""
    update: dict[str, Any] = {"gpus_per_trial": gpus_per_trial or None}
    if gpus_per_trial > 1 and not any(f in cfg.server.args or f in space_flags
                                      for f in PARALLEL_FLAGS):
        update["server"] = cfg.server.model_copy(update={
            "args": {**cfg.server.args, "tensor_parallel_size": gpus_per_trial}})
    return cfg.model_copy(update=update)


def load_worker_study(storage_url: str, study_name: str) -> tuple[optuna.Study, StudyConfig,
                                                                    dict[str, Any]]:
    """The study, its config (with this storage) and its stored search space."""
    try:
        study = optuna.load_study(study_name=study_name, storage=make_storage(storage_url))
    except KeyError:
        raise StudyError(f"--study-name: no study {study_name!r} in {storage_url}; create it "
                         "first (`autotune create-study --config FILE --storage URL`)") from None
    attrs = study_facts(study)
    if attrs.config is None or attrs.search_space is None:
        raise StudyError(f"study {study_name!r} was not created by autotune create-study or "
                         "autotune study (it has no stored config)")
    cfg = parse_model(StudyConfig, {**attrs.config, "storage": storage_url},
                      f"study {study_name!r}")
    # the stale-trial grace of the study's own config
    study = optuna.load_study(study_name=study_name,
                              storage=make_storage(storage_url, cfg.heartbeat_grace_s))
    return study, cfg, attrs.search_space


def worker_identity(worker_id: int | str) -> dict[str, Any]:
    return {"id": str(worker_id), "host": socket.gethostname(), "pid": os.getpid(),
            "devices": os.environ.get("CUDA_VISIBLE_DEVICES")
            or os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "")}


@dataclass
class Pool:
    """N `autotune worker` processes on this host, each a ProcessGroup with its own log file;
    leaving the `with` block (Ctrl-C included) stops every one."""

    cfg: StudyConfig
    envs: list[dict[str, str]]
    gpus_per_trial: int
    tracking_uri: str | None
    log_dir: Path
    procs: list[ProcessGroup] = field(default_factory=list)
    args: list[list[str]] = field(default_factory=list)  # each worker's own (certify boots)

    def start(self) -> None:
        for i, extra in enumerate(self.envs):
            argv = [sys.executable, "-m", "autotune", "worker", "--storage",
                    self.cfg.storage_url(), "--study-name", self.cfg.name, "--worker-id", str(i),
                    "--gpus-per-trial", str(self.gpus_per_trial), "--pool", str(len(self.envs))]
            argv += ["--tracking-uri", self.tracking_uri] if self.tracking_uri else ["--no-mlflow"]
            argv += self.args[i] if i < len(self.args) else []
            group = ProcessGroup(argv, log_path=self.log_dir / f"worker-{i}.log",
                                 env={**os.environ, **extra, "PYTHONUNBUFFERED": "1"})
            group.start()
            self.procs.append(group)

    def __enter__(self) -> Pool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, grace_s: float = 60.0) -> None:
        """SIGTERM every worker (each stops its server and marks its trial interrupted), then
        SIGKILL the groups of those still alive after `grace_s`."""
        for w in self.procs:
            if w.running():
                w.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(w.running() for w in self.procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        for w in self.procs:
            w.signal(signal.SIGKILL)
            w.wait()

    def watch(self, study: optuna.Study, on_trial: TrialHook,
              on_running: Callable[[list[FrozenTrial]], None], poll_s: float = 2.0) -> None:
        """Until every worker exits: report each trial as it finishes, and what runs now."""
        seen = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
        while True:
            alive = any(w.running() for w in self.procs)
            trials = study.get_trials(deepcopy=False)
            for t in trials:
                if t.state.is_finished() and t.number not in seen:
                    seen.add(t.number)
                    on_trial(study, t)
            on_running([t for t in trials if t.state == TrialState.RUNNING])
            if not alive:
                return
            time.sleep(poll_s)

    def failed(self) -> list[tuple[int, ProcessGroup]]:
        return [(i, w) for i, w in enumerate(self.procs) if w.returncode not in (0, None)]

    def run(self, study: optuna.Study, on_trial: TrialHook,
            on_running: Callable[[list[FrozenTrial]], None],
            what: Callable[[int], str] = lambda i: f"worker {i}",
            on_start: Callable[[Pool], None] = lambda _p: None) -> None:
        """Start the workers, report their trials until every one exits, and raise when one
        failed (`what(i)`: how the error names worker i)."""
        with self:
            on_start(self)
            self.watch(study, on_trial, on_running)
        bad = self.failed()
        if bad:
            i, w = bad[0]
            raise StudyError(f"{what(i)} exited with code {w.returncode}; the end of its log "
                             f"({w.log_path}):\n{w.log_tail()}")


def run_pool(cfg: StudyConfig, pre: Preflight, envs: list[dict[str, str]], gpus_per_trial: int,
             tracking_uri: str | None, *, on_start: Callable[[optuna.Study, list[Any]], None],
             on_trial: TrialHook, on_running: Callable[[list[FrozenTrial]], None],
             on_pool: Callable[[Pool], None] = lambda _p: None) -> optuna.Study:
    """`autotune study --workers N`: prepare the study here, run its trials in N workers on
    this host, and report each finished trial; raise when a worker failed."""
    st = prepare_study(cfg, pre)
    on_start(st, study_requests(cfg, pre.max_len))
    Pool(cfg, envs, gpus_per_trial, tracking_uri, cfg.study_dir() / "workers").run(
        st, on_trial, on_running, on_start=on_pool)
    return st


def certify_boots(study: optuna.Study, cfg: StudyConfig, envs: list[dict[str, str]],
                  gpus_per_trial: int, tracking_uri: str | None, *, on_trial: TrialHook,
                  on_running: Callable[[list[FrozenTrial]], None]) -> Boots:
    """The certify phase's boots on the workers' GPUs (certify.run_certify's `boots`): each
    boot of a round an `autotune worker --repeat N` on its own lane (envs[i]), all at once,
    reported as they finish; raise when one failed."""

    def run(numbers: list[int], start_at: dict[int, float | None]) -> None:
        if len(numbers) > len(envs):
            raise StudyError(f"{len(numbers)} certify boots at once on {len(envs)} workers")
        log_dir = cfg.study_dir() / "workers" / f"certify-{len(study.get_trials(deepcopy=False))}"
        args = [["--repeat", str(n), "--barrier", str(log_dir), "--round-size", str(len(numbers))]
                + ([] if start_at.get(n) is None else ["--check-at", repr(start_at[n])])
                for n in numbers]
        Pool(cfg, envs[:len(numbers)], gpus_per_trial, tracking_uri, log_dir, args=args).run(
            study, on_trial, on_running,
            what=lambda i: f"the certify boot of trial {numbers[i]} on worker {i}")
    return run


def barrier(on_phase: PhaseHook, folder: Path, lane: str, size: int, timeout_s: float
            ) -> tuple[PhaseHook, Callable[[], None]]:
    """A certify round's boots measure together: the phase hook that, at a boot's first phase
    after it came up healthy, marks this lane ready in `folder` and waits (up to `timeout_s`)
    until all `size` lanes are ready or done, so no server is measured while another of its
    round still boots (a boot's compile and JIT take CPU the other's client and API server
    need); and the call that marks the lane done whatever happened (a boot that failed does
    not hold the others)."""
    passed = [False]

    def mark(kind: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{kind}-{lane}").touch()

    def lanes() -> int:
        return len({f.name.split("-", 1)[1] for f in folder.glob("*-*")
                    if f.name.startswith(("ready-", "done-"))})

    def hook(number: int, phase: str, flags: dict[str, Any]) -> None:
        if not passed[0] and not phase.startswith("booting"):
            passed[0] = True
            mark("ready")
            on_phase(number, f"waiting for the round's other {size - 1} boot(s)", flags)
            end = time.monotonic() + timeout_s
            while lanes() < size and time.monotonic() < end:
                time.sleep(0.5)
        on_phase(number, phase, flags)
    return hook, lambda: mark("done")


def running_text(trials: list[FrozenTrial]) -> str:
    if not trials:
        return "waiting for workers"
    return ", ".join(f"trial {t.number} on worker {(facts_of(t).worker or {}).get('id', '?')}"
                     for t in sorted(trials, key=lambda t: t.number))
