"""Which trials' per-token figures are a measurement artefact, not the server's: tokens read late
by the client, or a TPOT/ITL below what any searched flag can give (a burst). The study summary
(tuning/summary.py) never recommends one; every surface marks them."""

from __future__ import annotations

from autotune.tuning.record import TrialRecord

# more than this share of a run's token gaps read in one socket read with the token before: the
# TPOT and ITL are the client's reading (the capacity search's limit, measure/capacity.py)
MAX_LATE_READS = 0.1
# no searched flag makes decoding 10x faster per token than vLLM's defaults on the same machine
# (fp8 weights ~1.5-2x, a smaller batch less than that); speculation's k draft tokens raise that
# at most (k + 1)-fold. A mean TPOT or ITL below the defaults' / (FLOOR_SPEEDUP * (k + 1)) is a
# burst: the tokens reached the client together, not one decode step apart.
FLOOR_SPEEDUP = 10.0
PER_TOKEN = ("mean_tpot_ms", "mean_itl_ms")


def artefact(rec: TrialRecord, base: TrialRecord | None) -> str | None:
    """Why the trial's per-token figures are a measurement artefact (None: they are not). The
    client's own lag is checked first: late reads blame the client, a TPOT below the floor with
    none blames the delivery (a burst)."""
    m = rec.metrics
    late = m.get("late_read_share", 0.0)
    if late > MAX_LATE_READS:
        return (f"the client read {late:.0%} of its token gaps late (in one read with the token "
                "before): its TPOT/ITL are the client's, not the server's")
    if base is None or not base.measured or rec.baseline:
        return None
    spec = rec.flags.get("speculative_config")
    k = int(spec.get("num_speculative_tokens", 0)) if isinstance(spec, dict) else 0
    for name in PER_TOKEN:
        v, b = m.get(name), base.metrics.get(name)
        if v is not None and b and v < b / (FLOOR_SPEEDUP * (k + 1)):
            return (f"{name} {v:.3g} ms is below the floor {b / (FLOOR_SPEEDUP * (k + 1)):.3g} "
                    f"ms (vLLM's defaults' {b:.3g} ms / {FLOOR_SPEEDUP:g}"
                    + (f" / {k + 1}" if k else "") + "): its tokens arrived in a burst")
    return None


