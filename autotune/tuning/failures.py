"""How a trial's failure is read: the seconds it took, whether a baseline's failure is fatal
(no parameter of the space can change it), and whether a failed boot is the machine's doing, not
its config's (issue 70: a config that had booted in 34 s hit the 300 s boot timeout on a busy
machine and was recorded `infeasible: boot timeout`).

A boot is the machine's, not the config's, when it timed out where the same flags had booted in
this study in under half the timeout (whatever the load), or while other work starved the
machine (autotune.server.starved) where some boot of the study fit the timeout (so it is one the
machine meets when not starved; a study none of whose boots fit it, such as one whose timeout
is too short for any, keeps its timeouts as the configs' verdicts). The trial is then recorded
unmeasured and failed (no sampler learns from it), its config enqueued again once, and the
study goes on to its n_trials complete trials; MAX_UNMEASURED such trials in a row stop it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NoReturn

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ServerBootStarved, ServerBootTimeout, ServerError, Unmeasured
from autotune.tuning.record import TrialFacts, enqueue, facts_of, write_facts
from autotune.tuning.search_space import SearchSpace

# trials in a row that measured nothing for the machine's sake before a study stops
MAX_UNMEASURED = 3


def machines_doing(e: Exception, study: optuna.Study, key: str, timeout_s: float
                   ) -> str | None:
    """Why a failed boot is the machine's doing, not its config's (None: the config's)."""
    if not isinstance(e, ServerBootTimeout):
        return None
    boots = {t.number: (facts_of(t), (facts_of(t).timings or {}).get("boot_s"))
             for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    booted = {n: (f, s) for n, (f, s) in boots.items()
              if not f.failure and s is not None and s < timeout_s}
    cause = e.cause if isinstance(e, ServerError) else str(e)
    same = next((n for n, (f, s) in booted.items() if f.flags_key == key and s < timeout_s / 2),
                None)
    if same is not None:  # whatever the load: these flags boot in half the time
        return (f"{cause}, where the same flags booted in {booted[same][1]:.0f} s in trial "
                f"{same}: the machine's, not the config's")
    if isinstance(e, ServerBootStarved) and booted:  # starved, and a boot has fit the timeout
        n = min(booted, key=lambda k: booted[k][1])
        return (f"{cause} while other work starved the machine ({e.starved}), where trial {n} "
                f"booted in {booted[n][1]:.0f} s: the machine's, not the config's")
    return None


def unless_machines(e: Exception, trial: optuna.Trial, key: str, timeout_s: float,
                    facts: TrialFacts) -> None:
    """Return when the failure `e` is the config's; where it is the machine's, record the
    trial unmeasured (with `facts`) and raise Unmeasured, which the study loop lets Optuna
    fail the trial on."""
    why = machines_doing(e, trial.study, key, timeout_s)
    if why is None:
        return
    unmeasured(trial, why, facts, e)


def unmeasured(trial: optuna.Trial, why: str, facts: TrialFacts,
               cause: BaseException | None = None) -> NoReturn:
    """Record the trial unmeasured (with `facts`) for `why`, the machine's doing, and raise
    Unmeasured, which the study loop lets Optuna fail the trial on."""
    write_facts(trial, facts)
    write_facts(trial, TrialFacts(cause=why, unmeasured=why))
    raise Unmeasured(f"trial {trial.number}: {why}") from cause


def retry_unmeasured(study: optuna.Study, last: FrozenTrial) -> bool:
    """Whether the trial just run is unmeasured; its config is then enqueued again, once (not
    a retry's), to be measured when the machine allows. The unmeasured trial stays failed: it
    counts toward no trial budget."""
    if last.state != TrialState.FAIL:
        return False
    facts = facts_of(last)
    if not facts.unmeasured:
        return False
    if facts.retry_of is None:
        enqueue(study, last.params, TrialFacts(retry_of=last.number, baseline=facts.baseline))
    return True


def keep(into: list[FrozenTrial]) -> Callable[[optuna.Study, FrozenTrial], None]:
    """An optimize callback that keeps the trial each call ran."""
    return lambda _st, t: into.append(t)


def unfixable_by(space: SearchSpace, cause: str) -> bool:
    """Whether a boot failure's cause names none of the space's parameters (as snake_case or
    as a flag): then no trial of the space can boot either (the model, the fixed args)."""
    text = cause.lower()
    names = {n for n, p in space.parameters.items()} | {p.into for p in
                                                        space.parameters.values() if p.into}
    return not any(n.lower() in text or n.replace("_", "-").lower() in text for n in names)


def failed_timings(began: dict[str, float]) -> dict[str, float]:
    """A failed trial's boot and bench seconds, up to its failure: the report counts them as
    the server's time, not the tuner's."""
    now = time.monotonic()
    boot = began.get("boot")
    if boot is None:
        return {}
    after = began.get("after")
    return {"boot_s": (after or now) - boot, "bench_s": now - after if after else 0.0}
