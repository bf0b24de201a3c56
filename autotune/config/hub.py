"""A model named by its Hugging Face hub id (`org/name`), found where `vllm serve` finds it.

vLLM takes a hub id and reads the model from the hub cache (HF_HUB_CACHE, else HF_HOME/hub;
huggingface_hub's `models--org--name/snapshots/<rev>/` layout, `refs/main` naming the
revision), downloading what the cache lacks (HF_TOKEN for a gated model; nothing from the
network under HF_HUB_OFFLINE=1). The load generator reads the model's tokenizer and config
before the first boot, so they are found the same way: the snapshot in the cache, else a
download of those few files only (the weights stay the server's to fetch). A name that exists
on disk is a path, as vLLM tells the two apart.
"""

from __future__ import annotations

import os

from autotune.errors import ConfigError

# what autotune reads of a model before a boot: the tokenizer, the chat template
# (tokenizer_config.json) and the model's length limit (config.json)
FILES = ["config.json", "tokenizer.json", "tokenizer_config.json"]


def is_local(name: str) -> bool:
    """A path rather than a hub id: it exists (vLLM's test), or it is written as a path."""
    return name.startswith((".", "/", "~")) or os.path.exists(name)


def cache_dir() -> str:
    """The hub cache, read from the environment now: huggingface_hub reads it once, when it
    is imported, and a caller may set it later."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or "~/.cache",
                                              "huggingface")
    return os.path.expanduser(env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
                              or os.path.join(home, "hub"))


def offline() -> bool:
    """HF_HUB_OFFLINE is on: the cache only, as vLLM and huggingface_hub do."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _snapshot(name: str, *, local: bool) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(name, cache_dir=cache_dir(), allow_patterns=FILES,
                             local_files_only=local)


def cached(name: str) -> str | None:
    """The folder holding `name`'s files: `name` itself for a path; for a hub id, its
    snapshot in the hub cache, or None when the cache lacks it."""
    if is_local(name):
        return name
    try:
        return _snapshot(name, local=True)
    except (OSError, ValueError):  # not in the cache, or not a hub id at all
        return None


def local_dir(name: str, field: str) -> str:
    """`cached(name)`, or for a hub id the cache lacks its tokenizer and config downloaded
    into the cache first (HF_TOKEN honoured; no download under HF_HUB_OFFLINE): a ConfigError
    naming `field` and the fix when neither finds them."""
    found = cached(name)
    if found is not None:
        return found
    if offline():
        why = "HF_HUB_OFFLINE is set and the cache does not hold it"
    else:
        try:
            return _snapshot(name, local=False)
        except (OSError, ValueError) as e:  # huggingface_hub's errors are one or the other
            why = _why(e)
    raise ConfigError(
        f"{field}: {name!r} is not a folder here, and its tokenizer and config are neither in "
        f"the Hugging Face hub cache ({cache_dir()}) nor downloadable ({why}). The load "
        "generator reads them before the first boot: download the model first (`hf download "
        f"{name}`; `huggingface-cli download {name}` in older huggingface_hub), set HF_TOKEN "
        "for a gated model, or set server.tokenizer to a local folder with its tokenizer.json")


def _why(e: Exception) -> str:
    """What the hub said, in a few words."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    has_token = bool(os.environ.get("HF_TOKEN"))
    if isinstance(e, GatedRepoError):
        return "a gated model, and " + ("HF_TOKEN's account has no access to it" if has_token
                                        else "HF_TOKEN is not set")
    if isinstance(e, RepositoryNotFoundError):
        return "the hub has no such model, or a private one " + (
            "HF_TOKEN's account cannot see" if has_token else "(HF_TOKEN is not set)")
    if isinstance(e, HFValidationError):
        return "not a hub id (org/name) either"
    if isinstance(e, LocalEntryNotFoundError):
        return "the hub could not be reached"
    first = str(e).strip().splitlines()
    return f"{type(e).__name__}: {first[0] if first else ''}"
