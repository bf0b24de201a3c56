"""Run a model's generated code, confined (the guard's HumanEval task, docs/quality.md): each
program in its own `python -I` subprocess, in an empty temporary directory that is removed
after, with an environment holding only PATH, its own process group (killed whole on timeout),
and resource limits: CPU seconds, 1 GiB of address space, 16 MiB per file written, no core
files. This confines mistakes (an endless loop, a huge allocation, files scattered about), not
an adversary: the program runs as the user who runs autotune, with the network the machine has.
Run the task only on models whose code you would run (quality.task: none turns it off).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MEMORY = 1 << 30
FILE_SIZE = 16 << 20


def _limits(cpu_s: int) -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_python(code: str, timeout_s: float = 10.0) -> tuple[bool, str]:
    """(whether the program exited 0 within `timeout_s`, the last of what it printed or why)."""
    with tempfile.TemporaryDirectory(prefix="autotune-task-") as tmp:
        path = Path(tmp) / "program.py"
        path.write_text(code)
        log = Path(tmp) / "output.txt"
        with log.open("wb") as out:
            p = subprocess.Popen(
                [sys.executable, "-I", str(path)], cwd=tmp, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                preexec_fn=lambda: _limits(int(timeout_s) + 1))
            try:
                rc = p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                return False, f"timed out after {timeout_s:g} s"
        said = log.read_bytes()[-300:].decode(errors="replace").strip()
        return rc == 0, said or f"exit {rc}"


def run_many(programs: Sequence[str], timeout_s: float = 10.0,
             workers: int | None = None) -> list[tuple[bool, str]]:
    """`run_python` over the programs, `workers` at a time (default: the machine's cores)."""
    n = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda c: run_python(c, timeout_s), programs))
