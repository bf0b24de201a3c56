"""The public API's two faces (autotune.api, autotune.api.parts): each name loads from the module
its table names, mypy's view of it (the TYPE_CHECKING imports) is the same table, and importing
a face loads nothing heavy until a name is used."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import autotune.api
import autotune.api.parts

ROOT = Path(__file__).resolve().parents[2]


def typed_imports(path: Path) -> dict[str, tuple[str, str]]:
    """{public name: (home module, name there)} of a face's `if TYPE_CHECKING:` imports."""
    out: dict[str, tuple[str, str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.Assign):  # __all__: mypy's export of renamed names
                    continue
                assert isinstance(imp, ast.ImportFrom) and imp.module is not None
                out.update({a.asname or a.name: (imp.module, a.name) for a in imp.names})
    return out


def typed_all(path: Path) -> set[str] | None:
    """The names a face's `if TYPE_CHECKING:` block lists in `__all__` (None: no such list)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for st in node.body:
                if isinstance(st, ast.Assign) and ast.unparse(st.targets[0]) == "__all__":
                    return set(ast.literal_eval(st.value))
    return None


def table(face: ModuleType) -> dict[str, tuple[str, str]]:
    out = {}
    for home, names in face._HOMES.items():
        for entry in names:
            public, _, attr = entry.partition("=")
            out[public] = (home, attr or public)
    return out


@pytest.mark.parametrize("face", [autotune.api, autotune.api.parts], ids=lambda m: m.__name__)
def test_a_face_and_its_typed_imports_are_one_table(face: ModuleType) -> None:
    assert face.__file__ is not None
    assert typed_imports(Path(face.__file__)) == table(face)
    assert sorted(face.__all__) == sorted(table(face))
    renamed = {pub for pub, (_, attr) in table(face).items() if pub != attr}
    # mypy exports `import x as y` only where __all__ lists y: every renamed name, no other
    assert typed_all(Path(face.__file__)) == (renamed or None)
    for name in face.__all__:
        home, attr = table(face)[name]
        assert getattr(face, name) is getattr(sys.modules[home], attr), name
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        face.nothing_here  # noqa: B018


def test_the_faces_do_not_overlap() -> None:
    assert not set(autotune.api.__all__) & set(autotune.api.parts.__all__)


def test_importing_the_api_loads_no_optuna_mlflow_or_vllm() -> None:
    code = ("import sys, autotune.api, autotune.api.parts; from autotune.api import ConfigError; "
            "print(sorted(m for m in ('optuna', 'mlflow', 'vllm', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"
