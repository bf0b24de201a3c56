"""The capacity search: bracket the most load that meets the SLOs, then bisect it.

From its first load (the incumbent's capacity, else `start`, else `low`) the search steps up
while the SLOs hold and down while they fail (`bracket_steps`) until it has a passing and a
failing load, then bisects them until (lowest failing - highest passing) / highest passing is
within `tolerance`. Each point is judged by the measure callback (autotune.measure.capacity's
judgement rule); a point the client could not offer ends the search below it; with `stop_below`
(the incumbent's capacity) a failing load at or below it ends the search early with a lower
bound. Pure: the measurement is a callback, so the search is tested against a synthetic server.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from autotune.config.capacity import Bracket
from autotune.measure.capacity import EARLY_STOP, CapacityResult, LoadPoint

Measure = Callable[[float], LoadPoint]

NEAR_STEPS = 2  # "near": this many small steps, then doubling/halving


def bracket_steps(bracket: Bracket, tolerance: float, from_start: bool = True,
                  doomed: bool = False) -> tuple[list[float], list[float]]:
    """The factors a search steps its load by while it brackets the capacity, up (while the SLOs
    hold) and down (while they fail); the last factor repeats.

    "double": x2 / x0.5 from the first step. "step": one tolerance at a time, x(1 + tolerance)
    up and x(1 + tolerance)^-1 down, for a search that starts at a capacity already found (a
    certify boot, autotune.tuning.certify): a boot whose capacity is where it was found meets
    there, misses one step above, and is done in two points, its capacity known to one
    tolerance as a full search's is. "near", for a search that starts at a given load
    (the incumbent's capacity, or `start`): the first NEAR_STEPS steps are (1 + tolerance)^3 up
    and (1 + tolerance)^-2 down (x1.33 / x0.83 at 10%, never beyond x2 / x0.5), then x2 / x0.5.
    A study starts each trial at the incumbent's capacity and most configs land near it: from a
    bracket of (1 + tolerance)^3 two bisections reach the tolerance, from one of x2 four do. A
    search from `low` (nothing known) doubles from the first step either way. `doomed`: the first
    load is at or below the early-stop bound, so a search that misses there stops at its first
    met load, a lower bound, which halving reaches in fewer points than near steps.
    """
    if bracket == "step":
        return [1 + tolerance], [1 / (1 + tolerance)]
    if bracket == "double" or not from_start:
        return [2.0], [0.5]
    up = min((1 + tolerance) ** 3, 2.0)
    down = max((1 + tolerance) ** -2, 0.5)
    return [up] * NEAR_STEPS + [2.0], [0.5] if doomed else [down] * NEAR_STEPS + [0.5]


def _round(x: float, integer: bool, up: bool = False) -> float:
    if not integer:
        return x
    return float(math.ceil(x) if up else math.floor(x))


def _step(x: float, factor: float, integer: bool, within: bool = False) -> float:
    """The load a bracket step from `x` goes to: whole on the concurrency axis (rounded away from
    `x`); on the rate axis three significant digits, whole from 100 up (x0.83 of 64 is 52.9, not
    52.892561...), unless rounding would undo a step as small as a tight tolerance's. `within`
    (the "step" bracket) rounds toward `x`, so one step never spans more than the tolerance and
    a boot that meets at C and misses one step above ends there (99.9 x 1.1 = 109.89 rounded
    to 110 would be 10.1% above, and one more point)."""
    y = x * factor
    up = factor > 1
    if integer:
        r = _round(y, integer, up=up != within)
        return r if (r > x if up else r < x) else x + (1.0 if up else -1.0)
    if within:
        q = 10.0 ** (math.floor(math.log10(y)) - 2) if y < 100 else 1.0
        r = (math.floor if up else math.ceil)(y / q) * q
        r = float(f"{r:.6g}")
    else:
        r = float(round(y)) if y >= 100 else float(f"{y:.3g}")
    return r if (r > x if up else r < x) else y


class _Flagged(Exception):
    """A point the load generator could not offer: the search ends below it."""


def search(measure: Measure, *, axis: str, low: float, high: float, tolerance: float,
           start: float | None = None, stop_below: float | None = None,
           bracket: Bracket = "near") -> CapacityResult:
    """Bracket, then bisect. `measure(load)` returns the judged point; loads on the
    concurrency axis are whole numbers. A flagged point (`LoadPoint.flag`) ends the search:
    the capacity is the highest passing load below it, `stopped` says why."""
    integer = axis == "concurrency"
    points: list[LoadPoint] = []

    def probe(x: float) -> bool:
        p = measure(x)
        points.append(p)
        if p.flag:
            raise _Flagged(p.flag)
        return p.passed

    try:
        return _bracket(probe, points, axis, low, high, tolerance, start, stop_below, integer,
                        bracket)
    except _Flagged as e:
        ok = [p.load for p in points if p.passed and not p.flag]
        lo = max(ok) if ok else None
        at = next((p for p in reversed(points) if p.load == lo and p.passed), None)
        return CapacityResult(axis, lo or 0.0, at, tuple(points), points[-1].load,
                              f"not a server verdict at {points[-1].load:g}: {e}")


def _bracket(probe: Callable[[float], bool], points: list[LoadPoint], axis: str, low: float,
             high: float, tolerance: float, start: float | None, stop_below: float | None,
             integer: bool, bracket: Bracket) -> CapacityResult:
    x = min(max(_round(start if start else low, integer), low), high)
    ups, downs = bracket_steps(bracket, tolerance, from_start=bool(start),
                               doomed=stop_below is not None and x <= stop_below)
    step = 0  # bracket steps taken

    def factor(factors: list[float]) -> float:
        return factors[min(step, len(factors) - 1)]

    def result(lo: float | None, hi: float | None, stopped: str | None) -> CapacityResult:
        at = next((p for p in reversed(points) if p.load == lo and p.passed), None)
        return CapacityResult(axis, lo or 0.0, at, tuple(points), hi, stopped)

    lo: float | None = None
    hi: float | None = None
    if probe(x):
        lo = x
        while hi is None:
            if x >= high:
                return result(lo, None, f"met the SLOs at the highest load ({high:g})")
            x = min(_step(x, factor(ups), integer, bracket == "step"), high)
            step += 1
            if probe(x):
                lo = x
            else:
                hi = x
    else:
        hi = x
        while lo is None:
            if x <= low:
                return result(None, hi, f"missed the SLOs at the lowest load ({low:g})")
            x = max(_step(x, factor(downs), integer, bracket == "step"), low)
            step += 1
            if probe(x):
                lo = x
            else:
                hi = x
    while (hi - lo) / lo > tolerance * (1 + 1e-9):  # 0.33 over 0.3 is 0.10000000000000003
        if stop_below is not None and hi <= stop_below:
            return result(lo, hi, f"{EARLY_STOP}'s {stop_below:g}: failed at {hi:g}")
        mid = _round((lo + hi) / 2, integer)
        if mid <= lo or mid >= hi:
            break
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return result(lo, hi, None)
