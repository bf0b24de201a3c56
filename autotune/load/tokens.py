"""The token ids a synthetic prompt may hold: every id of the model's vocabulary except its
special tokens (a special id in a prompt would end or restructure it)."""

from __future__ import annotations

from typing import Any

import numpy as np


def special_ids(tokenizer: Any) -> set[int]:
    added = tokenizer.get_added_tokens_decoder()
    return {i for i, t in added.items() if getattr(t, "special", True)}


def allowed_ids(tokenizer: Any) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The vocabulary's ids, sorted, less the special ones (a `tokenizers.Tokenizer`)."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    return np.setdiff1d(np.arange(vocab), np.fromiter(special_ids(tokenizer), dtype=np.int64))
