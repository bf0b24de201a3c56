"""The load generator against an in-process fake OpenAI server (httpx MockTransport)."""

import asyncio
import json
import math
from pathlib import Path

import httpx
import numpy as np
import pytest

from autotune.load import LoadSettings, arrival_offsets, run_load_async
from autotune.load.record import Request
from autotune.measure.metrics import compute_metrics


def sse(events: list[dict]) -> bytes:
    return b"".join(f"data: {json.dumps(e, ensure_ascii=False)}\n\n".encode()
                    for e in events) + b"data: [DONE]\n\n"


def fake_server(seen: list[dict]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"path": request.url.path, **body})
        if body.get("max_tokens") == 999:
            return httpx.Response(500, text="boom")
        n = body.get("max_tokens") or body.get("max_completion_tokens")
        prompt = body.get("prompt")
        plen = len(prompt) if isinstance(prompt, list) else 7
        if request.url.path.endswith("/chat/completions"):
            events = [{"choices": [{"delta": {"role": "assistant"}}]}]
            events += [{"choices": [{"delta": {"content": "x"}}]} for _ in range(n)]
        else:
            events = [{"choices": [{"text": "x"}]} for _ in range(n)]
        events.append({"choices": [], "usage": {"prompt_tokens": plen, "completion_tokens": n}})
        return httpx.Response(200, content=sse(events),
                              headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler)


def run(reqs: list[Request], s: LoadSettings, seen: list[dict], **kw):  # type: ignore[no-untyped-def]
    return asyncio.run(run_load_async("http://fake", "m", reqs, s,
                                      transport=fake_server(seen), **kw))


def test_completions_records_and_payload() -> None:
    seen: list[dict] = []
    reqs = [Request(prompt=[1, 2, 3, 4], prompt_len=4, output_len=5) for _ in range(6)]
    done: list = []
    res = run(reqs, LoadSettings(max_concurrency=2, warmup=2), seen, on_done=done.append)
    assert len(res.records) == 6 and len(done) == 6  # warm-up requests not reported
    assert len(seen) == 8  # but they were sent
    body = seen[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["max_tokens"] == 5 and body["prompt"] == [1, 2, 3, 4]
    for r in res.records:
        assert r.success and r.output_tokens == 5 and r.prompt_tokens == 4
        assert len(r.chunk_times) == 5 and r.ttft <= r.e2el
    m = compute_metrics(res.records, res.duration_s)
    assert m.total_input_tokens == 24 and m.total_output_tokens == 30


def test_chat_skips_role_chunk() -> None:
    seen: list[dict] = []
    reqs = [Request(prompt="hello", prompt_len=1, output_len=3)]
    res = run(reqs, LoadSettings(endpoint="chat"), seen)
    assert seen[0]["path"] == "/v1/chat/completions"
    assert seen[0]["messages"] == [{"role": "user", "content": "hello"}]
    assert len(res.records[0].chunk_times) == 3


def test_http_error_is_recorded() -> None:
    seen: list[dict] = []
    res = run([Request(prompt=[1], prompt_len=1, output_len=999)], LoadSettings(), seen)
    r = res.records[0]
    assert not r.success and r.error is not None and r.error.startswith("HTTP 500")


def test_dead_server_cancels_outstanding() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200)

    reqs = [Request(prompt=[1], prompt_len=1, output_len=2) for _ in range(3)]
    res = asyncio.run(run_load_async("http://fake", "m", reqs, LoadSettings(),
                                     transport=httpx.MockTransport(slow), alive=lambda: False))
    assert res.duration_s < 5
    assert all(r.error == "cancelled: server exited" for r in res.records)


