"""From a trace (autotune.load.trace) to what a run sends: a window of it, its timeline
compressed by a speed-up, each prompt built from its blocks.

A window is the requests from a start onwards, the trace read as a loop (after its last
request the first comes again, one mean gap later), until it holds at least `min_requests` and
its arrivals, divided by the speed-up, span at least `min_span_s`: the faster the replay, the
more of the trace a window holds, as a rate point holds more requests at a higher rate. Its
arrivals are the recorded ones from the window's first, divided by the speed-up, so bursts and
lulls keep their shape.

A prompt with hash ids is its blocks' token ids one after another, the last block cut to the
prompt's length: block `h` is `block_size` token ids (none of them special) drawn with a
generator seeded by (salt, pass over the trace, h), so two requests that share an id share
that block's tokens exactly and the server's prefix cache finds what it found in production.
Token ids, not text: text re-tokenizes differently at a block's edge, ids reach the server as
they are. A request without hash ids gets tokens of its own; one with text sends its text. The
salt is the point's seed: no block one load point cached serves the next, as with the other
profiles (measure.capacity.point_seed). vLLM's `timed_trace` dataset builds its prompts the
same way (random token ids per hash id), so `vllm bench serve` can replay the same window
(`vllm_rows`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune.load.record import Request
from autotune.load.tokens import allowed_ids
from autotune.load.trace import Trace, TraceEntry

MAX_WINDOW = 1_000_000  # requests: a window that would need more is a mistake in its sizes


@dataclass(frozen=True)
class Window:
    """Which of a trace's requests a run sends, in order: (entry index, pass over the trace),
    and when, in seconds from the window's first at the speed-up."""

    picks: tuple[tuple[int, int], ...]
    arrivals: tuple[float, ...]
    speedup: float

    @property
    def span_s(self) -> float:
        return self.arrivals[-1] - self.arrivals[0]


def period(trace: Trace) -> float:
    """Seconds after which the looped trace starts again: its span and one mean gap."""
    n = len(trace.entries)
    return trace.span_s * n / (n - 1)


def window_start(trace: Trace, seed: int) -> int:
    """Where a window drawn with `seed` starts (fresh windows per sample: a new seed)."""
    return random.Random(seed).randrange(len(trace.entries))


def window(trace: Trace, start: int, min_requests: int, min_span_s: float, speedup: float
           ) -> Window:
    """The window from entry `start`: at least `min_requests`, spanning at least `min_span_s`
    once divided by `speedup`."""
    if speedup <= 0:
        raise ValueError(f"speedup {speedup:g}: must be above 0")
    n, loop = len(trace.entries), period(trace)
    picks: list[tuple[int, int]] = []
    times: list[float] = []
    k = start
    while True:
        i, p = k % n, k // n
        t = trace.entries[i].at_s + p * loop
        picks.append((i, p))
        times.append(t)
        if len(picks) >= min_requests and (t - times[0]) / speedup >= min_span_s:
            break
        if len(picks) >= MAX_WINDOW:
            raise ValueError(f"a window of {MAX_WINDOW} requests spans less than "
                             f"{min_span_s:g} s at speedup {speedup:g}")
        k += 1
    return Window(tuple(picks), tuple((t - times[0]) / speedup for t in times), speedup)


class Blocks:
    """Prompt token ids from hash ids (the module's docstring), drawn once per block."""

    def __init__(self, tokenizer: Any, block_size: int, salt: int) -> None:
        self.allowed = allowed_ids(tokenizer)
        self.size, self.salt = block_size, salt % 2**32
        self._drawn: dict[tuple[int, int], list[int]] = {}

    def _tokens(self, key: tuple[int, ...], n: int) -> list[int]:
        rng = np.random.default_rng([self.salt, *key])
        return [int(x) for x in rng.choice(self.allowed, size=n)]

    def block(self, h: int, loop: int) -> list[int]:
        if (h, loop) not in self._drawn:
            self._drawn[h, loop] = self._tokens((loop, 0, h), self.size)
        return self._drawn[h, loop]

    def prompt(self, e: TraceEntry, index: int, loop: int) -> str | list[int]:
        if e.text is not None:
            return e.text
        if not e.hash_ids:  # tokens of its own
            return self._tokens((loop, 1, index), e.input_len)
        ids = [t for h in e.hash_ids for t in self.block(h, loop)]
        return ids[:e.input_len]


def requests(trace: Trace, win: Window, blocks: Blocks) -> list[Request]:
    """The window's requests, each carrying its arrival (the load generator sends it then)."""
    out = []
    for (i, loop), at in zip(win.picks, win.arrivals, strict=True):
        e = trace.entries[i]
        out.append(Request(blocks.prompt(e, i, loop), e.input_len, e.output_len, at))
    return out


def warmup(trace: Trace, win: Window, n: int, blocks: Blocks) -> list[Request]:
    """The `n` requests recorded before the window's first (sent before the clock starts, not
    measured): the prefixes they share with the window are cached, as the traffic before it
    had cached them in production."""
    i0, loop = win.picks[0]
    count = len(trace.entries)
    out = []
    for k in range(n, 0, -1):
        i = (i0 - k) % count
        e = trace.entries[i]
        out.append(Request(blocks.prompt(e, i, loop), e.input_len, e.output_len))
    return out


def point(trace: Trace, tokenizer: Any, speedup: float, seed: int, min_requests: int,
          min_span_s: float, warm: int) -> tuple[list[Request], list[Request], Window]:
    """A load point's requests at `speedup`: a window drawn with `seed` (also the blocks'
    salt), its warm-up, and the window itself."""
    win = window(trace, window_start(trace, seed), min_requests, min_span_s, speedup)
    blocks = Blocks(tokenizer, trace.block_size, seed)
    return requests(trace, win, blocks), warmup(trace, win, warm, blocks), win


def vllm_rows(trace: Trace, win: Window) -> list[dict[str, Any]]:
    """The window as `vllm bench serve --dataset-name timed_trace` reads it: its recorded
    arrivals in seconds from its first (the line's --timed-trace-sec-multiplier 1/speedup
    compresses them), lengths, and hash ids that cover every prompt: a pass over the trace
    gets ids of its own (as `Blocks` salts each pass), and a request without ids gets new ones
    (vLLM builds a prompt from its ids alone). Text cannot go: vLLM's timed_trace has no field
    for it (callers refuse a trace with text, `Trace.has_text`)."""
    top = 1 + max((h for e in trace.entries for h in e.hash_ids), default=-1)
    fresh = top * (1 + max(p for _, p in win.picks))
    rows = []
    for (i, loop), at in zip(win.picks, win.arrivals, strict=True):
        e = trace.entries[i]
        if e.hash_ids:
            ids = [h + loop * top for h in e.hash_ids]
        else:
            need = -(-e.input_len // trace.block_size)
            ids = list(range(fresh, fresh + need))
            fresh += need
        rows.append({"timestamp": round(at * win.speedup, 6), "input_length": e.input_len,
                     "output_length": e.output_len, "hash_ids": ids})
    return rows


def write_vllm_trace(trace: Trace, win: Window, path: Path) -> Path:
    """`vllm_rows` as a JSONL file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in vllm_rows(trace, win)))
    return path
