"""The statistics behind every gain the tool reports, on synthetic data with known noise."""

import time

import numpy as np
import pytest

from autotune.measure.stats import (
    boots_for_width,
    gain_ci,
    interval_name,
    median_ci,
    median_coverage,
    pick,
    rel_sd,
)


@pytest.mark.parametrize("n", [3, 5, 6, 9])
def test_median_interval_covers_the_true_median_as_often_as_it_states(n: int) -> None:
    """4,000 draws of n values from a skewed distribution (log-normal, median 100): the
    order-statistic interval holds the true median as often as `median_coverage` states (3 boots:
    75%, their range; 6 and 9: at least 95%), within the simulation's error."""
    rng = np.random.default_rng(n)
    hits = 0
    for _ in range(4000):
        _, lo, hi = median_ci(rng.lognormal(np.log(100), 0.2, size=n))
        hits += lo <= 100 <= hi
    _, stated = median_coverage(n)
    print(f"n={n}: coverage {hits / 4000:.1%}, stated {stated:.1%}")
    assert abs(hits / 4000 - stated) < 0.025
    assert (stated >= 0.95) == (n >= 6)
    assert interval_name(3) == "range of 3 boots, covers 75%" and interval_name(9) == "95% interval"


@pytest.mark.parametrize(("n", "n_base"), [(2, 2), (3, 3), (3, 5)])
def test_gain_interval_covers_the_true_gain_95_percent(n: int, n_base: int) -> None:
    """Log-normal boot noise (sd 8%, as on the CPU demo), a true gain of +10%: the Welch
    t-interval on the logs holds +10% in at least 95% of 4,000 simulated studies (Welch's
    degrees of freedom make it a little conservative with equal few boots: 97% at 2 vs 2)."""
    rng = np.random.default_rng(10 * n + n_base)
    hits = 0
    for _ in range(4000):
        g = gain_ci(rng.lognormal(np.log(110), 0.08, size=n),
                    rng.lognormal(np.log(100), 0.08, size=n_base))
        hits += g.low <= 0.10 <= g.high
    print(f"{n} vs {n_base} boots: coverage {hits / 4000:.1%}")
    assert 0.94 <= hits / 4000 <= 0.985


def test_boots_for_a_95_percent_gain_interval_of_a_given_width() -> None:
    """With 8% boot-to-boot noise, +-10% takes 7 boots of each config and +-5% takes 21; with
    3% noise, +-5% takes 5."""
    assert boots_for_width(0.08, 0.10) == 7
    assert boots_for_width(0.08, 0.05) == 21
    assert boots_for_width(0.03, 0.05) == 5


def test_gain_interval_and_text() -> None:
    rng = np.random.default_rng(2)
    base = rng.normal(100, 2, size=5)
    better = rng.normal(112, 2, size=5)
    g = gain_ci(better, base)
    assert g.low < 0.12 < g.high and g.significant
    assert g.text().startswith("+1") and "[" in g.text()
    same = gain_ci(rng.normal(100, 2, size=5), base)
    assert not same.significant and same.text().startswith("no significant change")
    assert gain_ci([120.0], base).text().endswith("(one measurement)")
    assert rel_sd([100.0, 100.0]) == 0.0 and rel_sd([1.0]) == 0.0


def test_the_lower_bound_rule_picks_the_truly_better_config_more_often() -> None:
    """One config is truly 5% better with steady measurements (sd 3%); five are no better but
    noisy (sd 12%), each measured 3 times. The point estimate often recommends a lucky noisy
    one; the lower confidence bound far less often."""
    rng = np.random.default_rng(3)
    wins = {"lower_bound": 0, "point": 0}
    draws = 300
    for _ in range(draws):
        samples = {"good": rng.normal(105, 3.15, size=3)}
        for i in range(5):
            samples[f"noisy{i}"] = rng.normal(100, 12, size=3)
        for rule in wins:
            wins[rule] += pick(samples, rule) == "good"
    lb, pt = wins["lower_bound"] / draws, wins["point"] / draws
    print(f"the truly better config picked: lower bound {lb:.0%}, point estimate {pt:.0%}")
    assert lb > pt + 0.15


@pytest.mark.parametrize("maximize", [True, False])
def test_pick_respects_the_direction(maximize: bool) -> None:
    samples = {"low": [1.0, 1.1, 0.9], "high": [2.0, 2.1, 1.9]}
    assert pick(samples, maximize=maximize) == ("high" if maximize else "low")


