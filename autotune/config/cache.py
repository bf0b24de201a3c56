"""Where autotune keeps what it can compute again: parsed ShareGPT pairs, vLLM's help text."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune (default ~/.cache/autotune)."""
    base = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "autotune")
    return Path(base)
