"""The machine a server runs on, as a study records it: GPU name, count and driver where
nvidia-smi answers, and the CPU model; and what a server's launch takes from it (the
environment a study's servers get, whether they are forked from a preloaded vLLM)."""

from __future__ import annotations

import functools
import platform
import shutil
import subprocess
from pathlib import Path

from autotune.config.study import ServerConfig

# vLLM on CPU sizes its KV cache at most of the machine's memory unless told
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def nvidia_smi(query: str) -> list[str] | None:
    """nvidia-smi's answer to `--query-gpu=QUERY`, a line a GPU; None where it is missing,
    fails or hangs."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        p = subprocess.run([smi, f"--query-gpu={query}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):  # a hung or broken nvidia-smi: no GPU
        return None
    return [x.strip() for x in p.stdout.strip().splitlines()] if p.returncode == 0 else None


def hardware() -> dict[str, str]:
    """GPU name, count and driver where nvidia-smi answers (else gpu "none"), and the CPU
    model: on a GPU too, where the host's CPU feeds the engine (two H100 machines of one kind
    served one config at 2.3-2.8x apart, docs/results/warm-server-h100)."""
    lines = nvidia_smi("name,driver_version")
    if lines and "," in lines[0]:
        name, driver = (x.strip() for x in lines[0].split(",", 1))
        return {"gpu": name, "gpu_count": str(len(lines)), "driver": driver,
                "cpu": cpu_model()}
    return {"gpu": "none", "cpu": cpu_model()}


def machine_id() -> str:
    """What tells two machines apart where their names do not (cloud GPU machines are often all
    called `vm`): the GPUs' UUIDs, else /etc/machine-id, else ""."""
    uuids = [x for x in nvidia_smi("uuid") or [] if x.startswith(("GPU-", "MIG-"))]
    if uuids:
        return ",".join(uuids)
    try:
        return Path("/etc/machine-id").read_text().strip()
    except OSError:
        return ""


@functools.cache
def has_gpu() -> bool:
    """Whether nvidia-smi sees a GPU here (asked once a process)."""
    return hardware()["gpu"] != "none"


def launch_env(server: ServerConfig) -> dict[str, str]:
    """The environment a study's servers get from its config, and its deploy line carries:
    `server.env`, or where the study file sets none, CPU_ENV on a machine without a GPU and
    nothing on a GPU (a CPU-only variable on a GPU deploy line is noise a user must question)."""
    if "env" in server.model_fields_set or has_gpu():
        return dict(server.env)
    return dict(CPU_ENV)


def preloads(server: ServerConfig) -> bool:
    """Whether a study forks its servers from a preloaded vLLM (server.preload; auto: only
    where no GPU is seen). On one H100, a preloaded server with a forked engine read 0.74-0.88
    of a stock `vllm serve`'s mean TPOT at 60 req/s on the dense 8B, in every pair
    (docs/results/warm-server-h100): a study must measure what it deploys."""
    return server.preload if isinstance(server.preload, bool) else not has_gpu()
