"""The fork server's process: import vLLM's CLI once, then fork one `vllm serve` per request.

Run by vLLM's own interpreter as a script (`python _forkserver_main.py SOCKET STATUS ENTRY
MODULES LOG`), so it imports nothing of autotune and only the standard library before the preload.
`autotune.server.forkserver` starts it, talks to it and owns the servers it forks.

Each request on the Unix socket is one JSON line, {"argv", "env", "cwd", "log"}; the answer is
{"pid": N} or {"error": "..."}. The child is what a fresh `vllm serve` would be, minus the
imports: its own session (its process group is its pid), SIGTERM when this process dies (which
itself gets SIGTERM when autotune dies), stdout and stderr appended to `log`, exactly `env` as
its environment, `argv` as sys.argv, then ENTRY (the console script's `main`). When a child
exits this process writes its exit status (Popen's returncode) to STATUS/<pid>.

Torch must not have touched CUDA before a fork: the preload checks after each module and exits
with code 3 if one did, and autotune then starts its servers directly.
"""

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

# Run as a script, Python puts this file's folder (autotune/server) first on sys.path, where
# process.py or command.py would shadow a top-level module of that name in vLLM's imports (the
# standard modules above have no namesake there).
_HERE = os.path.dirname(os.path.realpath(__file__))
if sys.path and os.path.realpath(sys.path[0]) == _HERE:
    del sys.path[0]

PR_SET_PDEATHSIG = 1
CUDA_TOUCHED = 3


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return bool(cuda is not None and cuda.is_initialized())


def _entry(spec: str) -> Callable[[], object]:
    module, _, attr = spec.partition(":")
    fn: Callable[[], object] = getattr(importlib.import_module(module), attr)
    return fn


def _retitle(title: str) -> None:
    """Show the server's argv in ps and /proc/PID/cmdline, as an exec'd `vllm serve` would
    (vLLM installs setproctitle and titles its own engine processes with it)."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(title)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _child(req: dict[str, Any], listener: socket.socket, conn: socket.socket, entry_spec: str,
           parent: int) -> None:
    """In the forked child: become a fresh `vllm serve` and never return."""
    code = 1
    try:
        os.setsid()
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the fork server died between fork and prctl
            os._exit(1)
        listener.close()
        conn.close()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        log = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        _retitle(" ".join(req["argv"]))  # before the environment moves: setproctitle needs it
        os.environ.clear()
        os.environ.update(req["env"])
        tempfile.tempdir = None  # TMPDIR is the server's own folder (its ZMQ sockets)
        if req.get("cwd"):
            os.chdir(req["cwd"])
        sys.argv = list(req["argv"])
        try:
            rv = _entry(entry_spec)()
            code = rv if isinstance(rv, int) else 0
        except SystemExit as e:
            code = _exit_code(e)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream must not change the code
                stream.flush()
        os._exit(code)


def _reap(status_dir: str) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        path = os.path.join(status_dir, str(pid))
        with open(path + ".tmp", "w") as f:
            f.write(str(rc))
        os.replace(path + ".tmp", path)


def main() -> int:
    sock_path, status_dir, entry_spec, modules = sys.argv[1:5]  # then the log, for ps readers
    t0 = time.monotonic()
    for name in [m for m in modules.split(",") if m]:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a module this vLLM lacks is only not preloaded
            print(f"preload: {name} not imported: {type(e).__name__}: {e}", flush=True)
        if _cuda_initialized():
            print(f"preload: importing {name} initialized CUDA; forking is unsafe", flush=True)
            return CUDA_TOUCHED
    _entry(entry_spec)
    if _cuda_initialized():
        print(f"preload: importing {entry_spec} initialized CUDA", flush=True)
        return CUDA_TOUCHED
    print(f"preload: {len(sys.modules)} modules in {time.monotonic() - t0:.1f} s", flush=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path + ".tmp")
    os.rename(sock_path + ".tmp", sock_path)  # the socket appears only once it listens
    listener.listen(8)
    listener.settimeout(0.2)
    me = os.getpid()
    while True:
        _reap(status_dir)
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(10)
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            try:
                req = json.loads(data)
            except ValueError as e:
                conn.sendall(json.dumps({"error": f"bad request: {e}"}).encode() + b"\n")
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(req, listener, conn, entry_spec, me)
            print(f"forked {pid}: {' '.join(req['argv'][:3])} ...", flush=True)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")


if __name__ == "__main__":
    sys.exit(main())
