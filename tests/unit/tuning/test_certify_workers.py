"""A planned study on several workers (issue 66): the certify phase boots pairs at once on the
workers' lanes, the exploration counts the trials other workers run against the budget, and a
timeout buys every worker's GPUs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.session.certify import Budget
from autotune.tuning.bill import bill, over_budget
from autotune.tuning.certify import BUDGET_SPENT, CERTIFIED, round_pairs, run_certify
from autotune.tuning.plan import Costs, plan
from autotune.tuning.record import records
from autotune.tuning.workers import barrier
from tests.certify_fakes import Synthetic, explored

COSTS = Costs("GPU-min", trial=6.0, check=3.5, reference=5.0, measured=True)


def test_a_round_boots_as_many_pairs_as_the_lanes_the_boots_left_and_the_budget_allow() -> None:
    assert round_pairs(1, 5, 100.0, COSTS) == 1  # one at a time: a pair a round
    assert round_pairs(4, 5, 100.0, COSTS) == 2  # four lanes: two pairs at once
    assert round_pairs(5, 5, 100.0, COSTS) == 2  # a lane left over stays idle
    assert round_pairs(4, 1, 100.0, COSTS) == 1  # max_boots leaves one boot each
    # two pairs and the reference cost 19; one pair and the reference 12
    assert round_pairs(4, 5, 18.0, COSTS) == 1
    assert round_pairs(4, 5, 11.0, COSTS) == 0


def lanes_run(syn: Synthetic, pick: int, budget: float, lanes: int
              ) -> tuple[Any, list[list[int]]]:
    rounds: list[list[int]] = []

    def boots(numbers: list[int], at: dict[int, float | None]) -> None:
        rounds.append(list(numbers))
        for n in numbers:
            syn.boot(str(records(syn.study)[n].facts.flags_key), 3.5, repeat_of=n, start=at[n])

    def left() -> float:
        return budget - bill(syn.study, syn.cfg).total

    def costs() -> Any:
        recs = records(syn.study)
        return plan(recs, syn.cfg, bill(recs, syn.cfg), budget).costs
    c = run_certify(syn.study, syn.cfg, None, [], pick, left, costs,  # type: ignore[arg-type]
                    boots=boots, lanes=lanes)
    return c, rounds


def test_four_lanes_boot_two_pairs_at_once_shuffled_across_the_lanes(tmp_path: Path) -> None:
    syn, pick = explored(tmp_path, 0.44, 0.03, max_boots=4)
    c, rounds = lanes_run(syn, pick, 200.0, 4)
    assert c.status == CERTIFIED, c.sentence()
    # each round: two boots of each config at once, in an order drawn for the round
    assert rounds and all(sorted(r) == sorted([0, pick] * 2) for r in rounds)
    assert c.gain is not None and c.gain["boots_pick"] == 2 * len(rounds)
    assert c.minutes["boots"] == pytest.approx(4 * 3.5 * len(rounds), abs=1.0)  # and idle gaps


def test_lanes_the_budget_cannot_fill_boot_fewer_pairs_then_end_spent(tmp_path: Path) -> None:
    syn, pick = explored(tmp_path, 0.44, 0.03, max_boots=6)
    spent = bill(syn.study, syn.cfg).total
    # room for one pair and the reference check, not two (a certify boot priced 2.5 from the
    # trials' phases, the reference 2.5): one pair, then budget spent
    c, rounds = lanes_run(syn, pick, spent + 5.0 + 2.5 + 3.0, 4)
    assert [len(r) for r in rounds] == [2]
    assert c.status == BUDGET_SPENT and "more boot" in c.remaining


def test_the_budget_counts_the_trials_other_workers_run_now(tmp_path: Path) -> None:
    syn, _ = explored(tmp_path, 0.44, 0.03)
    b = bill(syn.study, syn.cfg)  # 19.5 spent; the next trial about 5.5
    assert over_budget(b, 45.0, 10.0) is None
    why = over_budget(b, 45.0, 10.0, running=2)  # 19.5 + 3 x 5.5 + 10 > 45
    assert why is not None and "2 trials running elsewhere" in why and "kept to certify" in why


def test_a_timeout_buys_every_workers_gpus(tmp_path: Path) -> None:
    syn, _ = explored(tmp_path, 0.44, 0.03)
    cfg = syn.cfg.model_copy(update={"budget_gpu_minutes": None, "timeout_s": 600.0,
                                     "gpus_per_trial": 2})
    one, four = Budget(cfg, time.monotonic()), Budget(cfg, time.monotonic(), workers=4)
    assert one.total() == pytest.approx(20.0) and four.total() == pytest.approx(80.0)
    assert four.left() == pytest.approx(4 * one.left(), rel=0.01)


def test_a_rounds_boots_measure_together_and_a_failed_boot_holds_none(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    hooks = {lane: barrier(lambda n, p, f, lane=lane: seen.append((lane, p)), tmp_path / "r",
                           lane, 3, timeout_s=30.0) for lane in "abc"}
    hooks["a"][0](1, "booting", {})  # booting phases pass through
    assert seen == [("a", "booting")]
    t = threading.Thread(target=hooks["a"][0], args=(1, "load 4", {}))
    t.start()
    time.sleep(0.8)
    assert ("a", "load 4") not in seen  # a waits for b and c
    u = threading.Thread(target=hooks["b"][0], args=(2, "benchmarking", {}))
    u.start()  # b is up: it waits too
    time.sleep(0.8)
    assert ("b", "benchmarking") not in seen and t.is_alive()
    hooks["c"][1]()  # c's boot failed: its lane is done, not ready
    t.join(5)
    u.join(5)
    assert ("a", "load 4") in seen and ("b", "benchmarking") in seen
    assert ("a", "waiting for the round's other 2 boot(s)") in seen


def test_the_no_room_warning_names_what_was_measured(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With workers the first plan is printed once several trials have ended (on the H200 x4:
    three), so "only vLLM's defaults" would be wrong there; one trial still says the defaults."""
    from rich.console import Console

    import autotune.session.certify as session_certify

    rec = Console(width=300, record=True)
    monkeypatch.setattr(session_certify, "console", rec)
    syn, _ = explored(tmp_path, 0.44, 0.03)  # three trials, 19.5 spent
    cfg = syn.cfg.model_copy(update={"budget_gpu_minutes": 30.0})
    syn.study.enqueue_trial({})  # a start still waiting (on the H200 x2 it was counted: "5")
    b = Budget(cfg, time.monotonic(), workers=4)
    b.open(syn.study)
    b.reserve()
    out = rec.export_text()
    assert "beyond the 3 trials measured" in out and "can only end on one of them" in out
