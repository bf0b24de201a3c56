"""The reference client: `vllm bench serve` run against a server that is up, with a profile's
load, and what it measured.

Where autotune's numbers and these differ on the same server, autotune's are wrong until shown
otherwise (docs/load-generator.md). `run_reference` runs it as a subprocess (its own output to a
log file), optionally on given CPUs (the calling thread's affinity is what the child inherits),
and reads its `--save-result --save-detailed` JSON. Inside `reference_client(vllm)` its runs
go to one process of vLLM's own Python, which runs the `vllm` command's own entry point once a
run (sys.argv set as that command line sets it): the same client, without importing vLLM again
for every run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config.workload import PRESETS, ProfileConfig
from autotune.errors import LoadError
from autotune.load.datasets import sharegpt_json_for_vllm
from autotune.load.placement import pinned, realtime
from autotune.server.forkserver import console_script
from autotune.server.process import with_pdeathsig

# a gap between two token events under this was one read's events parsed one after another,
# not two engine steps (no vLLM engine step takes 0.2 ms; parsing an event takes ~20-50 us)
SAME_READ_S = 0.0002


@dataclass(frozen=True)
class ReferenceResult:
    metrics: dict[str, float]  # vllm bench serve's own names (mean_tpot_ms, p99_ttft_ms, ...)
    same_read_share: float  # the share of token gaps under SAME_READ_S
    burst_requests: int  # requests with at least half of their gaps so


def reference_argv(vllm: Sequence[str], url: str, model: str, tokenizer: str,
                   profile: ProfileConfig, out: Path) -> list[str]:
    """`vllm bench serve` with the profile's load; results to `out` (JSON)."""
    argv = [*vllm, "bench", "serve", "--base-url", url, "--model", model, "--tokenizer",
            tokenizer, "--ignore-eos", "--seed", str(profile.seed), "--num-prompts",
            str(profile.num_prompts), "--num-warmups", str(profile.warmup), "--disable-tqdm",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(out.parent),
            "--result-filename", out.name]
    argv += (["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
             if profile.endpoint == "chat" else ["--backend", "vllm"])
    if profile.max_concurrency:
        argv += ["--max-concurrency", str(profile.max_concurrency)]
    if not math.isinf(profile.request_rate):
        argv += ["--request-rate", f"{profile.request_rate:g}"]
    if profile.name == "random" or profile.name in PRESETS:  # a preset is random lengths
        i, o = profile.lengths()
        argv += ["--dataset-name", "random", "--random-input-len", str(i),
                 "--random-output-len", str(o),
                 "--random-range-ratio", f"{profile.range_ratio:g}"]
        if profile.prefix_len:
            argv += ["--random-prefix-len", str(profile.prefix_len)]
    elif profile.name == "trace":
        argv += trace_args(profile)
    elif profile.name == "sharegpt":
        argv += ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt_json_for_vllm())]
        if profile.output_len:
            argv += ["--sharegpt-output-len", str(profile.output_len)]
    else:
        raise LoadError(f"the reference client runs the random, preset, sharegpt and trace "
                        f"profiles, not {profile.name!r}")
    return argv


def trace_args(profile: ProfileConfig) -> list[str]:
    """`vllm bench serve`'s options that replay a trace profile whose path is a window written
    as vLLM's timed_trace dataset reads it (autotune.load.replay.write_vllm_trace: arrivals in
    seconds, hash ids covering every prompt), its timeline divided by the profile's speedup."""
    return ["--dataset-name", "timed_trace", "--dataset-path", str(profile.path),
            "--timed-trace-chunk-hash-size", str(profile.block_size),
            "--timed-trace-sec-multiplier", f"{1 / profile.speedup:.6g}"]


def same_read(itls: list[list[float]]) -> tuple[float, int]:
    """(share of gaps under SAME_READ_S, requests with at least half of their gaps so), for
    either client's per-request inter-token gaps in seconds."""
    gaps = sum(len(x) for x in itls)
    fast = [sum(g < SAME_READ_S for g in x) for x in itls]
    return (sum(fast) / gaps if gaps else 0.0,
            sum(2 * f >= len(x) >= 2 for f, x in zip(fast, itls, strict=True)))


