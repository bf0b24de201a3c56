"""A study's identity: what its trials' numbers mean. The model and its fixed flags, the
workload (the profile, or a suite's profiles and score), the SLOs and the capacity search's
axis and range, the objectives and the search space. It is recorded when a study is created and
compared each time a study file opens the study again (`autotune study`, `create-study`): a
name reused for another model or workload otherwise mixed two studies, and a trial of the new
one was scored against a baseline measured on the old workload (issue 84: -53.7%, no warning).

Left out, since a resume may change them without changing what a number means: the budget,
n_trials, the timeout, the sampler, the confirm, certify and quality settings, workdir, the
storage, the server's environment and boot settings, how the load generator runs (its
processes, CPUs, timeouts) and how many requests a measurement sends (`num_prompts`: the same
load sampled longer or shorter). Models are dumped without their defaults, so a field a later
autotune adds (at its default) does not make every stored study differ.

`--force-new` sets the study of a name aside (`set_aside`) so that a fresh one starts under it:
renamed, with its folder, not deleted."""

from __future__ import annotations

import json
import time
from typing import Any

import optuna

from autotune.config.base import parse_model
from autotune.config.study import StudyConfig
from autotune.errors import AutotuneError, StudyError
from autotune.tuning.record import StudyFacts, study_facts, write_study_facts
from autotune.tuning.search_space import SearchSpace
from autotune.tuning.storage import make_storage, rename_study

# a profile's fields that say how the load generator runs, not what it sends (a busy client's
# fix, "give the client more: profile.client_processes", must resume the study)
RUN_ONLY = {"client_processes", "client_cpus", "client_realtime", "request_timeout_s",
            "metrics_interval_s"}
# and the one that sets a measurement's precision, not what it measures: the same load, sampled
# longer or shorter (a resume may cut it to finish sooner, or raise it for tighter tails)
PRECISION = {"num_prompts"}
# the capacity search's fields that say what a capacity is; the rest set its precision
CAPACITY_MEANS = {"axis", "low", "high"}
SHOWN = 8  # differences listed in the error, at most


def identity(cfg: StudyConfig, space: SearchSpace) -> dict[str, Any]:
    """The identity of a study run with `cfg` over `space` (the space as the study searches
    it: its draft models added), as flat `dotted.name: value` pairs, JSON values."""
    workloads = [p.model_dump(mode="json", exclude=RUN_ONLY | PRECISION, exclude_defaults=True)
                 for p in cfg.workloads()]
    data: dict[str, Any] = {
        "server": cfg.server.model_dump(mode="json", include={"model", "args", "extra_args"},
                                        exclude_defaults=True),
        **({"profiles": workloads, "suite_score": cfg.suite_score} if cfg.profiles
           else {"profile": workloads[0]}),
        "objectives": [f"{o.direction} {o.metric}" for o in cfg.objectives],
        "slos": sorted(s.text() for s in cfg.slos),
        "capacity": cfg.capacity.model_dump(mode="json", include=CAPACITY_MEANS)
        if cfg.capacity is not None else None,
        "search_space": {"fixed": space.fixed, "parameters": {
            name: p.model_dump(mode="json", exclude={"description", "grid"},
                               exclude_defaults=True)
            for name, p in space.parameters.items()}},
    }
    flat = dict(_flatten("", data))
    return dict(json.loads(json.dumps(flat)))  # as the storage gives it back


def _left_out(key: str) -> bool:
    """Whether a recorded key is one of a profile's fields left out of the identity."""
    parts = key.split(".")
    return parts[0] in ("profile", "profiles") and parts[-1] in RUN_ONLY | PRECISION


def _flatten(prefix: str, value: Any) -> list[tuple[str, Any]]:
    """Mappings (and lists of mappings) to dotted keys: a difference names the one field. What
    is not set (None, an empty mapping) has no key: it reads `-`."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flatten(f"{prefix}{k}.", v)]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [kv for i, v in enumerate(value) for kv in _flatten(f"{prefix}{i}.", v)]
    return [(prefix.rstrip("."), value)]


def differences(stored: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Each field whose value differs, as `name: stored -> new` (`-`: not set)."""

    def shown(key: str, side: dict[str, Any]) -> str:
        return json.dumps(side[key]) if key in side else "-"

    keys = [*stored, *(k for k in new if k not in stored)]
    return [f"{k}: {shown(k, stored)} -> {shown(k, new)}" for k in keys
            if stored.get(k, ...) != new.get(k, ...)]


def stored_identity(study: optuna.Study) -> dict[str, Any] | None:
    """The identity the study recorded; for a study from before identities were recorded, the
    one of its stored config and space (None when it has none, or they no longer parse)."""
    facts = study_facts(study)
    if facts.identity is not None:  # recorded by an autotune that counted more fields in
        return {k: v for k, v in facts.identity.items() if not _left_out(k)}
    if facts.config is None or facts.search_space is None:
        return None
    try:
        cfg = parse_model(StudyConfig, facts.config, f"study {study.study_name!r}")
        space = parse_model(SearchSpace, facts.search_space, f"study {study.study_name!r}")
        return identity(cfg, space)
    except AutotuneError:  # written by an older autotune: nothing to compare; record ours
        return None


def check_identity(study: optuna.Study, cfg: StudyConfig, space: SearchSpace | None) -> None:
    """Refuse to go on with a study whose trials were measured on another setup (one
    StudyError naming each difference and the fix); record the identity where none is.
    Without a space (a command that opens the study to read it), nothing is checked."""
    if space is None:
        return
    new = identity(cfg, space)
    old = stored_identity(study)
    if old is not None and (diff := differences(old, new)):
        more = f"\n  ... and {len(diff) - SHOWN} more" if len(diff) > SHOWN else ""
        raise StudyError(
            f"study {cfg.name!r} in {cfg.storage_url()} was created for another setup; its "
            "trials (the baseline included) were measured on it, so a trial of this one "
            "would be scored against them. What differs (the study's -> this file's):\n  "
            + "\n  ".join(diff[:SHOWN]) + more + "\nTo resume it, run it as it was created "
            "(the values on the left). To start another study: give this file a new `name:` "
            "(or --study-name NEW), or run with --force-new to start afresh under this name "
            "(the old study is kept under a new name).")
    if study_facts(study).identity is None:
        write_study_facts(study, StudyFacts(identity=new))


def set_aside(cfg: StudyConfig) -> str | None:
    """--force-new: keep the study named `cfg.name` under a new name, `<name>.old-<time>`, its
    folder (server logs, confirm and certify records) moved to that name's, so that a fresh
    study starts under the name and nothing of the old one is lost. Returns the new name, or
    None where there is no such study."""
    storage = make_storage(cfg.storage_url(), cfg.heartbeat_grace_s)
    taken = set(optuna.get_all_study_names(storage))
    if cfg.name not in taken:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    new = next(n for i in range(1, 1000) if (n := f"{cfg.name}.old-{stamp}"
                                             + (f"-{i}" if i > 1 else "")) not in taken)
    rename_study(storage, cfg.name, new)
    folder = cfg.study_dir()
    if folder.exists():
        folder.rename(folder.with_name(new))
    return new
