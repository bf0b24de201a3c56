"""The study's lifecycle: open or create it, prepare it (config and space stored, baseline
enqueued, interrupted trials enqueued again), and run trials until it holds `n_trials`.

The same command resumes an interrupted study; several workers (processes or hosts) share one
budget through the storage. The checks before the first boot are autotune.tuning.preflight's, the
sampler is autotune.tuning.sampler's, the storage autotune.tuning.storage's.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.study import StudyConfig
from autotune.errors import MeasurementWarning, StudyError, Unmeasured
from autotune.load.datasets import study_requests
from autotune.tuning.bill import bill, over_budget
from autotune.tuning.failures import MAX_UNMEASURED, keep, retry_unmeasured
from autotune.tuning.identity import check_identity
from autotune.tuning.machines import note_machine
from autotune.tuning.objective import Objective, PhaseHook
from autotune.tuning.preflight import Preflight, preflight
from autotune.tuning.record import (
    StudyFacts,
    TrialFacts,
    enqueue,
    facts_of,
    study_facts,
    write_study_facts,
)
from autotune.tuning.sampler import make_sampler
from autotune.tuning.storage import make_storage


def requeue_interrupted(study: optuna.Study, facts: StudyFacts) -> StudyFacts:
    """Enqueue again (once each) the params of trials stopped by SIGINT/SIGTERM or by an
    unexpected exception, so the same command resumes them; `facts`: the study's as read
    before. Returns what to record (the trials requeued so far), or nothing new."""
    done = set(facts.requeued or [])
    again = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        trial = facts_of(t)
        if (trial.interrupted or trial.error) and t.number not in done:
            again.append(t.number)
            if not trial.baseline:  # the baseline is enqueued again by _enqueue_baseline
                enqueue(study, t.params, TrialFacts(retry_of=t.number))
    return StudyFacts(requeued=sorted(done | set(again))) if again else StudyFacts()


def open_study(cfg: StudyConfig, *, create: bool = True,
               pre: Preflight | None = None) -> optuna.Study:
    storage = make_storage(cfg.storage_url(), cfg.heartbeat_grace_s)
    directions = [o.direction for o in cfg.objectives]
    if not create:
        try:
            return optuna.load_study(study_name=cfg.name, storage=storage)
        except KeyError:
            raise StudyError(f"no study named {cfg.name!r} in {cfg.storage_url()}") from None
    study = optuna.create_study(study_name=cfg.name, storage=storage, directions=directions,
                                sampler=make_sampler(cfg), load_if_exists=True)
    if n := len(study.get_trials(deepcopy=False)):
        study.sampler = make_sampler(cfg, resumed_at=n)
    check_identity(study, cfg, pre.space if pre else None)  # first: names every difference
    got = [d.name.lower() for d in study.directions]
    if got != directions:
        raise StudyError(f"study {cfg.name!r} exists with directions {got}, not {directions}; "
                         "use another --study-name, or --force-new")
    return study


def completed(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def _enqueue_baseline(study: optuna.Study) -> None:
    """Enqueue vLLM's defaults unless a baseline is done, queued or running. A baseline that
    failed for a reason no parameter could change (fatal: the model, the fixed args) runs again
    once that is fixed."""
    for t in study.get_trials(deepcopy=False):
        facts = facts_of(t)
        if facts.baseline and not facts.fatal and t.state in (
                TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING):
            return
    enqueue(study, {}, TrialFacts(baseline=True))


def stop_if_fatal(study: optuna.Study, trial: FrozenTrial) -> None:
    """(An Optuna callback.) Stop the study when its baseline cannot boot for a reason no
    trial can change: every later trial would boot the same unusable model or args."""
    facts = facts_of(trial)
    if facts.baseline and facts.fatal:
        raise StudyError(f"the baseline (vLLM's defaults with server.args) does not boot: "
                         f"{facts.cause}. No parameter of the search space changes that, so "
                         "the study stops; fix server.model or server.args, then the same "
                         f"command resumes it. Server log: {facts.log_path}")


TrialHook = Callable[[optuna.Study, FrozenTrial], None]


def stored_config(cfg: StudyConfig) -> dict[str, Any]:
    """The config as the study keeps it for its workers: the fields the study file (or a
    command-line option) set, so that a worker parses back the same config, which fields were
    set included. A full dump did not: `server.env` came back set to nothing (launch_env then
    gave each worker's vLLM-CPU server no VLLM_CPU_KVCACHE_SPACE, a 6.3 GiB KV cache instead
    of 1), and a suite's default `profile` came back beside its `profiles`, which parsing
    refuses."""
    return cfg.model_dump(mode="json", exclude_unset=True)


def prepare_study(cfg: StudyConfig, pre: Preflight) -> optuna.Study:
    """Create (or load) the study and everything a worker needs from it: the config and the
    search space as study attributes, the baseline enqueued, interrupted trials enqueued again.
    `autotune study` calls it; `autotune create-study` calls it once before remote workers.
    The study's facts are read once before the enqueues and written once after them."""
    study = open_study(cfg, pre=pre)
    study.set_metric_names(cfg.metric_names())
    before = study_facts(study)
    facts = StudyFacts(config=stored_config(cfg), search_space=pre.space.model_dump(mode="json"),
                       vllm_version=pre.vllm.version)
    if cfg.baseline:
        _enqueue_baseline(study)
    facts = facts.merged(enqueue_starts(study, before, pre.space.study_starts(cfg.starts),
                                        [*pre.space.starts, *cfg.starts]))
    if cfg.sampler.name == "grid":
        facts = facts.merged(enqueue_grid(study, before, pre.space.grid(), cfg.sampler.seed))
    write_study_facts(study, facts.merged(requeue_interrupted(study, before)))
    return study


