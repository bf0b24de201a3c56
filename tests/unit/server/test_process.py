"""ProcessGroup: a child in its own session, logging to a file, stopped as a whole group."""

import signal
import sys
import time
from pathlib import Path

from autotune.server.process import ProcessGroup, free_port, group_pids, port_is_free

# a leader that starts a child which ignores SIGTERM
TREE = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
        "'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']);"
        " print('started', flush=True); time.sleep(600)")


def test_free_port_is_free() -> None:
    assert port_is_free(free_port())


def test_stop_terms_then_kills_the_whole_group(tmp_path: Path) -> None:
    g = ProcessGroup([sys.executable, "-c", TREE], log_path=tmp_path / "p.log", header=True)
    g.start()
    deadline = time.monotonic() + 20
    while len(group_pids(g.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_pids(g.pid)) == 2 and g.running()
    t0 = time.monotonic()
    g.stop(grace_s=1.0)
    assert group_pids(g.pid) == [] and not g.running()
    assert g.returncode == -signal.SIGTERM or g.returncode == -signal.SIGKILL
    assert time.monotonic() - t0 < 10
    text = g.log_text()
    assert text.startswith("$ ") and "started" in text and g.log_tail(1) == "started"


def test_context_manager_stops_on_error(tmp_path: Path) -> None:
    try:
        with ProcessGroup([sys.executable, "-c", "import time; time.sleep(60)"],
                          log_path=tmp_path / "q.log") as g:
            pid = g.pid
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert group_pids(pid) == []
