"""Whether a queue builds through a load point: each run's median TTFT per part of its arrivals,
from the per-request records a capacity point writes (`points/load-<load>.csv`: its runs follow
one another in one file, each run's requests in index order from 0).

At a load the server keeps up with, TTFT is flat from the first arrivals to the last. A TTFT that
grows part by part means requests wait longer the later they come: a queue is building. vLLM's
own split of its TTFT (autotune/server/scrape.py) then says where: in its engine's queue, or
outside the engine core (docs/capacity.md, "Where the time went").
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PARTS = 5  # fifths of the arrivals
GROWS = 3.0  # a last part's median TTFT this many times the first's: a queue builds


@dataclass(frozen=True)
class RunDrift:
    """One run of a point: its requests' median TTFT per part of the arrivals, and its p99."""

    requests: int
    ttft_p50_ms: tuple[float, ...]  # by part of the arrivals, the earliest first
    ttft_p99_ms: float

    @property
    def growth(self) -> float | None:
        """The last part's median TTFT over the first's (None: too few parts)."""
        if len(self.ttft_p50_ms) < 2 or self.ttft_p50_ms[0] <= 0:
            return None
        return self.ttft_p50_ms[-1] / self.ttft_p50_ms[0]


def read_runs(path: Path) -> list[list[tuple[float, float]]]:
    """Each run's successful requests as (send time s, TTFT ms), in the file's order. A request
    index that does not rise starts the next run."""
    runs: list[list[tuple[float, float]]] = []
    last = None
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            index = int(row["index"])
            if last is None or index <= last:
                runs.append([])
            last = index
            if row.get("ttft_ms") and not row.get("error"):
                runs[-1].append((float(row["send_time"]), float(row["ttft_ms"])))
    return [r for r in runs if r]


def drift(run: list[tuple[float, float]], parts: int = PARTS) -> RunDrift:
    """One run's TTFT by part of its arrivals (in send order; every request in one part, the
    parts as equal as whole requests allow); its p99 as the run's metrics take it (numpy's
    linear percentile)."""
    seg = sorted(run)
    n = len(seg)
    cuts = [i * n // parts for i in range(parts + 1)]
    chunks = [seg[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    return RunDrift(n, tuple(round(statistics.median(t for _, t in c), 1) for c in chunks),
                    round(float(np.percentile([t for _, t in seg], 99)), 1))


def point_drift(path: Path, parts: int = PARTS) -> list[RunDrift]:
    """Every run of the point recorded in `path`."""
    return [drift(r, parts) for r in read_runs(path)]
