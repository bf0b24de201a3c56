"""What a capacity point sends: its measured requests and its warm-up's.

Each point draws its own, with the point's seed (the same for every trial at that load,
measure.capacity.point_seed): the profile's kind drawn with the seed (a dataset at random, so
points share no prompts), or on the speedup axis a window of the trace whose timeline the load
compresses (autotune.load.replay), sized as a rate point is: at least the point's requests and
min_duration_s of arrivals. The warm-up's requests are those drawn after the measured ones (a
trace's: those recorded just before its window), their output cut to WARMUP_TOKENS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.config.capacity import CapacityConfig
from autotune.config.workload import ProfileConfig
from autotune.load import replay
from autotune.load.datasets import sample_requests
from autotune.load.record import Request
from autotune.load.trace import Trace

# A warm-up opens connections and wakes the server's paths: a few tokens do that, and a long
# ShareGPT reply would only make every point wait for it.
WARMUP_TOKENS = 16


@dataclass(frozen=True)
class Drawn:
    requests: list[Request]
    warm: list[Request]
    arrivals_s: float | None = None  # a trace window's span, at the point's speed-up

    def stats(self) -> dict[str, float]:
        """What the point records of its window (client_limit reads its span)."""
        if self.arrivals_s is None:
            return {}
        return {"arrivals_s": self.arrivals_s, "window_requests": float(len(self.requests))}


def draw(profile: ProfileConfig, cap: CapacityConfig, tokenizer: Any, tokenizer_dir: str,
         trace: Trace | None, load: float, seed: int, n: int | None = None,
         max_len: int | None = None) -> Drawn:
    """The point's requests at `load` (`n`: this many at least instead of a point's own); a
    dataset's within `max_len` tokens (a trace comes read within it)."""
    full, n = n is None, n or cap.requests_at(load)
    if trace is not None:
        reqs, pre, win = replay.point(trace, tokenizer, load, seed, n,
                                      cap.min_duration_s if full else 0.0, cap.warmup)
        return Drawn(reqs, _short(pre), win.span_s)
    drawn = profile.model_copy(update={"sample": "random"}) if profile.path else profile
    reqs = sample_requests(drawn, tokenizer, n + cap.warmup, seed, tokenizer_dir, max_len)
    return Drawn(reqs[:n], _short(reqs[n:]))


def _short(reqs: list[Request]) -> list[Request]:
    return [Request(r.prompt, r.prompt_len, min(r.output_len, WARMUP_TOKENS)) for r in reqs]
