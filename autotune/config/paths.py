"""Folders and files a command will write, checked before it does any work: a folder given
where a file is expected (or the other way round), or a place nobody may write, is one
ConfigError naming the option (or field) and the fix, not an OSError from deep inside."""

from __future__ import annotations

import os
from pathlib import Path

from autotune.errors import ConfigError


def _writable_above(path: Path) -> Path | None:
    """The nearest existing folder at or above `path`, when new entries may be made in it."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return None
    return existing


def check_folder(path: str | Path, field: str) -> None:
    """`path` is a writable folder, or one that can be created."""
    full = Path(path).expanduser().resolve()
    if full.exists() and not full.is_dir():
        raise ConfigError(f"{field}: {str(path)!r} is a file, not a folder")
    if _writable_above(full) is None:
        existing = next((p for p in (full, *full.parents) if p.exists()), None)
        raise ConfigError(f"{field}: cannot write under {str(path)!r} ({existing} is not a "
                          f"writable folder); set {field} to one")


def check_file(path: str | Path, field: str) -> None:
    """`path` is a file that can be written (an existing file is replaced)."""
    full = Path(path).expanduser().resolve()
    if full.is_dir():
        raise ConfigError(f"{field}: {str(path)!r} is a folder; give a file name in it")
    if full.exists() and not os.access(full, os.W_OK):
        raise ConfigError(f"{field}: {str(path)!r} is not writable; choose another file")
    check_folder(full.parent, field)
