import numpy as np
import pytest

from autotune.load.record import RequestRecord
from autotune.measure.metrics import compute_metrics


def rec(i: int, send: float, chunks: list[float], out: int, prompt: int = 10) -> RequestRecord:
    return RequestRecord(
        index=i, send_time=send, prompt_len=prompt, expected_output_len=out,
        first_token_time=chunks[0], end_time=chunks[-1], chunk_times=tuple(chunks),
        prompt_tokens=prompt, output_tokens=out,
    )


def test_definitions_match_vllm_bench_serve() -> None:
    a = rec(0, 0.0, [0.1, 0.2, 0.4], 3)
    b = rec(1, 0.5, [0.7, 0.8, 0.9, 1.0], 4)
    failed = RequestRecord(index=2, send_time=0.0, prompt_len=10, expected_output_len=3,
                           error="HTTP 500: boom")
    m = compute_metrics([a, b, failed], duration_s=2.0)
    assert m.completed == 2 and m.failed == 1
    assert m.total_input_tokens == 20 and m.total_output_tokens == 7
    assert m.total_token_throughput == pytest.approx(27 / 2.0)
    assert m.output_throughput == pytest.approx(7 / 2.0)
    assert m.request_throughput == pytest.approx(1.0)
    # TPOT per request = (E2EL - TTFT) / (out - 1), then averaged
    tpots = [(0.4 - 0.1) / 2, (0.5 - 0.2) / 3]
    assert m.tpot_ms.mean == pytest.approx(np.mean(tpots) * 1000)
    assert m.ttft_ms.mean == pytest.approx(np.mean([0.1, 0.2]) * 1000)
    itls = [0.1, 0.2, 0.1, 0.1, 0.1]
    assert m.itl_ms.mean == pytest.approx(np.mean(itls) * 1000)
    assert m.itl_ms.p99 == pytest.approx(np.percentile(itls, 99) * 1000)
    assert m.e2el_ms.median == pytest.approx(np.median([0.4, 0.5]) * 1000)
    assert m.errors == {"HTTP 500: boom": 1}
    flat = m.flat()
    assert flat["p99_tpot_ms"] == m.tpot_ms.p99 and flat["completed"] == 2


def test_single_token_outputs_have_no_tpot() -> None:
    m = compute_metrics([rec(0, 0.0, [0.1], 1)], duration_s=1.0)
    assert m.tpot_ms.mean == 0.0 and m.completed == 1


def test_all_failed() -> None:
    r = RequestRecord(index=0, send_time=0.0, prompt_len=1, expected_output_len=1, error="x")
    m = compute_metrics([r], 1.0)
    assert m.completed == 0 and m.total_token_throughput == 0


def test_the_root_error_is_the_one_that_made_the_run_give_up() -> None:
    """A hung engine: one silent stream times out and the run cancels the rest. Which request
    comes first by index is a race (the CI run of 2026-11-26 recorded "cancelled: server hung"
    as a trial's cause); the cause names the timeout either way."""
    def failed(i: int, error: str) -> RequestRecord:
        return RequestRecord(index=i, send_time=0.0, prompt_len=4, expected_output_len=4,
                             error=error)

    hung = "cancelled: server hung (a stream was silent for 5 s)"
    timeout = "timeout: no data for 5 s (ReadTimeout)"
    m = compute_metrics([failed(0, hung), failed(1, timeout), failed(2, hung)], 1.0)
    assert m.root_error == timeout
    assert compute_metrics([failed(0, hung)], 1.0).root_error == hung
    assert compute_metrics([], 1.0).root_error is None
