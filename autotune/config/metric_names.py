"""The metric vocabulary a study file may name (objectives, SLOs): `vllm bench serve`'s summary
fields, flattened as `BenchMetrics.flat` writes them (measure/metrics.py computes them)."""

from __future__ import annotations

import difflib
import math

SUMMARIZED = ("ttft", "tpot", "itl", "e2el", "send_lag")
# the metric counting failed requests: what a load point's miss on failures is on
FAILED = "failed"
# the percentile each statistic's name stands for (an SLO on p99_ttft_ms is on the 99th)
QUANTILES = {"p99": 99.0, "p90": 90.0, "median": 50.0}
METRIC_NAMES = tuple(
    ["duration_s", "completed", FAILED, "total_input_tokens", "total_output_tokens"]
    + ["request_throughput", "output_throughput", "total_token_throughput"]
    + [
        f"{s}_{n}_ms"
        for n in SUMMARIZED
        for s in ("mean", "median", "p90", "p99", "std")
    ]
)


# what a capacity search adds to a trial's metrics (autotune.measure.capacity); every other
# metric of a capacity trial is its value at the capacity point
CAPACITY_METRICS = ("capacity", "capacity_req_s", "goodput_tok_s")
# metrics that also exist per GPU the server uses (`<metric>_per_gpu`), so layouts that use
# different numbers of GPUs compare fairly
PER_GPU_BASES = ("request_throughput", "output_throughput", "total_token_throughput",
                 *CAPACITY_METRICS)
PER_GPU = "_per_gpu"


def base_metric(metric: str) -> str:
    """`capacity_per_gpu` -> `capacity`; any other metric is its own base."""
    if metric.endswith(PER_GPU) and metric[:-len(PER_GPU)] in PER_GPU_BASES:
        return metric[:-len(PER_GPU)]
    return metric


def per_gpu(metrics: dict[str, float], gpus: int) -> dict[str, float]:
    """The per-GPU values of the metrics that have one: the value divided by the GPUs the
    server used (a server that uses 1 GPU of a trial's 2 is scored on its 1: the other can run
    another replica)."""
    return {m + PER_GPU: metrics[m] / gpus for m in PER_GPU_BASES if m in metrics}


def lower_is_better(metric: str) -> bool:
    """A latency (any *_ms), a run's duration or its failures: smaller is better."""
    return base_metric(metric).endswith("_ms") or metric in (FAILED, "duration_s")


def did_you_mean(v: str, names: list[str]) -> str:
    """' (did you mean 'p99_ttft_ms'?)' for a near miss of one of `names`, else ''."""
    near = difflib.get_close_matches(v, names, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def known_metric(v: str) -> str:
    """A metric a single measurement produces (SLOs judge these)."""
    if v not in METRIC_NAMES:
        raise ValueError(f"unknown metric {v!r}{did_you_mean(v, list(METRIC_NAMES))}; known: "
                         f"{', '.join(METRIC_NAMES)}")
    return v


def objective_metric(v: str) -> str:
    """A metric a study can optimize: a measured one, or one of the capacity search's."""
    base = base_metric(v)
    if base not in METRIC_NAMES and base not in CAPACITY_METRICS:
        names = [*METRIC_NAMES, *CAPACITY_METRICS, *(m + PER_GPU for m in PER_GPU_BASES)]
        raise ValueError(f"unknown metric {v!r}{did_you_mean(v, names)}; known: "
                         f"{', '.join(CAPACITY_METRICS)} (with a "
                         f"capacity: section), {', '.join(METRIC_NAMES)}; "
                         f"{', '.join(PER_GPU_BASES)} also as <metric>{PER_GPU}")
    return v


def min_requests(metric: str) -> int:
    """Successful requests a measurement needs before `metric` can be judged: 100 / (100 - q)
    for a q-th percentile (p99: 100, p90: 10, median: 2), 1 for a mean or a throughput."""
    stat = metric.split("_", 1)[0]
    q = QUANTILES.get(stat)
    return 1 if q is None else math.ceil(100.0 / (100.0 - q) - 1e-9)
