"""The study's Optuna storage: RDB storage (SQLite by default, PostgreSQL for several hosts)
with heartbeats, and SQLite transactions that take the write lock when they begin. A URL is
written `sqlite:///PATH` or `postgresql://USER@HOST/DB`; the PostgreSQL driver is the one the
package ships (psycopg2), whatever SQLAlchemy's default for the scheme."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from autotune.errors import ConfigError

HEARTBEAT_S, GRACE_S = 10, 60
FORMS = "sqlite:///PATH or postgresql://USER@HOST/DB"
# SQLAlchemy 2.1 made psycopg (3) the driver of a bare postgresql://, which the package does not
# ship: it failed with "Failed to import DB access module" while the messages recommended it
POSTGRESQL, SHIPPED = "postgresql://", "postgresql+psycopg2://"


def driver_url(url: str) -> str:
    """`url` with the driver this install ships where it names none (postgresql://)."""
    return SHIPPED + url.removeprefix(POSTGRESQL) if url.startswith(POSTGRESQL) else url


def check_url(url: str) -> None:
    """Checks that need no connection: a URL SQLAlchemy can parse, a driver this install has,
    and for SQLite a folder that can hold the file. Called before the first boot."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(driver_url(url))
        parsed.get_dialect().import_dbapi()
    except (ArgumentError, ValueError) as e:
        raise ConfigError(f"storage: {url!r} is not a database URL ({e}); use {FORMS}"
                          ) from None
    except (NoSuchModuleError, ImportError) as e:
        raise ConfigError(f"storage: {url!r}: no driver for it in this install ({e}); use "
                          f"{FORMS}") from None
    if parsed.drivername.startswith("sqlite"):
        db = parsed.database
        if not db or db == ":memory:":
            raise ConfigError(f"storage: {url!r} names no file; a study is kept in "
                              "sqlite:///PATH (a file several processes share)")
        folder = Path(db).resolve().parent
        existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if existing is None or not existing.is_dir() or not _writable(existing):
            raise ConfigError(f"storage: cannot create {db!r}: {existing} is not a writable "
                              "folder")


def _writable(folder: Path) -> bool:
    import os

    return os.access(folder, os.W_OK | os.X_OK)


def make_storage(url: str, grace_s: float = GRACE_S) -> optuna.storages.BaseStorage:
    """Create (once) and return the storage, with heartbeats: a RUNNING trial whose worker died
    (SIGKILL, lost host) is failed after `grace_s` and its params retried once."""
    from sqlalchemy.exc import SQLAlchemyError

    check_url(url)
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)
    kw: dict[str, Any] = {"heartbeat_interval": HEARTBEAT_S, "grace_period": int(grace_s),
                          "heartbeat_stale_trial_callback": retry}
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        kw["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    try:
        storage = optuna.storages.RDBStorage(driver_url(url), **kw)
    except (ValueError, ImportError) as e:
        raise ConfigError(f"storage: cannot use {url!r}: {e}") from None
    except SQLAlchemyError as e:  # cannot connect, no such database, refused
        raise ConfigError(f"storage: cannot open {url!r}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:300]}") from None
    if url.startswith("sqlite:"):
        _immediate_transactions(storage.engine)
    return storage


def rename_study(storage: optuna.storages.BaseStorage, name: str, new: str) -> None:
    """Give the study `name` the name `new`, its trials and attributes untouched. Optuna has no
    rename (copy_study gives the trials new ids and drops their heartbeats); its schema has
    kept the name in studies.study_name since 1.0."""
    from sqlalchemy import text

    assert isinstance(storage, optuna.storages.RDBStorage)
    study_id = storage.get_study_id_from_name(name)
    with storage.engine.begin() as conn:
        conn.execute(text("UPDATE studies SET study_name = :new WHERE study_id = :id"),
                     {"new": new, "id": study_id})


def _immediate_transactions(engine: Any) -> None:
    """Make every SQLite transaction take the write lock when it begins (BEGIN IMMEDIATE).

    Optuna hands a WAITING trial (the baseline, a re-queued one) to a worker by reading its
    state and writing RUNNING, with SELECT ... FOR UPDATE, which SQLite ignores. Two workers
    that start together could both read WAITING and both run the trial; the second to finish
    then failed with "Cannot tell a COMPLETE trial". Serialized transactions make the read and
    the write one step. SQLAlchemy's recipe: let pysqlite issue no BEGIN of its own."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners reconnect with them
