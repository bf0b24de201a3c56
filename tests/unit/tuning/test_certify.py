"""The budget plan and the certify phase (tuning/plan.py, tuning/certify.py) on a synthetic
capacity study whose boots spread: the split of a budget, the certify loop's endings
(certified, not certified, budget spent, the defaults, a budget too small to explore), and what
every surface reads."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.config.study import StudyConfig
from autotune.tuning import certify as certify_mod
from autotune.tuning.bill import bill, over_budget
from autotune.tuning.certify import (
    BUDGET_SPENT,
    CERTIFIED,
    DEFAULTS,
    NOT_CERTIFIED,
    TOO_SMALL,
    read_certification,
    run_certify,
)
from autotune.tuning.plan import boots_for, boots_of, plan
from autotune.tuning.record import TrialFacts, records
from autotune.tuning.summary import summarize
from tests.certify_fakes import Synthetic, cfg_of, explored, run


def test_a_large_gain_is_certified_in_few_boots_and_every_surface_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syn, pick = explored(tmp_path, 0.44, 0.03)
    ref = {"load": 100.0, "samples": 3, "met": True, "p99_ttft_ms": 900.0,
           "p99_tpot_ms": 40.0, "minutes": 5.0}
    c = run(syn, pick, monkeypatch, 45.0, lambda rec, load: ref | {"load": load})
    assert c.status == CERTIFIED and c.exit_code == 0
    assert c.gain is not None and c.gain["low"] > 1.0 and c.gain["coverage"] == 0.9
    # neither first-pass boot counts (the pick's chosen for reading high, the defaults' for
    # being beaten): 2 certify boots of each, in pairs
    assert 2 <= c.gain["boots_pick"] <= 3 and c.gain["boots_defaults"] == c.gain["boots_pick"]
    assert c.gain["low"] < c.gain["adjusted"] <= c.gain["ratio"]
    assert c.minutes["reference"] == 5.0
    text = c.sentence()
    assert text.startswith(f"certified: trial {pick} is ") and "(90%, " in text
    assert "`vllm bench serve` meets the SLOs at" in text
    # the study summary reads it: the recommendation, its gain and the headline
    s = summarize(syn.study, syn.cfg)
    assert s.certification is not None and s.recommendation.number == pick
    assert s.recommendation.rule == "certified" and s.headline() == text
    assert s.gains[pick]["capacity"].low == pytest.approx(c.gain["low"] - 1)
    assert read_certification(syn.cfg, s.records) == c
    # certify boots start at the capacity found and are repeats of the configs, interleaved
    new = records(syn.study)[3:]
    assert {r.facts.repeat_of for r in new} == {0, pick}
    assert all(r.facts.check_at for r in new)


def test_no_gain_is_not_certified_and_recommends_the_defaults(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syn, pick = explored(tmp_path, 0.0, 0.05, seed=3, max_boots=3)
    c = run(syn, pick, monkeypatch, 1000.0)
    assert c.status == NOT_CERTIFIED and c.exit_code == 3
    assert c.gain is not None and c.gain["low"] <= 1.0
    assert c.gain["boots_pick"] == 2  # max_boots 3, the first pass's included, then the verdict
    s = summarize(syn.study, syn.cfg)
    assert s.recommendation.number == 0 and s.recommendation.rule == "certify"
    assert s.headline().startswith(f"not certified: trial {pick}'s capacity is ")


def test_a_budget_too_small_ends_spent_and_says_what_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syn, pick = explored(tmp_path, 0.44, 0.03)
    spent = bill(syn.study, syn.cfg).total
    c = run(syn, pick, monkeypatch, spent + 6.0)  # less than a pair and the reference
    assert c.status == BUDGET_SPENT and c.exit_code == 4
    assert "more boot" in c.remaining and "reference check" in c.remaining
    assert c.sentence().startswith("budget spent before certification: ")
    s = summarize(syn.study, syn.cfg)
    assert s.recommendation.number == pick and s.recommendation.rule == "uncertified"


def test_a_budget_spent_pick_whose_certify_boots_read_no_gain_is_not_recommended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Budget spent after certify boots that read the pick no better than the defaults: what
    to deploy is the defaults, not the pick marked uncertified."""
    syn, pick = explored(tmp_path, -0.1, 0.03, seed=1)
    spent = bill(syn.study, syn.cfg).total
    c = run(syn, pick, monkeypatch, spent + 14.0)  # one pair and the reference, not two
    assert c.status == BUDGET_SPENT and c.gain is not None and c.gain["boots_pick"] == 1
    assert c.gain["ratio"] <= 1.0
    s = summarize(syn.study, syn.cfg)
    assert s.recommendation.number == 0 and s.recommendation.rule == "certify"
    assert s.headline().startswith("budget spent before certification: ")


