"""The study summary every surface reads: its recommendation rule on recorded studies (burst
artefacts, a config that gives up most of the first objective, nothing to recommend, a confirm
phase), and the records read once per trial event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.tuning.record import Status, TrialFacts, TrialRecord
from tests.fakes import study_cfg, summary_of

TOK, TPOT = "total_token_throughput", "mean_tpot_ms"


def rec(n: int, tok: float, tpot: float, *, base: bool = False, key: str | None = None,
        repeat_of: int | None = None, **metrics: float) -> TrialRecord:
    facts = TrialFacts(flags={} if base else {"max_num_seqs": n}, flags_key=key or str(n),
                       baseline=base or None, repeat_of=repeat_of,
                       metrics={TOK: tok, TPOT: tpot, "mean_itl_ms": tpot, **metrics})
    return TrialRecord(n, Status.OK, facts, facts.flags or {}, {TOK: tok, TPOT: tpot})


def test_a_burst_tpot_is_flagged_and_never_recommended(tmp_path: Path) -> None:
    """The issue's small study: trial 4 read a mean TPOT of 0.01 ms (all 16 tokens within
    0.2 ms after a 103-327 ms TTFT) for -59.4% throughput, and the knee credited it. It is
    now an artefact (below the floor: the defaults' TPOT / 10), shown as such, and not the
    pick; without it the defaults are."""
    recs = [rec(0, 5000.0, 2.0, base=True), rec(4, 2030.0, 0.01)]
    s = summary_of(recs, tmp_path)
    assert 4 in s.artefacts and "burst" in s.artefacts[4]
    assert s.recommendation.number == 0 and s.recommendation.baseline
    assert "left out: trial 4: artefact" in s.recommendation.reason
    # the knee on the raw front would have taken it
    from autotune.tuning.front import knee

    assert knee(recs, [TOK, TPOT], ["maximize", "minimize"]).number == 4


def test_late_reads_blame_the_client_before_the_server(tmp_path: Path) -> None:
    recs = [rec(0, 5000.0, 2.0, base=True), rec(1, 6000.0, 1.5, late_read_share=0.4)]
    s = summary_of(recs, tmp_path)
    assert "the client read 40% of its token gaps late" in s.artefacts[1]
    assert s.recommendation.number == 0


def test_a_trial_only_an_artefact_dominates_stays_pickable(tmp_path: Path) -> None:
    """Trial 1's late reads make it an artefact; it dominated the defaults, which are then on
    the front once artefacts are left out, where a preference picks (before: `export --prefer
    throughput` found nothing); the front shown stays the true one. When
    every feasible trial is an artefact, the error names the front's and why."""
    from autotune.errors import StudyError
    from autotune.tuning.summary import choose

    recs = [rec(0, 5000.0, 2.0, base=True), rec(1, 6000.0, 1.5, late_read_share=0.4)]
    s = summary_of(recs, tmp_path)
    assert s.front == [1] and s.fit == [0] and list(s.artefacts) == [1]  # the true front
    assert choose(s, study_cfg(tmp_path), "throughput").number == 0
    assert s.recommendation.number == 0 and "trial 1: artefact" in s.recommendation.reason
    recs[0] = rec(0, 5000.0, 2.0, base=True, late_read_share=0.3)
    s = summary_of(recs, tmp_path)
    with pytest.raises(StudyError) as e:
        choose(s, study_cfg(tmp_path), "throughput")
    assert "every feasible trial's per-token figures are a measurement artefact" in str(e.value)
    assert "trial 1: the client read 40%" in str(e.value)  # the front's; 1 dominates 0


def test_speculation_raises_the_floor_by_its_draft_tokens(tmp_path: Path) -> None:
    """5 speculative tokens may decode up to 6 tokens a step: 0.15 ms against the defaults'
    2.0 is under 2.0/10 but over 2.0/60, so it is not called a burst."""
    spec = rec(1, 6000.0, 0.15)
    spec = TrialRecord(1, Status.OK, TrialFacts(
        flags={"speculative_config": {"method": "ngram", "num_speculative_tokens": 5}},
        flags_key="s", metrics=spec.metrics), {}, spec.values)
    s = summary_of([rec(0, 5000.0, 2.0, base=True), spec], tmp_path)
    assert s.artefacts == {} and s.recommendation.number == 1


def test_a_config_that_gives_up_most_of_the_first_objective_is_not_the_default_pick(
        tmp_path: Path) -> None:
    recs = [rec(0, 5000.0, 4.0, base=True), rec(1, 2000.0, 1.0), rec(2, 4800.0, 3.0)]
    s = summary_of(recs, tmp_path)
    assert s.recommendation.number == 2
    assert "trial 1: keeps < 50% of the defaults' total_token_throughput" in \
        s.recommendation.reason
    # asked for explicitly, the latency end of the front is still there
    from autotune.tuning.summary import choose

    assert choose(s, study_cfg(tmp_path), "latency").number == 1


def test_a_study_with_nothing_to_recommend_says_why_in_one_line_each(tmp_path: Path) -> None:
    cause = ("RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) but "
             "received 4 argument(s).\nDeclaration: _C::static_scaled_fp8_quant() -> ()")
    bad = [TrialRecord(n, Status.INFEASIBLE, TrialFacts(flags_key=str(n), cause=cause,
                                                        failure="ServerBootError",
                                                        baseline=(n == 0) or None), {}, {})
           for n in range(2)]
    s = summary_of(bad, tmp_path)
    assert s.recommendation.number is None and s.recommendation.rule == "none"
    assert s.failures == ["trial 0: infeasible: Declaration: _C::static_scaled_fp8_quant() -> ()",
                          "trial 1: infeasible: Declaration: _C::static_scaled_fp8_quant() -> ()"]
    assert s.headline().startswith("nothing to recommend: no trial was measured")
    from autotune.errors import StudyError
    from autotune.tuning.summary import choose

    with pytest.raises(StudyError, match="no trial was measured"):
        choose(s, study_cfg(tmp_path))


def test_the_confirm_phases_pick_is_the_recommendation_unless_it_is_an_artefact(
        tmp_path: Path) -> None:
    """After a confirm phase, a finalist is recommended when, over all its boots and the
    defaults', it is better beyond the noise on an objective and worse on none; trial 2 is
    better still but its TPOT is a burst, so trial 1 is the pick. The integration study that
    asked for the rule: its finalist was +14% throughput within the noise and -16% TPOT beyond
    it, and the old rule (the first objective alone) kept the defaults."""
    from autotune.measure.stats import gain_ci
    from autotune.tuning.confirm import ConfirmResult, ConfirmRow
    from autotune.tuning.summary import summarize_records

    recs = [rec(0, 5000.0, 2.0, base=True, key="b"), rec(1, 6000.0, 1.8, key="a"),
            rec(2, 7000.0, 0.01, key="z"),
            rec(3, 5050.0, 2.0, key="b", repeat_of=0), rec(4, 6100.0, 1.81, key="a", repeat_of=1),
            rec(5, 7100.0, 0.01, key="z", repeat_of=2),
            rec(6, 4950.0, 2.02, key="b", repeat_of=0), rec(7, 5900.0, 1.79, key="a", repeat_of=1),
            rec(8, 6900.0, 0.01, key="z", repeat_of=2)]
    g = gain_ci([6000.0, 6100.0, 5900.0], [5000.0, 5050.0, 4950.0])
    row = ConfirmRow([6000.0, 6100.0, 5900.0], 6000.0, 5900.0, 6100.0, g, True)
    base_row = ConfirmRow([5000.0, 5050.0, 4950.0], 5000.0, 4950.0, 5050.0)
    res = ConfirmResult(TOK, 3, 0, 0.01, True, {0: base_row, 1: row, 2: row}, 2)
    s = summarize_records("t", recs, study_cfg(tmp_path), res)
    assert s.recommendation.number == 1 and s.recommendation.rule == "confirm"
    assert 2 in s.artefacts
    assert "better beyond the noise on total_token_throughput, mean_tpot_ms" in \
        s.recommendation.reason
    # read back from confirm.json by every command
    cfg = study_cfg(tmp_path)
    cfg.study_dir().mkdir(parents=True)
    (cfg.study_dir() / "confirm.json").write_text(json.dumps(res.to_json()))
    assert summarize_records("t", recs, cfg).recommendation.number == 1
    # better on TPOT beyond the noise, throughput within it: recommended
    flat = [rec(0, 5000.0, 2.0, base=True, key="b"), rec(1, 5700.0, 1.6, key="a"),
            rec(3, 5050.0, 2.02, key="b", repeat_of=0), rec(4, 4600.0, 1.61, key="a", repeat_of=1),
            rec(6, 4950.0, 1.98, key="b", repeat_of=0), rec(7, 5200.0, 1.59, key="a", repeat_of=1)]
    res2 = ConfirmResult(TOK, 3, 0, 0.01, True, {0: base_row, 1: row}, 0)
    s2 = summarize_records("t", flat, study_cfg(tmp_path), res2)
    assert s2.recommendation.number == 1, s2.recommendation
    assert s2.recommendation.reason.endswith("on mean_tpot_ms, worse on none")


def test_the_pareto_front_is_on_pooled_values(tmp_path: Path) -> None:
    """The issue's pareto listing: trial 5's medians (5,094.65 tok/s, 1.29 ms) dominate trial
    0's (4,588.11, 1.34), so trial 0 is not on the front of pooled values."""
    recs = [rec(0, 3000.0, 1.2, base=True, key="b"), rec(5, 3478.0, 1.4, key="f"),
            rec(6, 4588.11, 1.34, key="b", repeat_of=0),
            rec(7, 5094.65, 1.29, key="f", repeat_of=5),
            rec(8, 6489.2, 1.5, key="b", repeat_of=0), rec(9, 5200.0, 1.2, key="f", repeat_of=5)]
    s = summary_of(recs, tmp_path)
    assert s.front == [5]
    assert s.record(5).values[TOK] == pytest.approx((3478.0 + 5094.65) / 2 + 0.0, rel=0.2)
    assert s.front_records()[0].number == s.recommendation.number == 5
    assert s.rank() == {5: 0, 0: 1}


def test_records_are_read_once_per_trial_event(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook every study command shares computes the summary once, and the live view and
    MLflow read it: one pass over the trials (TrialRecord.of once per trial), where the
    tracker alone used to rebuild every record for every trial it logged."""
    from autotune.outputs.live import tracked
    from autotune.outputs.tracking import Tracker

    cfg = study_cfg(tmp_path)
    st = optuna.create_study(study_name=cfg.name, storage=cfg.storage_url(),
                             directions=["maximize", "minimize"])
    st.set_metric_names([TOK, TPOT])
    for i, (tok, tpot) in enumerate([(5000.0, 2.0), (6000.0, 1.8), (4000.0, 1.0)]):
        facts = TrialFacts(flags={} if i == 0 else {"max_num_seqs": i}, flags_key=str(i),
                           baseline=(i == 0) or None, metrics={TOK: tok, TPOT: tpot})
        st.add_trial(optuna.trial.create_trial(values=[tok, tpot], user_attrs=facts.to_attrs()))
    tracker = Tracker(cfg, f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker.open_run(st, {})
    calls: list[int] = []
    real = TrialRecord.of.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, t: Any, names: list[str]) -> TrialRecord:
        calls.append(t.number)
        return real(cls, t, names)

    monkeypatch.setattr(TrialRecord, "of", classmethod(counted))
    with tracked(cfg, None, 3, 0) as (_, on_trial):
        tracker_hook = on_trial
        for t in st.get_trials():
            calls.clear()
            tracker_hook(st, t)
            assert sorted(calls) == [0, 1, 2]  # one pass
    # and with MLflow logging each trial
    with tracked(cfg, tracker, 3, 0, front_every=0) as (_, on_trial):
        calls.clear()
        on_trial(st, st.get_trials()[1])
        assert sorted(calls) == [0, 1, 2]
    assert tracker.failures == 0


def cap(n: int, slots: float, req_s: float, *, base: bool = False) -> TrialRecord:
    facts = TrialFacts(flags={} if base else {"max_num_seqs": n}, flags_key=str(n),
                       baseline=base or None,
                       metrics={"capacity": slots, "capacity_req_s": req_s, TPOT: 10.0})
    return TrialRecord(n, Status.OK, facts, facts.flags or {}, {"capacity": slots})


CAPACITY = {"capacity": {"axis": "concurrency", "low": 1, "high": 2048},
            "slos": [{"metric": "p99_tpot_ms", "max": 30}]}


@pytest.mark.parametrize("order", [(0, 5, 2), (5, 2, 0)])
def test_a_capacity_tie_keeps_the_defaults_in_any_order(tmp_path: Path,
                                                        order: tuple[int, ...]) -> None:
    """The real-weights H100 study: the defaults, n-gram k=3 and two fp8 configs all held 157
    slots (the bracket's resolution). A tie is no gain: the defaults are picked wherever they
    sit in the trials' order, and the reason names the tie."""
    by = {0: cap(0, 157, 49.5, base=True), 5: cap(5, 157, 29.3), 2: cap(2, 143, 45.1)}
    s = summary_of([by[n] for n in order], tmp_path, [("capacity", "maximize")], **CAPACITY)
    assert s.recommendation.number == 0 and s.recommendation.baseline
    assert "tied at 157 with trial 5: a tie is no gain, so vLLM's defaults" in \
        s.recommendation.reason


def test_a_capacity_tie_without_the_defaults_goes_to_the_most_req_s(tmp_path: Path) -> None:
    """Two configs above the defaults share the most capacity: the one that served more
    requests a second at it is picked, not the earlier trial; `export --prefer capacity`
    picks the same."""
    from autotune.tuning.summary import choose

    recs = [cap(0, 143, 45.0, base=True), cap(1, 172, 50.0), cap(2, 172, 64.8),
            cap(3, 157, 70.0)]
    s = summary_of(recs, tmp_path, [("capacity", "maximize")], **CAPACITY)
    assert s.recommendation.number == 2
    assert "tied at 172 with trial 1: trial 2 served the most req/s at it" in \
        s.recommendation.reason
    assert choose(s, study_cfg(tmp_path, [("capacity", "maximize")], **CAPACITY),
                  "capacity").number == 2
    alone = summary_of(recs[:2], tmp_path, [("capacity", "maximize")], **CAPACITY)
    assert alone.recommendation.number == 1 and "tied" not in alone.recommendation.reason
