"""The lab (lab/) uses the package through its public API only: every autotune import of a
script names autotune.api or autotune.api.parts and only names those faces export, and no
script reaches into another folder through sys.path, so a maintainer may move or rename
anything internal without breaking a script that reproduces a result (issue 79; pyproject.toml's
import contract checks the Python files' imports too, this test also the Python inside the
lab's shell scripts)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import autotune.api
import autotune.api.parts

ROOT = Path(__file__).resolve().parents[3]
FACES = {"autotune.api": set(autotune.api.__all__),
         "autotune.api.parts": set(autotune.api.parts.__all__)}


def outside_the_api(source: str) -> list[str]:
    """What a script's source imports of autotune that is not a public name of its faces, and
    where it changes sys.path."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "autotune":
            module = node.module or ""
            if module == "autotune":  # `from autotune import api`: the face itself
                found += [f"autotune.{a.name}" for a in node.names if a.name != "api"]
            elif module == "autotune.api" and [a.name for a in node.names] == ["parts"]:
                pass
            elif module not in FACES:
                found.append(module)
            else:
                found += [f"{module}.{a.name}" for a in node.names if a.name not in FACES[module]]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names
                      if a.name.split(".")[0] == "autotune" and a.name not in FACES]
        elif isinstance(node, ast.Attribute) and node.attr == "path" \
                and isinstance(node.value, ast.Name) and node.value.id == "sys":
            found.append(f"sys.path (line {node.lineno})")
    return found


def test_the_checker_sees_each_form() -> None:
    src = ("from autotune.load._run import x\nfrom autotune.api import nope, run_session\n"
           "import autotune.measure.runner as r\nfrom autotune import api, errors\n"
           "from autotune.api.parts import judge_point\nimport sys\nsys.path.insert(0, '.')\n")
    assert outside_the_api(src) == ["autotune.load._run", "autotune.api.nope",
                                    "autotune.measure.runner", "autotune.errors",
                                    "sys.path (line 7)"]
    assert outside_the_api("from autotune.api import parts\nimport autotune.api\n") == []


def test_no_lab_script_imports_past_the_api() -> None:
    scripts = sorted(ROOT.glob("lab/**/*.py"))
    assert len(scripts) > 30  # the glob sees the scripts it is meant to check
    bad = {str(p.relative_to(ROOT)): u for p in scripts if (u := outside_the_api(p.read_text()))}
    assert not bad, f"lab scripts past the public API (add the name to a face, or use one): {bad}"


INLINE = re.compile(r"^\s*(from autotune[\w.]* import [\w, ]+|import autotune[\w.]*)", re.M)


def test_the_python_inside_the_lab_shell_scripts_imports_the_api_only() -> None:
    shells = sorted(ROOT.glob("lab/**/*.sh"))
    assert len(shells) > 10
    bad = {str(p.relative_to(ROOT)): u for p in shells
           if (u := [x for m in INLINE.findall(p.read_text()) for x in outside_the_api(m)])}
    assert not bad, bad
