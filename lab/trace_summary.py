#!/usr/bin/env python3
"""docs/results/trace/summary.json from the runs of issue 69 (raw files outside the repo):

    python -m lab.trace_summary --config STUDY.yaml --export export.out \\
        --verify verify.json --reference reference.json --bad bad.json \\
        [--earlier-config EARLIER.yaml] --out summary.json

`cpu_study` from the study's storage (its summary, as every surface reads it) and each
trial's capacity.json; `replay_timing` from every load point our client ran against the
trace's schedule (the study's and the reference comparison's); `reference_agreement` from
lab/trace_reference.py and `export --verify`; `bad_trace_inputs` from
lab/trace_bad_inputs.py. `--earlier-config`: a study of the same trace run before a
change to the client, kept beside it (its capacities and send lags) to show what the change did.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from autotune.api import ProfileConfig, load_study_config, study_summary
from autotune.api.parts import CapacityResult, capacity_line, serve_line

SCHEMA = {
    "timestamp": "required: the arrival, a number (seconds; profile.time_unit: ms for "
                 "milliseconds) or an ISO-8601 date-time; absolute or from the start, the first "
                 "becomes 0; out-of-order arrivals are sorted and counted",
    "input_length": "the prompt's tokens (this or prompt)",
    "prompt": "the prompt's text, counted with the model's tokenizer (this or input_length)",
    "output_length": "required: the tokens generated (ignore_eos runs to it)",
    "hash_ids": "optional, with input_length: ceil(input_length / block_size) block ids; "
                "requests sharing an id share that block's tokens",
    "files": "JSONL (one object a line) or CSV with a header (hash_ids space-separated); "
             "BurstGPT's CSV as it is",
    "profile": {k: ProfileConfig.model_fields[k].description
                for k in ("path", "time_unit", "block_size", "speedup")},
}


def quantiles(xs: list[float]) -> dict[str, float | int]:
    xs = sorted(xs)
    return {"n": len(xs), "median": statistics.median(xs), "max": xs[-1]}


def vllm_send_lags(runs_dir: Path) -> list[float]:
    """vllm bench serve's p99 send lag (ms) of each of its runs: each request's start time
    (its `start_times`) after the first one's, against the window's timestamp divided by the
    speed-up (its own zero is not saved: measured from its first request, sent at 0)."""
    out = []
    for f in sorted(runs_dir.glob("ref-x*.json")):
        speedup, k = f.stem.removeprefix("ref-x").rsplit("-", 1)
        window = runs_dir / f"w-x{speedup}-{k}.jsonl"
        rows = [json.loads(x) for x in window.read_text().splitlines()]
        starts = json.loads(f.read_text())["start_times"]
        lags = sorted((t - starts[0] - r["timestamp"] / float(speedup)) * 1000
                      for t, r in zip(starts, rows, strict=True))
        out.append(lags[min(len(lags) - 1, int(0.99 * len(lags)))])
    return out


def study(config: Path) -> tuple[dict[str, Any], list[dict[str, float]]]:
    cfg = load_study_config(config)
    s = study_summary(cfg)
    trials, points = [], []
    for r in s.records:
        row: dict[str, Any] = {"trial": r.number, "state": r.label(), "baseline": r.baseline,
                               "flags": r.flags}
        f = cfg.study_dir() / f"trial-{r.number:04d}" / "capacity.json"
        if r.measured and f.is_file():
            res = CapacityResult.from_json(json.loads(f.read_text()))
            row |= {"capacity_speedup": res.capacity, "fail": res.fail,
                    "stopped": res.stopped, "capacity_req_s": r.metrics.get("capacity_req_s"),
                    "mean_tpot_ms": r.metrics.get("mean_tpot_ms"),
                    "points": [{"speedup": p.load, "passed": p.passed,
                                "window_requests": p.server.get("window_requests"),
                                "arrivals_s": p.server.get("arrivals_s"),
                                "request_throughput": p.metrics["request_throughput"],
                                "p99_ttft_ms": p.metrics["p99_ttft_ms"],
                                "p99_tpot_ms": p.metrics["p99_tpot_ms"],
                                "p99_send_lag_ms": p.metrics["p99_send_lag_ms"],
                                "late_read_share": p.metrics["late_read_share"],
                                "prefix_cache_hit_rate": p.server.get(
                                    "server_prefix_cache_hit_rate"),
                                "flag": p.flag} for p in res.points]}
            points += [p.metrics | {"trial": float(r.number)} for p in res.points]
        elif r.cause:
            row["cause"] = r.cause
        trials.append(row)
    per_config = {}
    for r in s.records:
        if r.measured and r.facts.repeat_of is None:
            boots = s.boots.get(r.number, {}).get("capacity") or [r.values.get("capacity")]
            per_config[str(r.number)] = {
                "flags": r.flags, "baseline": r.baseline, "boots": boots,
                "median": statistics.median(b for b in boots if b is not None),
                "first_pass": r.values.get("capacity"), "bound_only": r.bound_only}
    pick = s.picked
    doc = {"config": str(config), "model": cfg.server.model, "slos": [x.text() for x in cfg.slos],
           "trace": str(cfg.profile.path), "capacity": cfg.capacity.model_dump()
           if cfg.capacity else None, "trials": trials,
           "capacity_speedup": per_config,
           "capacity_speedup_by_trial": {str(t["trial"]): t.get("capacity_speedup")
                                         for t in trials},
           "pick": None if pick is None else {
               "trial": pick.number, "headline": s.headline(),
               "says": capacity_line(cfg, pick), "serve_command": serve_line(cfg, pick)}}
    return doc, points


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--config", type=Path, required=True)
    a.add_argument("--export", type=Path, help="`autotune export`'s output")
    a.add_argument("--verify", type=Path, help="export --verify's verify.json")
    a.add_argument("--reference", type=Path, help="lab/trace_reference.py's JSON")
    a.add_argument("--bad", type=Path, help="lab/trace_bad_inputs.py's JSON")
    a.add_argument("--earlier-config", type=Path, help="the same study before a client change")
    a.add_argument("--earlier-note", default="", help="what differed in that run")
    a.add_argument("--code", default="", help="the commit the study ran")
    a.add_argument("--reference-note", default="", help="what to know of the reference runs")
    a.add_argument("--raw", default="/work/raw-69", help="where the raw files are kept")
    a.add_argument("--out", type=Path, required=True)
    args = a.parse_args()
    cpu, points = study(args.config)
    cpu["code"] = args.code or None
    if args.export is not None:
        text = args.export.read_text()
        cpu["export_bench_command"] = next((ln.strip() for ln in text.splitlines()
                                            if "bench serve" in ln), None)
    ref = json.loads(args.reference.read_text()) if args.reference else None
    ours = [r["ours"] for d in (ref or {}).get("by_speedup", {}).values() for r in d["runs"]]
    timing = {"study_points": {k: quantiles([p[k] for p in points])
                               for k in ("p99_send_lag_ms", "late_read_share")},
              "reference_runs": {k: quantiles([r[k] for r in ours])
                                 for k in ("p99_send_lag_ms", "late_read_share")} if ours
              else None,
              "vllm_bench_serve_runs": {"p99_send_lag_ms": quantiles(vllm_send_lags(
                  args.reference.parent / (args.reference.stem + "-runs")))}
              if args.reference else None}
    timing["p99_send_lag_ms"] = max(p["p99_send_lag_ms"] for p in points)
    timing["late_read_share"] = max(p["late_read_share"] for p in points)
    agreement: dict[str, Any] = {"can_replay": True, "how": "vllm bench serve --dataset-name "
                                 "timed_trace on the same window (lab/trace_reference.py)"}
    if ref is not None:
        agreement["note"] = args.reference_note or None
        agreement["by_speedup"] = {s: {"median": d["median"], "ours_vs_vllm": d["ours_vs_vllm"],
                                       "pairs": len(d["runs"])}
                                   for s, d in ref["by_speedup"].items()}
        agreement["setup"] = {k: ref[k] for k in ("serve_argv", "min_duration_s", "requests",
                                                  "warmup", "pairs", "ours_warmup", "trace")}
    if args.verify is not None:
        v = json.loads(args.verify.read_text())
        agreement["export_verify"] = {
            "capacity": v["capacity"], "axis": v["axis"], "verdicts_agree": v["verdicts_agree"],
            "rates": [{k: c[k] for k in ("label", "rate", "verdict", "misses", "metrics",
                                         "samples_n")} for c in v["rates"]]}
    bad = json.loads(args.bad.read_text()) if args.bad else []
    earlier = None
    if args.earlier_config is not None:
        e, e_points = study(args.earlier_config)
        earlier = {"note": args.earlier_note, "config": e["config"],
                   "capacity_speedup": e["capacity_speedup"], "pick": e["pick"],
                   "replay_timing": {k: quantiles([p[k] for p in e_points])
                                     for k in ("p99_send_lag_ms", "late_read_share")},
                   "points_over_50ms_send_lag": sum(p["p99_send_lag_ms"] > 50
                                                    for p in e_points)}
    timing["points_over_50ms_send_lag"] = sum(p["p99_send_lag_ms"] > 50 for p in points)
    doc = {"issue": 69, "raw": args.raw, "schema": SCHEMA, "cpu_study": cpu,
           "cpu_study_earlier": earlier, "replay_timing": timing, "reference_agreement": agreement,
           "bad_trace_inputs": [{k: b[k] for k in ("case", "exit_code", "error", "error_lines",
                                                  "booted")} for b in bad]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
