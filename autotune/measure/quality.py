"""The quality guard's readings from a running server: greedy completions of a fixed prompt set
with their tokens' log-probabilities, and the log-probability a server gives another server's
completions (vLLM's `prompt_logprobs`). `compare` turns them into the two figures the guard
judges: the share of prompts completed token for token as the reference did, and the mean drop,
in nats per token, of the log-probability of the reference's tokens (docs/quality.md)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from autotune.errors import LoadError

TIMEOUT_S = 300.0


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


def _post(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    try:
        r = client.post("/v1/completions", json=body, timeout=TIMEOUT_S)
    except httpx.HTTPError as e:
        raise LoadError(f"quality guard: the server did not answer ({type(e).__name__}: "
                        f"{e})") from None
    if r.status_code != 200:
        raise LoadError(f"quality guard: HTTP {r.status_code} from /v1/completions: "
                        f"{r.text[:300]}")
    out: dict[str, Any] = r.json()
    return out


def greedy(base_url: str, model: str, prompts: list[str | list[int]], max_tokens: int
           ) -> list[Completion]:
    """Each prompt's greedy completion (temperature 0, EOS honoured), with token ids and
    log-probabilities."""
    out = []
    with httpx.Client(base_url=base_url) as client:
        for prompt in prompts:
            d = _post(client, {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                               "temperature": 0.0, "logprobs": 0, "return_token_ids": True})
            c = d["choices"][0]
            ids = c.get("token_ids")
            if ids is None:
                raise LoadError("quality guard: this vLLM does not return token ids "
                                "(return_token_ids); the guard needs vLLM >= 0.10")
            lp = (c.get("logprobs") or {}).get("token_logprobs") or []
            out.append(Completion(list(c.get("prompt_token_ids") or d.get(
                "prompt_token_ids") or []), list(ids), [float(x) for x in lp], c["text"]))
    return out


def score(base_url: str, model: str, reference: list[Completion]) -> list[list[float]]:
    """The log-probability this server gives each reference completion's tokens, read as
    prompt log-probabilities of prompt + completion (one forward pass each)."""
    out: list[list[float]] = []
    with httpx.Client(base_url=base_url) as client:
        for ref in reference:
            if not ref.ids:
                out.append([])
                continue
            d = _post(client, {"model": model, "prompt": ref.prompt_ids + ref.ids,
                               "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0})
            plp = d["choices"][0].get("prompt_logprobs") or d.get("prompt_logprobs")
            if plp is None:
                raise LoadError("quality guard: this vLLM returns no prompt_logprobs")
            n = len(ref.prompt_ids)
            got = []
            for pos, tok in enumerate(ref.ids, start=n):
                entry = plp[pos] or {}
                hit = entry.get(str(tok)) or entry.get(tok)
                got.append(float(hit["logprob"]) if hit else float("-inf"))
            out.append(got)
    return out


@dataclass(frozen=True)
class Drift:
    """How far a config's outputs moved from the reference's."""

    prompts: int
    exact_match: float  # share of prompts whose greedy completion equals the reference's
    logprob_drop: float  # mean over the reference's tokens of (its log-prob - this server's)
    first_diff: str  # the first prompt that differs: what each said (empty: none)
    # this server's two readings of its own log-probs of the same tokens (its greedy run's and
    # its prompt_logprobs pass), over the tokens its completions share with the reference's
    # from the start, same prompt tokens: mean |difference| in nats/token (None: none to read)
    logprob_self_gap: float | None = None
    # the drop read from the two servers' greedy log-probs over those shared tokens (no
    # prompt_logprobs): what the guard judges where the self gap says prompt_logprobs are wrong
    logprob_drop_greedy: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compare(reference: list[Completion], candidate: list[Completion],
            scored: list[list[float]]) -> Drift:
    """The drift of `candidate` (its completions, and its scores of the reference's tokens)
    from `reference`."""
    same = [r.ids == c.ids for r, c in zip(reference, candidate, strict=True)]
    drops = [a - b for r, s in zip(reference, scored, strict=True)
             for a, b in zip(r.logprobs, s, strict=True)]
    diff = next((f"{r.text!r} became {c.text!r}" for r, c, ok in
                 zip(reference, candidate, same, strict=True) if not ok), "")
    gaps, greedy_drops = [], []
    for r, c, sc in zip(reference, candidate, scored, strict=True):
        if r.prompt_ids != c.prompt_ids:  # tokenized otherwise: not the same context
            continue
        n = _shared(r.ids, c.ids)
        gaps += [abs(a - b) for a, b in zip(c.logprobs[:n], sc[:n], strict=False)
                 if math.isfinite(a) and math.isfinite(b)]
        greedy_drops += [a - b for a, b in zip(r.logprobs[:n], c.logprobs[:n], strict=False)
                         if math.isfinite(a) and math.isfinite(b)]
    return Drift(len(reference), sum(same) / len(same) if same else 1.0,
                 statistics.fmean(drops) if drops else 0.0, diff[:300],
                 statistics.fmean(gaps) if gaps else None,
                 statistics.fmean(greedy_drops) if greedy_drops else None)


def _shared(a: list[int], b: list[int]) -> int:
    """How many tokens two completions share from the start."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
