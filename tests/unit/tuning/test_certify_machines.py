"""Certifying across machines (issue 80): the pick's certify boots on each machine are compared
with the defaults' on the same machine, pooled over machines (certify_rule.basis,
measure.censored.blocked_gain), so a study resumed on another machine, or workers on several hosts, add to
one certification; where the pick's gain differs between machines beyond the boots' spread,
the machine becomes the unit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from autotune.measure.censored import blocked_gain, censored_gain
from autotune.tuning.bill import bill
from autotune.tuning.certify import BUDGET_SPENT, CERTIFIED
from autotune.tuning.certify_rule import Rule, basis, next_step
from autotune.tuning.certify_sim import across
from autotune.tuning.plan import Costs
from autotune.tuning.record import records
from tests.certify_fakes import Synthetic, cfg_of, run

RULE = Rule(max_boots=20)


def test_one_machine_is_the_one_machine_rule() -> None:
    a, b = [(79.9, 87.8), (87.8, 96.5)], [(64.0, 69.3), (64.0, 70.4), (64.0, 70.4)]
    one = blocked_gain([(a, b)], floor=0.06)
    g = censored_gain(a, b, floor=0.06)
    assert one is not None and math.expm1(one.low) == pytest.approx(g.low)
    assert math.expm1(one.high) == pytest.approx(g.high)


def test_a_machines_pace_cancels_within_it() -> None:
    """The same pairs on a machine 40% slower: pooled, the estimate is the machines' common
    gain, not dragged by the slow machine's capacities."""
    a, b = [(100.0, 110.0), (110.0, 121.0)], [(70.0, 77.0), (77.0, 84.7)]
    slow = [(x * 0.6, y * 0.6) for x, y in a], [(x * 0.6, y * 0.6) for x, y in b]
    labels = (["m:a", "m:a", "m:b", "m:b"], ["m:a", "m:a", "m:b", "m:b"])
    g, why = basis([*a, *slow[0]], [*b, *slow[1]], RULE, labels)
    assert "pooled over 2 machines" in why
    assert g.gain == pytest.approx(math.expm1(math.log(100 / 70)), rel=1e-6)
    ignored = censored_gain([*a, *slow[0]], [*b, *slow[1]], floor=0.06)
    assert g.high - g.low < ignored.high - ignored.low  # the machines' paces left out


def test_gains_that_differ_between_machines_make_the_machine_the_unit() -> None:
    """The pick 1.2x the defaults on one machine and 2x on the other, boots tight on each: the
    machines disagree beyond the boots' spread (interaction), so the interval is over the two
    machines' gains (1 degree of freedom), not over the boots."""
    a1, b1 = [(84.0, 92.4), (84.0, 92.4), (84.0, 92.4)], [(70.0, 77.0)] * 3
    a2, b2 = [(140.0, 154.0)] * 3, [(70.0, 77.0)] * 3
    labels = (["m:a"] * 3 + ["m:b"] * 3, ["m:a"] * 3 + ["m:b"] * 3)
    g, why = basis([*a1, *a2], [*b1, *b2], Rule(noise=0.02), labels)
    assert why.startswith("the machine as the unit (2 machines)")
    assert g.low < 0.2 and g.high > 1.0


@pytest.mark.parametrize("interaction", [0.0, 0.03])
@pytest.mark.parametrize("spread", [0.04, 0.08, 0.12])
def test_pooled_over_sittings_the_interval_holds_its_coverage(spread: float,
                                                              interaction: float) -> None:
    """Four sittings on machines 6% apart in pace, two pairs each, stopping at a verdict: the
    interval covers a true 1.25x at least 90% of the time, and a pick no better than the
    defaults is certified at most 5% of the time."""
    rng = np.random.default_rng(int(spread * 100 + interaction * 1000))
    runs = [across(rng, 1.25, spread, RULE, 4, interaction_sd=interaction) for _ in range(300)]
    cov = [c for r in runs if (c := r.covered) is not None]
    assert sum(cov) / len(cov) >= 0.9
    assert sum(r.certified for r in runs) / len(runs) >= 0.5  # four sittings certify most
    rng = np.random.default_rng(7)
    none = [across(rng, 1.0, spread, RULE, 4, interaction_sd=interaction) for _ in range(400)]
    assert sum(r.certified for r in none) / len(none) <= 0.05


def resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Synthetic, int]:
    """Explored and certified one pair on machine A with a budget that then ran out."""
    syn = Synthetic(cfg_of(tmp_path, max_boots=8), 0.03)
    syn.true = {"defaults": 70.0, "pick": 100.0}
    syn.boot("defaults", 9.0, base=True, machine="machine:a")
    pick = syn.boot("pick", 5.5, machine="machine:a")
    spent = bill(syn.study, syn.cfg).total
    # a pair (5.0 priced) and the reference (4.7) paid, not a second pair
    c = run(syn, pick, monkeypatch, spent + 11.0, machine="machine:a")
    assert c.status == BUDGET_SPENT and c.gain is not None and c.gain["boots_pick"] == 1
    return syn, pick


def test_a_study_resumed_on_another_machine_keeps_its_pairs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resumed on a machine 40% slower (its storage carried), the certification keeps machine
    A's pair and adds this machine's: the ending says it rests on both."""
    syn, pick = resumed(tmp_path, monkeypatch)
    syn.true = {"defaults": 42.0, "pick": 60.0}
    c = run(syn, pick, monkeypatch, 1000.0, machine="machine:b")
    assert c.status == CERTIFIED and c.gain is not None
    assert "pooled over 2 machines" in c.basis and "pooled over 2 machines" in c.sentence()
    on = [r.facts.machine for r in records(syn.study) if r.facts.repeat_of is not None]
    assert on.count("machine:a") == 2 and on.count("machine:b") >= 2
    assert c.gain["boots_pick"] == on.count("machine:a") // 2 + on.count("machine:b") // 2
    assert c.gain["low"] <= 100 / 70 <= c.gain["high"]


def test_two_hosts_add_to_one_certification(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers on two hosts share one storage: each runs pairs on its own machine; whoever
    runs the last pair reads every host's (the certify phase on host B certifies on A's pair
    and its own, without booting A's again)."""
    syn, pick = resumed(tmp_path, monkeypatch)
    before = len(syn.study.trials)
    c = run(syn, pick, monkeypatch, 1000.0, machine="machine:b")
    new_on_b = [r for r in records(syn.study)[before:] if r.facts.machine == "machine:b"]
    assert c.status == CERTIFIED and len(new_on_b) == len(records(syn.study)[before:])
    assert c.gain is not None and c.gain["boots_pick"] == 1 + len(new_on_b) // 2


def test_boots_on_machines_without_a_pair_of_their_own_count_without_an_interval() -> None:
    """One certify boot of each config on each of two machines: no machine bounds its own
    spread, so there is no interval yet, but both boots of each count (toward max_boots, and
    in what the phase says: 'boots 3', not 'boots 2' again)."""
    from autotune.tuning.certification import Certification
    from autotune.tuning.certify import gain_doc

    pick, base = [(50.0, 54.0), (25.0, 27.0)], [(11.0, 12.0), (5.0, 6.0)]
    labels = (["a", "b"], ["a", "b"])
    g, why = basis(pick, base, Rule(), labels)
    assert (g.n, g.n_base) == (2, 2) and g.low == g.high and "none with two boots" in why
    costs = Costs("CPU-min", trial=0.7, check=0.6, reference=0.5, measured=True)
    step = next_step(pick, base, Rule(max_boots=5), 30.0, costs, machines=labels)
    assert step.pairs == 1  # boots 3 of each next: two of the four certify boots are done
    text = Certification("not certified", 2, 0, "capacity", gain_doc(g, 0.9),
                         basis=why).ratio_text()
    assert "2 certify boots of it, 2 of the defaults: no interval yet on any one machine" in text


