"""The metric vocabulary a study file may name (objectives, SLOs): `vllm bench serve`'s summary
fields, flattened as `BenchMetrics.flat` writes them (measure/metrics.py computes them)."""

from __future__ import annotations

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
