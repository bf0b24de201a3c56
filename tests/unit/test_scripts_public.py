"""scripts/ and bench/ use the package through its public names only: no `from autotune.x import
_y`, no `autotune.x._y` module and no `module._y` attribute, so a maintainer may rename anything
private without breaking a script that reproduces a result (issue 68)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def private_uses(source: str) -> list[str]:
    """The private autotune names a script's source imports or reaches through an import."""
    tree = ast.parse(source)
    found: list[str] = []
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "autotune":
            module = node.module or ""
            found += [module for part in module.split(".") if part.startswith("_")][:1]
            found += [f"{module}.{a.name}" for a in node.names if a.name.startswith("_")]
            aliases |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "autotune":
                    found += [a.name for part in a.name.split(".") if part.startswith("_")][:1]
                    aliases.add((a.asname or a.name).split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                found.append(ast.unparse(node))
    return found


def test_the_checker_sees_each_form() -> None:
    src = ("from autotune.load._run import x\nfrom autotune.measure import _y\n"
           "import autotune.measure.runner as r\nr._z()\nfrom autotune.cli import bench\n")
    assert private_uses(src) == ["autotune.load._run", "autotune.measure._y", "r._z"]
    assert private_uses("from autotune.measure.runner import booted\nx._y\n") == []


def test_no_script_imports_a_private_name() -> None:
    scripts = sorted([*ROOT.glob("scripts/**/*.py"), *ROOT.glob("bench/**/*.py")])
    assert len(scripts) > 10  # the glob sees the scripts it is meant to check
    bad = {str(p.relative_to(ROOT)): u for p in scripts if (u := private_uses(p.read_text()))}
    assert not bad, f"scripts using private names (make the name public or inline it): {bad}"
