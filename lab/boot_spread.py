#!/usr/bin/env python3
"""Capacity searches of one config on several boots, side by side: each boot's capacity, their
spread ((max - min) / median, as docs/results/warm-server-h100 states it), and, at every load
that two or more boots measured, each boot's verdict, client p99/mean TPOT and p99 TTFT beside
vLLM's own means from /metrics (mean TPOT and TTFT, prefill, queue, time outside the engine
core, the tokens an engine step carried and the wall time a step; a search that predates a field
has None for it); and whether a boot's engine may have been slower: each boot's points set
against the curve of vLLM's step time over the tokens a step that the other boots' points make.
Where boots part, this says at which load and whether the time went inside vLLM's engine or
outside.

    python3 -m lab.boot_spread BENCH_JSON [BENCH_JSON ...] [--name NAME ...] [--out FILE]

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
            row = {"met": bool(p.get("passed")),
                   **{k: _round(p.get("metrics", {}).get(k)) for k in CLIENT},
                   **{k: _round(p.get("server", {}).get(k)) for k in SERVER}}
            loads.setdefault(round(float(p["load"]), 4), {})[name] = row
    common = {f"{load:g}": by for load, by in sorted(loads.items()) if len(by) > 1}
    return {"capacities": caps, "median": med, "spread_pct": _spread(list(caps.values())),
            "spread_rule": "(max - min) / median * 100", "common_loads": common,
            "engine": engine(docs)}


def engine(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether a boot's engine may have been slower: vLLM's wall time a step against the tokens
    a step, a quadratic least-squares fit. Each boot's points are set against the curve of the
    other boots' points (so a slow boot does not pull its own curve up), as % of that curve;
    the noise to read them by is the RMS of every such residual. A point beyond the tokens the
    other boots measured is extrapolation: kept apart and read by nothing. A boot with at least
    two points inside that range, all above (below) the noise, is listed. The fit knows tokens
    only, not the prompt/decode mix (which differs by load and sample), and the wall time a step
    includes the engine's idle time, which lifts light-load points: a listing points at a slower
    engine, it does not show one. A server with several API servers reads too many steps
    (autotune/server/scrape.py STEP_TOKENS): compare such boots only with each other. A boot
    whose others hold fewer than 3 distinct token figures is not fitted; nothing with fewer than
    two boots of figures."""
    import numpy as np

    pts = [(name, float(p["load"]), s["server_mean_step_tokens"], s["server_wall_ms_per_step"])
           for name, d in docs.items() for p in d["points"]
           if (s := p.get("server", {})).get("server_wall_ms_per_step")
           and s.get("server_mean_step_tokens")]
    names = list(dict.fromkeys(p[0] for p in pts))
    if len(names) < 2:
        return {}
    inside: dict[str, dict[str, float]] = {}
    beyond: dict[str, dict[str, float]] = {}
    for n in names:
        others = [p for p in pts if p[0] != n]
        if len({p[2] for p in others}) < 3:
            continue
        coef = np.polyfit([p[2] for p in others], [p[3] for p in others], 2)
        low, high = min(p[2] for p in others), max(p[2] for p in others)
        for _, load, tokens, ms in (p for p in pts if p[0] == n):
            curve = float(np.polyval(coef, tokens))
            where = inside if low <= tokens <= high and curve > 0 else beyond
            where.setdefault(n, {})[f"{load:g}"] = round((ms - curve) / curve * 100, 1)
    every = [r for rs in inside.values() for r in rs.values()]
    if not every:
        return {}
    noise = float(np.sqrt(np.mean(np.square(every))))

    def listed(side: int) -> list[str]:
        return [n for n, rs in inside.items()
                if len(rs) >= 2 and all(side * r > noise for r in rs.values())]

    return {"fit": "wall ms a step = a + b * tokens a step + c * tokens a step ^ 2, "
                   "each boot against the other boots' points",
            "points": len(pts), "noise_rms_pct": round(noise, 1),
            "residual_pct_against_the_others": inside,
            "beyond_the_others_tokens_pct": beyond,
            "above_beyond_noise_at_every_point": listed(1),
            "below_beyond_noise_at_every_point": listed(-1)}


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
    if e := doc["engine"]:
        out.append(f"engine: wall ms a step against tokens a step, each boot against the other "
                   f"boots' curve; noise (RMS) {e['noise_rms_pct']}%; above it at every point: "
                   f"{', '.join(e['above_beyond_noise_at_every_point']) or 'none'}; below: "
                   f"{', '.join(e['below_beyond_noise_at_every_point']) or 'none'}")
        out += [f"  {n}: {', '.join(f'{load} {r:+}%' for load, r in rs.items())}"
                for n, rs in e["residual_pct_against_the_others"].items()]
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