def test_arrivals_follow_vllm_bench_serve() -> None:
    """Poisson with the seed, scaled so the last arrival is at n / rate; the same gaps as
    vllm bench serve's get_request draws from numpy's legacy generator seeded alike."""
    assert arrival_offsets(3, math.inf, 0) == [0.0, 0.0, 0.0]
    offs = arrival_offsets(2000, 10.0, 1)
    assert offs[0] > 0.0 and offs == sorted(offs)
    assert offs[-1] == pytest.approx(200.0)  # exactly n / rate: the point offers its rate
    assert offs == arrival_offsets(2000, 10.0, 1) != arrival_offsets(2000, 10.0, 2)
    import numpy as np

    np.random.seed(7)  # what vllm bench serve --seed 7 does before get_request
    gaps = [np.random.gamma(shape=1.0, scale=1 / 10.0) for _ in range(50)]
    cum = np.cumsum(gaps)
    assert arrival_offsets(50, 10.0, 7) == pytest.approx(list(cum * (5.0 / cum[-1])))
    # the gaps are exponential: mean 1/rate, coefficient of variation 1
    d = np.diff(offs)
    assert d.mean() == pytest.approx(0.1, rel=0.05) and d.std() / d.mean() == pytest.approx(
        1.0, rel=0.1)
    smooth = np.diff(arrival_offsets(2000, 10.0, 1, burstiness=100.0))
    assert smooth.std() / smooth.mean() < 0.2  # gamma shape 100: near-regular arrivals


def test_sse_split_on_bytes_not_unicode_line_breaks() -> None:
    # JSON leaves U+2028 and U+0085 raw; str.splitlines would cut the event in two
    text = "a\u2028b\x85c"
    body = sse([{"choices": [{"text": text}]}, {"choices": [{"text": text}]},
                {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}])
    assert "\u2028".encode() in body
    t = httpx.MockTransport(lambda r: httpx.Response(200, content=body))
    res = asyncio.run(run_load_async("http://fake", "m", [Request([1], 1, 2)], LoadSettings(),
                                     transport=t))
    assert res.records[0].success and len(res.records[0].chunk_times) == 2


def test_server_stats_from_prometheus_text() -> None:
    from autotune.server.scrape import ServerStats, parse

    def text(q: float, h: float, kv: float, wait: float, n: int, ttft_s: float) -> str:
        return (f"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total"
                f'{{engine="0"}} {q}\n# TYPE vllm:prefix_cache_hits counter\n'
                f'vllm:prefix_cache_hits_total{{engine="0"}} {h}\n'
                f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc {kv}\n"
                f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting {wait}\n"
                "# TYPE vllm:time_to_first_token_seconds histogram\n"
                f'vllm:time_to_first_token_seconds_bucket{{le="1.0"}} {n}\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {n}\n'
                f"vllm:time_to_first_token_seconds_count {n}\n"
                f"vllm:time_to_first_token_seconds_sum {ttft_s}\n"
                "# TYPE vllm:request_time_per_output_token_seconds histogram\n"
                f"vllm:request_time_per_output_token_seconds_count {n}\n"
                f"vllm:request_time_per_output_token_seconds_sum {ttft_s / 10}\n")

    s = ServerStats()
    # 10 requests before the run; 40 more during it, whose TTFTs sum to 2 s: 50 ms each
    for sample in (text(100, 10, 0.1, 0, 10, 7.0), text(300, 60, 0.9, 7, 30, 8.0),
                   text(500, 110, 0.2, 1, 50, 9.0)):
        s.add(parse(sample))
    out = s.summary()
    assert out["server_mean_ttft_ms"] == pytest.approx(50.0)
    assert out["server_mean_tpot_ms"] == pytest.approx(5.0)  # vLLM's per-request TPOT
    assert "server_mean_queue_ms" not in out  # not exported: no mean, rather than 0
    assert not any(k.endswith(("_sum", "_count")) for k in out)
    assert out["server_prefix_cache_queries"] == 400 and out["server_prefix_cache_hits"] == 100
    assert out["server_prefix_cache_hit_rate"] == 0.25
    assert out["server_peak_kv_cache_usage"] == 0.9 and out["server_peak_requests_waiting"] == 7


