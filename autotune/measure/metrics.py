"""Pure: per-request records -> the summary `vllm bench serve` prints, with its definitions.

- duration: from the benchmark's start (after warm-up) to the last request's end;
- total token throughput = (input + output tokens of successful requests) / duration;
- TTFT: first content chunk - send; E2EL: last content chunk - send;
- TPOT per request (output > 1 token) = (E2EL - TTFT) / (output tokens - 1);
- ITL: every gap between consecutive content chunks, pooled over requests;
- summaries: mean, median, p90, p99 (numpy's linear percentiles), in milliseconds;
- send lag (open loop): actual send - scheduled arrival, for requests that had a schedule;
- late reads (not in `vllm bench serve`): the share of token gaps whose later token reached
  the client in one read with the one before (`late_read_share`), and the requests read mostly
  so (`burst_requests`): their TPOT and ITLs are the client's reading, not the server's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from autotune.config.metric_names import SUMMARIZED
from autotune.load.record import RequestRecord

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Summary:
    mean: float
    median: float
    p90: float
    p99: float
    std: float

    @classmethod
    def of(cls, values_s: Sequence[float]) -> Summary:
        if not values_s:
            return cls(0.0, 0.0, 0.0, 0.0, 0.0)
        a = np.asarray(values_s, dtype=float) * 1000.0
        p50, p90, p99 = np.percentile(a, PERCENTILES)
        return cls(float(a.mean()), float(p50), float(p90), float(p99), float(a.std()))


@dataclass(frozen=True)
class BenchMetrics:
    duration_s: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    ttft_ms: Summary
    tpot_ms: Summary
    itl_ms: Summary
    e2el_ms: Summary
    send_lag_ms: Summary = field(default_factory=lambda: Summary.of([]))
    errors: dict[str, int] = field(default_factory=dict)
    late_read_share: float = 0.0
    burst_requests: int = 0

    @property
    def root_error(self) -> str | None:
        """The first error that is not a cancellation (what made the run give up on the rest:
        a silent stream's timeout, not the "cancelled: server hung" of the requests it took
        down with it), else the first; None without errors."""
        return next((e for e in self.errors if not e.startswith("cancelled")),
                    next(iter(self.errors), None))

    def flat(self) -> dict[str, float]:
        """`{"total_token_throughput": ..., "mean_ttft_ms": ..., "p99_tpot_ms": ...}`."""
        out: dict[str, float] = {
            k: float(v) for k, v in asdict(self).items() if isinstance(v, int | float)
        }
        for name in SUMMARIZED:
            s: Summary = getattr(self, f"{name}_ms")
            for stat in ("mean", "median", "p90", "p99", "std"):
                out[f"{stat}_{name}_ms"] = getattr(s, stat)
        return out


def per_request(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """Each summarized quantity's values in seconds, by name (SUMMARIZED): what the summaries
    are taken over, and what a percentile's interval is drawn from (autotune.measure.capacity)."""
    ok = [r for r in records if r.success]
    return {"ttft": [r.ttft for r in ok],
            "tpot": [r.tpot for r in ok if r.output_tokens > 1],
            "itl": [x for r in ok for x in r.itls()],
            "e2el": [r.e2el for r in ok],
            "send_lag": [lag for r in records if (lag := r.send_lag) is not None
                         and r.error is None]}


