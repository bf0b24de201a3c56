"""The fixed texts the quality guard reads, as token ids from the server's own tokenizer (vLLM's
/tokenize, special tokens added as a completion request adds them), so every server reads the
same ids: the study's prompts, cut to their last tokens so a prompt and its greedy completion fit
the reading's length; and ShareGPT conversations (the first turn, a blank line, the reply),
spread over the dataset and cut to their first tokens (docs/quality.md)."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.load.datasets import sharegpt_pairs
from autotune.measure.quality import each, post

MIN_REPLY = 300  # characters: a reply long enough to read a few hundred tokens of it


def tokenize(base_url: str, model: str, texts: Sequence[str]) -> list[list[int]]:
    return each(base_url, texts, lambda c, t: [int(x) for x in post(
        c, {"model": model, "prompt": t}, "/tokenize")["tokens"]])


def prompt_ids(base_url: str, model: str, prompts: Sequence[str | list[int]], keep: int
               ) -> list[list[int]]:
    """Each prompt as token ids, cut to its last `keep` (a prompt's end is what its completion
    follows from)."""
    words = [p for p in prompts if isinstance(p, str)]
    got = iter(tokenize(base_url, model, words))
    ids = [next(got) if isinstance(p, str) else list(p) for p in prompts]
    return [x[-max(keep, 1):] for x in ids if x]


def sharegpt_texts(n: int) -> list[str]:
    """`n` conversations spread evenly over the dataset (the same ones every time)."""
    if n <= 0:
        return []
    pairs = [(a, b) for a, b in sharegpt_pairs() if a.strip() and len(b) >= MIN_REPLY]
    step = len(pairs) / n
    return [f"{pairs[int(i * step)][0]}\n\n{pairs[int(i * step)][1]}" for i in range(n)]


def dataset_texts(base_url: str, model: str, n: int, length: int) -> list[list[int]]:
    """`n` ShareGPT texts as token ids, each cut to its first `length` + 1 tokens."""
    return [ids[:length + 1] for ids in tokenize(base_url, model, sharegpt_texts(n))]
