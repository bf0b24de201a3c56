"""ServerProcess lifecycle against stand-in processes (fast; the real server is in integration)."""

import sys
import time
from pathlib import Path

import pytest

from autotune.errors import ServerBootError, ServerBootTimeout
from autotune.server import ServerProcess, free_port, group_pids, port_is_free

# Binds the port it is given (like a server), spawns a child, ignores SIGTERM in the child.
HOLDER = """
import signal, socket, subprocess, sys, time
port = int(sys.argv[sys.argv.index('--port') + 1])
s = socket.socket(); s.bind(('127.0.0.1', port)); s.listen()
subprocess.Popen([sys.executable, '-c',
    'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])
time.sleep(600)
"""


def test_stop_kills_whole_group_and_frees_port(tmp_path: Path) -> None:
    port = free_port()
    proc = ServerProcess([sys.executable, "-c", HOLDER], log_path=tmp_path / "log", port=port,
                         stop_grace_s=2.0)
    proc.start()
    deadline = time.monotonic() + 10
    while port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.proc is not None
    pg = proc.proc.pid
    assert not port_is_free(port)
    assert len(group_pids(pg)) == 2
    proc.stop()  # TERM (child ignores it), then KILL of the group
    assert group_pids(pg) == []
    assert port_is_free(port)


def test_exit_during_boot_raises_with_cause(tmp_path: Path) -> None:
    script = "print('INFO starting'); print('ValueError: max_num_seqs must be positive'); exit(3)"
    with ServerProcess([sys.executable, "-c", script], log_path=tmp_path / "log",
                       port=free_port()) as proc, pytest.raises(ServerBootError) as ei:
        proc.wait_healthy(30)
    assert ei.value.returncode == 3
    assert ei.value.cause == "ValueError: max_num_seqs must be positive"
    assert "$ " in (tmp_path / "log").read_text()  # the argv heads the log


def test_boot_timeout(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"],
                       log_path=tmp_path / "log", port=free_port()) as proc:
        with pytest.raises(ServerBootTimeout):
            proc.wait_healthy(1.0, poll_interval_s=0.1)
        pg = proc.proc.pid if proc.proc else -1
    assert time.monotonic() - t0 < 10
    assert group_pids(pg) == []
