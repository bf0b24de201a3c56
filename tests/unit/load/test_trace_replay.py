"""A trace's window, its timeline compressed, its prompts built from hash ids, and the same
window as vLLM's timed_trace dataset reads it; the trace generator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.load import maketrace, replay
from autotune.load.trace import Trace, TraceEntry, read_trace


@pytest.fixture(scope="module")
def tok(tiny_model: Path) -> Any:
    from autotune.load.datasets import load_tokenizer

    return load_tokenizer(str(tiny_model))


def trace(entries: list[TraceEntry], block: int = 4) -> Trace:
    return Trace(tuple(entries), "t.jsonl", block, len(entries))


TEN = trace([TraceEntry(float(i * i), 6, 3, (0, 10 + i)) for i in range(10)])  # span 81 s


def test_a_window_compresses_the_recorded_gaps_and_loops() -> None:
    w = replay.window(TEN, 7, 3, 0.0, 2.0)
    assert w.picks == ((7, 0), (8, 0), (9, 0))
    assert w.arrivals == pytest.approx([0.0, 15 / 2, 32 / 2])  # 49 -> 64 -> 81, halved
    # past the last request the trace starts again one mean gap (81 / 9) later
    w = replay.window(TEN, 9, 3, 0.0, 1.0)
    assert w.picks == ((9, 0), (0, 1), (1, 1))
    assert w.arrivals == pytest.approx([0.0, 9.0, 10.0])
    # the span rule: at least min_span_s once compressed, so a faster replay holds more
    slow = replay.window(TEN, 0, 2, 40.0, 1.0)
    fast = replay.window(TEN, 0, 2, 40.0, 2.0)
    assert slow.span_s >= 40 and fast.span_s >= 40 and len(fast.picks) > len(slow.picks)
    starts = {replay.window_start(TEN, s) for s in range(50)}
    assert len(starts) > 5  # fresh windows per sample (a new seed)


def test_shared_hash_ids_share_tokens_exactly(tok: Any) -> None:
    """Requests that share a block share its token ids; other blocks differ; a new salt (a
    load point's seed) or a new pass over the trace draws new ones; no special token."""
    from autotune.load.tokens import special_ids

    t = trace([TraceEntry(0.0, 10, 2, (0, 1, 2)), TraceEntry(1.0, 9, 2, (0, 1, 3)),
               TraceEntry(2.0, 5, 2), TraceEntry(3.0, 3, 2, text="hi")], block=4)
    w = replay.window(t, 0, 6, 0.0, 1.0)
    reqs = replay.requests(t, w, replay.Blocks(tok, 4, salt=7))
    a, b, c, d, a2, b2 = (r.prompt for r in reqs)
    assert isinstance(a, list) and isinstance(b, list) and isinstance(c, list)
    assert len(a) == 10 and len(b) == 9 and len(c) == 5 and d == "hi"
    assert a[:8] == b[:8] and a[8:9] != b[8:9]
    assert not set(a + b + c) & special_ids(tok)
    assert [r.arrival_s for r in reqs] == pytest.approx([0, 1, 2, 3, 4, 5])
    assert isinstance(a2, list) and a2[:8] != a[:8]  # the second pass: new blocks
    assert a2[:8] == b2[:8]  # ... still shared within it
    other = replay.requests(t, w, replay.Blocks(tok, 4, salt=8))[0].prompt
    assert other != a
    # the warm-up: the requests recorded just before the window, same blocks
    w = replay.window(t, 1, 2, 0.0, 1.0)
    warm = replay.warmup(t, w, 1, replay.Blocks(tok, 4, salt=7))
    assert warm[0].prompt == a and warm[0].arrival_s is None


def test_vllm_rows_cover_every_prompt_with_ids() -> None:
    """vLLM's timed_trace builds a prompt from its hash ids alone, block_size tokens each:
    a request without ids gets fresh ones, a second pass ids of its own; the timestamps are
    the recorded ones from the window's first (its sec multiplier divides them)."""
    t = trace([TraceEntry(0.0, 10, 2, (0, 1, 2)), TraceEntry(1.0, 9, 2),
               TraceEntry(3.0, 5, 2, (0, 4))], block=4)
    w = replay.window(t, 1, 4, 0.0, 2.0)
    rows = replay.vllm_rows(t, w)
    assert [r["timestamp"] for r in rows] == pytest.approx([0.0, 2.0, 3.5, 4.5])
    assert [len(r["hash_ids"]) for r in rows] == [3, 2, 3, 3]
    assert rows[1]["hash_ids"] == [0, 4]  # the recorded ids
    assert rows[2]["hash_ids"] == [5, 6, 7]  # pass 1: shifted past the trace's largest id
    assert rows[0]["hash_ids"] == [10, 11, 12] and rows[3]["hash_ids"] == [13, 14, 15]
    assert set(rows[0]) == {"timestamp", "input_length", "output_length", "hash_ids"}


def test_generated_trace_is_bursty_shares_prefixes_and_reads_back(tmp_path: Path,
                                                                  tok: Any) -> None:
    spec = maketrace.TraceSpec(requests=400, rate=4.0, burstiness=0.25, system_prompts=3,
                               system_len=100, block_size=64, max_output_len=50, seed=1)
    rows = maketrace.rows(spec, tok)
    d = maketrace.describe(rows)
    assert d["rate"] == pytest.approx(4.0, rel=1e-3)  # scaled to the asked rate
    assert d["gap_cv"] > 1.4  # 1 / sqrt(0.25) = 2 in theory: burstier than Poisson
    assert d["repeated_block_share"] > 0.2 and d["mean_output_len"] <= 50
    sys_ids = {tuple(r["hash_ids"][:2]) for r in rows}
    assert sys_ids == {(0, 1), (2, 3), (4, 5)}  # 100 tokens: two blocks of 64 each
    path = tmp_path / "g.csv"
    maketrace.write(rows, path)
    t = read_trace(str(path), "s", 64, tok, None)
    assert len(t.entries) == 400 and t.entries[5].hash_ids == tuple(rows[5]["hash_ids"])
    on = maketrace.rows(maketrace.TraceSpec(requests=400, rate=4.0, arrivals="onoff",
                                            system_prompts=0, block_size=64, seed=2), tok)
    assert maketrace.describe(on)["peak_10s_over_mean"] > 1.5
    assert on[0]["hash_ids"] == list(range(len(on[0]["hash_ids"])))  # no system prompt
    (tmp_path / "g.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1]) + "\n")
    assert len(read_trace(str(tmp_path / "g.jsonl"), "s", 64, tok, None).entries) == 2
    gaps = np.diff([r["timestamp"] for r in rows])
    assert (gaps >= 0).all()


def test_a_fixed_load_study_replays_num_prompts_from_the_start(tmp_path: Path,
                                                               tiny_model: Path) -> None:
    """Without a capacity search a trace profile sends num_prompts requests in a row from the
    trace's start (sample: order) at the profile's speedup, the warm-up's after them; with
    sample: random from a start drawn with the seed."""
    from autotune.config.workload import ProfileConfig
    from autotune.load.datasets import build_requests

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 2 * i, "input_length": 10 + i,
                                        "output_length": 4}) + "\n" for i in range(20)))
    p = ProfileConfig(name="trace", path=str(path), num_prompts=5, warmup=2, speedup=4.0)
    reqs = build_requests(p, str(tiny_model))
    assert [r.prompt_len for r in reqs] == [10, 11, 12, 13, 14, 15, 16]
    assert [r.arrival_s for r in reqs[:5]] == pytest.approx([0, 0.5, 1.0, 1.5, 2.0])
    drawn = build_requests(p.model_copy(update={"sample": "random", "seed": 3}),
                           str(tiny_model))
    assert drawn[0].prompt_len != 10 and drawn[0].arrival_s == 0.0