def test_the_confirm_phase_repeats_flags_interleaved(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Baseline and one finalist, 2 more boots each: the repeats boot the trials' own flags, in
    the order A B A B, ahead of a config still waiting in the queue (a start the study did not
    reach); confirm_samples pools each config's 3 measurements; the plan resumes."""
    from types import SimpleNamespace

    import optuna

    from autotune.tuning import objective as objective_mod
    from autotune.tuning.confirm import confirm_plan, confirm_samples, run_repeats
    from autotune.tuning.objective import Objective
    from tests.fakes import fake_bench
    from tests.unit.tuning.test_objective import SPACE, cfg

    calls: list[dict] = []
    monkeypatch.setattr(objective_mod, "run_boot", fake_bench(calls))
    c = cfg(tmp_path)
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.enqueue_trial({}, user_attrs={"baseline": True})
    st.enqueue_trial({"max_num_seqs": 16, "kv_cache_dtype": "auto"})
    st.enqueue_trial({"max_num_seqs": 4, "kv_cache_dtype": "auto"})  # left waiting
    st.optimize(Objective(c, SPACE, [], tmp_path), n_trials=2)
    plan = confirm_plan(st, [0, 1], repeats=2)
    assert plan == [0, 1, 0, 1]
    pre = SimpleNamespace(space=SPACE)
    assert run_repeats(st, c, pre, [], plan[:3]) == 3  # type: ignore[arg-type]
    assert confirm_plan(st, [0, 1], repeats=2) == [1]  # resumes where it stopped
    # a deadline no boot fits before: nothing runs, and the plan still says what is left
    now = time.monotonic()
    assert run_repeats(st, c, pre, [], [1], deadline=now) == 0  # type: ignore[arg-type]
    assert confirm_plan(st, [0, 1], repeats=2) == [1]
    run_repeats(st, c, pre, [], [1], deadline=time.monotonic() + 3600)  # type: ignore[arg-type]
    assert [f.get("max_num_seqs") for f in calls] == [None, 16, None, 16, None, 16]
    assert len(st.get_trials(states=(optuna.trial.TrialState.WAITING,))) == 1  # untouched
    st.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    samples = confirm_samples(st, "total_token_throughput")
    assert sorted(samples) == [0, 1] and all(len(v) == 3 for v in samples.values())


def test_percentile_interval_covers_the_true_percentile() -> None:
    """The order-statistic interval of a p99 holds the true p99 in about 95% of samples (at
    least: it is conservative), narrows with more values, and ends at the maximum when there
    are too few values for an upper order statistic."""
    import numpy as np

    from autotune.measure.stats import percentile_interval

    rng = np.random.default_rng(1)
    true = float(np.log(100.0))  # the p99 of an exponential of mean 1
    hits = 0
    for _ in range(400):
        lo, hi = percentile_interval(rng.exponential(size=1000), 99.0)
        hits += lo <= true <= hi
    assert 0.93 <= hits / 400 <= 0.995
    x = rng.exponential(size=100)
    lo, hi = percentile_interval(x, 99.0)
    assert lo < np.percentile(x, 99) and hi == x.max()
    wide = np.subtract(*percentile_interval(rng.exponential(size=500), 99.0)[::-1])
    narrow = np.subtract(*percentile_interval(rng.exponential(size=5000), 99.0)[::-1])
    assert narrow < wide
    assert percentile_interval([5.0], 50.0) == (5.0, 5.0)


def test_two_boots_each_are_too_few_to_bound_a_gain() -> None:
    """Issue 70, item 4: `export --validate --repeats 2` printed "+23.9% [-91.7, +1756.6]":
    an interval from 2 boots each (Welch's t with 1 to 2 degrees of freedom) that says
    nothing. Below MIN_BOOTS a gain says so and how many boots each would bound it at the
    spread measured (boots_for_width); it is never significant. Every surface prints
    Gain.text (tables.gain_text wraps it)."""
    from autotune.measure.stats import MIN_BOOTS
    from autotune.outputs.tables import gain_text

    g = gain_ci([4800.0, 6400.0], [4100.0, 5100.0])
    assert g.high - g.low > 2  # the interval is there (-47%, +179%), and it says nothing
    need = boots_for_width(g.log_sd or 0.0, abs(g.gain))
    assert MIN_BOOTS <= need <= 50
    text = g.text()
    assert text == (f"{g.gain * 100:+.1f}%, too few boots to bound it (n=2; {need} boots "
                    "each would at this spread)")
    assert "[" not in text and not g.significant
    assert gain_text(g) == text  # no ", 2 boots" after it
    assert "defaults 3" in gain_ci([4800.0, 6400.0], [4100.0, 5100.0, 4600.0]).text()
    # from 3 boots each the interval is printed, as before
    three = gain_ci([4800.0, 6400.0, 5600.0], [4100.0, 5100.0, 4600.0])
    assert three.bounded and "[" in three.text() and "too few" not in three.text()
    # a wild spread asks for more than a reader can act on
    wild = gain_ci([100.0, 900.0], [500.0, 90.0])
    assert wild.text().endswith("more than 50 boots each would at this spread)")