async def _sse_server(peers: set[int], in_flight: list[int], hang: bool = False):  # type: ignore[no-untyped-def]
    """A keep-alive HTTP/1.1 server on a real socket: each POST answers max_tokens events after
    20 ms (never, with `hang`); other requests (the /metrics scrapes) get an empty 200."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while line := await r.readline():
            n = 0
            while (h := await r.readline()) not in (b"\r\n", b""):
                if h.lower().startswith(b"content-length"):
                    n = int(h.split(b":")[1])
            if not line.startswith(b"POST"):
                w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                continue
            body = json.loads(await r.readexactly(n))
            peers.add(w.get_extra_info("peername")[1])
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            await asyncio.sleep(3600 if hang else 0.02)
            out = sse([{"choices": [{"text": "x"}]}] * body["max_tokens"]
                      + [{"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}])
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(out), out))
            await w.drain()
            in_flight[0] -= 1

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize("processes", [1, 3])
def test_one_kept_alive_connection_per_concurrency_slot(processes: int) -> None:
    """Over real sockets: never more than max_concurrency requests in flight, and each slot
    reuses its own connection (20 requests, 4 slots -> at most 4 connections), whether the
    slots live in one process or are spread over three (2 + 1 + 1)."""
    peers: set[int] = set()
    in_flight = [0, 0]  # now, peak
    done: list = []

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(peers, in_flight)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=3) for _ in range(20)]
            return await run_load_async(
                f"http://127.0.0.1:{port}", "m", reqs,
                LoadSettings(max_concurrency=4, warmup=3, processes=processes),
                scrape_metrics=True, on_done=done.append)

    res = asyncio.run(main())
    assert [r.index for r in res.records] == list(range(20))
    assert all(r.success and r.output_tokens == 3 for r in res.records)
    assert sorted(r.index for r in done) == list(range(20))  # reported live, each once
    assert in_flight[1] == 4
    assert len(peers) == 4
    assert 0.0 <= res.server_stats["client_cpu_fraction"] < 2.0
    assert res.server_stats["client_processes"] == processes
    # 20 requests of 20 ms over 4 slots: 5 rounds; the clock starts after the warm-up
    assert 0.09 < res.duration_s < 2.0
    assert all(0.0 <= r.send_time < r.end_time <= res.duration_s for r in res.records)


@pytest.mark.parametrize("processes", [1, 2])
def test_server_that_hangs_or_dies_ends_the_load(processes: int) -> None:
    """A silent stream (request_timeout_s) or a dead server cancels every other request, in
    every process, and each unfinished request says why."""

    def go(alive: bool, timeout_s: float):  # type: ignore[no-untyped-def]
        async def main():  # type: ignore[no-untyped-def]
            server = await _sse_server(set(), [0, 0], hang=True)
            port = server.sockets[0].getsockname()[1]
            async with server:
                reqs = [Request(prompt=[1], prompt_len=1, output_len=2) for _ in range(9)]
                return await run_load_async(
                    f"http://127.0.0.1:{port}", "m", reqs,
                    LoadSettings(max_concurrency=4, request_timeout_s=timeout_s,
                                 processes=processes),
                    alive=lambda: alive)
        return asyncio.run(main())

    hung = go(True, 0.5)
    errors = [r.error or "" for r in hung.records]
    assert sum(e.startswith("timeout:") for e in errors) >= 1
    assert all(e.startswith("timeout:") or e.startswith("cancelled: server hung")
               for e in errors)
    dead = go(False, 60.0)
    assert all(r.error == "cancelled: server exited" for r in dead.records)
    assert dead.duration_s < 5


def test_auto_processes() -> None:
    from autotune.load import auto_processes

    assert auto_processes(512, cpus=2) == 1  # this CI machine: the server needs the cores
    assert auto_processes(512, cpus=16) == 4  # the H100 machine
    assert auto_processes(64, cpus=16) == 1
    assert auto_processes(2000, cpus=64) == 16


@pytest.mark.parametrize("processes", [1, 2])
def test_a_request_that_cannot_be_built_surfaces_its_cause(processes: int) -> None:
    """Token-id prompts sent to the chat endpoint (the config rejects it; a library caller can
    still try): the load fails with the cause, instead of recording every request cancelled."""
    from autotune.errors import ClientError, ClientProcessError

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(set(), [0, 0])
        port = server.sockets[0].getsockname()[1]
        async with server:
            reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=3) for _ in range(4)]
            return await run_load_async(f"http://127.0.0.1:{port}", "m", reqs,
                                        LoadSettings(endpoint="chat", max_concurrency=2,
                                                     processes=processes))

    with pytest.raises(ClientError, match="the chat endpoint needs text prompts") as e:
        asyncio.run(main())
    assert not isinstance(e.value, ClientProcessError)  # the request path's: the study stops


@pytest.mark.parametrize("processes", [1, 3])
def test_open_loop_sends_on_schedule_over_reused_connections(processes: int) -> None:
    """A request rate: every request is sent at its scheduled arrival whatever the number of
    processes (the schedule is one, independent of connections), its send lag is recorded,
    and connections are kept alive and reused (far fewer than requests), as vllm bench
    serve's connector does. Each request takes 20 ms; at 100 req/s about 2 are in flight."""
    peers: set[int] = set()
    in_flight = [0, 0]
    handed: list[list[float]] = []

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(peers, in_flight)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=3) for _ in range(60)]
            return await run_load_async(
                f"http://127.0.0.1:{port}", "m", reqs,
                LoadSettings(request_rate=100.0, seed=3, warmup=2, processes=processes),
                on_schedule=handed.append)

    res = asyncio.run(main())
    offs = arrival_offsets(60, 100.0, 3)
    assert all(r.success for r in res.records)
    assert [r.scheduled_time for r in res.records] == offs
    assert handed == [offs]  # the caller hears the schedule the requests were sent on
    lags = [r.send_lag for r in res.records]
    # recorded, and not early; the bound is loose: a busy 2-core machine (a vLLM server beside
    # the tests) delays the event loop by hundreds of ms (the lag is measured, not promised)
    assert all(lag is not None and -0.001 <= lag < 1.0 for lag in lags)
    m = compute_metrics(res.records, res.duration_s)
    assert 0.0 <= m.send_lag_ms.p99 < 1000.0
    assert len(peers) < 30  # reused: not one connection per request
    new = [r for r in res.records if r.connect_s is not None]
    assert len(new) < 30 and all(r.headers_time is not None for r in res.records)
    assert res.duration_s >= offs[-1]


