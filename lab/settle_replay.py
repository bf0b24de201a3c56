"""Replay recorded capacity points through the settle rule (autotune.measure.settle): when would
each point have stopped, and would its verdict have been the same?

Reads the per-request CSVs a capacity search writes (points/load-<load>.csv), feeds each
request's first token and end to `Settle` in time order, asking every 0.2 s as the load
generator does, and compares with the full point's verdict (capacity.judge on every request).

    python -m lab.settle_replay OUT.json DIR [DIR ...] \
        [--slo p99_ttft_ms<=2000 --slo p99_tpot_ms<=60] [--met-only]

A DIR holding the trial's result.json (a study's trial-NNNN) also gets its minutes with its points
settled: its boot and bench seconds as recorded, less the load that settling would not have sent.
Each met point also says how much sooner its met verdict was known whatever its remaining
requests did (`met_known`): what settling a met verdict would save. It is not built.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from autotune.api import SLOConfig, parse_slo
from autotune.api.parts import (
    QUANTILES,
    Request,
    RequestRecord,
    Settle,
    compute_metrics,
    intervals,
    judge_point,
    percentile_ranks,
    request_samples,
    settle_rules,
)

TICK_S = 0.2


def _num(v: object) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)  # type: ignore[arg-type]


def records(csv: Path) -> list[RequestRecord]:
    out = []
    for row in pd.read_csv(csv).to_dict("records"):
        err = row.get("error")
        out.append(RequestRecord(
            index=int(row["index"]), send_time=float(row["send_time"]),
            prompt_len=int(row["prompt_len"]), expected_output_len=int(row["expected_output_len"]),
            first_token_time=_num(row["first_token_time"]), end_time=_num(row["end_time"]),
            output_tokens=int(row["output_tokens"]),
            error=None if err is None or (isinstance(err, float) and math.isnan(err)) else str(err),
            scheduled_time=_num(row.get("scheduled_time"))))
    return out


def replay(recs: list[RequestRecord], settle: Settle) -> float | None:
    events = sorted([(r.first_token_time, 0, r) for r in recs if r.first_token_time is not None]
                    + [(r.end_time if r.end_time is not None else r.send_time, 1, r)
                       for r in recs], key=lambda e: (e[0], e[1]))
    t, k = 0.0, 0
    while k < len(events):
        while k < len(events) and events[k][0] <= t:
            _, kind, r = events[k]
            if kind == 0 and r.first_token_time is not None:
                settle.first(r.index, r.send_time, r.first_token_time)
            elif kind == 1:
                settle.record(r)
            k += 1
        if settle(t):
            return t
        t += TICK_S
    return None


def runs(recs: list[RequestRecord]) -> list[list[RequestRecord]]:
    """A close point measured twice keeps both runs in one CSV, each numbered from 0: split them
    (each run has its own clock and its own Settle, as in capacity_on.run_at)."""
    out: list[list[RequestRecord]] = [[]]
    for r in recs:
        if out[-1] and r.index <= out[-1][-1].index:
            out.append([])
        out[-1].append(r)
    return out


def replay_point(recs: list[RequestRecord],
                 slos: list[SLOConfig]) -> tuple[float | None, str | None]:
    """When the point's runs would have stopped (seconds of load, counting a finished first run),
    and why; (None, None) if no run settles."""
    spent = 0.0
    for run in runs(recs):
        offsets = [r.scheduled_time for r in run]
        settle = Settle(slos, [Request("", r.prompt_len, r.expected_output_len) for r in run],
                        None if any(o is None for o in offsets) else offsets)  # type: ignore[arg-type]
        at = replay(run, settle)
        if at is not None:
            return spent + at, settle.reason
        spent += max((r.end_time or r.send_time) for r in run)
    return None, None


def met_known(run: list[RequestRecord], slos: list[SLOConfig]) -> float | None:
    """When a run's met verdict was known, whatever its remaining requests did: for every
    percentile SLO, the high rank of its 95% interval reached by requests known under the target
    (TTFT at the first token; TPOT and E2EL at the end, no sooner: a request still decoding has
    no upper bound). None when an SLO cannot be known so (a mean, a lower bound, another
    metric): settle's own rules say which SLOs are of this kind."""
    got = settle_rules(slos, [Request("", r.prompt_len, r.expected_output_len) for r in run])
    if len(got) != len(slos) or any(rule.stat not in QUANTILES for rule in got):
        return None
    at = 0.0
    for rule in got:
        known = sorted(
            (r.first_token_time if rule.stem == "ttft" else r.end_time)  # type: ignore[misc]
            for r in run if r.success and (rule.stem != "tpot" or r.expected_output_len > 1)
            and getattr(r, rule.stem) <= rule.target_s)
        k = percentile_ranks(rule.n, QUANTILES[rule.stat])[1]
        if len(known) < k:
            return None
        at = max(at, known[k - 1])
    return at


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--slo", action="append", default=[])
    ap.add_argument("--met-only", action="store_true",
                    help="only the met points' early-known time: for searches recorded with "
                    "settling on, whose settled points lack the requests they cut off")

    a = ap.parse_args()
    slos = [parse_slo(s) for s in (a.slo or ["p99_ttft_ms<=2000", "p99_tpot_ms<=60"])]
    rows: list[dict[str, Any]] = []
    for d in a.dirs:
        for csv in sorted(d.rglob("load-*.csv"), key=lambda p: float(p.stem[5:])):
            recs = records(csv)
            parts = runs(recs)
            length = sum(max((r.end_time or r.send_time) for r in run) for run in parts)
            flat = compute_metrics(recs, length).flat()
            state = judge_point(flat, slos, intervals(slos, request_samples(recs)))[0]
            if a.met_only and state != "met":
                continue
            at, reason = (None, None) if a.met_only else replay_point(recs, slos)
            last = parts[-1]
            known = met_known(last, slos) if state == "met" else None
            rows.append({"dir": str(d), "load": float(csv.stem[5:]), "requests": len(recs),
                         "runs": len(parts),
                         "full_verdict": state, "full_s": round(length, 2),
                         "settled_s": None if at is None else round(at, 2),
                         "agrees": at is None or state == "missed", "reason": reason,
                         # a met point: how much sooner its last run knew it (not built)
                         "met_known_saves_s": None if known is None else round(
                             max((r.end_time or r.send_time) for r in last) - known, 2)})
            print(f"{d.name:>12} {csv.stem[5:]:>6} {state:>7} full {length:6.1f} s  "
                  f"settled {'-' if at is None else f'{at:.1f} s'}")
    saved = sum(r["full_s"] - r["settled_s"] for r in rows if r["settled_s"] is not None)
    total = sum(r["full_s"] for r in rows)
    trials = {}  # a trial's minutes with its points settled: its own boot and bench overhead
    for d in a.dirs:
        res = d / "result.json"
        pts = [r for r in rows if r["dir"] == str(d)]
        if not res.exists() or not pts or a.met_only:
            continue
        tm = json.loads(res.read_text()).get("timings", {})
        full = sum(r["full_s"] for r in pts)
        short = sum(r["full_s"] if r["settled_s"] is None else r["settled_s"] for r in pts)
        trials[d.name] = {"boot_s": round(tm["boot_s"], 1), "bench_s": round(tm["bench_s"], 1),
                          "bench_settled_s": round(tm["bench_s"] - full + short, 1),
                          "minutes": round((tm["boot_s"] + tm["bench_s"]) / 60, 2),
                          "minutes_settled": round(
                              (tm["boot_s"] + tm["bench_s"] - full + short) / 60, 2)}
    met = [r["met_known_saves_s"] for r in rows if r["met_known_saves_s"] is not None]
    out = {"slos": [s.text() for s in slos], "points": rows,
           "all_agree": all(r["agrees"] for r in rows),
           "full_s": round(total, 1), "saved_s": round(saved, 1),
           "met_points": len(met), "met_known_saves_s": round(sum(met), 1),
           "met_known_saves_max_s": max(met, default=0.0), "trials": trials}
    if trials:
        out["trial_minutes_median"] = statistics.median(t["minutes"] for t in trials.values())
        out["trial_minutes_settled_median"] = statistics.median(
            t["minutes_settled"] for t in trials.values())
    a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {saved:.0f} of {total:.0f} s of load; verdicts agree: {out['all_agree']}; "
          f"a met verdict known early would save {sum(met):.0f} s more over {len(met)} met "
          f"points (at most {out['met_known_saves_max_s']} s one)")


if __name__ == "__main__":
    main()
