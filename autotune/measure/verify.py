"""Whether the reference client agrees with a found capacity: `vllm bench serve`, on a running
server, at the capacity C and at C x (1 + tolerance), each judged against the SLOs. A capacity it
agrees with meets at C and misses above (issue 46, docs/capacity.md).

One run a rate is no verdict for a p99 SLO: on one warm H100 MoE server one sample's p99 TPOT at
a fixed rate ranged over 30-66% of that rate's median (docs/results/warm-server-h100,
`verdict_wellposed`). So each rate runs `samples` fresh request samples (new seeds), the two
rates alternating in a shuffled order, and is judged on the median over its samples of each
figure, as a capacity point is (`capacity.samples`); a failed request in any sample is a miss.
Before them, one run at C is not judged: the first load after a boot compiles kernels. Given
the server's log, a measured run whose span of it holds vLLM's "JIT compilation during
inference" warning is run once more. `autotune export --verify` and lab/reference_check.py
run it.
"""

from __future__ import annotations

import math
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.config.capacity import CapacityConfig
from autotune.config.workload import PRESETS, ProfileConfig, SLOConfig
from autotune.errors import ConfigError
from autotune.load import replay
from autotune.load.trace import Trace
from autotune.measure.reference import reference_client, run_reference
from autotune.server.jit import LogSpan
from autotune.server.scrape import ServerStats, scrape_url

# the reference's mean TPOT this far from the server's own (vLLM's per-request TPOT histogram)
# is its client's reading, not the server's: on 2 busy cores it read 12-34% low in 3 of 5 runs
# (docs/load-generator.md)
OFF_SERVER = 0.15
# the SLO metrics `vllm bench serve` reports (run_reference asks for these percentiles)
JUDGED = re.compile(r"(mean|median|std|p50|p90|p99)_(ttft|tpot|itl|e2el)_ms|"
                    r"(request|output|total_token)_throughput")
REPORTED = ("p99_ttft_ms", "mean_ttft_ms", "p99_tpot_ms", "mean_tpot_ms",
            "request_throughput", "completed", "failed", "duration")


@dataclass(frozen=True)
class Target:
    """What is checked and how each run is sized: the capacity on its axis ("rate": requests/s,
    "concurrency": requests in flight), the search's tolerance, and a run's requests at a load
    (as the capacity search sizes a point)."""

    capacity: float
    axis: str
    tolerance: float
    requests: int  # at least this many a run
    per_unit: float  # and load x this many (seconds of arrivals, or requests a slot)

    def above(self) -> float:
        """C x (1 + tolerance); on the concurrency axis the whole slots under it (the search's
        failing load was at most that), one slot above C at least."""
        up = self.capacity * (1 + self.tolerance)
        return up if self.axis != "concurrency" else float(max(math.floor(up + 1e-9),
                                                               int(self.capacity) + 1))

    def requests_at(self, load: float) -> int:
        return max(self.requests, math.ceil(self.per_unit * load))


def capacity_target(cap: CapacityConfig, capacity: float) -> Target:
    """A found capacity as the reference checks it, each run sized as the search sized a point;
    on the concurrency axis the whole slots (a pooled median may fall between two)."""
    c = float(math.floor(capacity)) if cap.axis == "concurrency" else capacity
    per = cap.requests_per_slot if cap.axis == "concurrency" else cap.min_duration_s
    return Target(c, cap.axis, cap.tolerance, cap.requests_per_point, per)


def at_load(profile: ProfileConfig, target: Target, load: float, n: int | None = None
            ) -> ProfileConfig:
    """The workload one reference run sends at `load` (requests/s, requests in flight, or a
    trace's speed-up; a trace's window is written per run, `trace_window`)."""
    key = {"concurrency": "max_concurrency", "speedup": "speedup"}.get(target.axis,
                                                                      "request_rate")
    at: dict[str, Any] = {key: int(load) if key == "max_concurrency" else load}
    return profile.model_copy(update={"num_prompts": n or target.requests_at(load), **at})


