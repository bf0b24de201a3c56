"""One measurement: `vllm bench serve`'s metrics, statistics, the capacity search, and the one
boot -> bench -> stop runner.

    metrics   per-request records -> the summary `vllm bench serve` prints (pure)
    stats     intervals (bootstrap, order statistics), pooled gains
    capacity  the capacity search under SLOs: points, verdicts, the knee
    runner    boot a server, run a benchmark (one load, a suite, a capacity search), stop it

Never imports Optuna or MLflow: a trial's numbers come back as types; side effects are callbacks.
"""
