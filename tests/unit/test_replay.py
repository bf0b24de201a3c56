"""The replay harness against toy tables whose curves are computed by hand."""

import pytest

from autotune.replay import (
    Table,
    default_config,
    key,
    replay,
    trials_to,
)


def toy(noise: bool = False) -> Table:
    """Two knobs: a in (None, 8), b in (False, True). True means: (None, False) 1, (8, False) 2,
    (None, True) 1.5, (8, True) 4; with `noise`, (8, True) was measured 3.6 and 4.4."""
    cells = {(None, False): [1.0], (8, False): [2.0], (None, True): [1.5],
             (8, True): [3.6, 4.4] if noise else [4.0]}
    params = {key({"a": a, "b": b}): {"a": a, "b": b} for a, b in cells}
    values = {key({"a": a, "b": b}): v for (a, b), v in cells.items()}
    return Table(values, params, "maximize")


def test_one_knob_at_a_time_by_hand() -> None:
    """From the defaults (None, False): a=8 -> 2 (kept), then b=True -> 4: the incumbents are
    1, 2, 4 of the best 4; afterwards it has nothing left to try."""
    t = toy()
    assert default_config(t) == {"a": None, "b": False}
    s = replay(t, ["one-knob"], seeds=3, budget=5)["one-knob"]
    assert s.curves == [[0.25, 0.5, 1.0, 1.0, 1.0]] * 3
    assert s.median_trials_to_2pct == 3 and s.median_trials_to_5pct == 3
    assert s.share_within_2pct_at_16 == 1.0


def test_grid_in_random_order_and_noise() -> None:
    t = toy(noise=True)
    assert t.mean(key({"a": 8, "b": True})) == 4.0
    # pooled relative sd of the one repeated config: stdev(3.6, 4.4) / 4 = 0.1414
    assert t.noise() == pytest.approx(0.5657 / 4, rel=1e-3)
    s = replay(t, ["grid"], seeds=20, budget=4)["grid"]
    assert all(len(c) == 4 for c in s.curves)
    # by trial 4 every seed has measured the whole grid; the best config (4 +- 0.57) stands out
    # from the next (2 +- 0.28) by far more than the noise
    assert all(c[-1] == 1.0 for c in s.curves)
    assert trials_to([0.25, 0.5, 0.97, 0.99], 0.02) == 4 and trials_to([0.5], 0.02) is None


@pytest.mark.parametrize("name", ["tpe", "random", "nsga2", "gp"])
def test_optuna_samplers_run_against_the_table(name: str) -> None:
    s = replay(toy(), [name], seeds=2, budget=6)[name]
    assert len(s.curves) == 2 and all(len(c) == 6 for c in s.curves)
    assert all(0 < q <= 1 for c in s.curves for q in c)
