"""What the MLflow UI opens on: the study's saved view, the gain column and the study's note."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.config.study import StudyConfig
from autotune.outputs.mlflow_view import (
    flags_tag,
    gain_tag,
    run_url,
    runs_url,
    runs_view,
    study_note,
)
from autotune.tuning.record import TrialFacts, records
from autotune.tuning.search_space import load_search_space
from autotune.tuning.summary import summarize


def _cfg(tmp_path: Path, direction: str = "maximize") -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "t", "server": {"model": "/m", "executable": ["vllm"]},
        "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "objectives": [{"metric": "total_token_throughput", "direction": direction},
                       {"metric": "mean_tpot_ms", "direction": "minimize"}],
        "slos": [{"metric": "p99_ttft_ms", "max": 2000}],
        "search_space": "cpu-demo", "workdir": str(tmp_path)})


def _study() -> optuna.Study:
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    for flags, values, base in (({}, [100.0, 20.0], True),
                                ({"max_num_seqs": 8}, [150.0, 18.0], False),
                                ({"max_num_seqs": 4}, [90.0, 25.0], False)):
        facts = TrialFacts(flags=flags, baseline=base or None, metrics={
            "total_token_throughput": values[0], "mean_tpot_ms": values[1]})
        st.add_trial(optuna.trial.create_trial(values=values, user_attrs=facts.to_attrs()))
    return st


def test_the_saved_view_sorts_by_rank_with_the_key_columns_first(
        tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    v = runs_view(cfg, "p1")
    flags = list(load_search_space("cpu-demo").parameters)
    assert v["selectedColumns"] == [
        "metrics.`total_token_throughput`", "metrics.`mean_tpot_ms`", "tags.`autotune.gain`",
        "tags.`autotune.flags`", "metrics.`p99_ttft_ms`", "tags.`autotune.state`",
        *[f"params.`{p}`" for p in flags]]
    assert v["columnOrder"] == v["selectedColumns"]
    # the recommendation's rank is 0: the first row, whatever the objectives' directions
    assert v["orderByKey"] == "metrics.`rank`" and v["orderByAsc"] is True
    assert v["runsExpanded"] == {"p1": True} and v["runsHiddenMode"] == "SHOW_ALL"


def test_addresses_keep_the_model_training_mode() -> None:
    assert runs_url("http://h:1", "7") == ("http://h:1/#/experiments/7/runs?viewStateShareKey="
                                           "autotune&workflowType=machine_learning"
                                           "&compareRunsMode=TABLE")
    assert "viewStateShareKey" not in runs_url("http://h:1", "7", shared_view=False)
    assert run_url("http://h:1", "7", "abc").endswith("/runs/abc?workflowType=machine_learning")


def test_gain_and_the_study_note(tmp_path: Path) -> None:
    st = _study()
    recs = records(st)
    summary = summarize(st, _cfg(tmp_path))
    assert gain_tag(recs[0], summary) == "vLLM's defaults"
    assert gain_tag(recs[1], summary) == "+50.0%, one measurement"
    assert flags_tag(recs[1], _cfg(tmp_path)) == "--max-num-seqs 8"
    note = study_note(_cfg(tmp_path), summary, "7", {1: "r1"})
    assert note.startswith("**Recommended: trial 1: total_token_throughput +50.0%")
    assert "(#/experiments/7/runs?viewStateShareKey=autotune" in note
    assert ("| [trial 1](#/experiments/7/runs/r1?workflowType=machine_learning) | 150.00 | "
            "18.00 | +50.0%, one measurement | `--max-num-seqs 8` |") in note
    assert "| trial 2 |" not in note  # not on the front
    assert summary.rank() == {1: 0, 0: 1, 2: 2}


def test_the_printed_page_keeps_the_model_training_mode_and_opens_the_runs_view() -> None:
    """`autotune ui` prints /autotune/open on MLflow's own server: it stores the mode as MLflow's
    switch does (local storage, mlflow.workflowType_v1) and goes on to the study's runs view;
    it goes nowhere but MLflow's own pages."""
    from urllib.parse import unquote

    from autotune.outputs.mlflow_app import flask_app
    from autotune.outputs.mlflow_view import open_url

    url = open_url("http://127.0.0.1:5000", "7")
    assert url.startswith("http://127.0.0.1:5000/autotune/open?to=%23/experiments/7/runs%3F")
    client = flask_app.test_client()
    page = client.get(url.removeprefix("http://127.0.0.1:5000"))
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert 'localStorage.setItem("mlflow.workflowType_v1", "\\"machine_learning\\"")' in html
    target = unquote(url.split("to=", 1)[1])
    assert f'location.replace("/{target}")' in html
    assert client.get("/autotune/open?to=https://elsewhere.example/").status_code == 400


