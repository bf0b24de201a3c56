"""One request: what to send (`Request`: the prompt and its lengths in tokens) and what happened
to it (`RequestRecord`: what the load generator observed, in seconds from the benchmark's start).

The measure layer turns a run's records into `vllm bench serve`'s summary (measure/metrics.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    """One benchmark request: the prompt (text, token ids, or chat messages) and its lengths in
    tokens."""

    prompt: str | list[int] | list[dict[str, Any]]
    prompt_len: int
    output_len: int
    # seconds from the clock's zero at which to send it: a replayed trace's requests carry their
    # own schedule (autotune.load.trace); None: the run's rate (or concurrency) schedules it
    arrival_s: float | None = None


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request; times in seconds relative to the benchmark's start."""

    index: int
    send_time: float
    prompt_len: int
    expected_output_len: int
    first_token_time: float | None = None
    end_time: float | None = None
    chunk_times: tuple[float, ...] = ()
    prompt_tokens: int | None = None  # from the server's `usage`
    output_tokens: int = 0
    error: str | None = None
    # open loop: when the arrival schedule said to send it (send_time - this is the send lag)
    scheduled_time: float | None = None
    # seconds spent opening a new connection for it (None: a kept-alive one was reused)
    connect_s: float | None = None
    # when the response's headers came back: vLLM sends them once the request is in its engine
    headers_time: float | None = None
    # token events that reached the client in one read with an earlier token event of this
    # request, so stamped with the same time: the client read late (vLLM writes one event per
    # engine step; on 2 cores a client sharing the core vLLM's OpenMP thread is bound to read
    # whole streams at once, docs/load-generator.md "Late reads")
    coalesced: int = 0

    @property
    def success(self) -> bool:
        return self.error is None and self.first_token_time is not None

    @property
    def ttft(self) -> float:
        assert self.first_token_time is not None
        return self.first_token_time - self.send_time

    @property
    def e2el(self) -> float:
        assert self.end_time is not None
        return self.end_time - self.send_time

    @property
    def tpot(self) -> float:
        """Time per output token after the first (0 for a one-token reply)."""
        return (self.e2el - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 \
            else 0.0

    @property
    def send_lag(self) -> float | None:
        """Seconds between the scheduled arrival and the actual send (open loop only)."""
        return None if self.scheduled_time is None else self.send_time - self.scheduled_time

    @property
    def read_in_burst(self) -> bool:
        """At least half of its token gaps were read in one go with the token before: its
        TPOT and ITLs are the client's reading, not the server's streaming."""
        gaps = len(self.chunk_times) - 1
        return gaps >= 2 and 2 * self.coalesced >= gaps

    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]