def trace_window(trace: Trace, profile: ProfileConfig, target: Target, load: float, seed: int,
                 out_dir: Path, n: int | None = None) -> ProfileConfig:
    """A trace's reference run at speed-up `load`: a window drawn with `seed` and sized as a
    capacity point's (or `n` requests: the warm-up), written as vLLM's timed_trace reads it;
    the profile points at that file and sends its requests."""
    win = replay.window(trace, replay.window_start(trace, seed), n or target.requests,
                        0.0 if n else target.per_unit, load)
    path = replay.write_vllm_trace(trace, win, out_dir / f"window-x{load:g}-s{seed}.jsonl")
    return profile.model_copy(update={"path": str(path), "num_prompts": len(win.picks),
                                      "speedup": load})


@dataclass(frozen=True)
class RateCheck:
    """One run as the reference measured it, and its verdict against the SLOs."""

    label: str  # "C" or "C x 1.1" ("": the unjudged warm-up)
    rate: float  # the load: requests/s, or requests in flight
    num_prompts: int
    seed: int
    metrics: dict[str, float] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)
    verdict: str = ""  # meets / misses
    jit_events: int | None = None  # None: no server log to read
    jit_remeasured: bool = False
    result_file: str = ""
    server: dict[str, float] = field(default_factory=dict)  # vLLM's own /metrics over the run


def can_judge(profile: ProfileConfig, slos: Sequence[SLOConfig]) -> None:
    """Whether the reference can run this workload and judge these SLOs (ConfigError naming the
    field if not): checked before a server boots."""
    if profile.name not in ("random", "sharegpt", "trace", *PRESETS):
        raise ConfigError(f"profile.name: {profile.name}: the reference check runs `vllm bench "
                          "serve` on the random, preset, sharegpt and trace profiles only; "
                          "check this config with `export --validate`")
    for i, s in enumerate(slos):
        if not JUDGED.fullmatch(s.metric):
            raise ConfigError(f"slos[{i}].metric: {s.metric} is not a figure `vllm bench serve` "
                              "reports (it reports the mean, median and p50/p90/p99 of "
                              "ttft/tpot/itl/e2el in ms, and request/output/total_token "
                              "throughput), so the reference check cannot judge it")


def judge(metrics: dict[str, float], slos: Sequence[SLOConfig], sent: int) -> list[str]:
    """What missed: each SLO whose value breaks it, and failed requests."""
    misses = []
    for s in slos:
        if s.metric not in metrics:
            raise ConfigError(f"slo {s.text()}: vllm bench serve reports no {s.metric} (it "
                              f"reports {', '.join(sorted(k for k in metrics if '_' in k))})")
        if s.violation(metrics[s.metric]) > 0:
            misses.append(f"{s.metric} {metrics[s.metric]:.1f} (target {s.text()})")
    done = int(metrics.get("completed", sent))
    if done < sent:
        misses.append(f"{sent - done} of {sent} requests failed")
    return misses


@dataclass(frozen=True)
class Reference:
    """The reference client's command and the server it measures."""

    vllm: Sequence[str]
    url: str
    model: str
    tokenizer: str
    profile: ProfileConfig  # the workload; its load and size are set per run
    log: Path | None = None  # the server's log, to find kernels compiling during a run
    trace: Trace | None = None  # a trace profile's requests, read (a window is sent per run)


def check_rate(ref: Reference, target: Target, slos: Sequence[SLOConfig], label: str,
               load: float, seed: int, out_dir: Path, n: int | None = None) -> RateCheck:
    profile = at_load(ref.profile, target, load, n).model_copy(update={"seed": seed})
    if ref.trace is not None:
        profile = trace_window(ref.trace, profile, target, load, seed, out_dir, n)
    n = profile.num_prompts
    span = LogSpan(ref.log)
    keep = (*REPORTED, *(s.metric for s in slos))  # the SLOs' own figures too
    for attempt in range(2):
        span.mark()
        out = out_dir / f"reference-r{load:g}-s{seed}-{attempt}.json"
        # vLLM's own histograms over the run (its --num-warmups requests too: a few short ones)
        before = scrape_url(ref.url)
        res = run_reference(ref.vllm, ref.url, ref.model, ref.tokenizer, profile, out)
        after = scrape_url(ref.url)
        server: dict[str, float] = {}
        if before and after:  # a failed scrape would read the server's whole life as the run's
            stats = ServerStats()
            stats.add(before)
            stats.add(after)
            # vLLM's means (the tokens a step among them); not the wall time a step, whose
            # window here also holds `vllm bench serve` starting up and its warm-ups
            server = {k: v for k, v in stats.summary().items() if k.startswith("server_mean")}
        events = len(span.events()) if ref.log is not None else None
        misses = judge(res.metrics, slos, n)
        # a run with a kernel compiling inside it is measured once again (a warm-up is kept)
        if not events or not label or attempt == 1:
            return RateCheck(label, load, n, seed,
                             metrics={k: res.metrics[k] for k in keep if k in res.metrics},
                             misses=misses, verdict="misses" if misses else "meets",
                             jit_events=events, jit_remeasured=attempt == 1,
                             result_file=str(out), server=server)
    raise AssertionError("unreachable: the second attempt returns")


