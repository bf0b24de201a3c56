#!/usr/bin/env python3
"""Capacity searches of one config on several boots, side by side: each boot's capacity, their
spread ((max - min) / median, as docs/results/warm-server-h100 states it), and, at every load
that two or more boots measured, each boot's verdict, client p99/mean TPOT and p99 TTFT beside
vLLM's own means from /metrics (mean TPOT and TTFT, prefill, queue, time outside the engine
core, the tokens an engine step carried and the wall time a step; a search that predates a field
has None for it), and at each such load whether the engines differed (wall time a step per token a
step) or only the batch they carried (tokens a step). Where boots part, this says at which
load and whether the time went inside vLLM's engine or outside.

    python3 scripts/boot_spread.py BENCH_JSON [BENCH_JSON ...] [--name NAME ...] [--out FILE]

Each BENCH_JSON is what `autotune bench --capacity-axis ... --output FILE` wrote (one boot's
search); --name labels them in order (default: the file names). Exit 2 on a file that is not one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

CLIENT = ("p99_tpot_ms", "mean_tpot_ms", "p99_ttft_ms")
SERVER = ("server_mean_tpot_ms", "server_mean_ttft_ms", "server_mean_prefill_ms",
          "server_mean_queue_ms", "server_mean_outside_engine_ms", "server_mean_step_tokens",
          "server_wall_ms_per_step")


def load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return refuse(f"{path}: not readable as JSON ({e})")
    if not isinstance(doc, dict) or "points" not in doc or "capacity" not in doc:
        return refuse(f"{path}: not a capacity search's JSON (no points/capacity); give the "
                      "--output of `autotune bench --capacity-axis ...`")
    return doc


def refuse(why: str) -> Any:
    print(f"error: {why}", file=sys.stderr)
    raise SystemExit(2)


def spread(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    caps = {name: float(d["capacity"]) for name, d in docs.items() if d.get("capacity")}
    med = statistics.median(caps.values()) if caps else None
    loads: dict[float, dict[str, Any]] = {}
    for name, d in docs.items():
        for p in d["points"]:
            server = p.get("server", {})
            row = {"met": bool(p.get("passed")),
                   **{k: _round(p.get("metrics", {}).get(k)) for k in CLIENT},
                   **{k: _round(server.get(k)) for k in SERVER},
                   "ms_per_step_token": round(server["server_wall_ms_per_step"]
                                              / server["server_mean_step_tokens"], 4)
                   if server.get("server_wall_ms_per_step") and server.get(
                       "server_mean_step_tokens") else None}
            loads.setdefault(round(float(p["load"]), 4), {})[name] = row
    common = {f"{load:g}": by for load, by in sorted(loads.items()) if len(by) > 1}
    return {"capacities": caps, "median": med, "spread_pct": _spread(list(caps.values())),
            "spread_rule": "(max - min) / median * 100", "common_loads": common,
            "engine": {load: e for load, by in common.items() if (e := engine(by))}}


def engine(by: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """At one load, whether the boots' engines differed or only what they carried: each boot's
    wall time a step per token a step (vLLM's iteration histogram; the wall time a step is a
    ceiling, see autotune/server/scrape.py STEP_TOKENS) beside the tokens a step, and the spread
    of each over the boots. Boots on one line (ms per token alike) whose tokens a step differ ran
    one engine at different batches. Empty where fewer than two boots have the figures."""
    per = {name: (r["ms_per_step_token"], r["server_mean_step_tokens"])
           for name, r in by.items() if r.get("ms_per_step_token")}
    if len(per) < 2:
        return {}
    return {"ms_per_step_token": {n: v[0] for n, v in per.items()},
            "step_tokens": {n: v[1] for n, v in per.items()},
            "ms_per_step_token_spread_pct": _spread([v[0] for v in per.values()]),
            "step_tokens_spread_pct": _spread([v[1] for v in per.values()])}


def _spread(xs: list[float]) -> float | None:
    """(max - min) / median, in percent (None for no values)."""
    med = statistics.median(xs) if xs else None
    return round((max(xs) - min(xs)) / med * 100, 1) if med else None


def _round(x: Any) -> float | None:
    return round(float(x), 1) if isinstance(x, int | float) else None


def lines(doc: dict[str, Any]) -> list[str]:
    out = [f"capacities: {', '.join(f'{n} {c:g}' for n, c in doc['capacities'].items())}; "
           f"spread {doc['spread_pct']}% of the median {doc['median']:g}"]
    for load, by in doc["common_loads"].items():
        out.append(f"at {load}:")
        for name, r in by.items():
            out.append(f"  {name}: {'met' if r['met'] else 'missed'}, p99 TPOT "
                       f"{r['p99_tpot_ms']} ms, mean TPOT {r['mean_tpot_ms']} (vLLM's own "
                       f"{r['server_mean_tpot_ms']}), p99 TTFT {r['p99_ttft_ms']} (vLLM's own mean "
                       f"{r['server_mean_ttft_ms']}), vLLM's prefill "
                       f"{r['server_mean_prefill_ms']}, queue "
                       f"{r['server_mean_queue_ms']}, outside the engine "
                       f"{r['server_mean_outside_engine_ms']}, {r['server_mean_step_tokens']} "
                       f"tokens a step in {r['server_wall_ms_per_step']} ms")
    for load, e in doc["engine"].items():
        out.append(f"engine at {load}: wall ms a step per token a step spread "
                   f"{e['ms_per_step_token_spread_pct']}%, tokens a step spread "
                   f"{e['step_tokens_spread_pct']}%")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--name", action="append", default=[])
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.name and len(a.name) != len(a.files):
        ap.error(f"--name: {len(a.name)} names for {len(a.files)} files; give one per file")
    names = a.name or [f.name for f in a.files]
    if len(set(names)) != len(names):
        ap.error("--name: the labels must differ")
    doc = spread({n: load(f) for n, f in zip(names, a.files, strict=True)})
    print("\n".join(lines(doc)))
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
