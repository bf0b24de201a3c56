#!/usr/bin/env python3
"""Capacity searches of one config on several boots, side by side: each boot's capacity, their
spread ((max - min) / median, as docs/results/warm-server-h100 states it), and, at every load
that two or more boots measured, each boot's verdict, client p99/mean TPOT and p99 TTFT beside
vLLM's own means from /metrics (mean TPOT and TTFT, prefill, queue, time outside the engine
core, the tokens an engine step carried and the wall time a step; a search that predates a field
has None for it); and whether a boot's engine was slower: each boot's points set against one
curve of vLLM's step time over the tokens a step, fitted to every boot's points. Where boots
part, this says at which load and whether the time went inside vLLM's engine or outside.

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
            row = {"met": bool(p.get("passed")),
                   **{k: _round(p.get("metrics", {}).get(k)) for k in CLIENT},
                   **{k: _round(p.get("server", {}).get(k)) for k in SERVER}}
            loads.setdefault(round(float(p["load"]), 4), {})[name] = row
    common = {f"{load:g}": by for load, by in sorted(loads.items()) if len(by) > 1}
    return {"capacities": caps, "median": med, "spread_pct": _spread(list(caps.values())),
            "spread_rule": "(max - min) / median * 100", "common_loads": common,
            "engine": engine(docs)}


def engine(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether a boot's engine was slower: vLLM's wall time a step against the tokens a step,
    a quadratic least-squares fit. Each boot's residuals (% of the curve, by load) are taken
    against the curve of the other boots' points, so a slow boot does not pull its own curve
    up; the RMS of one fit over every point is the noise to read them by. A boot whose every
    point sits above its curve by more than that RMS took longer for the tokens it carried; one
    on the curve whose steps carried more tokens at a load the others shared ran a larger
    batch. The fit knows tokens only, not the prompt/decode mix (which differs by load and
    sample). A server with several API servers reads too many steps (autotune/server/scrape.py
    STEP_TOKENS): compare such boots only with each other. Empty with fewer than two boots of
    figures or fewer than 4 points besides any boot's."""
    import numpy as np

    pts = [(name, float(p["load"]), s["server_mean_step_tokens"], s["server_wall_ms_per_step"])
           for name, d in docs.items() for p in d["points"]
           if (s := p.get("server", {})).get("server_wall_ms_per_step")
           and s.get("server_mean_step_tokens")]
    names = list(dict.fromkeys(p[0] for p in pts))
    if len(names) < 2 or any(sum(p[0] != n for p in pts) < 4 for n in names):
        return {}

    def fit(rows: list[tuple[str, float, float, float]]) -> Any:
        return np.polyfit([r[2] for r in rows], [r[3] for r in rows], 2)

    def off(coef: Any, rows: list[tuple[str, float, float, float]]) -> list[float]:
        return [float((r[3] - np.polyval(coef, r[2])) / np.polyval(coef, r[2]) * 100)
                for r in rows]

    coef = fit(pts)
    rms = float(np.sqrt(np.mean(np.square(off(coef, pts)))))
    by: dict[str, dict[str, float]] = {}
    for n in names:
        own = [p for p in pts if p[0] == n]
        by[n] = {f"{p[1]:g}": round(r, 1)
                 for p, r in zip(own, off(fit([p for p in pts if p[0] != n]), own), strict=True)}
    return {"fit": "wall ms a step = a + b * tokens a step + c * tokens a step ^ 2",
            "a_b_c_every_point": [float(f"{x:.4g}") for x in coef[::-1]], "points": len(pts),
            "rms_pct": round(rms, 1), "residual_pct_against_the_others": by,
            "above_beyond_rms_at_every_point": [n for n, r in by.items()
                                                if min(r.values()) > rms],
            "below_beyond_rms_at_every_point": [n for n, r in by.items()
                                                if max(r.values()) < -rms]}


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
        out.append(f"engine: wall ms a step against tokens a step over {e['points']} points, "
                   f"RMS {e['rms_pct']}% off one curve; above the other boots' curve by more "
                   f"at every point: {', '.join(e['above_beyond_rms_at_every_point']) or 'none'};"
                   f" below: {', '.join(e['below_beyond_rms_at_every_point']) or 'none'}")
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
