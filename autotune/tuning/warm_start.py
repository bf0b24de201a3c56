"""--warm-start: another study's Pareto configs enqueued first, each re-checked against this
study's space and this vLLM, once per source (the study records the source it enqueued)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.config.study import StudyConfig
from autotune.errors import ConfigError
from autotune.server.vllm_help import check_flags
from autotune.tuning.front import front
from autotune.tuning.preflight import Preflight
from autotune.tuning.record import (
    StudyFacts,
    TrialFacts,
    enqueue,
    queued_params,
    study_facts,
    write_study_facts,
)
from autotune.tuning.storage import make_storage


def warm_start(study: optuna.Study, cfg: StudyConfig, pre: Preflight, source: str
               ) -> tuple[int, list[str]]:
    """Enqueue another study's Pareto configs (`NAME`, or `NAME@STORAGE-URL` for another
    storage), once, each re-checked first: its values must be ones this space can take and
    this vLLM accepts, and this study must not hold it already (measured, running or queued).
    Parameters this space lacks are left out; ones it has that the other study lacked are
    sampled. Returns (configs enqueued, why the others were skipped)."""
    if study_facts(study).warm_started == source:
        return 0, []
    name, _, url = source.partition("@")
    try:
        other = optuna.load_study(study_name=name, storage=make_storage(url or
                                                                        cfg.storage_url()))
    except KeyError:
        raise ConfigError(f"--warm-start: no study {name!r} in {url or cfg.storage_url()} "
                          "(NAME, or NAME@STORAGE-URL for another storage)") from None
    except ConfigError as e:  # the URL after @ (a storage error names `storage:`)
        raise ConfigError(f"--warm-start {source}: {e}") from None
    enqueued, skipped = 0, []
    have = [queued_params(t) for t in study.get_trials(deepcopy=False)
            if t.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)]
    for rec in front(other):
        params = {k: v for k, v in rec.params.items() if k in pre.space.parameters}
        where = f"--warm-start {name} trial {rec.number}"
        if params in have:  # a boot spent on a config this study already holds is a boot lost
            skipped.append(f"{where}: this study already has this config")
            continue
        try:
            pre.space.check_start(params, where)
            flags = pre.space.to_flags(params)
            check_flags(pre.vllm, {f: [v] if not isinstance(v, dict) else None
                                   for f, v in flags.items()}, where)
        except (ValueError, ConfigError) as e:
            skipped.append(str(e))
            continue
        enqueue(study, params, TrialFacts(warm_start=f"{name}#{rec.number}"))
        have.append(params)
        enqueued += 1
    write_study_facts(study, StudyFacts(warm_started=source))
    return enqueued, skipped
