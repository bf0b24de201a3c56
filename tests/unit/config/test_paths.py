"""Folders and files a command will write, checked before it works (autotune.config.paths)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.paths import check_file, check_folder
from autotune.errors import ConfigError


def test_folders(tmp_path: Path) -> None:
    check_folder(tmp_path, "--out")  # exists
    check_folder(tmp_path / "a" / "b", "--out")  # can be created
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match=r"^--out: '.*/f' is a file, not a folder$"):
        check_folder(tmp_path / "f", "--out")
    with pytest.raises(ConfigError, match=r"^workdir: cannot write under '/proc/1/x' "
                                          r"\(/proc/1 is not a writable folder\); set workdir"):
        check_folder("/proc/1/x", "workdir")


def test_files(tmp_path: Path) -> None:
    check_file(tmp_path / "new.json", "--output")
    check_file(tmp_path / "sub" / "new.json", "--output")
    (tmp_path / "old.json").write_text("{}")
    check_file(tmp_path / "old.json", "--output")  # replaced
    with pytest.raises(ConfigError, match="is a folder; give a file name in it"):
        check_file(tmp_path, "--output")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_file(tmp_path / "f" / "new.json", "--output")
