"""The certify interval (measure.censored.censored_gain): boots known to a bracket [low, high), as a
capacity search finds them, with a known boot-to-boot spread; at a fixed number of boots the
stated coverage must hold. The rule built on it, with its selection, floor and sequential
looks, is held to its coverage as the product runs it in tests/unit/tuning/test_certify_rule.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.measure.censored import CERTIFY_LEVEL, censored_gain

TOL = 0.10
STEP = math.log1p(TOL)


def found(rng: np.random.Generator, true_log: float, sigma: float, anchor_log: float
          ) -> tuple[float, float]:
    """One boot: its capacity drawn around the config's, found by a search stepping x1.1 from
    where the config was found before (`anchor_log`): the bracket [C, C x 1.1) holding it."""
    x = rng.normal(true_log, sigma)
    lo = anchor_log + math.floor((x - anchor_log) / STEP) * STEP
    return math.exp(lo), math.exp(lo + STEP)


@pytest.mark.parametrize("sigma", [0.005, 0.05, 0.2])
@pytest.mark.parametrize("boots", [2, 3, 5])
def test_fixed_boots_cover_the_true_gain(sigma: float, boots: int) -> None:
    rng = np.random.default_rng(7)
    hits, n = 0, 1500
    for _ in range(n):
        mu_b = math.log(70) + rng.uniform(0, STEP)  # where the truth sits in its bracket varies
        mu_a = mu_b + math.log(1.25)
        a = [found(rng, mu_a, sigma, math.log(99.9)) for _ in range(boots)]
        b = [found(rng, mu_b, sigma, math.log(69.3)) for _ in range(boots)]
        g = censored_gain(a, b)
        hits += g.low <= 0.25 <= g.high
    assert hits / n >= CERTIFY_LEVEL, hits / n


def test_one_boot_has_no_interval_and_brackets_bound_it() -> None:
    g = censored_gain([(99.9, 109.0)], [(69.3, 76.2)])
    assert (g.n, g.n_base) == (1, 1) and g.low == g.high == g.gain
    # identical boots: the interval is the brackets' own, whatever the t part says
    g = censored_gain([(99.9, 109.0)] * 3, [(69.3, 76.2)] * 3)
    assert g.low == pytest.approx(99.9 / 76.2 - 1)
    assert g.high == pytest.approx(109.0 / 69.3 - 1)
    assert g.low < g.gain < g.high


def test_no_capacity_no_gain() -> None:
    g = censored_gain([(0.0, 1.0)], [(5.0, 5.5)])
    assert g.n == 0
