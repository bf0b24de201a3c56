#!/usr/bin/env python3
"""What a newcomer's demo shows on each surface (issue 70, items 1-3), read from a finished
`autotune study --config examples/cpu-demo.yaml --confirm` in the current folder (a fresh clone):
the Pareto front's members as `pareto` prints them (and the recommendation, on the front or apart),
the trial runs MLflow tags `autotune.pick`, and the defaults' first objective as `trials`,
`pareto` and `export --trial 0` show it.

    .venv/bin/python -m lab.newcomer_surfaces --config examples/cpu-demo.yaml > surfaces.json

Each command runs as a user runs it (`.venv/bin/autotune ...`, 200 columns); the JSON holds the
numbers, and the printed texts go to --texts DIR when given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

FRONT_APART = "Recommended, not on the Pareto front"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "autotune"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})


def rows(table: str) -> list[str]:
    """The trial column of a rich table's rows ("0★" -> "0★")."""
    return [ln.split("│")[1].strip() for ln in table.splitlines()
            if ln.startswith("│") and ln.split("│")[1].strip()[:1].isdigit()]


def first_value(line: str) -> float | None:
    m = re.search(r"│[^│]*│[^│]*│\s*([\d,]+\.\d+)", line)
    return float(m.group(1).replace(",", "")) if m else None


def surfaces(config: str, texts: Path | None) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from autotune.api import load_study_config, study_summary
    from autotune.api.parts import default_tracking_uri

    cfg = load_study_config(config)
    summary = study_summary(cfg)
    t, p = cli("trials", "--config", config), cli("pareto", "--config", config)
    e = cli("export", "--config", config, "--trial", str(summary.base.number if summary.base
                                                         else 0))
    if texts is not None:
        texts.mkdir(parents=True, exist_ok=True)
        for name, run in (("trials", t), ("pareto", p), ("export-defaults", e)):
            (texts / f"{name}.txt").write_text(run.stdout + run.stderr)
    front, _, apart = p.stdout.partition(FRONT_APART)
    base = summary.base.number if summary.base else None
    base_trials = next((ln for ln in t.stdout.splitlines()
                        if re.match(rf"│\s*{base}★?\s*│", ln)), "")
    median = re.search(r"median ([\d,]+\.\d+) \((\d+) boots\)", base_trials.split("│")[3]) \
        if base_trials.count("│") > 3 else None
    base_pareto = next((ln for ln in p.stdout.splitlines()
                        if re.match(rf"│\s*{base}★?\s*│", ln)), "")
    exported = re.search(r"total_token_throughput ([\d,]+\.\d+)", " ".join(e.stderr.split()))
    client = MlflowClient(default_tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.name)
    holders = sorted(int(r.data.tags["autotune.trial_number"]) for r in client.search_runs(
        [exp.experiment_id], "tags.`autotune.kind` = 'trial'", max_results=5000)
        if r.data.tags.get("autotune.pick") == "recommended") if exp is not None else []
    study_run = client.search_runs([exp.experiment_id], "tags.`autotune.kind` = 'study'")[0] \
        if exp is not None else None
    return {
        "trials": len(summary.records),
        "recommended": summary.recommendation.number,
        "recommendation_reason": summary.recommendation.reason,
        "pareto_front_members": [int(r.rstrip("★")) for r in rows(front)],
        "pareto_recommended_apart": [int(r.rstrip("★")) for r in rows(apart)],
        "summary_front": summary.front,
        "off_front_line": summary.off_front,
        "mlflow_pick_holders": holders,
        "mlflow_study_recommended_tag": study_run.data.tags.get("autotune.recommended")
        if study_run is not None else None,
        "baseline_trial": base,
        "baseline_value": {
            "trials_first_boot": first_value(base_trials),
            "trials_median": float(median.group(1).replace(",", "")) if median else None,
            "trials_boots": int(median.group(2)) if median else None,
            "pareto": first_value(base_pareto),
            "export": float(exported.group(1).replace(",", "")) if exported else None,
            "summary_pooled": summary.pooled[base].values[summary.metrics[0]]
            if base is not None else None,
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="examples/cpu-demo.yaml")
    ap.add_argument("--texts", type=Path)
    a = ap.parse_args()
    print(json.dumps(surfaces(a.config, a.texts), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
