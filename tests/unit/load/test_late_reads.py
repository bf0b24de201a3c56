"""Late reads: which of a stream's token events reached the client in one socket read
(RequestRecord.coalesced), over a real socket, and what the metrics and the capacity search
make of them."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from autotune.load._reads import counting_transport
from autotune.load._request import RequestOptions, send
from autotune.load.record import Request, RequestRecord
from autotune.measure.capacity import LATE_READS, MAX_LATE_READS, client_limit
from autotune.measure.metrics import compute_metrics


def _chunk(event: dict) -> bytes:
    data = b"data: " + json.dumps(event).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _chunked_server(gap_s: float | None):  # type: ignore[no-untyped-def]
    """One SSE event per HTTP chunk, as uvicorn sends vLLM's: `gap_s` apart, each flushed on its
    own, or (None) every event written at once, as a client that read late finds them."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while await r.readline():
            n = 0
            while (h := await r.readline()) not in (b"\r\n", b""):
                if h.lower().startswith(b"content-length"):
                    n = int(h.split(b":")[1])
            body = json.loads(await r.readexactly(n)) if n else {}
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n")
            await w.drain()
            events = [{"choices": [{"text": "x"}]}] * body.get("max_tokens", 1) + [
                {"choices": [], "usage": {"prompt_tokens": 2,
                                          "completion_tokens": body.get("max_tokens", 1)}}]
            for e in events:
                w.write(_chunk(e))
                if gap_s is not None:
                    await w.drain()
                    await asyncio.sleep(gap_s)
            done = b"data: [DONE]\n\n"
            w.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            await w.drain()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _send(gap_s: float | None, tokens: int = 6) -> RequestRecord:
    async def main() -> RequestRecord:
        server = await _chunked_server(gap_s)
        port = server.sockets[0].getsockname()[1]
        limits = httpx.Limits(max_connections=1)
        async with server, httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                transport=counting_transport(limits, httpx.create_ssl_context())) as client:
            return await send(client, "m", 0, Request([1, 2], 2, tokens), RequestOptions(),
                              0.0)
    return asyncio.run(main())


def test_events_read_as_they_come_are_not_coalesced() -> None:
    rec = _send(0.02)
    assert rec.success and len(rec.chunk_times) == 6
    assert rec.coalesced == 0 and not rec.read_in_burst
    assert min(rec.itls()) > 0.01  # each stamped when it came


def test_events_found_together_in_the_socket_are_counted_as_one_read() -> None:
    """Every event of the stream in one read: h11 still hands them over one chunk at a time,
    microseconds apart, so only the socket's read count tells."""
    rec = _send(None)
    assert rec.success and len(rec.chunk_times) == 6
    assert rec.coalesced == 5 and rec.read_in_burst


def _rec(i: int, times: tuple[float, ...], coalesced: int) -> RequestRecord:
    return RequestRecord(index=i, send_time=0.0, prompt_len=2, expected_output_len=len(times),
                         first_token_time=times[0], end_time=times[-1], chunk_times=times,
                         output_tokens=len(times), coalesced=coalesced)


def test_metrics_count_the_late_gaps_and_the_requests_read_in_a_burst() -> None:
    on_time = _rec(0, (0.1, 0.2, 0.3, 0.4, 0.5), 0)
    burst = _rec(1, (0.9, 0.9, 0.9, 0.9, 0.9), 4)
    half = _rec(2, (0.1, 0.2, 0.2, 0.3, 0.3), 2)
    m = compute_metrics([on_time, burst, half], 1.0)
    assert m.late_read_share == pytest.approx(6 / 12)
    assert m.burst_requests == 2  # half of its gaps late counts
    assert m.flat()["late_read_share"] == pytest.approx(0.5)
    assert compute_metrics([on_time], 1.0).late_read_share == 0.0


def test_a_point_read_late_is_the_clients_limit_on_either_axis() -> None:
    late = {"late_read_share": MAX_LATE_READS + 0.01}
    for axis in ("rate", "concurrency"):
        flag = client_limit(late, 1000, 10.0, axis)
        assert flag is not None and flag.startswith(LATE_READS)
        assert "profile.client_cpus" in flag
    assert client_limit({"late_read_share": MAX_LATE_READS}, 1000, 10.0, "concurrency") is None
