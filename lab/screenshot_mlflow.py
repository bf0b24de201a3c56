#!/usr/bin/env python3
"""Screenshot the MLflow UI showing a study's runs, with headless Chromium (Debian's package).

    python -m lab.screenshot_mlflow --experiment cpu-demo --out docs/results/ui/first-screen.png
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import httpx

from autotune.api.parts import MlflowUI, free_port, runs_url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--workdir", default="mlruns")
    ap.add_argument("--out", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    uri = f"sqlite:///{Path(a.workdir).resolve() / 'mlflow.db'}"
    with MlflowUI(uri, port=free_port(), log_path=Path(tempfile.mkdtemp()) / "ui.log") as ui:
        took = ui.wait_ready(120)
        exp = httpx.get(f"{ui.url}/api/2.0/mlflow/experiments/get-by-name",
                        params={"experiment_name": a.experiment}, timeout=30).json()
        eid = exp["experiment"]["experiment_id"]
        # what `autotune ui` prints: the study's runs, as charts of every trial's metrics
        url = runs_url(ui.url, eid)
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run([a.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-quic", "--no-first-run", "--disable-background-networking",
                            "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={profile}", "--hide-scrollbars",
                            "--window-size=1600,1000", "--virtual-time-budget=60000",
                            f"--screenshot={Path(a.out).resolve()}", url],
                           check=True, capture_output=True, timeout=120)
    print(f"UI ready in {took:.1f} s; screenshot of {url} -> {a.out}")


if __name__ == "__main__":
    main()