def test_a_pick_that_is_the_defaults_needs_no_certifying(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syn, _ = explored(tmp_path, 0.44, 0.03)
    c = run(syn, 0, monkeypatch, 45.0)
    assert c.status == DEFAULTS and c.exit_code == 0
    assert len(syn.study.trials) == 3  # no boot


def test_a_budget_too_small_to_explore_ends_on_its_own_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 84 item 5: `--budget-gpu-minutes 1` ran vLLM's defaults alone, then ended "no
    config explored beat them", exit 0, though nothing was explored. It now ends "budget too
    small to explore" (exit 5) with what the plan needs to explore one trial and certify:
    a budget of that much explores one trial (over_budget lets it start)."""
    syn = Synthetic(cfg_of(tmp_path), 0.03)
    syn.true = {"defaults": 70.0}
    syn.boot("defaults", 9.0, base=True)
    c = run(syn, 0, monkeypatch, 1.0)
    assert c.status == TOO_SMALL and c.exit_code == 5
    assert len(syn.study.trials) == 1  # no boot
    recs = records(syn.study)
    b = bill(recs, syn.cfg)
    costs = plan(recs, syn.cfg, b, 1.0).costs
    need = b.total + costs.trial + costs.reserve(2)
    assert c.sentence().startswith(
        f"budget too small to explore: only vLLM's defaults (trial 0) ran; the plan needs "
        f"about {need:.1f} {b.unit} to explore one trial and certify (")
    assert "a larger budget resumes the study" in c.sentence()
    assert over_budget(b, need, plan(recs, syn.cfg, b, need).reserve) is None
    assert over_budget(b, need - 0.5, plan(recs, syn.cfg, b, need - 0.5).reserve) is not None
    s = summarize(syn.study, syn.cfg)
    assert s.recommendation.number == 0 and s.headline() == c.sentence()


def test_explored_with_nothing_better_or_asked_for_the_defaults_alone_is_exit_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What is not "budget too small to explore": configs tried that failed to boot are
    explored (nothing beat the defaults: deploy them), and so is a study whose n_trials asked
    for the defaults alone; a trial the machine spoiled (unmeasured) explored nothing."""
    from autotune.tuning.record import Status

    syn = Synthetic(cfg_of(tmp_path / "a"), 0.03)
    syn.true = {"defaults": 70.0}
    syn.boot("defaults", 9.0, base=True)
    syn.study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.FAIL, user_attrs=TrialFacts(
            flags={"k": "oom"}, flags_key="oom",
            unmeasured="boot timeout while other work starved the machine").to_attrs()))
    assert records(syn.study)[1].status == Status.UNMEASURED
    assert run(syn, 0, monkeypatch, 1.0).status == TOO_SMALL
    syn.study.add_trial(optuna.trial.create_trial(  # as a boot failure is recorded
        values=[0.0], constraints={"capacity_ok": 1.0}, user_attrs=TrialFacts(
            flags={"k": "oom"}, flags_key="oom", failure="ServerBootError",
            cause="CUDA out of memory").to_attrs()))
    assert records(syn.study)[2].status == Status.INFEASIBLE
    c = run(syn, 0, monkeypatch, 1.0)
    assert c.status == DEFAULTS and c.exit_code == 0
    assert c.sentence() == ("vLLM's defaults (trial 0): no config explored beat them; there "
                            "is no gain to certify")
    one = Synthetic(cfg_of(tmp_path / "b").model_copy(update={"n_trials": 1}), 0.03)
    one.true = {"defaults": 70.0}
    one.boot("defaults", 9.0, base=True)
    assert run(one, 0, monkeypatch, 1.0).status == DEFAULTS


