#!/usr/bin/env python3
"""Whether a queue builds through a load point: each sample's median TTFT per fifth of its
arrivals, from the per-request records a capacity point writes (`points/load-X.csv` in a
bench's or a trial's folder; samples follow one another in one file, their indexes restart).

A TTFT that grows fifth by fifth while vLLM's own queue time stays 0 and its log shows no
request waiting means requests wait outside the engine's queue: in front of it (the API server)
or before their first token is streamed back.

    python3 scripts/ttft_drift.py RUN/points/load-61.4125.csv [...] [--json OUT]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path
from typing import Any


def drift(path: Path, parts: int = 5) -> list[dict[str, Any]]:
    rows = [r for r in csv.DictReader(path.open()) if r.get("ttft_ms") and not r.get("error")]
    idx = [int(r["index"]) for r in rows]
    starts = [i for i in range(len(rows)) if i == 0 or idx[i] < idx[i - 1]]
    out = []
    for a, b in zip(starts, [*starts[1:], len(rows)], strict=True):
        seg = sorted((float(r["send_time"]), float(r["ttft_ms"])) for r in rows[a:b])
        q = max(1, len(seg) // parts)
        fifths = [seg[i * q:(i + 1) * q] for i in range(parts)]
        ttft = sorted(t for _, t in seg)
        out.append({"requests": len(seg),
                    "ttft_p50_ms_by_part": [round(statistics.median(t for _, t in f), 1)
                                            for f in fifths if f],
                    "ttft_p99_ms": round(ttft[max(0, int(0.99 * len(ttft)) - 1)], 1)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    doc = {str(f): drift(f) for f in a.files}
    for f, samples in doc.items():
        print(f)
        for s in samples:
            print(f"  {s['requests']:5d} requests  TTFT p50 by fifth {s['ttft_p50_ms_by_part']}"
                  f"  p99 {s['ttft_p99_ms']}")
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