def compute_metrics(records: Sequence[RequestRecord], duration_s: float) -> BenchMetrics:
    ok = [r for r in records if r.success]
    errors: dict[str, int] = {}
    for r in records:
        if not r.success:
            key = (r.error or "no tokens received")[:200]
            errors[key] = errors.get(key, 0) + 1
    in_tok = sum(r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len for r in ok)
    out_tok = sum(r.output_tokens for r in ok)
    values = per_request(records)
    dur = max(duration_s, 1e-9)
    gaps = sum(max(len(r.chunk_times) - 1, 0) for r in ok)
    return BenchMetrics(
        duration_s=duration_s,
        completed=len(ok),
        failed=len(records) - len(ok),
        total_input_tokens=in_tok,
        total_output_tokens=out_tok,
        request_throughput=len(ok) / dur,
        output_throughput=out_tok / dur,
        total_token_throughput=(in_tok + out_tok) / dur,
        ttft_ms=Summary.of(values["ttft"]),
        tpot_ms=Summary.of(values["tpot"]),
        itl_ms=Summary.of(values["itl"]),
        e2el_ms=Summary.of(values["e2el"]),
        send_lag_ms=Summary.of(values["send_lag"]),
        errors=errors,
        late_read_share=sum(r.coalesced for r in ok) / gaps if gaps else 0.0,
        burst_requests=sum(r.read_in_burst for r in ok),
    )


def steady_share(records: Sequence[RequestRecord], concurrency: int, duration_s: float) -> float:
    """The share of the benchmark's duration a closed loop spent in its steady state: from the
    first moment all `concurrency` slots had a request in flight (the end of the ramp) to the
    first moment after the last send that a slot fell idle (the start of the drain). A slot's
    gap between one request's end and its next send inside that window is the client's own
    latency, not ramp or drain: it counts as steady (on 2 CPU cores, where client and server
    share the cores, such gaps left "every slot busy" true only 47% of a 9 s run)."""
    if concurrency <= 0 or duration_s <= 0 or not records:
        return 0.0
    events = sorted([(r.send_time, 1) for r in records]
                    + [(r.end_time if r.end_time is not None else r.send_time, -1)
                       for r in records])
    last_send = max(r.send_time for r in records)
    level, ramped, drain = 0, None, None
    for i, (t, step) in enumerate(events):
        level += step
        if i + 1 < len(events) and events[i + 1][0] == t:
            continue  # the slots' level once every event at this moment is counted
        if ramped is None and level >= concurrency:
            ramped = t
        elif ramped is not None and t >= last_send and level < concurrency:
            drain = t
            break
    if ramped is None or drain is None:  # never every slot busy: all ramp and drain
        return 0.0
    return min(max(min(drain, duration_s) - max(ramped, 0.0), 0.0) / duration_s, 1.0)


# "Too short to measure" (docs/noise.md says how these were set): a closed-loop benchmark that
# gives each concurrency slot fewer than MIN_PER_SLOT requests is one wave of requests, and one
# that spends less than MIN_STEADY of its time with every slot busy measures its ramp and drain
MIN_PER_SLOT = 1.9
MIN_STEADY = 0.5



def too_short(records: list[RequestRecord], concurrency: int | None, duration_s: float
              ) -> str | None:
    """Why a closed-loop measurement is too short to trust, or None."""
    if not concurrency or not records or duration_s <= 0:
        return None
    per_slot = len(records) / concurrency
    steady = steady_share(records, concurrency, duration_s)
    why, enough = [], math.ceil(MIN_PER_SLOT * concurrency)
    if per_slot < MIN_PER_SLOT:
        why.append(f"{per_slot:.2f} requests per concurrency slot (< {MIN_PER_SLOT:g})")
    if steady < MIN_STEADY:
        why.append(f"all {concurrency} slots busy for only {steady:.0%} of its "
                   f"{duration_s:.1f} s (< {MIN_STEADY:.0%})")
        # the ramp and drain take about as long with more requests, so the steady part must
        # grow by `extra_s`; a closed loop's steady rate is its slots over a request's latency
        extra_s = (MIN_STEADY - steady) * duration_s / (1 - MIN_STEADY)
        took = [r.end_time - r.send_time for r in records if r.end_time is not None]
        latency = statistics.median(took) if took else 0.0
        rate = concurrency / latency if latency > 0 else len(records) / duration_s
        enough = max(enough, math.ceil((len(records) + rate * extra_s) * 1.05))
    if not why:
        return None
    return (f"benchmark too short to measure: {' and '.join(why)}; raise profile.num_prompts "
            f"to at least {enough} (docs/noise.md)")
