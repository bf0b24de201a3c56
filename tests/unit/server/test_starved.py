"""Whether other work starved the machine while a server booted (autotune.server.starved), and
the boot timeout that says so, against stand-in readings and processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.errors import ServerBootStarved, ServerBootTimeout
from autotune.server.lifecycle import ServerProcess
from autotune.server.process import free_port
from autotune.server.starved import (
    TICK,
    CpuClock,
    cpu_text,
    group_ticks,
    others_share,
    starved_since,
)


def test_the_share_other_processes_took_leaves_out_the_servers_own() -> None:
    start = CpuClock(100.0, busy=1000.0, total=2000.0, stall_us=0.0)
    # 600 s of two CPUs = 1200 ticks at 1 tick/s: 1100 busy, of which the server's 200
    end = CpuClock(700.0, busy=2100.0, total=3200.0, stall_us=540e6)
    assert others_share(start, end, 200.0) == pytest.approx(0.75)
    text = cpu_text(start, end, 200.0)
    assert text.startswith("other processes took 75% of the CPUs' time")
    assert "runnable tasks waited for a CPU 90% of the time" in text
    assert others_share(start, CpuClock(700.0, None, None, None), 0.0) is None


def test_the_servers_own_time_counts_its_reaped_children() -> None:
    """vLLM's API server starts its engine core as a child: the server's ticks are its own and
    those of children it has reaped, so its boot is never counted as other work."""
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "subprocess.run([sys.executable, '-c', "
        "'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass'])\n"
        "time.sleep(30)")])
    try:
        deadline = time.monotonic() + 20
        while group_ticks([parent.pid]) < 0.5 * TICK and time.monotonic() < deadline:
            time.sleep(0.1)
        assert group_ticks([parent.pid]) >= 0.5 * TICK
    finally:
        parent.kill()
        parent.wait()
    assert group_ticks([os.getpid()]) > 0 and group_ticks([10 ** 9]) == 0.0  # gone: none


def test_a_boot_timeout_on_a_starved_machine_says_so(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.server.lifecycle.starved_since",
                        lambda _start, _pids: "other processes took 96% of the CPUs' time")
    with ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"],
                       log_path=tmp_path / "log", port=free_port()) as proc, \
            pytest.raises(ServerBootStarved) as e:
        proc.wait_healthy(1.0, poll_interval_s=0.1)
    assert isinstance(e.value, ServerBootTimeout) and e.value.cause == "boot timeout (1 s)"
    assert e.value.starved == "other processes took 96% of the CPUs' time"
    # a quiet machine: a plain timeout
    monkeypatch.setattr("autotune.server.lifecycle.starved_since", starved_since)
    with ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"],
                       log_path=tmp_path / "log2", port=free_port()) as proc, \
            pytest.raises(ServerBootTimeout) as plain:
        proc.wait_healthy(1.0, poll_interval_s=0.1)
    assert type(plain.value) in (ServerBootTimeout, ServerBootStarved)  # the machine decides
