"""What a trace's timeline must look like before anything replays it (autotune.load.trace reads
it): no arrival far from all the others, a recorded rate that fits its time unit, and load
points that last minutes, not hours.

A stray timestamp (a 0 or -1 placeholder in a trace of epoch seconds, a date in 1970 or in
another year) is one gap that dwarfs the rest: sorted first, it puts the trace's other requests
1.77e9 s later, and a replay sleeps for years. A gap is refused when it is STRAY_GAP times the
median of the trace's other gaps and STRAY_SPAN times the span of all the others together, with
STRAY_AMONG requests or more on its other side; a real lull (a night in a months-long log, a
quiet hour) is neither. A unit that does not fit shows in the rate: Mooncake's millisecond
timestamps read as seconds make an hour's traffic last 42 days, a request every few minutes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from autotune.config.capacity import CapacityConfig
from autotune.config.workload import ProfileConfig
from autotune.errors import ConfigError

STRAY_GAP = 1000.0  # times the median of the other gaps: orders of magnitude, not a lull
STRAY_SPAN = 10.0  # times the span of all the other gaps together
STRAY_AMONG = 10  # requests on the far side at least: three requests make no typical gap
# A mean gap above SLOW_S read in seconds, or a rate above FAST_RATE read in milliseconds, is
# more likely the other unit: the busiest public traces (Azure's, Mooncake's, BurstGPT's)
# record between 0.1 and 20 requests/s.
SLOW_S = 100.0
FAST_RATE = 1000.0
MAX_POINT_S = 3600.0  # a load point whose arrivals take longer is a mistake in the setup


@dataclass(frozen=True)
class Stamp:
    """One request's arrival as read: seconds (absolute), its line, its value as written."""

    at_s: float
    line: int
    raw: Any


def _long(s: float) -> str:
    """Seconds, and in words where they are days or more."""
    words = (f" ({s / 31_557_600:,.0f} years)" if s >= 31_557_600 else
             f" ({s / 86_400:,.1f} days)" if s >= 86_400 else "")
    return f"{s:,.0f} s{words}"


def check_gaps(stamps: list[Stamp], path: str) -> None:
    """ConfigError naming the line(s) of a stray arrival (the module's docstring)."""
    ordered = sorted(stamps, key=lambda x: x.at_s)
    gaps = [b.at_s - a.at_s for a, b in zip(ordered, ordered[1:], strict=False)]
    if len(gaps) < 2:
        return
    k = max(range(len(gaps)), key=gaps.__getitem__)
    big = gaps[k]
    others = [g for i, g in enumerate(gaps) if i != k and g > 0]
    if not others:
        return
    typical, rest = statistics.median(others), sum(gaps) - big
    if big < STRAY_GAP * typical or big < STRAY_SPAN * rest:
        return
    before, after = ordered[:k + 1], ordered[k + 1:]
    few, side = (before, "before") if len(before) <= len(after) else (after, "after")
    if len(ordered) - len(few) < STRAY_AMONG:
        return
    shown = sorted(few, key=lambda x: x.line)[:3]
    more = f" and {len(few) - 3} more" if len(few) > 3 else ""
    lines = ", ".join(str(x.line) for x in shown) + more
    stamps_said = ", ".join(repr(x.raw) for x in shown) + more
    many = len(few) > 1
    raise ConfigError(
        f"profile.path: {path}, line{'s' if many else ''} {lines}: timestamp"
        f"{'s' if many else ''} {stamps_said} {'lie' if many else 'lies'} {_long(big)} "
        f"{side} the trace's other {len(stamps) - len(few)} requests, which span "
        f"{_long(rest)} with a median gap of {typical:.3g} s: a stray value (a 0 or -1 "
        "placeholder, a date in another year) would make the replay wait that long; remove "
        f"{'those lines' if many else 'the line'} or correct {'their' if many else 'its'} "
        "timestamp")


def unit_hint(rate: float, unit: str) -> str | None:
    """What to check when a trace of numeric timestamps records a rate that fits the other
    unit better (the module's docstring); None when it fits its own."""
    if unit == "s" and rate * SLOW_S < 1:
        return (f"{rate:.3g} req/s recorded is a request every {1 / rate:,.0f} s: if its "
                "timestamps are milliseconds (Mooncake's are), set profile.time_unit: ms "
                f"({rate * 1000:.3g} req/s)")
    if unit == "ms" and rate > FAST_RATE:
        return (f"{rate:,.0f} req/s recorded: if its timestamps are seconds, remove "
                f"profile.time_unit: ms ({rate / 1000:.3g} req/s)")
    return None


def check_replay_time(rate: float, path: str, hint: str | None, profile: ProfileConfig,
                      cap: CapacityConfig | None) -> None:
    """ConfigError when a load point would replay a trace of `rate` requests/s for over
    MAX_POINT_S: at the capacity search's lowest speed-up its requests_per_point, or a fixed
    load's num_prompts at profile.speedup; naming what to raise (or the unit, `hint`)."""
    if cap is not None and cap.axis == "speedup":
        n, speed, field = cap.requests_per_point, cap.low, "capacity.low"
    else:
        n, speed, field = profile.num_prompts, profile.speedup, "profile.speedup"
    took = (n - 1) / (rate * speed)
    if took <= MAX_POINT_S:
        return
    need = (n - 1) / (rate * MAX_POINT_S)
    raise ConfigError(
        f"{field}: at {speed:g}x a load point replays {n} requests of {path} at "
        f"{rate * speed:.3g} req/s, {took / 3600:,.1f} hours of arrivals; "
        + (f"{hint}, or raise {field}" if hint else f"raise {field}")
        + f" to {need:.3g} or more (an hour a point at most)")