def pooled(label: str, load: float, samples: list[RateCheck], slos: Sequence[SLOConfig]
           ) -> dict[str, Any]:
    """One rate judged on its samples: the median of each figure over them, checked against
    the SLOs; a request that failed in any sample is a miss."""
    keys = sorted(set.intersection(*(set(c.metrics) for c in samples)))
    med = {k: statistics.median(c.metrics[k] for c in samples) for k in keys}
    misses = judge({k: v for k, v in med.items() if k != "completed"}, slos, 0)
    failed = sum(c.num_prompts - int(c.metrics.get("completed", c.num_prompts))
                 for c in samples)
    if failed:
        misses.append(f"{failed} of {sum(c.num_prompts for c in samples)} requests failed "
                      f"over {len(samples)} samples")
    keys = sorted(set.intersection(*(set(c.server) for c in samples)))
    server = {k: statistics.median(c.server[k] for c in samples) for k in keys}
    return {"label": label, "rate": load, "samples_n": len(samples), "metrics": med,
            "server": server,
            "misses": misses, "verdict": "misses" if misses else "meets", "failed": failed,
            "meets_share": sum(c.verdict == "meets" for c in samples) / len(samples),
            "jit_events": None if any(c.jit_events is None for c in samples) else
            sum(c.jit_events or 0 for c in samples),
            "samples": [asdict(c) for c in samples]}


def run_line(c: RateCheck, i: int, samples: int) -> str:
    """One reference run as it lands (`verify`'s on_run): its load, sample and verdict."""
    m = c.metrics
    what = "warm-up (not judged)" if not c.label else \
        f"{c.label} sample {i}/{samples}: {c.verdict}"
    return (f"{what} at {c.rate:g}: p99 TTFT {m.get('p99_ttft_ms', math.nan):,.0f} ms, p99 "
            f"TPOT {m.get('p99_tpot_ms', math.nan):,.1f} ms"
            + (f"; {'; '.join(c.misses)}" if c.misses and c.label else ""))


