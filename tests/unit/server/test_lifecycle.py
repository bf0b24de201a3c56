"""The server module: its lifecycle against stand-in processes (fast; the real server is in
integration), and the root-cause line it reads from a vLLM log."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.errors import ServerBootError, ServerBootHung, ServerBootTimeout
from autotune.server.lifecycle import ServerProcess, root_cause
from autotune.server.process import (
    OWNER_FILE,
    SOCKET_DIR_PREFIX,
    free_port,
    group_pids,
    port_is_free,
    sweep_socket_dirs,
)

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
    assert proc.group is not None
    pg = proc.group.pid
    assert not port_is_free(port)
    assert len(group_pids(pg)) == 2
    proc.stop()  # TERM (child ignores it), then KILL of the group
    assert group_pids(pg) == []
    assert port_is_free(port)


def test_socket_folders_of_dead_owners_are_swept(tmp_path: Path) -> None:
    """A worker killed mid-trial never runs stop(): its socket folder stays in /tmp until the
    next server start sweeps it. Only folders whose owner process is gone are removed."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folders = {}
    for name, owner in (("dead", str(dead.pid)), ("live", str(os.getpid())), ("foreign", None)):
        d = tmp_path / f"{SOCKET_DIR_PREFIX}{name}"
        d.mkdir()
        (d / "sock").write_text("")
        if owner is not None:
            (d / OWNER_FILE).write_text(owner)
        folders[name] = d
    assert sweep_socket_dirs(str(tmp_path)) == [folders["dead"]]
    assert not folders["dead"].exists()
    assert folders["live"].exists() and folders["foreign"].exists()


def test_a_stopped_server_leaves_no_socket_folder(tmp_path: Path) -> None:
    proc = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"],
                         log_path=tmp_path / "log", port=free_port(), stop_grace_s=2.0)
    proc.start()
    assert proc.tmpdir is not None
    folder = Path(proc.tmpdir)
    assert (folder / OWNER_FILE).read_text() == str(os.getpid())
    proc.stop()
    assert not folder.exists()


def test_exit_during_boot_raises_with_cause(tmp_path: Path) -> None:
    script = "print('INFO starting'); print('ValueError: max_num_seqs must be positive'); exit(3)"
    with ServerProcess([sys.executable, "-c", script], log_path=tmp_path / "log",
                       port=free_port()) as proc, pytest.raises(ServerBootError) as ei:
        proc.wait_healthy(30)
    assert ei.value.returncode == 3
    assert ei.value.cause == "ValueError: max_num_seqs must be positive"
    assert "$ " in (tmp_path / "log").read_text()  # the argv heads the log


def test_an_engine_that_failed_and_a_server_that_hangs_end_the_boot(tmp_path: Path) -> None:
    """vLLM 0.26 on two H200s: the engine logged that it failed to start, then the process tree
    stayed alive and silent (docs/results/multi-gpu-h200x2). The boot ends after the grace, with
    the engine's cause, not at the boot timeout."""
    script = ("import sys, time\n"
              "print('(EngineCore pid=1) ERROR [core.py:1330] EngineCore failed to start.')\n"
              "print('(EngineCore pid=1) ERROR [core.py:1330] RuntimeError: Worker failed with "
              "error CUBLAS_STATUS_EXECUTION_FAILED')\n"
              "sys.stdout.flush(); time.sleep(120)")
    (tmp_path / "server.py").write_text(script)  # not in the argv, which heads the log
    t0 = time.monotonic()
    with ServerProcess([sys.executable, str(tmp_path / "server.py")], log_path=tmp_path / "log",
                       port=free_port(), hang_grace_s=1.0) as proc, \
            pytest.raises(ServerBootHung) as ei:
        proc.wait_healthy(100)
    assert time.monotonic() - t0 < 20
    assert ei.value.cause == "RuntimeError: Worker failed with error CUBLAS_STATUS_EXECUTION_FAILED"
    assert isinstance(ei.value, ServerBootError) and "had not exited 1 s later" in str(ei.value)


def test_boot_timeout(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"],
                       log_path=tmp_path / "log", port=free_port()) as proc:
        with pytest.raises(ServerBootTimeout):
            proc.wait_healthy(1.0, poll_interval_s=0.1)
        pg = proc.group.pid if proc.group else -1
    assert time.monotonic() - t0 < 10
    assert group_pids(pg) == []

ENGINE_LOG = """\
INFO 11-22 10:00:01 [api_server.py:1] vLLM API server version 0.32.0
ERROR 11-22 10:00:09 [core.py:700] EngineCore failed to start.
ERROR 11-22 10:00:09 [core.py:700] Traceback (most recent call last):
ERROR 11-22 10:00:09 [core.py:700]   File "/x/core.py", line 12, in run
ERROR 11-22 10:00:09 [core.py:700] NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.
Traceback (most recent call last):
  File "/x/api_server.py", line 3, in <module>
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_engine_root_cause_skips_wrappers() -> None:
    assert root_cause(ENGINE_LOG) == (
        "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    )


def test_argparse_error_wins() -> None:
    log = "usage: vllm serve ...\nvllm serve: error: unrecognized arguments: --bogus\n"
    assert root_cause(log) == "vllm serve: error: unrecognized arguments: --bogus"


def test_qualified_exception_name_is_shortened() -> None:
    log = "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'x'\n"
    assert root_cause(log) == "HFValidationError: Repo id must be in the form 'x'"


def test_nothing_found() -> None:
    assert root_cause("INFO all good\n") is None


def test_pydantic_validation_error_takes_the_next_line() -> None:
    log = ("(APIServer pid=1872) pydantic_core._pydantic_core.ValidationError: 1 validation "
           "error for SchedulerConfig\n(APIServer pid=1872)   Value error, max_num_batched_tokens "
           "(2067) is smaller than max_model_len (8192). [type=value_error, input_value=x]\n")
    assert root_cause(log) == (
        "ValidationError: 1 validation error for SchedulerConfig: Value error, "
        "max_num_batched_tokens (2067) is smaller than max_model_len (8192).")
