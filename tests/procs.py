"""Process helpers shared by the integration tests."""

from __future__ import annotations

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
