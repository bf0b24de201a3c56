"""The functions of a source tree longer than a limit, by ast (`def` line to last line, the
decorators left out): docs/results/product-shape/summary.json's `functions_over_80_lines`.

    .venv/bin/python -m lab.long_functions [ROOT (default autotune)] [--over 80] [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path


def long_functions(root: Path, over: int) -> list[tuple[int, str]]:
    """(lines, "path:line:name") of every function or method in `root`'s .py files longer
    than `over` lines, the longest first."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > over:
                    found.append((n, f"{path}:{node.lineno}:{node.name}"))
    return sorted(found, key=lambda f: (-f[0], f[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default="autotune", type=Path)
    ap.add_argument("--over", type=int, default=80)
    ap.add_argument("--json", action="store_true", help="one JSON object: count and list")
    a = ap.parse_args()
    found = long_functions(a.root, a.over)
    if a.json:
        print(json.dumps({"count": len(found), "list": [f"{w} ({n} lines)" for n, w in found]},
                         indent=1))
        return
    for n, where in found:
        print(n, where)
    print(f"{len(found)} over {a.over} lines")


if __name__ == "__main__":
    main()