def test_a_json_flag_is_a_column_and_in_the_flags_tag_once(tmp_path: Path) -> None:
    """MLflow logs a trial's flags by name (speculative_config, not the speculative_method
    parameter that goes into it): the view's columns and the flags tag use those names."""
    cfg = _cfg(tmp_path).model_copy(update={"search_space": "latency"})
    cfg = cfg.model_copy(update={"server": cfg.server.model_copy(
        update={"draft_models": ["/d"]})})
    cols = runs_view(cfg, "p1")["selectedColumns"]
    assert cols.count("params.`speculative_config`") == 1
    assert "params.`speculative_method`" not in cols
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    spec = {"method": "draft_model", "model": "/d", "num_speculative_tokens": 3}
    facts = TrialFacts(flags={"speculative_config": spec}, metrics={
        "total_token_throughput": 1.0, "mean_tpot_ms": 1.0})
    st.add_trial(optuna.trial.create_trial(values=[1.0, 1.0], user_attrs=facts.to_attrs()))
    tag = flags_tag(records(st)[0], cfg)
    assert tag.startswith("--speculative-config ") and '"draft_model"' in tag


def test_the_trials_table_has_its_columns_with_no_trial() -> None:
    """A study whose only trial failed (its capacity server's engine killed, 2026-11-27):
    MLflow's front files had raised "'DataFrame' object has no attribute 'on_front'"."""
    from autotune.outputs.plots import trials_frame

    df = trials_frame([], ["capacity", "mean_tpot_ms"], set())
    assert list(df.columns) == ["number", "status", "baseline", "feasible", "on_front", "cause",
                                "params", "capacity", "mean_tpot_ms"]
    assert df[df.on_front].empty


def test_the_pareto_plot_draws_the_front_of_pooled_values(tmp_path: Path) -> None:
    """Issue 70, item 1, on the plots (report and MLflow): Optuna's Pareto plot drew its front
    on each trial's first boot while every table's front is on the config's medians; given the
    summary's pooled values, the plot's front is the tables' front."""
    from autotune.outputs.plots import measured_study, pareto_png

    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    # trial 1's first boot beats the defaults' on both; its median over three boots does not
    for flags, values, base, rep in [
            ({}, [100.0, 20.0], True, None), ({"max_num_seqs": 8}, [150.0, 18.0], False, None),
            ({"max_num_seqs": 8}, [60.0, 30.0], False, 1),
            ({"max_num_seqs": 8}, [70.0, 28.0], False, 1)]:
        facts = TrialFacts(flags=flags, flags_key=str(sorted(flags.items())), baseline=base or None,
                           repeat_of=rep, metrics={"total_token_throughput": values[0],
                                                   "mean_tpot_ms": values[1]})
        st.add_trial(optuna.trial.create_trial(values=values, user_attrs=facts.to_attrs()))
    summary = summarize(st, _cfg(tmp_path))
    assert summary.front == [0]  # trial 1's medians: 70 tok/s, 28 ms
    pooled = {n: r.values for n, r in summary.pooled.items()}
    stored = [t.values for t in st.get_trials()]
    first = [t.number for t in measured_study(st, full_only=True).best_trials]
    drawn = [t.number for t in measured_study(st, full_only=True, pooled=pooled).best_trials]
    assert first == [1] and drawn == [0]  # the copy numbers trials 0 and 1 as the study does
    pareto_png(st, tmp_path / "p.png", "t", pooled)
    assert (tmp_path / "p.png").stat().st_size > 0
    # the study's own trials keep their measurements: get_trials(deepcopy=False) hands out
    # the storage's cached objects, and a plot that wrote into them once fed the pooled
    # medians to a study's confirm phase in the same process
    assert [t.values for t in st.get_trials()] == stored


def test_a_trial_run_logs_the_gain_its_gain_tag_says(tmp_path: Path) -> None:
    """Issue 84 item 7 on MLflow: a trial's `delta_<objective>` was this boot against the
    defaults' first boot (-2.7%) beside a gain tag of +1.9% (against the geometric mean of the
    defaults' three boots); both now say the summary's gain, and the defaults' run names the
    figure it divides by."""
    from autotune.outputs.tracking import Tracker

    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    for flags, tok, base, rep in [({}, 15300.0, True, None), ({"max_num_seqs": 8}, 14892.71,
                                                              False, None),
                                  ({}, 13500.0, False, 0), ({}, 15100.0, False, 0)]:
        facts = TrialFacts(flags=flags, flags_key=str(sorted(flags.items())),
                           baseline=base or None, repeat_of=rep,
                           metrics={"total_token_throughput": tok, "mean_tpot_ms": 5.0})
        st.add_trial(optuna.trial.create_trial(values=[tok, 5.0], user_attrs=facts.to_attrs()))
    cfg = _cfg(tmp_path)
    summary = summarize(st, cfg)
    tracker = Tracker(cfg, f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker.open_run(st, {})
    for t in st.get_trials()[:2]:
        tracker.log_trial(summary, t)
    assert tracker.failures == 0
    runs = {r.data.tags["autotune.trial_number"]: r.data for r in tracker.client.search_runs(
        [tracker.experiment_id], "tags.`autotune.kind` = 'trial'")}
    assert runs["1"].tags["autotune.gain"] == "+1.9%, one measurement"
    assert runs["1"].metrics["delta_total_token_throughput"] == pytest.approx(0.0193, abs=1e-4)
    assert runs["0"].tags["autotune.gain"] == "vLLM's defaults; geo. mean 14,610.58 of 3 boots"
