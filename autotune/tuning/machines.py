"""The machines a study's trials ran on, kept in the study (its `machines` attribute): each
worker records its own once, with the number of trials the study held when it joined.

Capacities compare within one machine. Two H100 machines of one kind (same GPU, driver, vLLM
and flags) found 43.7-53.1 and 18.8 req/s for the same MoE fp8 config under one p99 TPOT SLO
(docs/results/warm-server-h100, `hosts_2026_11_26`): a study resumed on another machine, or
run by workers on unlike ones, compares trials that the machine alone can set apart. So a
worker that finds the study's earlier trials ran elsewhere says so, and the report lists the
machines.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import optuna

from autotune.server.machine import hardware

KEY = "machines"
SAME = ("id", "host", "gpu", "gpu_count", "driver", "cpu", "cpus")


def machine_id() -> str:
    """What tells two machines apart where their host names do not (every GPU machine lent
    here is called `vm`): the GPUs' UUIDs, else /etc/machine-id, else ""."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            p = subprocess.run([smi, "--query-gpu=uuid", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            if p.returncode == 0 and p.stdout.strip():
                return ",".join(x.strip() for x in p.stdout.strip().splitlines())
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        return Path("/etc/machine-id").read_text().strip()
    except OSError:
        return ""


def identity() -> dict[str, str]:
    """This machine as a study records it: its id, host name, GPU, driver, CPU model and
    count."""
    return {"id": machine_id(), "host": socket.gethostname(), **hardware(),
            "cpus": str(os.cpu_count() or 0)}


def label(m: dict[str, Any]) -> str:
    gpu = m.get("gpu", "none")
    chips = f"{m.get('gpu_count', '1')}x {gpu} (driver {m.get('driver', '?')}), " \
        if gpu != "none" else ""
    short = str(m.get("id") or "")[:12]
    return (f"{m.get('host', '?')}{f' ({short})' if short else ''}: {chips}"
            f"{m.get('cpu', '?')} x{m.get('cpus', '?')}")


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(str(a.get(k)) == str(b.get(k)) for k in SAME)


def machines(study: optuna.Study) -> list[dict[str, Any]]:
    return list(study.user_attrs.get(KEY, []))


def note_machine(study: optuna.Study, me: dict[str, str] | None = None) -> str | None:
    """Record this machine in the study once; say so when earlier trials ran on others."""
    me = me or identity()
    seen = machines(study)
    if not any(same(m, me) for m in seen):
        n = len(study.get_trials(deepcopy=False))
        study.set_user_attr(KEY, [*seen, {**me, "from_trial": n}])
    others = [m for m in seen if not same(m, me)]
    if not others:
        return None
    return (f"this study's trials ran on {len(others) + 1} machines (this one: {label(me)}; "
            f"before: {'; '.join(label(m) for m in others)}): capacities compare within one "
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
