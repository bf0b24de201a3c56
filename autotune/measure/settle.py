"""A load point whose judgement is settled before its last request: stop it there.

A capacity point is judged on its requests' percentiles (autotune.measure.capacity.judge): an
SLO `pXX_metric <= T` is missed when the lower end of the percentile's 95% order-statistic
interval is above T, that is when at least `need` of the point's n requests are above T
(`need = n - k + 1`, k the rank of the interval's lower end, stats.percentile_ranks). While the
point runs, every request already has a value or a lower bound on it:

- a finished request: its value;
- a request whose first token came: its TTFT; a lower bound on its TPOT,
  (now - margin - first token) / (expected output tokens - 1), since it ends after now and
  `max_tokens` caps its tokens; its E2EL is at least now - margin - sent;
- on the rate axis without a concurrency cap, a request whose scheduled arrival is more than
  `margin` ago and that has no first token yet: its TTFT (and E2EL) is at least
  now - margin - its arrival (it was sent then, give or take its send lag).

Values only grow from their bounds, so once `need` requests are above T the full point would
miss that SLO whatever its remaining requests do: the judgement is settled, and sending the rest
buys nothing. A mean SLO is settled the same way once the sum of the bounds over n is above T.
A failed request settles the point too (judge misses any point with a failed request).

Only misses settle early: a met judgement needs every request (any one left could be slow or
fail; on 90 recorded H100 points, settling a met judgement once the requests still out could no
longer change it would have saved about 2 s a point, so it is not done). The
margin (1 s) covers the queue between the client's processes and this one and the send lag.
Pure: fed events and asked with the seconds since the load's clock zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.config.metric_names import FAILED, QUANTILES
from autotune.config.workload import SLOConfig
from autotune.load.record import Request, RequestRecord
from autotune.measure.stats import percentile_ranks

MARGIN_S = 1.0
STEMS = ("ttft", "tpot", "e2el")


@dataclass(frozen=True)
class Rule:
    """One SLO as the settle check reads it."""

    slo: SLOConfig
    stem: str  # ttft, tpot or e2el
    stat: str  # p99, p90, median or mean
    target_s: float
    n: int  # the requests the metric will be taken over
    need: int  # percentile: requests above the target that settle a miss


def rules(slos: Sequence[SLOConfig], requests: Sequence[Request]) -> list[Rule]:
    """The SLOs a point can settle early: `max` targets on a percentile or mean of TTFT, TPOT
    or E2EL (the others are judged at the end only)."""
    out = []
    for slo in slos:
        stat, _, rest = slo.metric.partition("_")
        stem = rest.removesuffix("_ms")
        if slo.max is None or stem not in STEMS or (stat not in QUANTILES and stat != "mean"):
            continue
        n = sum(r.output_len > 1 for r in requests) if stem == "tpot" else len(requests)
        if not n:
            continue
        k = percentile_ranks(n, QUANTILES[stat])[0] if stat in QUANTILES else 0
        out.append(Rule(slo, stem, stat, slo.max / 1000.0, n, n - max(k, 1) + 1))
    return out


class Settle:
    """Follows one load point's requests and says once its judgement is a settled miss.

    `offsets`: each request's scheduled arrival (seconds from the clock's zero) when every
    request is sent at it (the rate axis with no concurrency cap), else None; the load
    generator hands them over itself (`schedule`, run_load's `on_schedule`)."""

    def __init__(self, slos: Sequence[SLOConfig], requests: Sequence[Request],
                 offsets: Sequence[float] | None = None, margin_s: float = MARGIN_S) -> None:
        self.requests, self.margin = list(requests), margin_s
        self.offsets = list(offsets) if offsets is not None else None
        self.rules = rules(slos, requests)

        self.firsts: dict[int, tuple[float, float]] = {}  # index -> (sent, first token)
        self.done: dict[int, RequestRecord] = {}
        self.reason: str | None = None  # the settled miss, once it is
        self.metric: str | None = None  # the SLO metric it is on (FAILED: failed requests)
        self.at_s: float | None = None  # when it was settled (seconds from the clock's zero)

    def schedule(self, offsets: Sequence[float]) -> None:
        """The load generator's arrivals, when it sends every request at its own
        (`run_load`'s `on_schedule`)."""
        self.offsets = list(offsets)

    def first(self, index: int, sent: float, first: float) -> None:
        self.firsts[index] = (sent, first)

    def record(self, rec: RequestRecord) -> None:
        self.done[rec.index] = rec

    def _bounds(self, stem: str, now: float) -> list[float]:
        """Each request's value of `stem` in seconds, or a lower bound on it (0: nothing
        known)."""
        out = []
        late = now - self.margin
        for i, req in enumerate(self.requests):
            rec = self.done.get(i)
            if rec is not None and rec.success:
                out.append(rec.ttft if stem == "ttft" else rec.e2el if stem == "e2el" else
                           rec.tpot)
            elif i in self.firsts:
                sent, first = self.firsts[i]
                out.append(first - sent if stem == "ttft" else late - sent if stem == "e2el"
                           else (late - first) / (req.output_len - 1)
                           if req.output_len > 1 else 0.0)
            elif self.offsets is not None and stem != "tpot" and i < len(self.offsets):
                out.append(max(late - self.offsets[i], 0.0))
            else:
                out.append(0.0)
        return out

    def __call__(self, now: float) -> bool:
        """Whether the point's judgement is a settled miss, `now` seconds after its clock's
        zero (sets `reason` and `at_s` the first time)."""
        if self.reason is None:
            got = self._missed(now)
            if got is not None:
                self.metric, self.reason = got
                self.at_s = now
        return self.reason is not None

    def _missed(self, now: float) -> tuple[str, str] | None:
        """(the metric, the miss in words), or None while nothing is settled."""
        failed = [r for r in self.done.values() if r.error is not None]
        if failed:
            return FAILED, (f"{len(failed)} of {len(self.requests)} requests failed "
                            f"({failed[0].error}): settled after {now:.1f} s")
        for rule in self.rules:
            bounds = self._bounds(rule.stem, now)
            target = rule.target_s
            if rule.stat == "mean":
                low = sum(bounds) / rule.n
                if low > target:
                    return rule.slo.metric, (
                        f"{rule.slo.text()} (settled after {now:.1f} s: the mean is at "
                        f"least {low * 1000:,.1f} whatever the rest do)")
                continue
            over = sum(b > target for b in bounds)
            if over >= rule.need:
                return rule.slo.metric, (
                    f"{rule.slo.text()} (settled after {now:.1f} s: {over:,} of "
                    f"{rule.n:,} requests already over {rule.slo.max:,g} ms, and "
                    f"{rule.need:,} put the {rule.stat}'s 95% interval above it)")
        return None

