"""The guard's teacher-forced figures on distributions whose answers are known: KL over the
coarse-graining top-k allows, top-1 agreement with exact ties, the log-likelihood change, and
the pooled intervals over prompts."""

from __future__ import annotations

import math

import pytest

from autotune.measure.divergence import (
    Divergence,
    Position,
    argmax_set,
    compare_position,
    compare_prompt,
    kl,
    pool,
)


def pos(probs: dict[int, float], token: int = 1) -> Position:
    top = {t: math.log(p) for t, p in probs.items()}
    return Position(top, token, top[token])


def test_identical_readings_have_no_divergence() -> None:
    p = pos({1: 0.5, 2: 0.3, 3: 0.2})
    c = compare_position(p, p)
    assert c.kl == 0.0 and c.agree and not c.tie and c.ll_change == 0.0 and c.rest == 0.0


def test_kl_equals_the_closed_form_when_top_k_holds_all_the_mass() -> None:
    p, q = {1: 0.5, 2: 0.3, 3: 0.2}, {1: 0.4, 2: 0.4, 3: 0.2}
    want = sum(p[t] * math.log(p[t] / q[t]) for t in p)  # KL(defaults || config)
    got, rest = kl(pos(p), pos(q))
    assert got == pytest.approx(want, abs=1e-9) and rest == pytest.approx(0.0, abs=1e-12)
    assert kl(pos(q), pos(p))[0] != pytest.approx(want)  # the direction matters


def test_the_mass_outside_both_top_k_is_one_bucket_and_a_lower_bound() -> None:
    # the full distributions over 5 tokens; each side reports its top 2 (token 1 is the text's)
    full_p = {1: 0.4, 2: 0.3, 3: 0.1, 4: 0.1, 5: 0.1}
    full_q = {1: 0.4, 3: 0.35, 2: 0.05, 4: 0.1, 5: 0.1}
    ref = Position({1: math.log(0.4), 2: math.log(0.3)}, 1, math.log(0.4))
    cand = Position({1: math.log(0.4), 3: math.log(0.35)}, 1, math.log(0.4))
    got, rest = kl(ref, cand)
    # kept: token 1 (in both); rest: defaults 0.6, config 0.6 -> no divergence seen
    assert got == pytest.approx(0.0, abs=1e-12) and rest == pytest.approx(0.6)
    true = sum(full_p[t] * math.log(full_p[t] / full_q[t]) for t in full_p)
    assert got <= true
    # with token 2 reported on both sides it is kept apart and the divergence shows
    cand2 = Position({1: math.log(0.4), 3: math.log(0.35), 2: math.log(0.05)}, 1, math.log(0.4))
    got2, _ = kl(ref, cand2)
    want2 = 0.3 * math.log(0.3 / 0.05) + 0.3 * math.log(0.3 / 0.55)
    assert got2 == pytest.approx(want2) and got2 <= true


def test_exact_ties_in_the_defaults_top_two_count_as_agreement() -> None:
    tied = Position({7: -0.6931471805599453, 8: -0.6931471805599453}, 7, -0.6931471805599453)
    assert argmax_set(tied.top) == {7, 8}
    config_picks_8 = Position({8: -0.6, 7: -0.8}, 7, -0.8)
    c = compare_position(tied, config_picks_8)
    assert c.agree and c.tie
    # one step apart is no tie: a different top token disagrees
    near = Position({7: -0.68, 8: -0.70}, 7, -0.68)
    assert not compare_position(near, config_picks_8).agree
    # a tie on the config's side counts too (vLLM's order of tied tokens is arbitrary)
    config_tied = Position({8: -0.7, 7: -0.7}, 7, -0.7)
    assert compare_position(near, config_tied).agree


def test_the_log_likelihood_change_is_the_configs_minus_the_defaults() -> None:
    c = compare_position(pos({1: 0.5, 2: 0.5}), pos({1: 0.25, 2: 0.75}))
    assert c.ll_change == pytest.approx(math.log(0.25) - math.log(0.5))


def test_readings_of_different_texts_are_refused() -> None:
    with pytest.raises(ValueError, match="different texts"):
        compare_position(pos({1: 1.0}, 1), pos({2: 1.0}, 2))


def test_pooled_figures_are_token_weighted_with_intervals_over_prompts() -> None:
    same = [pos({1: 0.5, 2: 0.5})] * 10
    moved = [pos({1: 0.25, 2: 0.75})] * 10
    k1 = kl(same[0], moved[0])[0]
    units = [compare_prompt(same, same)] * 10 + [compare_prompt(same, moved)] * 10
    d = pool(units, 0.95)
    assert d.prompts == 20 and d.positions == 200
    assert d.kl_mean.value == pytest.approx(k1 / 2)
    assert d.kl_mean.low < d.kl_mean.value < d.kl_mean.high
    assert d.kl_mean.low >= 0 and d.kl_mean.high <= k1
    assert d.kl_p99.value == pytest.approx(k1)
    # the defaults' top token is a tie here, so every position agrees
    assert d.top1_agree.value == 1.0 and d.ties == 1.0
    assert Divergence.from_json(d.to_json()) == d
    # the defaults against themselves: a point interval at zero
    z = pool([compare_prompt(same, same)] * 12)
    assert z.kl_mean.to_json() == [0.0, 0.0, 0.0] and z.top1_agree.value == 1.0


def test_a_prompt_set_is_resampled_deterministically() -> None:
    a = [pos({1: 0.6, 2: 0.4})] * 5
    units = [compare_prompt(a, [pos({1: 0.6 - i / 100, 2: 0.4 + i / 100})] * 5)
             for i in range(12)]
    assert pool(units) == pool(units)
