"""The machines a study's trials ran on, kept in the study: one attribute per machine
(`machine:<key>`, written once, so workers starting together on PostgreSQL do not overwrite
each other's), each with the number of trials the study had started when that machine joined;
autotune.tuning.record reads and writes them (`study_attrs`, `write_study_facts`).

Capacities compare within one machine. Two H100 machines of one kind (same GPU, driver, vLLM
and flags) found 43.7-53.1 and 18.8 req/s for the same MoE fp8 config under one p99 TPOT SLO
(docs/results/warm-server-h100, `hosts_2026_11_26`): a study resumed on another machine, or
run by workers on unlike ones, compares trials that the machine alone can set apart. So a
worker about to run a trial, finding that earlier trials ran elsewhere, says so, and the
report lists the machines.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.server.machine import hardware, machine_id
from autotune.tuning.record import StudyFacts, study_attrs, write_study_facts

PREFIX = "machine:"
# without an id (no GPU, no /etc/machine-id), what tells machines apart; not the host name,
# which a container gets new on every start
ALIKE = ("gpu", "gpu_count", "driver", "cpu", "cpus")
SETUP = ("cpu_quota", "vllm")  # what else sets a machine's pace, where recorded


def identity() -> dict[str, str]:
    """This machine as a study records it: its id, host name, GPU, driver, CPU model, the
    cores this process may run on and its cgroup's CPU quota (two core sets or quotas of one
    host serve apart: each is a machine of its own), and the vLLM it runs."""
    return {"id": machine_id(), "host": socket.gethostname(), **hardware(),
            "cpus": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else os.cpu_count() or 0),
            "cpu_quota": cpu_quota(), "vllm": vllm_version()}


def cpu_quota() -> str:
    """The cgroup's CPU quota ("max" or "QUOTA PERIOD", cgroup v2's cpu.max), "" unknown."""
    try:
        return Path("/sys/fs/cgroup/cpu.max").read_text().strip()
    except OSError:
        return ""


def vllm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm")
    except PackageNotFoundError:
        return ""


@functools.cache
def here() -> str:
    """This machine's key (each trial records it: TrialFacts.machine)."""
    return key(identity())


def key(m: dict[str, Any]) -> str:
    """The machine's attribute key: its id, or without one its hardware (host left out); with
    the cores, CPU quota and vLLM it ran with where they were recorded."""
    what = str(m.get("id") or "") or "|".join(str(m.get(k)) for k in ALIKE)
    if m.get("id"):
        what += "|" + str(m.get("cpus", ""))
    what += "".join(f"|{k}={m[k]}" for k in SETUP if m.get(k))
    return PREFIX + hashlib.sha256(what.encode()).hexdigest()[:16]


def label(m: dict[str, Any]) -> str:
    gpu = m.get("gpu", "none")
    chips = f"{m.get('gpu_count', '1')}x {gpu} (driver {m.get('driver', '?')}), " \
        if gpu != "none" else ""
    short = str(m.get("id") or "")[:12]
    return (f"{m.get('host', '?')}{f' ({short})' if short else ''}: {chips}"
            f"{m.get('cpu', '?')} x{m.get('cpus', '?')}")


def machines(study: optuna.Study) -> list[dict[str, Any]]:
    """The machines recorded, in the order they joined (attributes of another shape are
    left out)."""
    found = [v for v in study_attrs(study, PREFIX).values() if isinstance(v, dict)]
    return sorted(found, key=lambda m: (int(m.get("from_trial", 0))
                                        if str(m.get("from_trial", 0)).isdigit() else 0))


def started(study: optuna.Study) -> int:
    """Trials started so far (enqueued ones waiting for a worker are not)."""
    return sum(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))


def note_machine(study: optuna.Study, me: dict[str, str] | None = None) -> str | None:
    """Record this machine in the study once (before it runs a trial); say so when trials
    ran, or run, on others."""
    me = me or identity()
    mine = key(me)
    if mine not in study_attrs(study, PREFIX):
        write_study_facts(study, StudyFacts(), {mine: {**me, "from_trial": started(study)}})
    others = [m for m in machines(study) if key(m) != mine]
    if not others:
        return None
    return (f"this study's trials ran on {len(others) + 1} machines (this one: {label(me)}; "
            f"others: {'; '.join(label(m) for m in others)}): capacities compare within one "
            "machine (two H100 machines of one kind served one config 2.3-2.8x apart), so "
            "compare its trials per machine or run it again on one")


def machines_line(study: optuna.Study) -> str | None:
    """The report's line: the machine, or the machines and the trial each joined at."""
    seen = machines(study)
    if not seen:
        return None
    if len(seen) == 1:
        return f"- machine: {label(seen[0])}"
    return (f"- **{len(seen)} machines** (capacities compare within one): " + "; ".join(
        f"{label(m)} from trial {m.get('from_trial', '?')}" for m in seen))
