"""Process helpers shared by the integration tests."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def _commands() -> dict[int, str]:
    """Every live process's command line, by pid."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
    return out


def servers_of(model: Path) -> list[int]:
    return [pid for pid, cmd in _commands().items() if " serve " in cmd and str(model) in cmd]


def fork_servers_of(path: Path) -> list[int]:
    """Fork servers (autotune.server.forkserver) whose log lies under `path`: their argv ends
    with it, so a test sees its own and not those of others."""
    return [pid for pid, cmd in _commands().items()
            if "_forkserver_main.py" in cmd and str(path) in cmd]


def wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.1)


def side_by_side(*argvs: list[str], env: dict[str, str] | None = None, timeout: float = 900
                 ) -> list[subprocess.CompletedProcess[str]]:
    """Commands that only read (as `autotune trials`, `export`, `report` do a study) run at
    once, as `subprocess.run` runs one: most of each is its imports, and two cores import two
    at a time."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for argv in argvs]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done
