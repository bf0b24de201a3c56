"""One streamed request: the payload `vllm bench serve` sends, the SSE stream read on bytes, and
the record of what came back.

Payloads and timing follow vllm/benchmarks/lib/endpoint_request_func.py: streaming,
`stream_options.include_usage` so token counts come from the server, a chunk with `choices` is a
token event (the first one is TTFT, the gaps between later ones are ITLs), and the request ends
at its last token event.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from autotune.load._reads import reads_of
from autotune.load.record import Request, RequestRecord

Endpoint = Literal["completions", "chat"]
TIMEOUT_PREFIX = "timeout:"


@dataclass(frozen=True)
class RequestOptions:
    """How every request of a load is sent."""

    endpoint: Endpoint = "completions"
    ignore_eos: bool = True
    request_timeout_s: float = 600.0


def payload(model: str, req: Request, opts: RequestOptions) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of one request. Token-id prompts only go to the completions endpoint
    (the profile config rejects the other combination before any boot)."""
    common: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if opts.ignore_eos:
        common["ignore_eos"] = True
    if opts.endpoint == "chat":
        if isinstance(req.prompt, list) and not all(isinstance(m, dict) for m in req.prompt):
            raise ValueError("the chat endpoint needs text prompts or messages; token-id "
                             "prompts go to the completions endpoint")
        return "/v1/chat/completions", {
            **common,
            "messages": req.prompt if isinstance(req.prompt, list) else [
                {"role": "user", "content": req.prompt}],
            "max_completion_tokens": req.output_len,
        }
    if isinstance(req.prompt, list) and req.prompt and isinstance(req.prompt[0], dict):
        raise ValueError("chat messages go to the chat endpoint, not completions")
    return "/v1/completions", {
        **common,
        "prompt": req.prompt,
        "max_tokens": req.output_len,
        "repetition_penalty": 1.0,
    }


def is_token_event(data: dict[str, Any], endpoint: Endpoint) -> bool:
    choices = data.get("choices")
    if not choices:
        return False
    if endpoint == "chat":  # the first chat chunk carries only the role
        return "content" in (choices[0].get("delta") or {}) and bool(choices[0]["delta"]["content"])
    return True


class _Trace:
    """httpcore's trace events of one request (a handful per request, none per chunk): how
    long opening a new connection took, and when the response's headers came back."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.connect_started: float | None = None
        self.connect_s: float | None = None
        self.headers_time: float | None = None

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.started":
            self.connect_started = time.perf_counter()
        elif event == "connection.connect_tcp.complete" and self.connect_started is not None:
            self.connect_s = time.perf_counter() - self.connect_started
        elif event == "http11.receive_response_headers.complete":
            self.headers_time = time.perf_counter() - self.t0


OnFirst = Callable[[int, float, float], None]  # (index, sent, first token), seconds from t0


async def send(client: httpx.AsyncClient, model: str, index: int, req: Request,
               opts: RequestOptions, t0: float, scheduled: float | None = None,
               on_first: OnFirst | None = None) -> RequestRecord:
    """Send one request, read its stream to the end, and record it (times from `t0`;
    `scheduled`: when the arrival schedule said to send it, open loop only; `on_first` hears
    of its first token as it comes, long before the record)."""
    path, body = payload(model, req, opts)
    trace = _Trace(t0)
    sent = time.perf_counter() - t0
    chunks: list[float] = []
    coalesced = 0  # token events read together with an earlier one (see RequestRecord)
    usage: dict[str, Any] = {}
    error: str | None = None
    try:
        async with client.stream("POST", path, json=body,
                                 extensions={"trace": trace}) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                error = f"HTTP {resp.status_code}: {text[:300]}"
            else:
                # Split SSE on bytes, not text: generated text may hold characters that
                # str.splitlines treats as line breaks (U+2028, U+0085), which JSON leaves raw.
                buf = b""
                reads = reads_of(resp)
                last_read: int | None = None  # the socket read of the last token event
                async for part in resp.aiter_bytes():
                    buf += part
                    *lines, buf = buf.split(b"\n")
                    now = time.perf_counter() - t0
                    read = reads()
                    for raw in lines:
                        if not raw.startswith(b"data: "):
                            continue  # blank separators and SSE comments
                        data_bytes = raw[6:].rstrip(b"\r")
                        if data_bytes == b"[DONE]":
                            break
                        data = json.loads(data_bytes)
                        if is_token_event(data, opts.endpoint):
                            chunks.append(now)
                            coalesced += read is not None and read == last_read
                            last_read = read
                            if len(chunks) == 1 and on_first is not None:
                                on_first(index, sent, now)
                        if data.get("usage"):
                            usage = data["usage"]
                if not chunks:
                    error = "no token received"
    except httpx.TimeoutException as e:
        error = f"{TIMEOUT_PREFIX} no data for {opts.request_timeout_s:g} s ({type(e).__name__})"
    except httpx.HTTPError as e:
        error = f"{type(e).__name__}: {e}"[:300] or type(e).__name__
    return RequestRecord(
        index=index,
        send_time=sent,
        prompt_len=req.prompt_len,
        expected_output_len=req.output_len,
        first_token_time=chunks[0] if chunks else None,
        end_time=chunks[-1] if chunks else None,
        chunk_times=tuple(chunks),
        coalesced=coalesced,
        prompt_tokens=usage.get("prompt_tokens"),
        output_tokens=int(usage.get("completion_tokens") or len(chunks)),
        error=error,
        scheduled_time=scheduled,
        connect_s=trace.connect_s,
        headers_time=trace.headers_time,
    )
