#!/usr/bin/env python3
"""Whether a queue builds through a load point: each run's median TTFT per fifth of its
arrivals, from the per-request records a capacity point writes (`points/load-X.csv` in a
bench's or a trial's folder). The rule and its reading: autotune/measure/drift.py.

    python3 -m lab.ttft_drift RUN/points/load-61.4125.csv [...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from autotune.api.parts import point_drift


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    doc = {str(f): [asdict(d) for d in point_drift(f)] for f in a.files}
    for f, runs in doc.items():
        print(f)
        for r in runs:
            print(f"  {r['requests']:5d} requests  TTFT p50 by fifth {list(r['ttft_p50_ms'])}"
                  f"  p99 {r['ttft_p99_ms']}")
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
