"""Several processes on one SQLite study never run the same enqueued trial twice."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import optuna

from autotune.tuning.storage import make_storage

N_TRIALS, N_PROCS = 40, 4


def _worker(url: str, go: Any, out: Any) -> None:
    got: list[int] = []
    try:
        _pop_all(url, go, got)
        out.put((got, None))
    except Exception as e:  # e.g. "Cannot tell a COMPLETE trial": another process ran it
        out.put((got, repr(e)))


def _pop_all(url: str, go: Any, got: list[int]) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="pop", storage=make_storage(url))
    go.wait()
    while True:
        waiting = study.get_trials(deepcopy=False,
                                   states=(optuna.trial.TrialState.WAITING,))
        if not waiting:
            break
        t = study.ask()
        if "i" not in t.user_attrs:  # no WAITING trial left for us: a new one was created
            study.tell(t, state=optuna.trial.TrialState.FAIL)
            continue
        got.append(t.number)
        study.tell(t, 1.0)


def test_each_enqueued_trial_runs_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="pop", storage=make_storage(url))
    for i in range(N_TRIALS):
        study.enqueue_trial({"x": i}, user_attrs={"i": i})
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, go, out)) for _ in range(N_PROCS)]
    for p in procs:
        p.start()
    go.set()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [err for _, err in results if err] == []
    popped = [n for got, _ in results for n in got]
    assert sorted(popped) == list(range(N_TRIALS))  # each once: none twice, none lost


def test_a_postgresql_url_uses_the_driver_the_package_ships() -> None:
    """Issue 84, item 6: `postgresql://`, the form every message recommends, failed with
    "Failed to import DB access module": SQLAlchemy 2.1 gives the bare scheme psycopg (3),
    and the package ships psycopg2. No server needed: port 1 refuses the connection."""
    import importlib.util

    import pytest
    from sqlalchemy.engine import make_url

    from autotune.errors import ConfigError
    from autotune.tuning.storage import check_url, driver_url

    url = "postgresql://autotune:pw@127.0.0.1:1/autotune"
    check_url(url)
    assert make_url(driver_url(url)).get_dialect().driver == "psycopg2"
    for kept in ("postgresql+psycopg2://u@h/d", "sqlite:///x.db"):
        assert driver_url(kept) == kept
    with pytest.raises(ConfigError) as e:
        make_storage(url)
    assert "cannot open 'postgresql://autotune:pw@127.0.0.1:1/autotune': OperationalError" in \
        str(e.value)
    if importlib.util.find_spec("psycopg") is None:  # a driver named but not installed
        with pytest.raises(ConfigError, match="no driver for it in this install .* use "
                                              "sqlite:///PATH or postgresql://USER@HOST/DB"):
            check_url("postgresql+psycopg://u@127.0.0.1/d")
