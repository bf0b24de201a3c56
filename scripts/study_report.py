#!/usr/bin/env python3
"""A study as Markdown (every trial's raw numbers) plus its Pareto plot, for docs/results/.

    python scripts/study_report.py --config examples/h100-qwen3-8b.yaml --out docs/results/h100
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autotune import plots
from autotune.config import load_study_config
from autotune.present import params_text
from autotune.study import feasible_front, open_study, trial_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True, help="Path prefix: writes PREFIX.md and PREFIX.png")
    a = ap.parse_args()
    cfg = load_study_config(a.config)
    st = open_study(cfg, create=False)
    metrics = [o.metric for o in cfg.objectives]
    rows = trial_rows(st, metrics)
    front = {t.number for t in feasible_front(st)}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    df = plots.trials_frame(rows, metrics, front)
    plots.pareto_png(df, metrics, out.with_suffix(".png"), cfg.name)
    lines = ["| # | state | total tok/s | vs base | mean TPOT ms | vs base | boot s | bench s | "
             "stop s | front | params / cause |", "|" + "---|" * 11]
    for r in rows:
        state = r["state"].lower() if r["state"] != "COMPLETE" else (
            "infeasible" if r["cause"] else "ok")
        tm = r["timings"] or {}
        def f(v: float | None, pct: bool = False) -> str:
            if v is None:
                return ""
            return f"{v * 100:+.1f}%" if pct else f"{v:,.1f}"
        what = ("baseline (vLLM defaults)" if r["baseline"] else params_text(r["params"]))
        if r["cause"]:
            what += f" -- {r['cause'][:160]}"
        lines.append(
            f"| {r['number']} | {state} | {f(r[metrics[0]])} | {f(r['delta_' + metrics[0]], True)}"
            f" | {f(r[metrics[1]])} | {f(r['delta_' + metrics[1]], True)} | "
            f"{f(tm.get('boot_s'))} | {f(tm.get('bench_s'))} | {f(tm.get('stop_s'))} | "
            f"{'yes' if r['number'] in front else ''} | {what} |")
    out.with_suffix(".table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
