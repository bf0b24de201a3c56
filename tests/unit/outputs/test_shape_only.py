"""Issue 84, item 4: a study served with random weights (`load_format: dummy`, or
`server.shape_only: true`) says it is shape only on every surface: the end of the study,
`export` (printed, export.json, the vLLM config file), the report and MLflow's study run. A
study of real weights says nothing of the kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.config import weights
from autotune.config.study import StudyConfig, load_study_config
from autotune.errors import ConfigError
from autotune.tuning.record import TrialFacts
from autotune.tuning.summary import choose, summarize

ROOT = Path(__file__).resolve().parents[3]


def _cfg(tmp_path: Path, **server: Any) -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "t", "server": {"model": "/m", "executable": ["vllm"], **server},
        "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "search_space": "cpu-demo", "workdir": str(tmp_path)})


def _study() -> optuna.Study:
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    for flags, values, base in (({}, [100.0, 20.0], True),
                                ({"max_num_seqs": 8}, [150.0, 18.0], False)):
        facts = TrialFacts(flags=flags, baseline=base or None, metrics={
            "total_token_throughput": values[0], "mean_tpot_ms": values[1]})
        st.add_trial(optuna.trial.create_trial(values=values, user_attrs=facts.to_attrs()))
    return st


def _export(cfg: StudyConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
            ) -> tuple[dict[str, Any], str, str, str]:
    from autotune.outputs.export import export

    summary = summarize(_study(), cfg)
    res = export(cfg, choose(summary, cfg), tmp_path / "export")
    folder = Path(res["config_path"]).parent
    printed = capsys.readouterr().err
    return (res, printed, (folder / "export.json").read_text(),
            Path(res["config_path"]).read_text())


def test_the_field_and_dummy_weights_are_one_choice(tmp_path: Path) -> None:
    assert _cfg(tmp_path, shape_only=True).server.args == {"load_format": "dummy"}
    assert _cfg(tmp_path, args={"load_format": "dummy"}).server.shape_only
    assert _cfg(tmp_path, extra_args=["--load-format", "dummy"]).server.shape_only
    assert not _cfg(tmp_path).server.shape_only
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nserver: {model: /m, shape_only: false, args: {load_format: dummy}}\n"
                 "search_space: cpu-demo\n")
    with pytest.raises(ConfigError, match="shape_only: false, but load_format dummy"):
        load_study_config(p)


def test_an_export_of_a_dummy_weight_study_says_it_is_shape_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res, printed, doc, yaml_file = _export(_cfg(tmp_path, args={"load_format": "dummy"}),
                                           tmp_path, capsys)
    assert res["shape_only"] == weights.STATEMENT
    assert "shape only: the servers loaded random weights" in printed
    assert json.loads(doc)["shape_only"] == weights.STATEMENT
    assert yaml_file.startswith("# shape only: ") and "load-format: dummy" in yaml_file


def test_an_export_of_a_real_weight_study_does_not(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res, printed, doc, yaml_file = _export(_cfg(tmp_path), tmp_path, capsys)
    for said in (json.dumps(res), printed, doc, yaml_file):
        assert "shape only" not in said and "random weights" not in said


def test_the_end_of_the_study_and_the_report_say_it(tmp_path: Path) -> None:
    from autotune.outputs.ending import deploy_lines
    from autotune.outputs.report import write_report

    for cfg, said in ((_cfg(tmp_path, shape_only=True), True), (_cfg(tmp_path), False)):
        lines = deploy_lines(summarize(_study(), cfg), cfg, Path("s.yaml"))
        assert (f"  {weights.STATEMENT}" in lines) is said
        report = write_report(_study(), cfg, tmp_path / "report").read_text()
        assert ("**shape only**: the servers loaded random weights" in report) is said


def test_mlflow_tags_the_study_run(tmp_path: Path) -> None:
    from autotune.outputs.tracking import Tracker

    for cfg, said in ((_cfg(tmp_path, shape_only=True), True), (_cfg(tmp_path), False)):
        st = _study()
        uri = f"sqlite:///{tmp_path / f'mlflow-{said}.db'}"
        tracker = Tracker(cfg, uri)
        tracker.open_run(st, {})
        tracker.log_front(summarize(st, cfg), None)
        assert tracker.failures == 0 and tracker.parent_id is not None
        tags = tracker.client.get_run(tracker.parent_id).data.tags
        assert (tags.get(weights.TAG) == weights.STATEMENT) is said


@pytest.mark.parametrize("path", sorted([*(ROOT / "examples").glob("*.yaml"),
                                         *(ROOT / "lab/examples").glob("*.yaml")]),
                         ids=lambda p: p.name)
def test_a_dummy_weight_example_says_shape_only_in_its_name_or_first_line(path: Path) -> None:
    import yaml

    doc = yaml.safe_load(path.read_text())
    if "server" not in doc:  # a search space beside its study file
        return
    cfg = StudyConfig.model_validate(doc)
    first = path.read_text().splitlines()[0].lower()
    if cfg.server.shape_only:
        assert "shape-only" in path.name or "shape only" in first, path.name
    else:
        assert "shape only" not in first, path.name
