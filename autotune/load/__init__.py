"""The load generator: streams requests at an OpenAI-compatible server and returns one record
per request, with `vllm bench serve`'s timing definitions.

    _request     one request: payload, SSE stream, record
    _slots       slot scheduling in one event loop (one kept-alive connection per slot)
    _processes   the slots spread over client processes (shared counter, typed messages)
    _run         settings, warm-up, /metrics scrapes, the entry points
    placement    which CPUs the client runs on, and how long it waited for one
"""

from autotune.load._request import Endpoint, RequestOptions, payload
from autotune.load._run import (
    LoadResult,
    LoadSettings,
    arrival_offsets,
    auto_processes,
    more_processes,
    resolve_processes,
    run_load,
    run_load_async,
    schedule,
)
from autotune.load._slots import SETTLED_REASON, Abort

__all__ = [
    "Abort",
    "Endpoint",
    "LoadResult",
    "LoadSettings",
    "RequestOptions",
    "SETTLED_REASON",
    "arrival_offsets",
    "auto_processes",
    "more_processes",
    "payload",
    "resolve_processes",
    "run_load",
    "run_load_async",
    "schedule",
]
