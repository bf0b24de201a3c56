"""What the server saw: vLLM's Prometheus /metrics, scraped before and after a benchmark.

Counters are read as the difference between the first and the last scrape (prefix-cache hits and
queries, preemptions, speculative draft and accepted tokens). Gauges (KV-cache usage, waiting
requests) need sampling during the run, which is off unless the profile sets
`metrics_interval_s` (each scrape is parsed in the load generator's event loop, which also
reads every stream), so their peaks are reported only when sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "preemptions": "vllm:num_preemptions_total",
    "spec_drafts": "vllm:spec_decode_num_drafts_total",
    "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
SPEC_COUNTS = tuple(k for k in COUNTERS if k.startswith("spec_"))
# accepted draft tokens by position (label `position`): over spec_drafts, the per-position
# unconditional acceptance rates (config/acceptance.py), read as server_spec_accepted_pos_<i>
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def spec_counts(stats: Iterable[dict[str, float]]) -> dict[str, float]:
    """The speculative-decoding counters (server_spec_drafts, ...) of several runs' or points'
    server stats, summed: deltas add up; those no run recorded are left out."""
    rows = list(stats)
    return {key: sum(r.get(key, 0.0) for r in rows) for key in
            (f"server_{c}" for c in SPEC_COUNTS) if any(key in r for r in rows)}


def last_split(stats: Iterable[dict[str, float]]) -> dict[str, float]:
    """vLLM's TTFT split (its TTFT, queue, prefill and the time outside the engine core) of the
    last of several runs' server stats where it held. A run stopped once its miss settled
    cancels its requests still out, whose queue and prefill vLLM never records, so its split
    is dropped (SPLIT_COUNTS); an earlier sample of the same point may still have one, and then
    `server_split_runs_back` says how many runs before the last it is. Empty when none held:
    the last run's own means then stand."""
    keys = [f"server_mean_{k}_ms" for k in ("ttft", "queue", "prefill", "outside_engine")]
    rows = list(stats)
    held = [i for i, r in enumerate(rows) if keys[-1] in r]
    if not held:
        return {}
    back = len(rows) - 1 - held[-1]
    return {k: rows[held[-1]][k] for k in keys if k in rows[held[-1]]} | (
        {"server_split_runs_back": float(back)} if back else {})


# Histograms read as their mean over the run (the sum's and the count's differences): vLLM's own
# TTFT (from the request's arrival in its front end, after the API server parsed and tokenized
# it, to the front end's handling of the first token), queue time (waiting in the engine's
# scheduler) and prefill time (scheduled to first token, in the engine). TTFT less queue and
# prefill is time outside the engine core: the hand-over to it and the first token's way back
# through the API server (`server_mean_outside_engine_ms`). Against the client's TTFT, a client
# TTFT far above the server's was spent before vLLM saw the request (an API server or a client
# that cannot keep up). Its per-request TPOT is the arbiter of the client's
# (docs/load-generator.md).
MEANS_MS = {
    "mean_ttft_ms": "vllm:time_to_first_token_seconds",
    "mean_queue_ms": "vllm:request_queue_time_seconds",
    "mean_prefill_ms": "vllm:request_prefill_time_seconds",
    "mean_tpot_ms": "vllm:request_time_per_output_token_seconds",
}
SPLIT_COUNTS = 0.1  # TTFT's, queue's and prefill's counts this close: the split holds
# vLLM's tokens an engine step (prompt tokens computed plus tokens generated), a histogram its
# front end observes once per step that returned outputs: over a run, its count is the engine's
# steps and its mean the batch a step carried; the wall time between the first and the last
# scrape over an engine's steps is the wall time a step, a ceiling on the step time (an engine
# idles between arrivals at a light load). Set against the tokens a step over many points, a
# boot whose steps take longer for the same tokens had a slower engine (lab/boot_spread.py);
# the time a token (wall time over tokens) is only the run's throughput inverted. Each data-
# parallel engine has its own series (label `engine`): the steps are an engine's, the mean of
# theirs. With more than one API server each observes the steps that carried its own requests
# (vLLM's note on the metric), so the steps read up to that many times too many: not comparable
# there (autotune/outputs/inside.py says so).
STEP_TOKENS = "vllm:iteration_tokens_total"
ENGINES = "autotune:step_engines"  # parse's count of the engines with a STEP_TOKENS series
GAUGES = {
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "requests_waiting": "vllm:num_requests_waiting",
}


