"""The quality guard's readings from a running server (docs/quality.md): greedy completions of a
prompt set with their tokens' log-probabilities, and a teacher-forced reading of fixed texts
(one prefill each, vLLM's `prompt_logprobs` with top-k: every position's top-k log-probabilities
and the text's own token's), one at a time or `concurrency` in flight. Both servers are read
through the same call, so both readings take the same code path. `greedy_check` compares two
servers' greedy completions, naming whether each first divergence fell on a tie.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import httpx

from autotune.errors import LoadError
from autotune.measure.divergence import Position, argmax_set

TIMEOUT_S = 300.0
T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Completion:
    """One greedy completion: the prompt's token ids, the completion's, and each completion
    token's log-probability under the server that wrote it."""

    prompt_ids: list[int]
    ids: list[int]
    logprobs: list[float]
    text: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Completion:
        return cls(list(d["prompt_ids"]), list(d["ids"]), list(d["logprobs"]), d["text"])


def post(client: httpx.Client, body: dict[str, Any], path: str = "/v1/completions"
         ) -> dict[str, Any]:
    try:
        r = client.post(path, json=body, timeout=TIMEOUT_S)
    except httpx.HTTPError as e:
        raise LoadError(f"quality guard: the server did not answer ({type(e).__name__}: "
                        f"{e})") from None
    if r.status_code != 200:
        raise LoadError(f"quality guard: HTTP {r.status_code} from {path}: {r.text[:300]}")
    out: dict[str, Any] = r.json()
    return out


def each(base_url: str, items: Sequence[T], fn: Callable[[httpx.Client, T], U],
         concurrency: int = 1) -> list[U]:
    """`fn` over `items` on one client, `concurrency` at a time, results in order."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(base_url=base_url, limits=limits) as client:
        if concurrency <= 1:
            return [fn(client, x) for x in items]
        with ThreadPoolExecutor(concurrency) as pool:
            return list(pool.map(lambda x: fn(client, x), items))


def greedy(base_url: str, model: str, prompts: Sequence[str | list[int]], max_tokens: int,
           concurrency: int = 1) -> list[Completion]:
    """Each prompt's greedy completion (temperature 0, EOS honoured), with token ids and
    log-probabilities."""
    def one(client: httpx.Client, prompt: str | list[int]) -> Completion:
        d = post(client, {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                          "temperature": 0.0, "logprobs": 0, "return_token_ids": True})
        c = d["choices"][0]
        ids = c.get("token_ids")
        if ids is None:
            raise LoadError("quality guard: this vLLM does not return token ids "
                            "(return_token_ids); the guard needs vLLM >= 0.10")
        lp = (c.get("logprobs") or {}).get("token_logprobs") or []
        return Completion(list(c.get("prompt_token_ids") or d.get("prompt_token_ids") or []),
                          list(ids), [float(x) for x in lp], c["text"])
    return each(base_url, prompts, one, concurrency)


def read_text(client: httpx.Client, model: str, ids: list[int], k: int) -> list[Position]:
    """One prefill of `ids`: each position after the first, its top-k and the text's token."""
    d = post(client, {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0,
                      "prompt_logprobs": k})
    plp = d["choices"][0].get("prompt_logprobs") or d.get("prompt_logprobs")
    if plp is None:
        raise LoadError("quality guard: this vLLM returns no prompt_logprobs")
    out = []
    for pos in range(1, len(ids)):
        entry = plp[pos] or {}
        tok = ids[pos]
        mine = entry.get(str(tok))
        if mine is None:
            raise LoadError(f"quality guard: prompt_logprobs lack the text's own token at "
                            f"position {pos}")
        top = {int(t): float(e["logprob"]) for t, e in entry.items() if int(e["rank"]) <= k}
        out.append(Position(top, tok, float(mine["logprob"])))
    return out


def read_texts(base_url: str, model: str, texts: Sequence[list[int]], k: int,
               concurrency: int = 1) -> list[list[Position]]:
    """The teacher-forced reading of each text (token ids)."""
    return each(base_url, texts, lambda c, ids: read_text(c, model, ids, k), concurrency)


def self_gap(ref: Sequence[Completion], cand: Sequence[Completion],
             cand_read: Sequence[Sequence[Position]]) -> float | None:
    """The config's two readings of its own log-probabilities of the same tokens, its greedy
    run's and its teacher-forced reading of the defaults' prompt + completion, over the tokens
    its completions share with the defaults' from the start: mean |difference|, nats/token
    (None: none shared). They are the same quantity; far apart, the teacher-forced reading is
    wrong (vLLM issue 53488: prompt_logprobs corrupted under model-based speculation; on an
    H200 a greedy pick of the defaults' own token read -9.6 nats there)."""
    gaps = []
    for r, c, read in zip(ref, cand, cand_read, strict=True):
        if r.prompt_ids != c.prompt_ids:
            continue
        for j, (a, b) in enumerate(zip(r.ids, c.ids, strict=False)):
            at = len(r.prompt_ids) - 1 + j
            if a != b or j >= len(c.logprobs) or at >= len(read):
                break
            gaps.append(abs(c.logprobs[j] - read[at].token_logprob))
    return sum(gaps) / len(gaps) if gaps else None


def greedy_check(ref: Sequence[Completion], ref_read: Sequence[Sequence[Position]],
                 cand: Sequence[Completion], tie_margin: float) -> dict[str, Any]:
    """The config's greedy completions (`cand`) against the defaults' (`ref`), with the
    defaults' teacher-forced reading of each prompt + completion (`ref_read`) to say at what
    margin each first divergence fell: the defaults' log-probability of their own pick minus
    that of the config's pick (0: an exact tie; beyond the defaults' top-k: unknown, counted as
    beyond). Returns the fields of tuning.verdict.GreedyCheck."""
    equal = ties = near = beyond = 0
    first = ""
    for r, rr, c in zip(ref, ref_read, cand, strict=True):
        if r.ids == c.ids:
            equal += 1
            continue
        if not first:
            first = f"{r.text!r} became {c.text!r}"[:300]
        j = next((i for i, (a, b) in enumerate(zip(r.ids, c.ids, strict=False)) if a != b),
                 min(len(r.ids), len(c.ids)))
        at = len(r.prompt_ids) - 1 + j  # the reading's positions start at the text's second
        if j >= len(r.ids) or j >= len(c.ids) or at >= len(rr) or r.prompt_ids != c.prompt_ids:
            beyond += 1  # one stopped where the other went on: no pick to compare
            continue
        top = rr[at].top
        mine, theirs = top.get(r.ids[j]), top.get(c.ids[j])
        if theirs is None or mine is None:
            beyond += 1
        elif c.ids[j] in argmax_set(top) or mine - theirs <= 0:
            ties += 1
        elif mine - theirs <= tie_margin:
            near += 1
        else:
            beyond += 1
    return {"prompts": len(ref), "equal": equal, "at_ties": ties, "near_ties": near,
            "beyond": beyond, "first_diff": first}
