"""Shared fixtures: the tiny model (made once per session, no network)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from autotune.load.tinymodel import make_tiny_model

    cache = os.environ.get("AUTOTUNE_TEST_MODEL_DIR")
    out = Path(cache) if cache else tmp_path_factory.mktemp("models") / "tiny-qwen3"
    return make_tiny_model(out)