@pytest.mark.parametrize("processes", [1, 2])
def test_requests_that_carry_their_arrivals_are_sent_on_them(processes: int) -> None:
    """A replayed trace: each request is sent at its own arrival (whatever the settings' rate),
    its send lag recorded as the rate's is, and the caller hears that schedule."""
    peers: set[int] = set()
    handed: list[list[float]] = []
    at = [0.0, 0.0, 0.05, 0.3, 0.31, 0.32, 0.6]  # a burst, a lull, a burst

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(peers, [0, 0])
        port = server.sockets[0].getsockname()[1]
        async with server:
            reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=3, arrival_s=a) for a in at]
            return await run_load_async(f"http://127.0.0.1:{port}", "m", reqs,
                                        LoadSettings(processes=processes),
                                        on_schedule=handed.append)

    res = asyncio.run(main())
    assert all(r.success for r in res.records)
    assert [r.scheduled_time for r in res.records] == at and handed == [at]
    assert all(r.send_lag is not None and -0.001 <= r.send_lag < 1.0 for r in res.records)
    assert res.duration_s >= at[-1]
    with pytest.raises(ValueError, match="every request carries its arrival or none"):
        asyncio.run(run_load_async("http://fake", "m", [
            Request([1], 1, 1, 0.0), Request([1], 1, 1)], LoadSettings()))


