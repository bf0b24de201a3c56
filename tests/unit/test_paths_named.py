"""Every `tests/...`, `docs/...`, `autotune/...`, `scripts/...` or `lab/...` path that the
package, the README, the docs and lab/README.md name exists: a moved or deleted file cannot
leave a dead reference behind. A raw result file lives on the `results` branch
(lab/results.sh), listed in docs/results/raw-manifest.tsv: naming it, or a folder of them,
counts as existing."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a path: one of the roots (bench/: the lab's old name), then path characters; a glob or a
# placeholder is not a path
PATH = re.compile(r"(?<![\w./-])((?:tests|docs|autotune|scripts|lab|bench)/[\w./-]*[\w/])")


def named_paths() -> dict[str, list[str]]:
    """{path: [files naming it]} over the package's sources, README.md, docs/ and lab/ *.md."""
    sources = [*ROOT.glob("autotune/**/*.py"), ROOT / "README.md", *ROOT.glob("docs/**/*.md"),
               *ROOT.glob("lab/**/*.md")]
    found: dict[str, list[str]] = {}
    for src in sources:
        for m in PATH.finditer(src.read_text()):
            name = m.group(1).rstrip(".")
            after = src.read_text()[m.end():m.end() + 1]
            glob = after != "" and after in "*<{"
            # a file (its last part has an extension) or a folder (a trailing slash); a bare
            # word after a slash is a label (a Kubernetes annotation "autotune/study")
            if glob or not ("." in name.rsplit("/", 1)[-1] or name.endswith("/")):
                continue
            found.setdefault(name, []).append(str(src.relative_to(ROOT)))
    return found


def raw_files() -> list[str]:
    manifest = ROOT / "docs/results/raw-manifest.tsv"
    return [line.split("\t")[0] for line in manifest.read_text().splitlines() if line]


def test_named_paths_exist() -> None:
    found = named_paths()
    assert len(found) > 30  # the scan sees the references it is meant to check
    raw = raw_files()

    def exists(p: str) -> bool:
        return (ROOT / p).exists() or any(r == p or r.startswith(p.rstrip("/") + "/")
                                          for r in raw)

    dead = {p: srcs for p, srcs in found.items() if not exists(p)}
    assert not dead, "named but missing:\n" + "\n".join(f"  {p}  (in {', '.join(sorted(set(s)))})"
                                                       for p, s in sorted(dead.items()))
