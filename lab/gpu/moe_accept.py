#!/usr/bin/env python3
"""Issue 46, steps 2, 3 and 5 on the H100 with the Qwen3-30B-A3B-shaped MoE (fp8 + fp8 KV, dummy
weights): the capacity search as the product runs it, on fresh boots, then the reference check and
the first point repeated on a warm stock server. Driven by lab/gpu/moe_accept.sh.

    python3 -m lab.gpu.moe_accept run --res DIR --deadline EPOCH_S
    python3 -m lab.gpu.moe_accept boot --res DIR --k 3 --start 47.8125 --deadline-in 400
    python3 -m lab.gpu.moe_accept stock --res DIR --capacity 43.65625 --warmup-s 10 \
        --tag -boot3 --deadline-in 230
    python3 -m lab.gpu.moe_accept pack --res DIR --out DIR

run, in this order, each step only if the deadline leaves it room:
  boot 1, boot 2   `autotune bench --capacity-axis rate` (its own launch: a stock `vllm serve`),
                   ShareGPT, p99 TTFT <= 2 s, p99 TPOT <= 60 ms, tolerance 0.1, start 24,
                   >= 20 s of arrivals a point; one shared cache root (a study's trials share one)
  stock            `vllm serve` of the same config started here; lab/reference_check.py at the
                   last capacity found and at 1.1x; then the search's first point (same load, same
                   seed) again with `autotune bench --url`
  boot 3           the search again, for a third capacity
With ACC_REF (config:start pairs, e.g. "fp8:56,pick:64") `run` boots a stock server per config,
runs the search on it with --url and the reference check at what it found; ACC_CHECK and ACC_AB
(below) a reference check alone and a client A/B.
With ACC_PLAN (config:start pairs, e.g. "tp1-dp2:128,tp2-dp1:80" with ACC_MODEL=dense on two
GPUs) `run` is one capacity search per config instead, each from its own start, no stock step.
`boot` and `stock` run one of those steps alone. On 2026-11-26 `run` ended after the stock step
(boot 3 did not fit its rule); boot 3 then ran as `boot` from the incumbent's capacity (47.8125,
as a study's later trial starts), and a second stock server checked boot 3's capacity (`stock`
with --warmup-s 10 and no repeat; that call was a shell line doing the same, port 8012).
Every server runs with --jit-monitor-verbose where this vLLM has it: vLLM's JIT monitor warns
once per kernel name otherwise, so a measured point without a line would prove nothing.
Each step's facts land in DIR/results.jsonl as it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]  # the checkout copy it runs from
# the model (ACC_MODEL: "moe", the default, or "dense", the Qwen3-8B-shaped dummy that
# lab/gpu/prepare.sh's install lays in /root/w, or a path) and the config every boot serves
# (ACC_CONFIG: fp8, the default, or defaults)
MODELS = {"moe": str(HERE / "lab" / "gpu" / "models" / "qwen3-30b-a3b-dummy"),
          "dense": "/root/w/qwen3-8b-dummy"}
MOE = MODELS.get(os.environ.get("ACC_MODEL", "moe"), os.environ.get("ACC_MODEL", ""))
CONFIGS = {"fp8": ["--quantization", "fp8", "--kv-cache-dtype", "fp8"], "defaults": []}
# parallel layouts on two GPUs of one host (ACC_PLAN, below), each with an fp8 KV cache as
# docs/results/multi-gpu-h200x2 compared them, and that run's all-reduce settings: vLLM 0.26.0's
# all-reduce + RMSNorm fusion picks FlashInfer's NVLink-multicast workspace, which these hosts
# keep off, so the fusion, vLLM's custom all-reduce and symmetric memory are off in every layout
ALLREDUCE = ["--disable-custom-all-reduce",
             "--compilation-config", '{"pass_config": {"fuse_allreduce_rms": false}}']
LAYOUT_ENV = {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0", "VLLM_FLASHINFER_ALLREDUCE_BACKEND": "trtllm"}
CONFIGS |= {"tp1-dp2": ["--data-parallel-size", "2", "--kv-cache-dtype", "fp8", *ALLREDUCE],
            "tp2-dp1": ["--tensor-parallel-size", "2", "--kv-cache-dtype", "fp8", *ALLREDUCE],
            "tp1-dp1": ["--kv-cache-dtype", "fp8", *ALLREDUCE],
            # tensor parallel with the two API servers data parallel 2 gets by default: the
            # confound of the 2026-11-27 run (tp_vs_dp_h100x2 confound_api_servers)
            "tp2-dp1-api2": ["--tensor-parallel-size", "2", "--api-server-count", "2",
                             "--kv-cache-dtype", "fp8", *ALLREDUCE],
            # the dense study's pick (docs/results/capacity-h100 study_pick_trial18)
            "pick": ["--quantization", "fp8", "--kv-cache-dtype", "fp8",
                     "--max-num-batched-tokens", "4096", "--api-server-count", "4"]}
# ACC_PLAN="tp1-dp2:128,tp2-dp1:80": one capacity search per config, each from its own start,
# in this order, each while the deadline leaves a boot room (no stock step): tp_vs_dp_h100x2.
# One-GPU configs too ("defaults:64,fp8:51"): moe_accept.sh's ACC_LANES runs one such plan per
# GPU of a host at once, each lane on its own GPU (CUDA_VISIBLE_DEVICES) and cache root


def pairs(var: str) -> list[tuple[str, float]]:
    """"a:1,b:2" in the environment variable var -> [("a", 1.0), ("b", 2.0)]; a config name
    that is not in CONFIGS stops the run before any boot."""
    out = [(c, float(s)) for c, s in (x.split(":") for x in os.environ.get(var, "").split(",")
                                      if x)]
    if bad := [c for c, _ in out if c not in CONFIGS]:
        sys.exit(f"{var}: unknown config {', '.join(bad)}; known: {', '.join(sorted(CONFIGS))}")
    return out


PLAN = pairs("ACC_PLAN")
# ACC_REF="fp8:56,pick:64": per config one stock `vllm serve`, the product's capacity search on
# it (`autotune bench --url`, from its start), then the reference check at the capacity it found
# (reference_check in the summary: one boot a config instead of two)
REF_PLAN = pairs("ACC_REF")
# ACC_CHECK="pick:79.9": the reference check alone at a capacity found before (no search), and
# ACC_AB="fp8:56": on a stock server of the config, lab/fidelity.py (autotune's client
# against `vllm bench serve`, interleaved in a shuffled order, fresh seeds, AB_RUNS each) at
# that rate; ACC_CHECK's run first, then ACC_AB's
CHECKS, ABS = pairs("ACC_CHECK"), pairs("ACC_AB")
AB_RUNS = int(os.environ.get("AB_RUNS", "4"))
CONFIG = os.environ.get("ACC_CONFIG", "fp8")
SLOS = ["p99_ttft_ms<=2000", "p99_tpot_ms<=60"]
# where every boot's search starts (MOE_START; 24 in the first run of 2026-11-26; every boot there
# met 42.5, so the two points below it only cost time)
START = float(os.environ.get("MOE_START", "24"))
# runs of the search's first point repeated on the stock server (MOE_REPEATS; 0 skips them,
# at most 2 run)
REPEATS = int(os.environ.get("MOE_REPEATS", "2"))
JIT = "JIT compilation during inference"
REF_SAMPLES = int(os.environ.get("REF_SAMPLES", "4"))
# stock boot on warm caches + 15 s warm-up + two rates x REF_SAMPLES runs of ~30 s + the repeat
STOCK_NEED_S = 240 + 60 * REF_SAMPLES
PY = sys.executable


def now() -> float:
    return time.time()


class Run:
    def __init__(self, res: Path, deadline: float) -> None:
        self.res, self.deadline = res, deadline
        self.work = res / "work"  # --workdir of every bench: one cache root, work/vllm-cache
        self.extra: list[str] = []

    def left(self) -> float:
        return self.deadline - now()

    def record(self, **row: Any) -> None:
        row["t"] = round(now(), 1)
        with (self.res / "results.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row)[:600], flush=True)

    def env(self, config: str | None = None) -> dict[str, str]:
        """The environment of every child; a two-GPU layout's all-reduce settings where the
        config is one (whichever mode runs it)."""
        path = os.pathsep.join(x for x in (str(HERE), os.environ.get("PYTHONPATH")) if x)
        layout = config is not None and ALLREDUCE[0] in CONFIGS.get(config, [])
        return {**os.environ, **(LAYOUT_ENV if layout else {}), "PYTHONPATH": path,
                "PYTHONUNBUFFERED": "1"}

    def call(self, argv: list[str], out: Path, limit: float, config: str | None = None
             ) -> tuple[int, float]:
        t0 = now()
        with out.open("w") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=HERE,
                                 env=self.env(config), start_new_session=True)
            try:
                rc = p.wait(timeout=max(1.0, limit))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                rc = -999
        return rc, now() - t0

    def gpu_free(self) -> int | None:
        """Wait (up to 60 s) until this run's GPUs hold under 2 GiB each: the last server is
        gone. A lane's GPUs only (CUDA_VISIBLE_DEVICES, counted in PCI order as nvidia-smi
        counts them: moe_accept.sh sets CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
        used = None
        ids = os.environ.get("CUDA_VISIBLE_DEVICES")
        only = ["-i", ids] if ids else []
        for _ in range(30):
            q = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", *only,
                                "--format=csv,noheader,nounits"], capture_output=True, text=True)
            mib = [int(x) for x in q.stdout.split()] if q.returncode == 0 else []
            used = max(mib) if mib else None
            if used is None or used < 2048:
                break
            time.sleep(2)
        return used

    def boot(self, k: int, config: str, url: str | None = None, start: float | None = None,
             reserve: float = 15, log: Path | None = None) -> dict[str, Any] | None:
        """One capacity search by the product: on a server it boots, or (`url`) on a running
        one whose output goes to `log` (then the search is named url{k}, and it reads the log
        for kernel compilations: before 2026-11-27 it did not, and its points' jit_events 0
        meant unwatched); it ends `reserve` s before the deadline."""
        name = f"{'url' if url else 'boot'}{k}-{config}"
        self.record(kind="begin", step=name, left_s=round(self.left()))
        used = self.gpu_free()
        argv = [PY, "-m", "autotune", "bench", "--model", MOE, "--profile", "sharegpt",
                "--client-processes", "auto", "--capacity-axis", "rate", "--low", "4",
                "--start", f"{start or START:g}", "--high", "512", "--tolerance", "0.1",
                "--min-duration-s", "20", "--point-warmup", "8",
                *(x for s in SLOS for x in ("--slo", s)), "--boot-timeout", "900",
                "--workdir", str(self.work), "--output", str(self.res / f"{name}.json"),
                *(["--url", url, *(["--server-log", str(log)] if log else [])] if url else
                  ["--", "--load-format", "dummy", *CONFIGS[config], *self.extra])]
        rc, wall = self.call(argv, self.res / f"{name}.out", self.left() - reserve, config)
        row: dict[str, Any] = {"kind": "boot", "step": name, "config": config, "rc": rc,
                               "wall_s": round(wall, 1), "gpu_used_mib_before": used}
        path = self.res / f"{name}.json"
        doc = json.loads(path.read_text()) if rc == 0 and path.exists() else None
        if doc is not None:
            log = Path(doc.get("log_path") or "-")
            lines = log.read_text(errors="replace").splitlines() if log.exists() else []
            row |= {"capacity": doc.get("capacity"), "timings": doc.get("timings"),
                    "launch": doc.get("launch"), "argv": doc.get("argv"),
                    "log_path": str(log), "jit_lines": [x for x in lines if JIT in x][:60],
                    "points": [{"load": p.get("load"), "passed": p.get("passed"),
                                "runs": p.get("runs"), "seconds": round(p.get("seconds", 0), 1),
                                "settled_s": p.get("settled_s"),
                                **{k: p.get("metrics", {}).get(k) for k in (
                                    "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                                    "p99_tpot_ms", "request_throughput", "completed")},
                                **{k: v for k, v in p.get("server", {}).items()
                                   if k.startswith(("jit", "warm", "samples", "server_mean"))}}
                               for p in doc.get("points", [])]}
        self.record(**row)
        return doc

    def stock(self, config: str, capacity: float, first: dict[str, Any] | None,
              warmup_s: float = 15, tag: str = "", search_k: int = 0, ab: bool = False
              ) -> None:
        """A stock `vllm serve` of the config: the reference check at `capacity`, then the
        search's first point again. With `search_k` the product's search runs on the server
        first (named url{search_k}, from `capacity`) and the check is at what it found."""
        self.record(kind="begin", step=f"stock-{config}{tag}", left_s=round(self.left()))
        used = self.gpu_free()
        log = self.res / f"stock-{config}{tag}.log"
        port = 8011
        argv = [str(Path(PY).parent / "vllm") if (Path(PY).parent / "vllm").exists() else "vllm",
                "serve", MOE, "--load-format", "dummy", *CONFIGS[config], *self.extra,
                "--host", "127.0.0.1", "--port", str(port)]
        from autotune.api.parts import cache_env
        env = {**self.env(config), **cache_env(self.work / "vllm-cache")}
        t0 = now()
        with log.open("w") as f:
            srv = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            boot_s = None
            while now() < self.deadline - 60 and srv.poll() is None:
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2) as r:
                        if r.status == 200:
                            boot_s = now() - t0
                            break
                except OSError:
                    pass
                time.sleep(1)
            self.record(kind="stock_boot", config=config, argv=argv, boot_s=boot_s and
                        round(boot_s, 1), rc=srv.poll(), gpu_used_mib_before=used)
            if boot_s is None:
                return
            if ab:  # the two clients at `capacity`, then nothing else on this server
                rc, wall = self.call([PY, "-m", "lab.fidelity", "--url", url, "--model", MOE,
                                      "--rates", f"{capacity:g}", "--runs", str(AB_RUNS),
                                      "--fresh-seeds", "--warm-s", "30", "--span-s", "20",
                                      *(x for s in SLOS for x in ("--slo", s)),
                                      "--out", str(self.res / f"ab-{config}{tag}")],
                                     self.res / f"ab-{config}{tag}.out", self.left() - 30)
                self.record(kind="client_ab", config=config, rate=capacity, rc=rc,
                            wall_s=round(wall, 1))
                return
            if search_k:
                # the search leaves the reference check its time (it is the point of ACC_REF)
                doc = self.boot(search_k, config, url=url, start=capacity,
                                reserve=60 * REF_SAMPLES + 105, log=log)
                if not doc or not doc.get("capacity") or self.left() < 60 * REF_SAMPLES + 60:
                    self.record(kind="skipped", step=f"reference-{config}{tag}",
                                left_s=round(self.left()))
                    return
                capacity = float(doc["capacity"])
            ref = self.res / f"reference-{config}{tag}.json"
            rc, wall = self.call([PY, "-m", "lab.reference_check", "--model", MOE,
                                  "--capacity", f"{capacity:g}", "--tolerance", "0.1",
                                  *(x for s in SLOS for x in ("--slo", s)), "--url", url,
                                  "--server-log", str(log), "--warmup-s", f"{warmup_s:g}",
                                  "--vllm", argv[0], "--out", str(ref),
                                  # each rate judged on the median of N fresh samples (one run
                                  # of a p99 is no verdict: verdict_wellposed in the summary)
                                  "--samples", str(REF_SAMPLES)],
                                 self.res / f"reference-{config}{tag}.out", self.left() - 45)
            self.record(kind="reference", config=config, rc=rc, wall_s=round(wall, 1),
                        doc=json.loads(ref.read_text()) if ref.exists() else None)
            # the product's search on this stock server too (MOE_URL_SEARCH=1): a second
            # capacity on the machine without a boot's cost
            if os.environ.get("MOE_URL_SEARCH") == "1" and self.left() > 300 and not search_k:
                self.boot(2, config, url=url, start=capacity, log=log)  # as a later trial
            if first is None or REPEATS == 0 or self.left() < 75:
                return
            load = float(first["load"])
            from autotune.api.parts import point_seed
            n, seed = max(200, math.ceil(20 * load)), point_seed(0, load)
            for i in range(min(REPEATS, 2 if self.left() > 150 else 1)):
                off = log.stat().st_size
                out = self.res / f"repeat-{config}-{i}.json"
                rc, wall = self.call(
                    [PY, "-m", "autotune", "bench", "--url", url, "--model", MOE,
                     "--profile", "sharegpt", "--client-processes", "auto", "--request-rate",
                     f"{load:g}", "--seed", str(seed), "--num-prompts", str(n), "--warmup", "8",
                     "--workdir", str(self.res / "repeat"), "--output", str(out)],
                    self.res / f"repeat-{config}-{i}.out", self.left() - 30)
                with log.open("rb") as f:
                    f.seek(off)
                    jit = [x for x in f.read().decode(errors="replace").splitlines() if JIT in x]
                d = json.loads(out.read_text()) if rc == 0 and out.exists() else {}
                m = d.get("metrics", {})
                self.record(kind="repeat", config=config, i=i, rc=rc, wall_s=round(wall, 1),
                            load=load, seed=seed, num_prompts=n, jit_lines=jit,
                            metrics={k: m.get(k) for k in (
                                "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
                                "request_throughput", "completed")},
                            first={k: first.get(k) for k in (
                                "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
                                "request_throughput", "completed")})
                if self.left() < 75:
                    break
        finally:
            t_stop = now()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(srv.pid, signal.SIGTERM)
            try:
                srv.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(srv.pid, signal.SIGKILL)
                srv.wait()
            self.record(kind="stock_stop", config=config, stop_s=round(now() - t_stop, 1),
                        jit_lines=[x for x in log.read_text(errors="replace").splitlines()
                                   if JIT in x][:60])

    def main(self) -> None:
        self.extra = verbose_flag()
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True)
        self.record(kind="start", gpu=q.stdout.strip(), extra_flags=self.extra,
                    left_s=round(self.left()), model=MOE)
        caps: list[float] = []
        firsts: list[dict[str, Any]] = []
        walls: list[float] = []

        def one(k: int) -> None:
            t0 = now()
            try:
                doc = self.boot(k, CONFIG)
            except Exception as e:  # noqa: BLE001 - recorded; the next step may still run
                self.record(kind="error", step=f"boot{k}", error=repr(e))
                doc = None
            walls.append(now() - t0)
            if doc is not None and doc.get("points"):
                caps.append(float(doc["capacity"]))
                p0 = doc["points"][0]
                firsts.append({"load": p0["load"], **p0["metrics"]})

        if CHECKS or ABS:
            steps = [(f"check{k}", c, x, False, STOCK_NEED_S) for k, (c, x) in enumerate(CHECKS, 1)]
            steps += [(f"ab{k}", c, x, True, 300 + 60 * AB_RUNS) for k, (c, x) in enumerate(ABS, 1)]
            for tag, config, load, ab, need in steps:
                if self.left() < need:
                    self.record(kind="skipped", step=f"{tag}-{config}", left_s=round(self.left()))
                    continue
                try:
                    self.stock(config, load, None, tag=f"-{tag}", ab=ab)
                except Exception as e:  # noqa: BLE001 - recorded; the next step may still run
                    self.record(kind="error", step=f"{tag}-{config}", error=repr(e))
            self.record(kind="end", left_s=round(self.left()))
            return
        if REF_PLAN:  # per config: a stock server, the product's search on it, the reference
            for k, (config, start) in enumerate(REF_PLAN, 1):
                if self.left() < 240 + 200 + 60 * REF_SAMPLES:  # a boot, a search, the check
                    self.record(kind="skipped", step=f"ref{k}-{config}", left_s=round(self.left()))
                    continue
                try:
                    self.stock(config, start, None, tag=f"-ref{k}", search_k=k)
                except Exception as e:  # noqa: BLE001 - recorded; the next config may still run
                    self.record(kind="error", step=f"ref{k}", error=repr(e))
            self.record(kind="end", left_s=round(self.left()))
            return
        if PLAN:  # one search per layout, from its own start
            for k, (config, start) in enumerate(PLAN, 1):
                if self.left() < 420:  # a cold boot and two points
                    self.record(kind="skipped", step=f"boot{k}-{config}", left_s=round(self.left()))
                    continue
                try:
                    self.boot(k, config, start=start)
                except Exception as e:  # noqa: BLE001 - recorded; the next layout may still run
                    self.record(kind="error", step=f"boot{k}", error=repr(e))
            self.record(kind="end", left_s=round(self.left()))
            return
        one(1)
        if os.environ.get("MOE_BOOTS_ONLY") == "1":  # the spread over boots alone: no stock step
            for k in (2, 3):
                if self.left() > min(walls[-1], 600) + 20:
                    one(k)
            self.record(kind="end", capacities=caps, left_s=round(self.left()))
            return
        # a warm boot: boot 1 compiled everything cold (torch.compile, Triton, FlashInfer)
        if self.left() > max(walls[-1] - 180, 250) + STOCK_NEED_S:
            one(2)
        if caps and self.left() > STOCK_NEED_S - 60:
            try:
                self.stock(CONFIG, caps[-1], firsts[-1] if firsts else None)
            except Exception as e:  # noqa: BLE001 - recorded; boot 3 may still run
                self.record(kind="error", step="stock", error=repr(e))
        if self.left() > (walls[-1] if len(walls) > 1 else 300) + 20:
            one(3)
        if self.left() > 700 and CONFIG != "defaults":
            self.boot(4, "defaults")
        self.record(kind="end", capacities=caps, left_s=round(self.left()))


