"""The study file: what a user writes, validated at the edge (pydantic, `extra="forbid"`).

    base          the strict base model, YAML reading, one readable error per bad field
    workload      a trial's workload (requests, concurrency, rate), SLOs, suites
    capacity      the capacity mode's settings (each trial's search for the most load)
    study         the study file: server, search, objectives, storage, tracking; overrides
    metric_names  the metric vocabulary objectives and SLOs may name
    cache         where autotune keeps what it can compute again

The bottom layer: it imports nothing of autotune's but `autotune.errors`.
"""