def test_open_loop_without_reuse_opens_a_connection_per_request() -> None:
    """The old rate mode, kept for the fidelity harness: one new connection per request."""
    peers: set[int] = set()

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(peers, [0, 0])
        port = server.sockets[0].getsockname()[1]
        async with server:
            reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=3) for _ in range(20)]
            return await run_load_async(
                f"http://127.0.0.1:{port}", "m", reqs,
                LoadSettings(request_rate=200.0, reuse_connections=False))

    res = asyncio.run(main())
    assert all(r.success and r.connect_s is not None for r in res.records)
    assert len(peers) == 20


def test_open_loop_with_a_cap_keeps_the_schedule_and_the_cap() -> None:
    """A rate and a concurrency cap (vllm bench serve's --request-rate with
    --max-concurrency): never more than the cap in flight; a request that waits for a free
    slot is sent late, and that wait is its send lag."""
    in_flight = [0, 0]
    handed: list[list[float]] = []

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(set(), in_flight)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=3) for _ in range(30)]
            return await run_load_async(
                f"http://127.0.0.1:{port}", "m", reqs,
                LoadSettings(request_rate=1000.0, max_concurrency=2), on_schedule=handed.append)

    res = asyncio.run(main())
    assert all(r.success for r in res.records) and in_flight[1] <= 2
    assert handed == []  # a capped request is not sent at its arrival: no schedule to bound by
    assert max(r.send_lag or 0.0 for r in res.records) > 0.05  # 30 x 20 ms over 2 slots


@pytest.mark.parametrize("processes", [1, 2])
def test_a_settled_run_stops_sending_and_says_so(processes: int) -> None:
    """`stop` (a point whose verdict is settled) ends an open-loop run early, in every
    process: the requests not sent or cut off are recorded as settled, and `on_first` heard
    of each finished request's first token before its record."""
    from autotune.load import SETTLED_REASON

    firsts: dict[int, tuple[float, float]] = {}
    asked: list[float] = []

    def stop(elapsed: float) -> bool:
        asked.append(elapsed)
        return elapsed > 0.6

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(set(), [0, 0])
        port = server.sockets[0].getsockname()[1]
        async with server:
            reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=3) for _ in range(200)]
            return await run_load_async(
                f"http://127.0.0.1:{port}", "m", reqs,
                LoadSettings(request_rate=50.0, warmup=2, processes=processes),
                on_first=lambda i, sent, first: firsts.setdefault(i, (sent, first)),
                stop=stop)

    res = asyncio.run(main())
    ok = [r for r in res.records if r.success]
    cut = [r for r in res.records if r.error == SETTLED_REASON]
    assert len(ok) + len(cut) == 200 and 10 <= len(ok) < 150 and cut
    assert res.duration_s < 3.0  # 200 arrivals at 50/s would take 4 s
    assert all(r.index in firsts and firsts[r.index][1] <= r.end_time for r in ok)
    assert all(s <= f for s, f in firsts.values())
    assert asked and min(asked) >= 0.0  # asked only once the clock ran
    gaps = np.diff(sorted(asked))
    assert len(asked) < 60 and (gaps >= 0.19).all()  # at most every WATCH_S


