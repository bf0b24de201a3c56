"""The flag registry (autotune/config/flags.py) is the one table every rule reads: its derived
lists are what the guard and the layout check use, its refusal names are server/refusals.py's
rules, and docs/flags.md lists each flag with the same marks."""

from __future__ import annotations

import re
from pathlib import Path

from autotune.config import flags
from autotune.config.quality import OUTPUT_FLAGS
from autotune.config.study import PARALLEL_FLAGS, gpus_per_replica
from autotune.server.refusals import RULES

DOC = Path(__file__).resolve().parents[3] / "docs/flags.md"


def test_every_rule_reads_the_registry() -> None:
    assert OUTPUT_FLAGS == flags.OUTPUT_FLAGS and PARALLEL_FLAGS == flags.PARALLEL_FLAGS
    assert set(flags.LOSSLESS_FLAGS) <= set(OUTPUT_FLAGS)  # judged, by the bug check
    assert gpus_per_replica({"tensor_parallel_size": 2, "data_parallel_size": 2}) == 4


def test_refusal_names_are_the_rules_and_every_rule_is_named() -> None:
    named = {r for f in flags.FLAGS.values() for r in f.refusals}
    assert named == set(RULES)


def test_the_docs_table_matches_the_registry() -> None:
    table = DOC.read_text().split("Today's table:")[1]
    rows = {m[1]: [c.strip() for c in m[2].split("|")]
            for m in re.finditer(r"^\| `(\w+)` \|(.*)\|$", table, re.M)}
    assert set(rows) == set(flags.FLAGS)
    for name, f in flags.FLAGS.items():
        outputs, lossless, gpus, refusals = rows[name]
        assert (outputs == "yes", lossless == "yes", gpus == "yes") == (
            f.changes_outputs, f.lossless, f.gpus), name
        assert (refusals.replace("`", "").split(", ") if refusals else []) == list(f.refusals)
