"""Where speculation stops paying: two configs' curves over load (a speculative one and one
without), compared at every load both measured, and the load at which the speculative one's
edge ends. Speculative decoding cuts TPOT at low batch and costs capacity at high batch, so
"spec on" or "spec off" alone hides where the line falls (issue 82).

A curve is a capacity search's load points: the load, the metric compared (mean TPOT by
default, lower better) and the capacity (the highest load that met the SLOs). Between points
a curve is read linearly in load, its metric in logs; past its own points it is not read. The
speculative config pays at a load where it meets the SLOs and its metric is better; it stops
paying where its edge crosses zero (interpolated between the two loads around it) or where it
stops meeting the SLOs (its capacity)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Curve:
    """One config's metric over load: points sorted by load, and its capacity (None: no load
    met the SLOs, so it pays nowhere)."""

    loads: Sequence[float]
    values: Sequence[float]
    capacity: float | None = None

    def at(self, x: float) -> float | None:
        """The metric at load `x`, read between the two points around it (logs, linearly)."""
        pts = sorted(zip(self.loads, self.values, strict=True))
        for (x0, v0), (x1, v1) in zip(pts, pts[1:], strict=False):
            if x0 <= x <= x1 and v0 > 0 and v1 > 0:
                t = 0.0 if x1 == x0 else (x - x0) / (x1 - x0)
                return math.exp(math.log(v0) + t * (math.log(v1) - math.log(v0)))
        return next((v for x0, v in pts if x0 == x), None)


@dataclass(frozen=True)
class Crossing:
    """Where the speculative config pays: up to `pays_up_to` (None: at no load compared),
    `everywhere` when it paid at every load compared; `edges` the (load, relative edge) pairs
    compared (positive: it pays)."""

    pays_up_to: float | None
    everywhere: bool
    edges: list[tuple[float, float]]

    def text(self, unit: str, spec: str, other: str) -> str:
        if not self.edges:
            return f"{spec} and {other} measured no load in common: no crossover to read"
        top = self.edges[-1][0]
        if self.pays_up_to is None:
            return f"{spec} does not pay at any load measured ({self.edges[0][0]:g}-{top:g} " \
                   f"{unit}): {other} is better there"
        if self.everywhere:
            return f"{spec} pays at every load measured, up to {top:g} {unit}"
        return f"{spec} up to {self.pays_up_to:.3g} {unit}, {other} above"


def crossover(spec: Curve, other: Curve, lower_is_better: bool = True) -> Crossing:
    """Where `spec` stops beating `other` (the module's docstring), over the loads both
    measured."""
    if not spec.loads or not other.loads:
        return Crossing(None, False, [])
    lo = max(min(spec.loads), min(other.loads))
    hi = min(max(spec.loads), max(other.loads))
    xs = sorted({x for x in [*spec.loads, *other.loads] if lo <= x <= hi})
    edges: list[tuple[float, float]] = []
    for x in xs:
        a, b = spec.at(x), other.at(x)
        if a is None or b is None or a <= 0 or b <= 0:
            continue
        e = math.log(b / a) if lower_is_better else math.log(a / b)
        met = spec.capacity is not None and x <= spec.capacity
        other_met = other.capacity is not None and x <= other.capacity
        edges.append((x, e if met else -math.inf if other_met else e))
    if not edges:
        return Crossing(None, False, [])
    if edges[0][1] <= 0:
        return Crossing(None, False, _shown(edges))
    for (x0, e0), (x1, e1) in zip(edges, edges[1:], strict=False):
        if e1 <= 0:
            if math.isinf(e1):  # it stopped meeting the SLOs: its capacity is the line
                cap = spec.capacity if spec.capacity is not None else x0
                return Crossing(min(max(cap, x0), x1), False, _shown(edges))
            return Crossing(x0 + (x1 - x0) * e0 / (e0 - e1), False, _shown(edges))
    return Crossing(edges[-1][0], True, _shown(edges))


def _shown(edges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Edges as relative differences (exp - 1), rounded; a missed SLO reads -1."""
    return [(x, -1.0 if math.isinf(e) else round(math.expm1(e), 4)) for x, e in edges]