def test_a_resume_that_only_certifies_records_its_machine(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A study resumed elsewhere whose exploration is done runs no trial, only certify boots
    (run_repeats): the machine joins the study's machines there, so the report lists both."""
    from types import SimpleNamespace

    import optuna

    from autotune.tuning import confirm, machines

    cfg = cfg_of(tmp_path)
    study = optuna.create_study()
    monkeypatch.setattr(machines, "identity", lambda: {"id": "b", "host": "h", "cpus": "1"})
    from autotune.tuning.search_space import study_space

    pre = SimpleNamespace(space=study_space(cfg.search_space, []))
    confirm.run_repeats(study, cfg, pre, [], [])
    assert [m["id"] for m in machines.machines(study)] == ["b"]


def test_the_reference_judges_the_pick_at_its_capacity_on_the_machine_it_runs_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Certified over a machine that served it at 51 and one at 27, the check on the second runs
    at 27 (its own boots), not at the median over both machines' paces."""
    from autotune.measure.capacity import CapacityResult, LoadPoint
    from autotune.tuning import certify as certify_mod
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    def boot(n: int, cap: float, machine: str, repeat_of: int | None) -> TrialRecord:
        pts = (LoadPoint(cap, True, (), {}),)
        search = CapacityResult("concurrency", cap, pts[0], pts, cap * 1.1)
        return TrialRecord(n, Status.OK, TrialFacts(flags={"max_num_seqs": 16},
                                                    flags_key="k", repeat_of=repeat_of,
                                                    machine=machine,
                                                    capacity=search.to_json()),
                           {"capacity": cap}, {"capacity": cap})

    recs = [boot(2, 51.0, "a", None), boot(5, 51.0, "a", 2), boot(9, 27.0, "b", 2)]
    monkeypatch.setattr(certify_mod, "here", lambda: "b")
    assert certify_mod.reference_load(recs, 2, (27.0,)) == 27.0
    assert certify_mod.reference_load(recs, 2) == 27.0
    monkeypatch.setattr(certify_mod, "here", lambda: "c")  # no boot here: every certify boot
    assert certify_mod.reference_load(recs, 2) == 39.0


def test_certify_here_adds_this_machines_pair_to_a_pick_certified_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`autotune study --certify-here` (certify.here) on machine B of a study certified on
    machine A: a plain resume reads A's certification; with it, B boots the defaults and the
    pick (at least one pair), the interval pools both machines' pairs, and the reference
    check runs again, at B's capacity, not A's. Without the budget for one pair it says so."""
    from autotune.tuning import certify as certify_mod
    from autotune.tuning.certify import run_certify
    from tests.certify_fakes import explored

    syn, pick = explored(tmp_path, 0.44, 0.03)
    monkeypatch.setattr(certify_mod, "here", lambda: "machine:a")
    checks: list[float] = []

    def ref(rec: object, load: float) -> dict[str, object]:
        checks.append(load)
        return {"load": load, "samples": 3, "met": True, "p99_ttft_ms": 1.0,
                "p99_tpot_ms": 1.0, "minutes": 1.0}
    first = run(syn, pick, monkeypatch, 1000.0, ref, machine="machine:a")
    assert first.status == CERTIFIED and len(checks) == 1
    n_a = len(syn.study.trials)
    syn.true = {"defaults": 42.0, "pick": 60.5}  # machine B: 40% slower, the same gain
    monkeypatch.setattr(certify_mod, "here", lambda: "machine:b")
    said: list[str] = []
    monkeypatch.setattr(certify_mod, "run_repeats", syn.repeats("machine:b"))
    again = run_certify(syn.study, syn.cfg, None, [], pick, lambda: 1000.0,  # type: ignore[arg-type]
                        lambda: None, reference=ref, on_step=said.append)  # type: ignore[arg-type,return-value]
    assert again == first and len(syn.study.trials) == n_a  # read, not booted again
    assert "`--certify-here` adds a pair on this one" in said[0]
    syn.cfg = syn.cfg.model_copy(update={"certify": syn.cfg.certify.model_copy(
        update={"here": True})})
    spent = bill(syn.study, syn.cfg).total
    short = run(syn, pick, monkeypatch, spent + 1.0, ref, machine="machine:b")
    assert short.status == BUDGET_SPENT and "on this machine" in short.remaining
    assert len(syn.study.trials) == n_a
    c = run(syn, pick, monkeypatch, 1000.0, ref, machine="machine:b")
    on_b = [r for r in records(syn.study)[n_a:] if r.facts.machine == "machine:b"]
    assert c.status == CERTIFIED and len(on_b) >= 2 and len(on_b) % 2 == 0
    assert {r.facts.repeat_of for r in on_b} == {0, pick}
    assert "pooled over 2 machines" in c.sentence() and c.gain is not None
    assert c.gain["boots_pick"] == (len(records(syn.study)) - 3) // 2
    assert len(checks) == 2 and checks[1] < 0.8 * checks[0]  # B's own pace