def test_the_plan_reserves_more_where_boots_spread_more(tmp_path: Path) -> None:
    """The split: the reserve is the certify boots a gain of certify.min_gain needs at the
    spread between the defaults' boots, plus the reference check; a wider spread keeps more,
    and exploration stops once the next trial would eat into it."""
    out = {}
    for spread in (0.01, 0.15):
        syn = Synthetic(cfg_of(tmp_path / str(spread), max_boots=8), spread, seed=1)
        syn.true = {"defaults": 70.0, "pick": 90.0}
        syn.boot("defaults", 9.0, base=True)
        syn.boot("defaults", 5.5, repeat_of=0)
        syn.boot("pick", 5.5)
        recs = records(syn.study)
        b = bill(recs, syn.cfg)
        p = plan(recs, syn.cfg, b, 90.0)
        out[spread] = p
        assert p.costs.measured and p.reserve == pytest.approx(p.costs.reserve(p.pairs))
        # a spread under certify.noise's is not trusted from two boots (one bracket reads 0)
        assert p.noise_from == ("the defaults' 2 boots" if spread > 0.06 else "certify.noise")
        # 14.5 minutes spent; the next trial (5.5) fits only if the reserve leaves room
        fits = over_budget(b, 45.0, p.reserve) is None
        assert fits == (b.total + b.next_trial() + p.reserve <= 45.0)
        # a budget with room for little exploring keeps the fewest pairs that can certify
        assert plan(recs, syn.cfg, b, 30.0).pairs == 2
    assert out[0.15].pairs > out[0.01].pairs and out[0.15].reserve > out[0.01].reserve
    assert "kept to certify the pick" in out[0.01].text()


def test_boots_needed_grow_with_the_spread_and_shrink_with_the_gain() -> None:
    assert boots_for(0.44, 0.05, 0.1) <= boots_for(0.2, 0.05, 0.1) <= boots_for(0.2, 0.15, 0.1)
    assert boots_for(0.05, 0.05, 0.1) == 10  # inside one tolerance step: never certifiable


def test_a_boot_reads_as_its_bracket(tmp_path: Path) -> None:
    syn = Synthetic(cfg_of(tmp_path), 0.0)
    syn.true = {"defaults": 64.0}
    syn.boot("defaults", 5.0, base=True)
    assert boots_of(records(syn.study), 0, syn.cfg) == [(64.0, 70.4)]


