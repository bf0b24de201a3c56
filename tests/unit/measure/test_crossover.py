"""Where speculation stops paying (measure/crossover.py): two configs' curves over load compared
at every load both measured; the crossing read between the loads around it, or at the
speculative config's capacity where it stops meeting the SLOs first."""

from __future__ import annotations

import pytest

from autotune.measure.crossover import Curve, crossover


def test_the_edge_crosses_zero_between_two_loads() -> None:
    # mean TPOT: speculation 20 -> 40 ms over loads 1-8; without 30 -> 30 (flat)
    spec = Curve([1, 2, 4, 8], [20.0, 24.0, 30.0, 40.0], capacity=8)
    plain = Curve([1, 2, 4, 8], [30.0, 30.0, 30.0, 30.0], capacity=8)
    c = crossover(spec, plain)
    assert not c.everywhere and c.pays_up_to == pytest.approx(4.0)  # equal at 4: the line
    spec2 = Curve([1, 2, 4, 8], [20.0, 24.0, 27.0, 40.0], capacity=8)
    c2 = crossover(spec2, plain)
    assert 4 < (c2.pays_up_to or 0) < 8  # interpolated between 4 (pays) and 8 (does not)
    assert c2.text("req/s", "ngram K 3", "the pick").startswith("ngram K 3 up to")
    assert [x for x, _ in c2.edges] == [1, 2, 4, 8]
    assert c2.edges[0][1] == pytest.approx(0.5)  # 30 / 20 - 1


def test_the_curves_are_read_between_points_not_past_them() -> None:
    spec = Curve([1, 3, 9], [10.0, 10.0, 10.0], capacity=9)
    plain = Curve([2, 6, 12], [20.0, 20.0, 20.0], capacity=12)
    c = crossover(spec, plain)
    assert [x for x, _ in c.edges] == [2, 3, 6, 9]  # the loads in common, from both
    assert c.everywhere and c.pays_up_to == 9
    assert "pays at every load measured, up to 9" in c.text("req/s", "spec", "plain")


def test_a_speculative_config_past_its_capacity_stops_paying_there() -> None:
    spec = Curve([1, 2, 4, 8], [10.0, 10.0, 10.0, 10.0], capacity=2)  # misses from 4 on
    plain = Curve([1, 2, 4, 8], [20.0, 20.0, 20.0, 20.0], capacity=8)
    c = crossover(spec, plain)
    assert c.pays_up_to == 2 and not c.everywhere
    assert c.edges[-1] == (8, -1.0)


def test_never_paying_and_nothing_in_common() -> None:
    spec = Curve([1, 2], [40.0, 50.0], capacity=2)
    plain = Curve([1, 2], [30.0, 30.0], capacity=2)
    c = crossover(spec, plain)
    assert c.pays_up_to is None and "does not pay at any load measured" in c.text(
        "req/s", "spec", "plain")
    apart = crossover(Curve([1, 2], [1.0, 1.0], 2), Curve([4, 8], [1.0, 1.0], 8))
    assert apart.edges == [] and "no load in common" in apart.text("req/s", "a", "b")


def test_higher_is_better_compares_the_other_way() -> None:
    spec = Curve([1, 2], [120.0, 90.0], capacity=2)  # tokens/s
    plain = Curve([1, 2], [100.0, 100.0], capacity=2)
    c = crossover(spec, plain, lower_is_better=False)
    assert c.pays_up_to is not None and 1 < c.pays_up_to < 2
