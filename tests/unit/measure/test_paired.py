"""The task's paired test: Tango's score interval for the drop from the defaults to a config,
its coverage on simulated items, and McNemar's exact p-value."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.measure.paired import paired, tango


def test_no_discordant_item_still_leaves_an_interval() -> None:
    low, high = tango(0, 0, 164)
    # the score interval's closed form at d: n d / (1 - d) = z^2
    z2 = 1.959963984540054 ** 2
    assert high == pytest.approx(z2 / (164 + z2), rel=1e-6) and low == pytest.approx(-high)


def test_the_interval_holds_the_point_and_moves_with_the_losses() -> None:
    p = paired([True] * 40 + [False] * 60, [True] * 30 + [False] * 70)
    assert (p.lost, p.gained, p.drop) == (10, 0, 0.1)
    assert p.low < 0.1 < p.high and p.low > 0  # ten items lost, none gained: a real drop
    assert p.mcnemar_p == pytest.approx(2 * 0.5 ** 10)
    even = paired([True, False] * 10, [False, True] * 10)
    assert even.drop == 0 and even.low < 0 < even.high and even.mcnemar_p == 1.0


def test_outcomes_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="3 and 2 items"):
        paired([True] * 3, [True] * 2)


@pytest.mark.parametrize("lost, gained, n", [(0.10, 0.05, 100), (0.02, 0.01, 164),
                                             (0.005, 0.005, 164), (0.20, 0.02, 60)])
def test_the_interval_covers_the_true_drop_at_its_stated_coverage(
        lost: float, gained: float, n: int) -> None:
    """Simulated items: each item lost with probability `lost`, gained with `gained`; the 95%
    interval holds the true drop in 93-99.5% of 2,000 draws (a score interval is a little
    conservative where discordant items are few)."""
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(2000):
        u = rng.random(n)
        lo, hi = tango(int((u < lost).sum()), int(((u >= lost) & (u < lost + gained)).sum()), n)
        hits += lo <= lost - gained <= hi
    assert 0.93 <= hits / 2000 <= 0.995
