#!/usr/bin/env python3
"""Is "meets at C, misses at C x 1.1" well-posed for p99 TPOT <= 60 ms on the MoE? On ONE warm
stock `vllm serve` of the Qwen3-30B-A3B-shaped MoE (fp8 + fp8 KV, dummy weights), `vllm bench
serve` (ShareGPT, as lab/reference_check.py runs it) at three Poisson rates x four request
seeds, in a blocked shuffled order (each block runs every rate once), after one unjudged warm-up.
Then, if the deadline leaves room, a second boot with --no-enable-prefix-caching runs the middle
rate with the same seeds. Driven by lab/gpu/p99_spread.sh.

    python3 -m lab.gpu.p99_spread run --res DIR --deadline EPOCH_S
    python3 -m lab.gpu.p99_spread fresh --res DIR --deadline-in 890 --server-pgid PGID
    python3 -m lab.gpu.p99_spread pack --res DIR --out DIR
    python3 -m lab.gpu.p99_spread summarize --results results.jsonl

How it ran on 2026-11-26 (H100): `run` reused each seed at every rate, and with a KV cache of
878,656 tokens a seed's second run found its prompts cached (prefix-cache hit rate 0.71-0.96,
p99 TPOT 9.8-35.4 ms). After 6 measured runs its process group was killed (the server kept
running) and `fresh` ran on the same warm server: 10 runs with seeds not used before on it, then
it stopped that server and booted one with --no-enable-prefix-caching for the middle rate.
`summarize` judges the rates on the runs whose sample was new to the server (`FRESH`).

Per run, in DIR/results.jsonl: rate, seed, vllm bench serve's p99/mean TPOT and TTFT, completed,
the requests with fewer than 16 output tokens, the output lengths of the top 1% by TPOT, p99
TPOT over the requests with >= 16 output tokens, vLLM's prefix-cache hit rate over the run (the
/metrics counters before and after) and the server log's JIT-compilation lines inside the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from autotune.api import ProfileConfig, parse_model
from autotune.api.parts import LogSpan, cache_env, run_reference, sharegpt_json_for_vllm
from lab.gpu.moe_accept import CONFIGS, MOE, verbose_flag

RATES = (40.0, 44.0, 48.4)  # around the boots' C (43.7-53.1) and C x 1.1
SEEDS = (1, 2, 3, 4)
WARMUP_SEED = 1000
SHORT = 16  # output tokens: "a short reply"
MIN_S, MIN_N, NUM_WARMUPS = 20.0, 200, 8  # lab/reference_check.py's defaults
PORT = 8011
VLLM = shutil.which("vllm") or str(Path(sys.executable).parent / "vllm")


def now() -> float:
    return time.time()


def n_prompts(rate: float) -> int:
    return max(MIN_N, math.ceil(MIN_S * rate))  # reference_check.requests_at


def prefix_counters(url: str) -> dict[str, float]:
    """vllm:prefix_cache_{hits,queries}_total summed over their label sets."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {"hits": 0.0, "queries": 0.0}
    for line in text.splitlines():
        for k in out:
            if line.startswith(f"vllm:prefix_cache_{k}_total"):
                out[k] += float(line.rsplit(" ", 1)[1])
    return out


def per_request(doc: dict[str, Any]) -> dict[str, Any]:
    """From a --save-detailed result: output lengths, TTFTs and TPOTs per request (TPOT as
    vllm bench serve defines it: the token gaps' sum over output_len - 1)."""
    outs = [int(x) for x in doc.get("output_lens", [])]
    ttfts = [float(x) for x in doc.get("ttfts", [])]
    itls = [list(x) for x in doc.get("itls", [])]
    tpots = [sum(g) / (n - 1) * 1000 if n > 1 and g else None
             for n, g in zip(outs, itls, strict=False)]
    return {"output_lens": outs, "input_lens": doc.get("input_lens", []),
            "ttft_ms": [round(t * 1000, 2) for t in ttfts],
            "tpot_ms": [None if t is None else round(t, 3) for t in tpots]}


def p99(xs: list[float]) -> float | None:
    if not xs:
        return None
    import numpy as np

    return float(np.percentile(xs, 99))