def verify(ref: Reference, target: Target, slos: Sequence[SLOConfig], samples: int,
           out_dir: Path, seed: int = 0, warmup: int | None = None, ceiling: bool = False,
           on_run: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The check, as a JSON document: the unjudged warm-up run at C (`warmup` requests; None:
    a run's size, 0: none), then per rate the samples' medians, what missed and the verdict;
    `verdicts_agree`: meets at C and misses at C x (1 + tolerance). With `ceiling` (the
    search's high end passed: C is a lower bound) only C is checked. `on_run` gets each run's
    line as it lands (`run_line`)."""
    said = on_run or (lambda _line: None)
    if target.capacity <= 0:
        raise ConfigError(f"capacity {target.capacity:g}: nothing to check (the search found "
                          "no load that met the SLOs)")
    if samples < 1:
        raise ConfigError(f"samples {samples}: at least 1 (3 or more to judge a p99)")
    can_judge(ref.profile, slos)
    out_dir.mkdir(parents=True, exist_ok=True)
    # one process of vLLM's Python runs every run of the check (reference_client)
    with reference_client(ref.vllm, out_dir / "reference-client.log"):
        doc: dict[str, Any] = {"capacity": target.capacity, "axis": target.axis,
                               "tolerance": target.tolerance, "slos": [s.text() for s in slos],
                               "slo_metrics": [s.metric for s in slos], "samples": samples,
                               "url": ref.url, "seed": seed}
        if warmup != 0:
            t0 = time.monotonic()
            w = check_rate(ref, target, slos, "", target.capacity, seed + 1, out_dir, warmup)
            doc["warmup"] = asdict(w) | {"s": round(time.monotonic() - t0, 1)}
            said(run_line(w, 0, samples))
        rates = [("C", target.capacity), (f"C x {1 + target.tolerance:g}", target.above())]
        if ceiling:
            rates = rates[:1]
            doc["above"] = ("not checked: the search measured no failing load above it (its high "
                            "end passed, or it stopped early), so the capacity is a lower bound")
        runs: dict[str, list[RateCheck]] = {lab: [] for lab, _ in rates}
        order = random.Random(seed)
        for i in range(samples):  # fresh seeds each sample; the rates' order shuffled
            for j in order.sample(range(len(rates)), len(rates)):
                lab, load = rates[j]
                runs[lab].append(check_rate(ref, target, slos, lab, load, seed + 2 + 2 * i + j,
                                            out_dir))
                said(run_line(runs[lab][-1], i + 1, samples))
        doc["rates"] = [pooled(lab, load, runs[lab], slos) for lab, load in rates]
        doc["verdicts_agree"] = (doc["rates"][0]["verdict"] == "meets"
                                 and (ceiling or doc["rates"][1]["verdict"] == "misses"))
        # a verdict against C decided by a split of samples is inside their spread: on an H100 near
        # the knee one sample's p99 TPOT spanned 34-66% at a fixed rate (warm-server-h100)
        want = ["meets", "misses"]
        doc["split"] = [c["label"] for c, w in zip(doc["rates"], want, strict=False)
                        if c["verdict"] != w and 0 < c["meets_share"] < 1 and not c["failed"]]
        doc["jit_events_in_measured"] = (None if ref.log is None else
                                         sum(c["jit_events"] or 0 for c in doc["rates"]))
        return doc


def lines(doc: dict[str, Any]) -> list[str]:
    """The check in a few lines: each rate's verdict and figures, then whether it agrees."""
    unit = {"rate": "req/s", "speedup": "x rate"}.get(doc["axis"], "in flight")
    out = []
    for c in doc["rates"]:
        m = c["metrics"]
        shown = dict.fromkeys([*doc.get("slo_metrics", []), "p99_ttft_ms", "p99_tpot_ms"])
        out.append(f"{c['label']:>9} {c['rate']:8.2f} {unit}: {c['verdict']:6} "
                   f"({c['meets_share']:.0%} of {c['samples_n']} samples meet) "
                   + ", ".join(f"{k} {m[k]:,.1f}" for k in shown if k in m)
                   + (f"; {'; '.join(c['misses'])}" if c["misses"] else ""))
        own, read = c.get("server", {}).get("server_mean_tpot_ms"), m.get("mean_tpot_ms")
        if own and read and abs(read / own - 1) > OFF_SERVER:
            out.append(f"{'':>9} the reference read mean TPOT {read:,.1f} ms, the server's "
                       f"own (/metrics) {own:,.1f}: {read / own - 1:+.0%}, its client is off "
                       "(docs/load-generator.md)")
    c, up = doc["rates"][0], doc["rates"][-1]
    if "above" in doc:
        out.append(f"the reference {'agrees' if doc['verdicts_agree'] else 'DISAGREES'}: it "
                   f"{c['verdict']} the SLOs at the capacity; above it {doc['above']}")
    elif doc["verdicts_agree"]:
        out.append("the reference agrees: it meets the SLOs at the capacity and misses "
                   f"{doc['tolerance']:.0%} above")
    else:
        said = [f"it {'meets' if c['verdict'] == 'meets' else 'MISSES'} at the capacity",
                f"{'MEETS' if up['verdict'] == 'meets' else 'misses'} {doc['tolerance']:.0%} "
                "above"]
        out.append("the reference DISAGREES: " + ", ".join(said) + (
            " (the capacity is high)" if c["verdict"] == "misses" else
            " (the capacity is low)"))
    for lab in doc.get("split", []):
        r = next(x for x in doc["rates"] if x["label"] == lab)
        out.append(f"  at {lab} its samples split ({r['meets_share']:.0%} of {r['samples_n']} "
                   f"meet): from sample to sample the SLO's figure moves more than a "
                   f"{doc['tolerance']:.0%} step in load does, so this check cannot place the "
                   "capacity that finely; more samples (--verify-samples) narrow it")
    return out
