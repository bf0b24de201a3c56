"""scripts/reference_check.py: its input errors (the check: tests/unit/measure/test_verify.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "scripts" / "reference_check.py"
    spec = importlib.util.spec_from_file_location("reference_check", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["reference_check"] = mod
    spec.loader.exec_module(mod)
    return mod


rc = _load()


@pytest.mark.parametrize("argv, needle", [
    (["--capacity", "0", "--url", "http://x"], "--capacity 0"),
    (["--capacity", "5", "--url", "http://x", "--tolerance", "1.5"], "--tolerance 1.5"),
    (["--capacity", "5"], "either --url"),
    (["--capacity", "5", "--url", "http://x", "--slo", "p99<"], "--slo"),
    (["--capacity", "5", "--url", "http://x", "--", "--load-format", "dummy"], "--url"),
])
def test_bad_input_exits_2_with_one_line(argv: list[str], needle: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = rc.main(["--model", "m", "--vllm", sys.executable, "--out",
                    str(tmp_path / "c.json"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err