def test_a_study_explored_on_another_machine_certifies_on_its_certify_boots(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Explored on machine A, certified here: A's first-pass boots were selected and do not
    count, so the interval rests on this machine's certify boots (two of each at least), each
    compared with this machine's (tests/unit/tuning/test_certify_machines.py pools several)."""
    from autotune.tuning.machines import here

    syn = Synthetic(cfg_of(tmp_path), 0.03)
    syn.true = {"defaults": 70.0, "pick": 100.0}
    syn.boot("defaults", 9.0, base=True, machine="machine:a")
    pick = syn.boot("pick", 5.5, machine="machine:a")
    syn.true = {"defaults": 40.0, "pick": 57.0}  # a slower machine: A's boots would mislead
    c = run(syn, pick, monkeypatch, 1000.0, machine=here())
    assert c.status == "certified" and c.gain is not None
    assert c.gain["boots_pick"] >= 2 and c.gain["boots_defaults"] >= 2
    here_only = [r for r in records(syn.study) if r.facts.machine == here()]
    assert len(here_only) == c.gain["boots_pick"] + c.gain["boots_defaults"]
    assert c.gain["low"] <= 57 / 40 <= c.gain["high"]


def test_a_failed_certify_boot_of_the_pick_ends_it_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pick whose certify boot fails (an OOM on this machine) is not booted again for ever:
    its flags fail at once after, and only the defaults would boot."""
    syn, pick = explored(tmp_path, 0.44, 0.03)

    def failing(study: Any, cfg: Any, pre: Any, requests: Any, pair: list[int], **kw: Any
                ) -> int:
        for n in pair:
            if n == pick:
                t = optuna.trial.create_trial(
                    values=[0.0], user_attrs=TrialFacts(
                        repeat_of=n, failure="ServerBootError", cause="CUDA out of memory",
                        flags_key="pick").to_attrs(), constraints={"capacity_ok": 1.0})
                t.datetime_start, t.datetime_complete = syn.clock, syn.clock
                study.add_trial(t)
            else:
                syn.boot("defaults", 3.5, repeat_of=n, start=70.0)
        return len(pair)

    monkeypatch.setattr(certify_mod, "run_repeats", failing)
    c = run_certify(syn.study, syn.cfg, None, [], pick, lambda: 1e9,  # type: ignore[arg-type]
                    lambda: plan(records(syn.study), syn.cfg, bill(syn.study, syn.cfg), 1e9).costs)
    assert c.status == NOT_CERTIFIED and "a certify boot was not measured" in c.why
    assert len(syn.study.trials) == 5  # one pair, then the verdict


def spoiling(syn: Synthetic, pick: int, times: int) -> Any:
    """A run_repeats whose first `times` boots of `pick` the machine spoils (unmeasured)."""
    left = [times]

    def run(study: Any, cfg: Any, pre: Any, requests: Any, pair: list[int], *,
            start_at: dict[int, float | None], **kw: Any) -> int:
        for n in pair:
            if n == pick and left[0]:
                left[0] -= 1
                t = optuna.trial.create_trial(
                    state=optuna.trial.TrialState.FAIL, user_attrs=TrialFacts(
                        repeat_of=n, flags_key="pick", unmeasured="boot timeout while other "
                        "work starved the machine").to_attrs())
                t.datetime_start, t.datetime_complete = syn.clock, syn.clock
                study.add_trial(t)
            else:
                syn.boot(str(records(study)[n].facts.flags_key), 3.5, repeat_of=n,
                         start=start_at[n])
        return len(pair)
    return run


def test_a_certify_boot_the_machine_spoiled_is_booted_again_not_a_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 70, item 5: a certify boot that timed out while other work starved the machine
    (recorded unmeasured) says nothing of the pick: the pair boots again and the certification
    goes on; a machine that stays starved stops it with one clear error (the same command
    resumes), never with a "not certified" that later runs would read."""
    from autotune.errors import StudyError
    from autotune.tuning.record import Status

    def certify(syn: Synthetic, pick: int) -> Any:
        return run_certify(syn.study, syn.cfg, None, [], pick, lambda: 1e9,  # type: ignore[arg-type]
                           lambda: plan(records(syn.study), syn.cfg, bill(syn.study, syn.cfg),
                                        1e9).costs)

    syn, pick = explored(tmp_path, 0.44, 0.03)
    monkeypatch.setattr(certify_mod, "run_repeats", spoiling(syn, pick, 1))
    c = certify(syn, pick)
    assert c.status == CERTIFIED, c.why
    assert [r.status for r in records(syn.study)].count(Status.UNMEASURED) == 1
    syn, pick = explored(tmp_path / "b", 0.44, 0.03)
    monkeypatch.setattr(certify_mod, "run_repeats", spoiling(syn, pick, 99))
    with pytest.raises(StudyError, match="3 certify pairs in a row measured nothing"):
        certify(syn, pick)
    assert read_certification(syn.cfg, records(syn.study)) is None  # nothing decided

def test_a_study_run_again_reads_its_certification_and_bills_its_reference_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syn, pick = explored(tmp_path, 0.44, 0.03)
    calls: list[float] = []

    def ref(rec: Any, load: float) -> dict[str, Any]:
        calls.append(load)
        return {"load": load, "samples": 3, "met": True, "p99_ttft_ms": 900.0,
                "p99_tpot_ms": 40.0, "minutes": 5.0}
    first = run(syn, pick, monkeypatch, 45.0, ref)
    again = run(syn, pick, monkeypatch, bill(syn.study, syn.cfg).total + 1.0, ref)
    assert first.status == again.status == CERTIFIED and len(calls) == 1
    assert again.minutes["reference"] == 5.0
    # exploring more makes it stale: the study's pick may have changed
    syn.boot("other", 5.0)
    assert read_certification(syn.cfg, records(syn.study)) is None


def test_without_a_baseline_the_sentence_says_so() -> None:
    c = certify_mod.Certification(NOT_CERTIFIED, 5, None, "capacity",
                                  why="the study has no measured baseline to compare with")
    assert c.sentence() == ("not certified: trial 5: the study has no measured baseline to "
                            "compare with")


def test_a_minimized_metric_s_gain_reads_as_better_not_as_a_multiple() -> None:
    """A gain on a minimized metric is the defaults' over the pick's: 21.6x on mean TTFT is a
    TTFT 21.6 times lower, not 21.6 times the defaults'."""
    gain = {"ratio": 21.6, "low": 6.7, "high": 69.6, "coverage": 0.9, "boots_pick": 2,
            "boots_defaults": 3}
    c = certify_mod.Certification(CERTIFIED, 1, 0, "mean_ttft_ms", gain, lower_is_better=True)
    assert c.sentence() == ("certified: trial 1 is 21.60x [6.70, 69.60] (90%, 2 certify boots of "
                            "it, 3 of the defaults) better than the defaults on mean_ttft_ms (theirs "
                            "over its: lower is better)")
    spent = certify_mod.Certification(BUDGET_SPENT, 1, 0, "mean_ttft_ms", gain,
                                      remaining="x", lower_is_better=True)
    assert spent.sentence().startswith("budget spent before certification: trial 1 is 21.60x")
    assert "the defaults' mean_ttft_ms" not in spent.sentence()
    up = certify_mod.Certification(CERTIFIED, 1, 0, "capacity", gain)
    assert up.sentence().startswith("certified: trial 1 is 21.60x [6.70, 69.60] (90%, 2 certify "
                                    "boots of it, 3 of the defaults) the defaults' capacity")


def test_only_a_capacity_first_objective_is_judged_by_its_brackets(tmp_path: Path) -> None:
    """With p99 TPOT the first objective of a capacity study, a boot is its TPOT, not its
    capacity's bracket (a 1.43x capacity is not a 0.70x TPOT)."""
    cfg = cfg_of(tmp_path).model_copy(update={"objectives": [
        StudyConfig.model_validate({"name": "x", "server": {"model": "/m"},
                                    "search_space": "cpu-demo"}).objectives[1]]})
    syn = Synthetic(cfg_of(tmp_path), 0.0)
    syn.true = {"defaults": 64.0}
    syn.boot("defaults", 5.0, base=True)
    recs = records(syn.study)
    assert boots_of(recs, 0, cfg) == []  # its values are capacities; no TPOT objective stored
    assert boots_of(recs, 0, syn.cfg) == [(64.0, 70.4)]


def test_pairs_the_budget_pays_that_can_decide_nothing_are_not_booted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget that pays one pair more after two, fewer than max_boots allows: where that
    pair, at the estimate so far hoped a standard error higher, leaves the lower bound under
    1.0x and, feared one lower, the upper bound over it, it is not booted (on the H200 x2 the
    third round of a 1.03x [0.72, 1.49] pick cost 8.3 of 45 GPU-min and ended at 1.01x
    [0.82, 1.26]). Where more boots might certify, budget spent, resumable; where not even
    max_boots would, a verdict: not certified, keep the defaults."""
    syn, pick = explored(tmp_path, 0.0, 0.05, seed=7, max_boots=8)  # no gain
    spent = bill(syn.study, syn.cfg).total
    c = run(syn, pick, monkeypatch, spent + 26.0)  # two pairs (14.3), then one more is paid
    assert bill(syn.study, syn.cfg).total - spent == pytest.approx(14.3, abs=0.1)  # 2 pairs
    assert c.status == NOT_CERTIFIED and c.exit_code == 3
    assert c.gain is not None and c.gain["boots_pick"] == 2
    assert "not even the 5 more boots each that certify.max_boots allows would clear 1.0x" \
        in c.sentence() and "unspent" in c.sentence()
    assert summarize(syn.study, syn.cfg).recommendation.number == 0
    # a gain that more boots might certify: budget spent, what a larger budget needs
    syn2, pick2 = explored(tmp_path / "b", 0.2, 0.05, seed=1, max_boots=8)
    spent2 = bill(syn2.study, syn2.cfg).total
    c2 = run(syn2, pick2, monkeypatch, spent2 + 26.0)
    assert c2.status == BUDGET_SPENT and c2.exit_code == 4, c2.sentence()
    assert c2.sentence().startswith(f"budget too small to certify: trial {pick2}'s ")
    assert "more would pay the" in c2.sentence()
    # a budget that pays every boot max_boots allows boots on to the verdict
    syn3, pick3 = explored(tmp_path / "c", 0.0, 0.05, seed=7)
    c3 = run(syn3, pick3, monkeypatch, bill(syn3.study, syn3.cfg).total + 1000.0)
    # max_boots 5 counts the first pass: 4 certify boots each
    assert c3.status == NOT_CERTIFIED and c3.gain is not None and c3.gain["boots_pick"] == 4


def test_the_projected_interval_narrows_with_boots_and_hopes_and_fears_a_standard_error(
        ) -> None:
    from autotune.measure.censored import censored_gain, projected

    pick = [(72.7, 79.9), (83.9, 92.2)]  # the H200 x2 run's brackets after two rounds
    base = [(74.6, 79.9), (82.0, 90.2), (71.2, 78.3)]
    got = [projected(pick, base, k) for k in range(4)]
    assert all(p is not None for p in got)
    lows, highs = [p[0] for p in got if p], [p[1] for p in got if p]
    assert lows == sorted(lows) and highs == sorted(highs, reverse=True)  # more boots: narrower
    g = censored_gain(pick, base)
    assert lows[0] > g.low and highs[0] < g.high  # hoped and feared one standard error
    assert lows[1] < 0 < highs[1]  # one more pair (what its budget paid) could decide nothing
    assert projected(pick[:1], base, 3) is None  # no spread yet
    worse = [(60.0, 66.0), (64.0, 70.4)]  # a pick one more pair may show worse: go on
    assert (projected(worse, base, 1) or (0.0, 0.0))[1] < 0


def test_the_reference_runs_on_the_picks_last_certify_boot_where_the_launch_is_stock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 85's cut: where the study's boots are stock `vllm serve` launches one at a time,
    each round boots the defaults, then the pick, and the reference check runs on the pick's
    server once its boot makes the round certify: no boot of its own (its minutes are the
    boot's), and only on the boot that certifies."""
    monkeypatch.setattr(certify_mod, "reference_on_boot", lambda cfg, lanes=1: True)
    syn, pick = explored(tmp_path, 0.44, 0.03)
    monkeypatch.setattr(certify_mod, "run_repeats", syn.repeats())
    booted_for: list[float] = []
    checked: list[float] = []

    def boot_ref(rec: Any, load: float) -> dict[str, Any]:
        booted_for.append(load)
        return {"load": load, "samples": 3, "met": True, "p99_ttft_ms": 1.0,
                "p99_tpot_ms": 1.0, "minutes": 5.0}

    def up_ref(url: str, log: Path, load: float) -> dict[str, Any]:
        checked.append(load)
        return {"load": load, "samples": 3, "met": True, "p99_ttft_ms": 900.0,
                "p99_tpot_ms": 40.0, "minutes": 1.0}

    c = run_certify(syn.study, syn.cfg, None, [], pick,  # type: ignore[arg-type]
                    lambda: 45.0 - bill(syn.study, syn.cfg).total,
                    lambda: plan(records(syn.study), syn.cfg, bill(syn.study, syn.cfg),
                                 45.0).costs, reference=boot_ref, reference_up=up_ref)
    assert c.status == CERTIFIED and booted_for == [] and len(checked) == 1
    assert c.reference is not None and c.reference["on_boot"] and c.minutes["reference"] == 0
    new = records(syn.study)[3:]
    assert [r.facts.repeat_of for r in new] == [0, pick] * (len(new) // 2)  # defaults first
    assert [r.number for r in new if r.facts.reference] == [new[-1].number]
    assert checked[0] == pytest.approx(statistics.median(
        r.facts.capacity["capacity"] for r in new if r.facts.repeat_of == pick))
