"""A throwaway PostgreSQL server from Debian's package, for the multi-worker tests and the
scale-out benchmark. Installs `postgresql` with apt-get when it is missing (as root), runs
initdb in a fresh folder, starts the server on a free loopback port, and removes it all after.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autotune.server.process import free_port


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def ensure_installed() -> Path:
    bindir = _bindir()
    if bindir is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], check=True, env=env)
        bindir = _bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed and cannot be installed here "
                           "(as root: apt-get install postgresql)")
    return bindir


@contextmanager
def postgres(dbname: str = "autotune") -> Iterator[str]:
    """Yield a SQLAlchemy URL of a new database on a new server; stop and delete it after."""
    bindir = ensure_installed()
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))  # /tmp: the postgres user can enter
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres", "postgres")
    root.chmod(0o755)
    data, port = root / "data", free_port()

    def run(*argv: str) -> None:
        subprocess.run([*as_user, *argv], check=True, capture_output=True, text=True)

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
            "--no-sync")
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w",
            "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
            dbname)
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{dbname}"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w",
                        "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