def verbose_flag() -> list[str]:
    """--jit-monitor-verbose where this vLLM's arg parser has it (read, not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    src = Path(spec.origin or "").parent / "engine" / "arg_utils.py" if spec else Path("-")
    return ["--jit-monitor-verbose"] if src.exists() and \
        "--jit-monitor-verbose" in src.read_text() else []


def pack(res: Path, out: Path) -> None:
    """What has landed: results.jsonl and the console outputs as they are, the rest (bench
    results, per-point records, server logs, the reference's files) in one tarball."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("results.jsonl", "orchestrator.log"):
        if (res / name).exists():
            (out / name).write_bytes((res / name).read_bytes())

    def keep(t: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if "vllm-cache" in t.name or t.name.endswith(".sqlite") else t

    with tarfile.open(out / "acc.tgz", "w:gz") as tar:
        tar.add(res, arcname="acc", filter=keep)


def main() -> int:
    global START
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--res", type=Path, required=True)
    r.add_argument("--deadline", type=float, required=True)
    b = sub.add_parser("boot")
    b.add_argument("--res", type=Path, required=True)
    b.add_argument("--k", type=int, required=True)
    b.add_argument("--start", type=float, default=START)
    b.add_argument("--config", choices=sorted(CONFIGS), default="fp8")
    b.add_argument("--deadline-in", type=float, required=True)
    s = sub.add_parser("stock")
    s.add_argument("--res", type=Path, required=True)
    s.add_argument("--capacity", type=float, required=True)
    s.add_argument("--config", choices=sorted(CONFIGS), default="fp8")
    s.add_argument("--warmup-s", type=float, default=15)
    s.add_argument("--tag", default="")
    s.add_argument("--deadline-in", type=float, required=True)
    p = sub.add_parser("pack")
    p.add_argument("--res", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if a.cmd == "pack":
        pack(a.res, a.out)
        return 0
    a.res.mkdir(parents=True, exist_ok=True)
    if a.cmd == "run":
        Run(a.res, a.deadline).main()
        return 0
    job = Run(a.res, now() + a.deadline_in)
    job.extra = verbose_flag()
    if a.cmd == "boot":
        START = a.start
        job.boot(a.k, a.config)
    else:
        job.stock(a.config, a.capacity, None, a.warmup_s, a.tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