def parse(text: str) -> dict[str, float]:
    """Sample name -> value summed over label sets (engines, models), and under ENGINES the
    number of engines that report STEP_TOKENS."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    engines = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + float(s.value)
            if s.name == PER_POS and "position" in s.labels:
                key = f"{PER_POS}:{s.labels['position']}"
                out[key] = out.get(key, 0.0) + float(s.value)
            if s.name == f"{STEP_TOKENS}_count":
                engines.add(s.labels.get("engine", ""))
    if engines:
        out[ENGINES] = float(len(engines))
    return out


@dataclass
class ServerStats:
    scrapes: int = 0
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)  # the first scrape's and the last's

    def add(self, sample: dict[str, float], at: float | None = None) -> None:
        """One scrape; `at`: when it was taken (time.monotonic(), the default)."""
        at = time.monotonic() if at is None else at
        if not self.first:
            self.first, self.times = sample, [at, at]
        self.last, self.times[1] = sample, at
        self.scrapes += 1
        for key, name in GAUGES.items():
            if name in sample:
                self.peaks[key] = max(self.peaks.get(key, 0.0), sample[name])

    def summary(self) -> dict[str, float]:
        """Flat `server_*` metrics for the trial record."""
        d = {k: self.last.get(n, 0.0) - self.first.get(n, 0.0) for k, n in COUNTERS.items()
             if n in self.last}
        out = {f"server_{k}": v for k, v in d.items()}
        counts = {}
        for key, name in MEANS_MS.items():
            count = self.last.get(f"{name}_count", 0.0) - self.first.get(f"{name}_count", 0.0)
            counts[key] = count
            if count:
                total = self.last.get(f"{name}_sum", 0.0) - self.first.get(f"{name}_sum", 0.0)
                out[f"server_{key}"] = 1000.0 * total / count
        parts = [out.get(f"server_mean_{k}_ms") for k in ("ttft", "queue", "prefill")]
        # TTFT counts a request at its first token, queue and prefill at its end: the split
        # holds only where they counted the same requests (within SPLIT_COUNTS), as over a run
        # that waited for its last reply
        n = [counts[f"mean_{k}_ms"] for k in ("ttft", "queue", "prefill")]
        if None not in parts and max(n) <= (1 + SPLIT_COUNTS) * min(n):
            ttft, queue, prefill = (float(x or 0.0) for x in parts)
            out["server_mean_outside_engine_ms"] = max(0.0, ttft - queue - prefill)
        out.update(self.steps())
        # gauges sampled during the run (every scrape but the first and the last); a benchmark
        # shorter than the sampling interval has none, and then no peak is reported
        samples = max(self.scrapes - 2, 0)
        out["server_gauge_samples"] = float(samples)
        if samples:
            out.update({f"server_peak_{k}": v for k, v in self.peaks.items()})
        if d.get("prefix_cache_queries"):
            out["server_prefix_cache_hit_rate"] = d["prefix_cache_hits"] / d[
                "prefix_cache_queries"]
        out.update({f"server_{k}": v for k, v in spec_rates(d).items()})
        out.update({f"server_spec_accepted_pos_{n.rpartition(':')[2]}": v - self.first.get(n, 0.0)
                    for n, v in self.last.items() if n.startswith(f"{PER_POS}:")})
        return out

    def steps(self) -> dict[str, float]:
        """An engine's steps between the first and the last scrape (STEP_TOKENS; the mean over
        data-parallel engines), the tokens a step carried and the wall time a step; nothing
        where vLLM stepped none or a scrape lacks the histogram."""
        key = f"{STEP_TOKENS}_count"
        if key not in self.first or key not in self.last:
            return {}
        n, tokens = (self.last.get(f"{STEP_TOKENS}_{k}", 0.0)
                     - self.first.get(f"{STEP_TOKENS}_{k}", 0.0) for k in ("count", "sum"))
        if n <= 0:
            return {}
        engines = self.last.get(ENGINES, 1.0)
        return {"server_engine_steps": n / engines, "server_mean_step_tokens": tokens / n,
                "server_wall_ms_per_step": 1000.0 * (self.times[1] - self.times[0]) * engines / n,
                "server_step_engines": engines}


def spec_rates(d: dict[str, float]) -> dict[str, float]:
    """From speculative-decoding counter deltas (spec_drafts, spec_draft_tokens,
    spec_accepted_tokens): the share of draft tokens accepted and the mean accepted length
    (tokens a step: the target's own one plus those accepted); only what the counts allow."""
    out = {}
    if d.get("spec_draft_tokens"):
        out["spec_acceptance_rate"] = d.get("spec_accepted_tokens", 0.0) / d["spec_draft_tokens"]
    if d.get("spec_drafts"):
        out["spec_mean_accepted_len"] = 1.0 + d.get("spec_accepted_tokens", 0.0) / d["spec_drafts"]
    return out


def scrape_url(url: str) -> dict[str, float]:
    """One scrape of `url`'s /metrics outside an event loop (empty when it gives none): the
    reference check's reading before and after each `vllm bench serve` run."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        r = httpx.get(url.rstrip("/") + "/metrics", timeout=httpx.Timeout(10.0))
        if r.status_code == 200:
            return parse(r.text)
    return {}


async def scrape_once(client: httpx.AsyncClient, stats: ServerStats) -> None:
    """One scrape of /metrics; a failed scrape is skipped, never fatal."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        r = await client.get("/metrics", timeout=5.0)
        if r.status_code == 200:
            stats.add(parse(r.text))


async def poll(client: httpx.AsyncClient, stats: ServerStats, interval_s: float) -> None:
    """Scrape /metrics every `interval_s` until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        await scrape_once(client, stats)
