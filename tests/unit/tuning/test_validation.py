"""The verdict `export --validate` ends with (autotune.tuning.validation), on made-up boots."""

from __future__ import annotations

from autotune.measure.stats import gain_ci
from autotune.tuning.validation import HELD, NOT_HELD, UNDECIDED, Boot, verdict


def boots(*tpots: float) -> list[Boot]:
    return [Boot(1, {"t": 1.0}, "ok", True, t) for t in tpots]


def test_the_figure_is_judged_on_the_interval_from_three_re_runs_else_on_the_noise() -> None:
    study = gain_ci([5600.0, 5500.0, 5700.0], [5000.0, 5100.0, 4900.0])  # +12%
    # three re-runs each: inside their interval or not
    same = gain_ci([5650.0, 5400.0, 5800.0], [5050.0, 4900.0, 5100.0])
    assert verdict(study, same, [5000.0] * 3, boots(8.0), None)[0] == HELD
    lower = gain_ci([5000.0, 5010.0, 4990.0], [5000.0, 5010.0, 4990.0])
    said, why = verdict(study, lower, [5000.0] * 3, boots(8.0), None)
    assert said == NOT_HELD and "OUTSIDE the re-runs' 95% interval" in why[0]
    # one re-run each: the difference of the gains against the defaults' spread (2%)
    one = gain_ci([5500.0], [5000.0])  # +10%
    said, why = verdict(study, one, [5000.0, 5100.0, 4900.0, 5050.0], boots(8.0), None)
    assert said == HELD and "within the noise" in why[0]
    flat = gain_ci([5000.0], [5000.0])  # 0%: 12% away, where the noise allows ~4%
    assert verdict(study, flat, [5000.0, 5100.0, 4900.0], boots(8.0), None)[0] == NOT_HELD
    # the defaults booted once in all: nothing measures the noise
    said, why = verdict(gain_ci([5600.0], [5000.0]), one, [5000.0], boots(8.0), None)
    assert said == UNDECIDED and "cannot be judged" in why[0]


def test_the_cap_and_the_slos_are_checked_on_the_re_runs() -> None:
    g = gain_ci([5500.0], [5000.0])
    said, why = verdict(g, g, [5000.0, 5000.0], boots(9.0, 11.0, 9.5), 10.0)
    assert said == HELD and "median mean TPOT 9.50 ms meets it" in why[1]
    assert verdict(g, g, [5000.0, 5000.0], boots(11.0), 10.0)[0] == NOT_HELD
    missed = [Boot(1, {"t": 1.0}, "SLO miss", False, 8.0)]
    said, why = verdict(g, g, [5000.0, 5000.0], missed, None)
    assert said == NOT_HELD and why[-1] == "the SLOs: met on 0 of 1 re-run(s)"