def test_the_heap_is_frozen_while_the_load_runs_in_this_process() -> None:
    """The objects alive before the run are left out of the collector's scans during it (a
    full scan of a study's heap stood the event loop still), and handed back after."""
    import gc

    frozen: list[int] = []
    seen: list[dict] = []
    reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=2) for _ in range(3)]
    run(reqs, LoadSettings(max_concurrency=1), seen,
        on_done=lambda rec: frozen.append(gc.get_freeze_count()))
    assert len(frozen) == 3 and min(frozen) > 0
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("child", ["dies", "sticks"])
def test_a_client_process_that_dies_or_sticks_at_its_start_fails_the_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, child: str) -> None:
    """A client process that dies before reading its plan (on a GPU worker: autotune's files
    were being replaced under it) or never says it is ready fails the load with a ClientError;
    it does not leave the parent blocked in Process.start(). The request list pickles to more
    than a pipe's 64 KiB, which is what blocked spawn's write before the plans went by file."""
    import multiprocessing.spawn
    import os
    import threading
    from multiprocessing import resource_tracker

    from autotune.errors import ClientProcessError
    from autotune.load import _processes

    exe = tmp_path / "python"  # what the spawned "interpreter" does: exit at once, or hang
    exe.write_text("#!/bin/sh\nexit 1\n" if child == "dies" else "#!/bin/sh\nexec sleep 3\n")
    exe.chmod(0o755)
    resource_tracker.ensure_running()  # started by the real interpreter, not the fake one
    real = multiprocessing.spawn.get_executable()  # bytes on some Pythons
    monkeypatch.setattr(multiprocessing.spawn, "_python_exe",
                        os.fsencode(exe) if isinstance(real, bytes) else str(exe))
    monkeypatch.setattr(_processes, "READY_S", 1.0)
    reqs = [Request(prompt=list(range(1000, 3000)), prompt_len=2000, output_len=3)
            for _ in range(40)]
    got: list[BaseException] = []

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(set(), [0, 0])
        port = server.sockets[0].getsockname()[1]
        async with server:
            await run_load_async(f"http://127.0.0.1:{port}", "m", reqs,
                                 LoadSettings(max_concurrency=4, processes=2))

    def go() -> None:
        try:
            asyncio.run(main())
        except BaseException as e:
            got.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the parent is still blocked"
    assert len(got) == 1 and isinstance(got[0], ClientProcessError), got  # the machine's
    assert ("exited with code 1" if child == "dies" else "not ready after 1 s") in str(got[0])


def test_a_client_process_killed_mid_load_fails_the_load_and_nothing_waits_on_it() -> None:
    """A client process SIGKILLed while the load runs (the OOM killer's way) fails the load
    with a ClientProcessError (the machine's: the trial is unmeasured and tried again), and the
    other processes stop on the abort."""
    import multiprocessing
    import os
    import signal as sig
    import threading
    import time as clock

    from autotune.errors import ClientProcessError

    got: list[BaseException] = []
    killed: list[int] = []
    done: list[object] = []

    def killer() -> None:
        end = clock.monotonic() + 60
        while clock.monotonic() < end:
            kids = [c for c in multiprocessing.active_children()
                    if c.name.startswith("autotune-load-")]  # this load's, not another test's
            if len(kids) == 3 and len(done) >= 300:  # mid-load: records are flowing
                os.kill(kids[0].pid, sig.SIGKILL)
                killed.append(len(done))
                return
            clock.sleep(0.01)

    async def main():  # type: ignore[no-untyped-def]
        server = await _sse_server(set(), [0, 0])
        port = server.sockets[0].getsockname()[1]
        async with server:
            reqs = [Request(prompt=[1, 2], prompt_len=2, output_len=3) for _ in range(4000)]
            await run_load_async(f"http://127.0.0.1:{port}", "m", reqs,
                                 LoadSettings(max_concurrency=12, processes=3),
                                 on_done=done.append)

    def go() -> None:
        try:
            asyncio.run(main())
        except BaseException as e:
            got.append(e)

    k = threading.Thread(target=killer, daemon=True)
    k.start()
    t0 = clock.monotonic()
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(90)
    assert killed, "no client process to kill"
    assert not t.is_alive(), "the parent is still waiting"
    assert len(got) == 1 and isinstance(got[0], ClientProcessError), got
    assert "exited with code -9" in str(got[0])
    assert killed[0] < 4000 and clock.monotonic() - t0 < 60