def enqueue_grid(study: optuna.Study, facts: StudyFacts, grid: list[dict[str, Any]],
                 seed: int | None) -> StudyFacts:
    """Enqueue every config of the grid once, in an order shuffled with the seed (so a grid cut
    short is a random sample of it); `facts`: the study's, read before. Each enqueued trial is
    taken by exactly one worker (the storage hands out WAITING trials one at a time). Returns
    what to record (how many were enqueued), or nothing where the grid was enqueued before."""
    if facts.grid_enqueued:
        return StudyFacts()
    order = list(range(len(grid)))
    random.Random(seed).shuffle(order)
    for i in order:
        enqueue(study, grid[i], TrialFacts(grid=i))
    return StudyFacts(grid_enqueued=len(grid))


def waiting(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def grid_done(study: optuna.Study, cfg: StudyConfig) -> bool:
    """Whether a grid study has nothing left to hand out: its enqueued configs are all taken."""
    return cfg.sampler.name == "grid" and not waiting(study)


def enqueue_starts(study: optuna.Study, facts: StudyFacts, starts: list[dict[str, Any]],
                   before: list[dict[str, Any]] | None = None) -> StudyFacts:
    """Enqueue each start config once, in `starts`' order: a resumed study enqueues only the
    configs it has not (a start added to the study file since runs; one enqueued before does
    not run again); `facts`: the study's, read before. A study that kept only a count of its
    starts (before 2026-11-29) enqueued them in `before`'s order (the space's, then the
    file's). Returns what to record: the starts enqueued so far, in order."""
    done = facts.starts_list if facts.starts_list is not None else \
        (before if before is not None else starts)[:facts.starts_enqueued or 0]
    new = [s for s in starts if s not in done]
    for start in new:
        enqueue(study, start, TrialFacts(start=starts.index(start)))
    if new or facts.starts_list is None:
        return StudyFacts(starts_enqueued=len(done) + len(new), starts_list=[*done, *new])
    return StudyFacts()


def claimed(study: optuna.Study) -> tuple[int, int]:
    """(complete, running) trials, after failing those whose worker stopped beating."""
    optuna.storages.fail_stale_trials(study)
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    done = sum(t.state == TrialState.COMPLETE for t in trials)
    return done, len(trials) - done


def run_trials(
    study: optuna.Study,
    cfg: StudyConfig,
    pre: Preflight,
    requests: list[Any],
    *,
    on_phase: PhaseHook | None = None,
    on_trial: TrialHook | None = None,
    worker: dict[str, Any] | None = None,
    reserve: Callable[[], float] | None = None,
    deadline: float | None = None,
    reference: Callable[[], float] | None = None,
    lanes: int = 1,
) -> int:
    """Run trials one at a time until complete + running trials reach `cfg.n_trials`, counted
    in the storage, so several workers (processes or hosts) share one budget. Returns the
    number of trials this call ran. The budget counts the trials other workers run now as
    the next trial will cost; two workers that check at the same moment can still overshoot
    it by one trial each; none is ever run twice (Optuna hands each trial to one worker)."""
    objective = Objective(cfg, pre.space, requests, cfg.study_dir(), on_phase, worker=worker)
    callbacks = [*([on_trial] if on_trial is not None else []), stop_if_fatal]
    if deadline is None and cfg.timeout_s:
        deadline = time.monotonic() + cfg.timeout_s
    say = on_phase or (lambda _n, _p, _f: None)
    durations: list[float] = []
    ran = unmeasured = 0
    while True:
        done, running = claimed(study)
        # the plan first: each worker states its reserve once its own trial is measured, even
        # where that trial was the study's last (two workers ending in the same second)
        kept = reserve() if reserve is not None else 0.0
        if done >= cfg.n_trials:
            return ran
        spent = reference() if reference else 0.0
        if (why := stop_reason(study, cfg, durations, kept, running, deadline, spent, lanes)):
            say(-1, why, {})
            return ran
        if grid_done(study, cfg) or done + running >= cfg.n_trials:
            if not running:  # the grid is done (or n_trials cut it short)
                return ran
            # the rest is running elsewhere; wait, in case one of them dies: its worker's
            # heartbeat stops, the trial is failed as stale and retried (by us)
            say(-1, ("grid done here; " if grid_done(study, cfg) else "")
                + f"waiting for {running} trial(s) of other workers", {})
            time.sleep(WAIT_POLL_S)
            continue
        if not ran and (elsewhere := note_machine(study)) is not None:  # before its 1st trial
            warnings.warn(elsewhere, MeasurementWarning, stacklevel=2)
        started = time.monotonic()
        last: list[FrozenTrial] = []
        study.optimize(objective, n_trials=1, catch=(Unmeasured,),
                       callbacks=[*callbacks, keep(last)])
        durations.append(time.monotonic() - started)
        ran += 1
        unmeasured = unmeasured + 1 if last and retry_unmeasured(study, last[-1]) else 0
        if unmeasured >= MAX_UNMEASURED:
            raise StudyError(f"{unmeasured} trials in a row measured nothing because the "
                             "machine was too busy (a boot timed out while it was starved, "
                             "or the load generator could not send or read on time; "
                             "`autotune trials` shows each). Free the machine (or give the "
                             "client more: profile.client_processes); the same command "
                             "resumes the study")


def stop_reason(study: optuna.Study, cfg: StudyConfig, durations: list[float], kept: float,
                running: int, deadline: float | None, reference: float, lanes: int
                ) -> str | None:
    """Why this worker starts no more trials, or None: the budget less the `kept` reserve is
    spent (counting the `running` trials of other workers as the next trial will cost), or
    the next trial would end after the deadline less the reserve's wall time (the certify
    boots run `lanes` at once, on the workers' GPUs)."""
    if cfg.budget_gpu_minutes is not None and (why := over_budget(
            bill(study, cfg, reference=reference), cfg.budget_gpu_minutes, kept, running)):
        return f"{why}; stopping"
    end = deadline - kept * 60 / ((cfg.gpus_per_trial or 1) * lanes) \
        if kept and deadline else deadline
    if end is not None and not fits_before(end, time.monotonic(), durations):
        return (f"timeout: the next trial (about {trial_estimate(durations):.0f} s) would end "
                "after it" + (f" and the {kept:.1f} minutes kept to certify" if kept else "")
                + "; stopping")
    return None


def trial_estimate(durations: list[float]) -> float:
    """How long the next trial may take: the longest this run has seen, leaving out its first
    trial (which boots cold: imports, kernel JIT, a new compile cache) once there are others."""
    if not durations:
        return 0.0
    return max(durations[1:]) if len(durations) > 1 else durations[0]


def fits_before(deadline: float, now: float, durations: list[float]) -> bool:
    """Whether a trial started now is expected to end before `deadline` (`timeout_s`): a study
    on a machine held for a fixed time stops between trials, not in the middle of one."""
    return now + trial_estimate(durations) < deadline


WAIT_POLL_S = 5.0


def run_study(
    cfg: StudyConfig,
    *,
    on_phase: PhaseHook | None = None,
    on_trial: TrialHook | None = None,
    pre: Preflight | None = None,
    on_start: Callable[[optuna.Study, list[Any]], None] | None = None,
    reserve: Callable[[], float] | None = None,
    deadline: float | None = None,
    reference: Callable[[], float] | None = None,
    explore: bool = True,
) -> optuna.Study:
    """Run trials in this process until the study holds `cfg.n_trials` complete ones (or
    `timeout_s` passes, or the budget less the `reserve()` is spent); without `explore`, open
    the study and run none."""
    pre = pre or preflight(cfg)
    requests = study_requests(cfg, pre.max_len)
    study = prepare_study(cfg, pre)
    if on_start is not None:
        on_start(study, requests)
    if explore:
        run_trials(study, cfg, pre, requests, on_phase=on_phase, on_trial=on_trial,
                   reserve=reserve, deadline=deadline, reference=reference)
    return study