class Job:
    def __init__(self, res: Path, deadline: float) -> None:
        self.res, self.deadline = res, deadline
        self.runs = res / "runs"
        self.runs.mkdir(parents=True, exist_ok=True)
        self.cache = res / "vllm-cache"
        self.run_s = 60.0  # a run's wall, updated from the first ones

    def left(self) -> float:
        return self.deadline - now()

    def record(self, **row: Any) -> None:
        row["t"] = round(now(), 1)
        with (self.res / "results.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row)[:400], flush=True)

    def serve(self, tag: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], Path, float]:
        log = self.res / f"server-{tag}.log"
        argv = [VLLM, "serve", MOE, "--load-format", "dummy", *CONFIGS["fp8"], *extra,
                "--host", "127.0.0.1", "--port", str(PORT)]
        env = {**os.environ, **cache_env(self.cache), "PYTHONUNBUFFERED": "1"}
        t0 = now()
        with log.open("w") as f:
            srv = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
        boot_s = None
        while now() < self.deadline - 30 and srv.poll() is None:
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"http://127.0.0.1:{PORT}/health", timeout=2) as r:
                if r.status == 200:
                    boot_s = now() - t0
                    break
            time.sleep(1)
        self.record(kind="boot", tag=tag, argv=argv, boot_s=boot_s and round(boot_s, 1),
                    rc=srv.poll())
        return srv, log, -1.0 if boot_s is None else boot_s

    def stop(self, srv: subprocess.Popen[bytes], tag: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(srv.pid, signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()
        self.record(kind="stop", tag=tag)

    def one(self, log: Path, tag: str, i: int | str, rate: float, seed: int) -> bool:
        """One `vllm bench serve` run; False when the deadline leaves no room for it."""
        if self.left() < self.run_s + 20:
            self.record(kind="skipped", tag=tag, i=i, rate=rate, seed=seed,
                        left_s=round(self.left()))
            return False
        url = f"http://127.0.0.1:{PORT}"
        n = n_prompts(rate)
        profile = parse_model(ProfileConfig, {"name": "sharegpt", "num_prompts": n,
                                              "request_rate": rate, "seed": seed,
                                              "warmup": NUM_WARMUPS}, "profile")
        out = self.runs / f"{tag}-{i}-r{rate:g}-s{seed}.json"
        span = LogSpan(log)
        span.mark()
        before = prefix_counters(url)
        t0 = now()
        row: dict[str, Any] = {"kind": "run", "tag": tag, "i": i, "rate": rate, "seed": seed,
                               "num_prompts": n}
        try:
            ref = run_reference([VLLM], url, MOE, MOE, profile, out, timeout_s=self.left() - 5)
        except Exception as e:  # noqa: BLE001 - recorded; the next run may still work
            self.record(**row, error=repr(e)[:500], wall_s=round(now() - t0, 1))
            return True
        wall = now() - t0
        after = prefix_counters(url)
        jit = [e.line[:300] for e in span.events()]
        doc = json.loads(out.read_text())
        req = per_request(doc)
        doc.pop("generated_texts", None)  # random weights: noise, and most of the file
        out.write_text(json.dumps(doc))
        (self.runs / (out.stem + ".req.json")).write_text(json.dumps(req))
        outs, tpots = req["output_lens"], req["tpot_ms"]
        pairs = [(t, o) for t, o in zip(tpots, outs, strict=False) if t is not None]
        pairs.sort(reverse=True)
        top = pairs[:max(1, len(pairs) // 100)]
        dq, dh = after["queries"] - before["queries"], after["hits"] - before["hits"]
        m = ref.metrics
        row |= {k: m.get(k) for k in ("p99_tpot_ms", "mean_tpot_ms", "median_tpot_ms",
                                      "p99_ttft_ms", "mean_ttft_ms", "completed", "failed",
                                      "duration", "request_throughput")}
        row |= {"meets_tpot_60": (m.get("p99_tpot_ms") or 1e9) <= 60,
                "meets_both": (m.get("p99_tpot_ms") or 1e9) <= 60
                and (m.get("p99_ttft_ms") or 1e9) <= 2000
                and int(m.get("completed", 0)) == n,
                "short_lt16": sum(o < SHORT for o in outs),
                "top1pct_tpot_output_lens": [o for _, o in top],
                "top1pct_tpot_ms": [round(t, 1) for t, _ in top],
                "p99_tpot_ms_ge16": p99([t for t, o in pairs if o >= SHORT]),
                "p99_tpot_ms_recomputed": p99([t for t, _ in pairs]),
                "prefix_queries": dq, "prefix_hits": dh,
                "prefix_hit_rate": round(dh / dq, 4) if dq else None,
                "same_read_share": round(ref.same_read_share, 4),
                "burst_requests": ref.burst_requests, "jit_lines": jit,
                "wall_s": round(wall, 1)}
        self.record(**row)
        self.run_s = wall + 5 if i == "warmup" else max(self.run_s, wall + 5)
        return True

    def block(self, tag: str, extra: list[str], plan: list[tuple[float, int]]) -> None:
        srv, log, boot_s = self.serve(tag, extra)
        try:
            if boot_s < 0:
                return
            self.one(log, tag, "warmup", RATES[1], WARMUP_SEED)
            for i, (rate, seed) in enumerate(plan):
                if not self.one(log, tag, i, rate, seed):
                    break
        finally:
            self.stop(srv, tag)
            lines = log.read_text(errors="replace").splitlines()
            self.record(kind="server_log", tag=tag,
                        jit_lines=[x for x in lines if "JIT compilation" in x][:40])

    def main(self) -> None:
        extra = verbose_flag()
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True)
        rng = random.Random(46)
        seeds = {r: rng.sample(SEEDS, len(SEEDS)) for r in RATES}
        plan: list[tuple[float, int]] = []
        for b in range(len(SEEDS)):  # block b: every rate once, in a shuffled order
            rates = rng.sample(RATES, len(RATES))
            plan += [(r, seeds[r][b]) for r in rates]
        plan_off = [(RATES[1], s) for s in rng.sample(SEEDS, len(SEEDS))]
        self.record(kind="start", gpu=q.stdout.strip(), extra_flags=extra, plan=plan,
                    plan_no_prefix_caching=plan_off, left_s=round(self.left()), model=MOE)
        sharegpt_json_for_vllm()  # written once, before the clock of any run
        self.block("pc-on", extra, plan)
        if self.left() > 160 + 5 * self.run_s:
            self.block("pc-off", [*extra, "--no-enable-prefix-caching"], plan_off)
        else:
            self.record(kind="skipped", tag="pc-off", left_s=round(self.left()))
        self.record(kind="end", left_s=round(self.left()))


# what `fresh` ran after `run` was stopped: blocked, shuffled, every seed new to the server
FRESH_PLAN = [(48.4, 31), (40.0, 12), (44.0, 22), (44.0, 23), (48.4, 32), (40.0, 13),
              (40.0, 14), (44.0, 24), (48.4, 33), (48.4, 34)]
FRESH_OFF_PLAN = [(44.0, 22), (44.0, 2), (44.0, 24), (44.0, 23)]
FRESH = {("pc-on", 0), ("pc-on", 1), ("pc-on", 5)}  # run's runs whose seed was new (1, 2, 3)


def fresh(res: Path, deadline: float, pgid: int) -> None:
    """On the server `run` left up (port PORT, its log server-pc-on.log): FRESH_PLAN, then stop
    it (its process group) and boot --no-enable-prefix-caching for FRESH_OFF_PLAN."""
    j = Job(res, deadline)
    log = res / "server-pc-on.log"
    j.record(kind="fresh_start", plan=FRESH_PLAN,
             note="seeds unused so far on this server; driver pgid killed mid-run")
    for i, (r, s) in enumerate(FRESH_PLAN):
        if j.left() < 330 + 50 and i >= 9:
            break
        if not j.one(log, "pc-on-fresh", i, r, s):
            break
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    time.sleep(8)
    j.record(kind="stop", tag="pc-on", left_s=round(j.left()))
    if j.left() > 300:
        j.block("pc-off", [*verbose_flag(), "--no-enable-prefix-caching"], FRESH_OFF_PLAN)
    j.record(kind="end", left_s=round(j.left()))


def spread(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """p99 TPOT over runs: median, min, max, (max - min) / median, the share that meets 60."""
    import statistics

    v = [r["p99_tpot_ms"] for r in rows]
    med = statistics.median(v)
    return {"n": len(v), "p99_tpot_ms_median": round(med, 1),
            "p99_tpot_ms_min": round(min(v), 1), "p99_tpot_ms_max": round(max(v), 1),
            "sample_spread_pct": round((max(v) - min(v)) / med * 100, 1),
            "meets_share": round(sum(x <= 60 for x in v) / len(v), 2),
            "p99_tpot_ms_ge16_median": round(statistics.median(
                r["p99_tpot_ms_ge16"] for r in rows), 1)}


def summarize(path: Path) -> dict[str, Any]:
    """The runs, per rate, and the verdict on the fresh-sample runs with prefix caching on."""
    rows = [r for r in map(json.loads, path.read_text().splitlines())
            if r.get("kind") == "run" and r.get("i") != "warmup" and "error" not in r]
    for r in rows:
        r["fresh_sample"] = r["tag"] != "pc-on" or (r["tag"], r["i"]) in FRESH
    out: dict[str, Any] = {}
    for tag in ("pc-on", "pc-off"):
        for rate in RATES:
            mine = [r for r in rows if r["tag"].startswith(tag) and r["rate"] == rate]
            if not mine:
                continue
            fresh_rows = [r for r in mine if r["fresh_sample"]]
            out.setdefault(tag, {})[f"{rate:g}"] = {
                "runs": [{"seed": r["seed"], "order": f"{r['tag']}#{r['i']}",
                          "fresh_sample": r["fresh_sample"],
                          "p99_tpot_ms": round(r["p99_tpot_ms"], 1),
                          "mean_tpot_ms": round(r["mean_tpot_ms"], 1),
                          "p99_ttft_ms": round(r["p99_ttft_ms"], 1),
                          "mean_ttft_ms": round(r["mean_ttft_ms"], 1),
                          "completed": int(r["completed"]), "num_prompts": r["num_prompts"],
                          "short_lt16": r["short_lt16"],
                          "prefix_hit_rate": r["prefix_hit_rate"],
                          "p99_tpot_ms_ge16": round(r["p99_tpot_ms_ge16"], 1),
                          "top1pct_tpot_output_lens": r["top1pct_tpot_output_lens"],
                          "meets_60": r["p99_tpot_ms"] <= 60,
                          "jit_lines": len(r["jit_lines"])} for r in mine],
                "fresh": spread(fresh_rows) if fresh_rows else None,
                "all": spread(mine)}
    return out


def pack(res: Path, out: Path) -> None:
    """What has landed, small enough to come back (a call returns files of 16 MiB at most; the
    --save-detailed results with every token gap are larger): results.jsonl, the orchestrator's
    log, the per-request records (req.tgz) and each server log's JIT, KV-cache and error lines
    with its last 3 kB."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("results.jsonl", "orchestrator.log"):
        if (res / name).exists():
            (out / name).write_bytes((res / name).read_bytes())
    with tarfile.open(out / "req.tgz", "w:gz") as tar:
        for f in sorted((res / "runs").glob("*.req.json")):
            tar.add(f, arcname=f"runs/{f.name}")
    for log in sorted(res.glob("server-*.log")):
        text = log.read_text(errors="replace")
        keep = [x[:300] for x in text.splitlines()
                if any(k in x for k in ("JIT", "jit_monitor", "KV cache", "concurrency",
                                        "ERROR"))]
        (out / f"{log.stem}.grep.txt").write_text("\n".join(keep) + "\n" + text[-3000:])


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--res", type=Path, required=True)
    r.add_argument("--deadline", type=float, required=True)
    f = sub.add_parser("fresh")
    f.add_argument("--res", type=Path, required=True)
    f.add_argument("--deadline-in", type=float, required=True)
    f.add_argument("--server-pgid", type=int, required=True)
    p = sub.add_parser("pack")
    p.add_argument("--res", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    m = sub.add_parser("summarize")
    m.add_argument("--results", type=Path, required=True)
    a = ap.parse_args()
    if a.cmd == "pack":
        pack(a.res, a.out)
        return 0
    if a.cmd == "summarize":
        print(json.dumps(summarize(a.results), indent=1))
        return 0
    if a.cmd == "fresh":
        fresh(a.res, now() + a.deadline_in, a.server_pgid)
        return 0
    a.res.mkdir(parents=True, exist_ok=True)
    Job(a.res, a.deadline).main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
