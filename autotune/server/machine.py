"""The machine a server runs on, as a study records it: GPU name, count and driver where
nvidia-smi answers, else the CPU model."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path


def hardware() -> dict[str, str]:
    """GPU name and driver where nvidia-smi answers, else the CPU model."""
    smi = shutil.which("nvidia-smi")
    if smi:
        p = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        if p.returncode == 0 and p.stdout.strip():
            first = p.stdout.strip().splitlines()
            name, driver = (x.strip() for x in first[0].split(",", 1))
            return {"gpu": name, "gpu_count": str(len(first)), "driver": driver}
    cpu = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"gpu": "none", "cpu": cpu}