def summarize(doc: dict[str, Any]) -> ReferenceResult:
    """The metrics of a `--save-detailed` result, and its gaps read at once."""
    metrics = {k: float(v) for k, v in doc.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    return ReferenceResult(metrics, *same_read([list(x) for x in doc.get("itls", []) if x]))


# One `vllm ...` command line a line on stdin ({"argv": [...], "log": path}), each run through
# the console script's own entry point ("module:function", its argument) with its output in the
# run's log; {"rc": N} a line back once it ends. {"ready": true} first, once that is imported.
_DRIVER = r"""
import sys
del sys.path[0]  # -c's current folder: the console script's vLLM, not a checkout here
import importlib, json, os, traceback
back = os.fdopen(os.dup(1), "w", buffering=1)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
module, _, function = sys.argv[1].partition(":")
entry = getattr(importlib.import_module(module), function)
back.write(json.dumps({"ready": True}) + "\n")
for line in sys.stdin:
    job = json.loads(line)
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    back.write(json.dumps({"started": True}) + "\n")
    try:
        sys.argv = ["vllm", *job["argv"]]
        code = entry()  # as the console script's sys.exit(main()) reads it
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    rc = code if isinstance(code, int) else (0 if code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(null, 1)
    os.dup2(null, 2)
    back.write(json.dumps({"rc": rc}) + "\n")
"""
class ReferenceClient:
    """One process of vLLM's Python that runs `vllm bench serve` runs one after another."""

    def __init__(self, python: str, entry: str, log: Path | None = None) -> None:
        self.python, self.entry, self.log = python, entry, log
        self.proc: subprocess.Popen[bytes] | None = None
        self._buf = b""  # what the process wrote past its last line read
        self.ready = False  # its "ready" line read: vLLM's CLI imported
        self.failed = False  # it could not start once: every run is its own process

    def start(self) -> None:
        """Start the process (vLLM's import runs meanwhile); `run` waits for it."""
        if self.proc is None and not self.failed:
            with (self.log.open("a") if self.log else open(os.devnull, "w")) as err:
                self.proc = subprocess.Popen(with_pdeathsig([self.python, "-u", "-c", _DRIVER,
                                                             self.entry]),
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=err, start_new_session=True)
            self.ready, self._buf = False, b""

    def _started(self, timeout_s: float) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            self.close()  # it died between runs: a new one
        self.start()
        if not self.ready:
            self.ready = self.proc is not None and self._reply(timeout_s) == {"ready": True}
        return self.ready

    def _reply(self, timeout_s: float) -> dict[str, Any] | None:
        """The process's next line; {} where it closed its end (it died), None past
        `timeout_s`. Read from the pipe's file descriptor with a buffer of its own: two lines
        that arrive in one read are both kept."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        end = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            with selectors.DefaultSelector() as sel:
                sel.register(fd, selectors.EVENT_READ)
                if not sel.select(max(0.0, end - time.monotonic())):
                    return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return {}
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            reply = json.loads(line) if line.strip() else {}
        except ValueError:  # not the driver's line (something printed at start-up): no client
            reply = {}
        return reply if isinstance(reply, dict) else {}

    def run(self, argv: Sequence[str], log: Path, timeout_s: float) -> int | None:
        """One run's exit status; None where this process could not start the run (it did not
        start, or died between runs): the caller runs the command itself. A run past
        `timeout_s`, or one during which the process died, raises (a run the server has
        partly served is not run again; its log is kept)."""
        if self.failed:
            return None
        t0 = time.monotonic()
        if not self._started(timeout_s):
            self.close()
            self.failed = True
            return None
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps({"argv": list(argv), "log": str(log)}) + "\n")
                                  .encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.close()
            return None
        left = timeout_s - (time.monotonic() - t0)
        started = self._reply(max(1.0, left)) == {"started": True}
        reply = self._reply(max(1.0, timeout_s - (time.monotonic() - t0))) if started else {}
        if not reply or "rc" not in reply:
            self.close()
            if not started:
                return None  # it never began the run: the caller runs it as its own process
            if reply is None:
                raise LoadError(f"vllm bench serve ran past {timeout_s:g} s (its log: {log})")
            raise LoadError(f"vllm bench serve's process ended inside the run (its log: {log})")
        return int(reply["rc"])

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, 9)
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            self.proc, self.ready = None, False


_CLIENT: ContextVar[tuple[tuple[str, ...], ReferenceClient] | None] = ContextVar(
    "reference_client", default=None)


@contextlib.contextmanager
def reference_client(vllm: Sequence[str], log: Path | None = None, start: bool = False
                     ) -> Iterator[bool]:
    """`run_reference`'s runs of this `vllm` (without given CPUs) go to one process of vLLM's
    Python inside the block; yields whether they do (False: not a Python script, so each run
    is its own process as outside the block). `log` gets that process's own errors; `start`
    starts the process at once (its import overlapping, say, a server's boot), else at the
    first run. A block inside another's for the same `vllm` uses the outer block's process."""
    held = _CLIENT.get()
    if held is not None and held[0] == tuple(vllm):
        yield True
        return
    script = console_script(vllm)  # the Python and entry point of a `vllm` pip wrote
    # VLLM_USE_RUST_BENCH: vLLM's CLI execs another binary for `bench serve`, ending the process
    if script is None or os.environ.get("VLLM_USE_RUST_BENCH", "0") not in ("", "0"):
        yield False
        return
    client = ReferenceClient(*script, log=log)
    if start:
        client.start()
    token = _CLIENT.set((tuple(vllm), client))
    try:
        yield True
    finally:
        _CLIENT.reset(token)
        client.close()


def run_reference(vllm: Sequence[str], url: str, model: str, tokenizer: str,
                  profile: ProfileConfig, out: Path, cpus: Sequence[int] | None = None,
                  rt: bool = False, timeout_s: float = 900.0) -> ReferenceResult:
    """Run `vllm bench serve` once (on `cpus` when given, as SCHED_FIFO with `rt` where the
    OS allows it, as autotune's client runs); its log beside `out`. Inside
    `reference_client(vllm)`, without `cpus` or `rt`, the run goes to that client's process."""
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = reference_argv(vllm, url, model, tokenizer, profile, out)
    log = out.with_suffix(".log")
    rc: int | None = None
    held = _CLIENT.get()
    if held is not None and held[0] == tuple(vllm) and not cpus and not rt:
        rc = held[1].run(argv[len(vllm):], log, timeout_s)
    if rc is None:
        with log.open("w") as f, pinned(cpus):
            try:
                rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=timeout_s, check=False,
                                    preexec_fn=realtime if rt else None).returncode
            except subprocess.TimeoutExpired:
                raise LoadError(f"vllm bench serve ran past {timeout_s:g} s (its log: {log})") \
                    from None
    if rc != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise LoadError(f"vllm bench serve exited with {rc}: {' | '.join(tail)}")
    return summarize(json.loads(out.read_text()))
