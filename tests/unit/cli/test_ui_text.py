"""What `autotune ui` prints about the view it opens, with MLflow's server replaced by a
stand-in (tests/integration/test_study_real.py opens the real one in a browser)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner


class FakeUI:
    def __init__(self, *_a: Any, **_k: Any) -> None:
        self.url = "http://127.0.0.1:5999"

    def __enter__(self) -> FakeUI:
        return self

    def __exit__(self, *_a: Any) -> None:
        return None

    def wait_ready(self, _t: float) -> float:
        return 0.1

    def wait(self) -> None:
        return None


def test_ui_says_the_view_sorts_by_rank_as_it_does(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 70, item 8: `autotune ui` printed "its trials sorted by the first objective"
    while the saved view sorts by rank (the recommended config first): the line now says
    what the view does, from the one constant beside it."""
    from autotune.cli import cli as main
    from autotune.outputs import mlflow_ui, mlflow_view

    monkeypatch.setattr(mlflow_ui, "MlflowUI", FakeUI)
    monkeypatch.setattr(mlflow_view, "find_study_experiment", lambda *_a: ("7", "demo"))
    monkeypatch.setattr(mlflow_view, "has_shared_view", lambda *_a: True)
    r = CliRunner().invoke(main, ["ui", "--workdir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "its trials sorted by rank: the recommended config first" in text
    assert "first objective" not in text
    from tests.fakes import study_cfg

    view = mlflow_view.runs_view(study_cfg(tmp_path), None)  # what the view does
    assert view["orderByKey"] == f"metrics.`{mlflow_view.RANK}`" and view["orderByAsc"]
