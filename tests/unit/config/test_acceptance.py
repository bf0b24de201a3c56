"""The acceptance profile (config/acceptance.py): parsed and checked with the field named, turned
into the K per-position rates vLLM's synthetic rejection sampling takes, and applied to a trial's
launch flags on random weights only (what a user deploys keeps the standard sampler)."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.config.acceptance import AcceptanceProfile, solve_conditional, synthetic
from autotune.config.base import parse_model
from autotune.config.study import ServerConfig
from autotune.errors import ConfigError

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def test_a_mean_length_reads_as_one_conditional_rate_that_gives_it_back() -> None:
    p = AcceptanceProfile(mean_length=1.8, measured_k=3)
    a = p.conditional()
    assert 1 + a + a**2 + a**3 == pytest.approx(1.8)
    assert p.rates_at(3) == [round(a, 4), round(a**2, 4), round(a**3, 4)]
    assert p.mean_length_at(3) == pytest.approx(1.8, abs=1e-3)
    assert p.mean_length_at(1) == pytest.approx(1 + a, abs=1e-3)  # fewer drafts, fewer kept
    assert p.mean_length_at(6) > 1.8  # more drafts: a few more accepted, by the same rate
    assert solve_conditional(1.0, 3) == 0.0 and solve_conditional(4.0, 3) == 1.0


def test_rates_are_taken_as_given_then_a_geometric_tail() -> None:
    p = AcceptanceProfile(rates=[0.8, 0.6, 0.45])
    assert p.rates_at(2) == [0.8, 0.6]
    assert p.rates_at(5) == [0.8, 0.6, 0.45, 0.3375, 0.2531]  # 0.45/0.6 a further token
    assert AcceptanceProfile(rates=[0.5]).rates_at(3) == [0.5, 0.25, 0.125]
    assert AcceptanceProfile(rates=[0.5, 0.0]).rates_at(4) == [0.5, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(("given", "said"), [
    ({"mean_length": 1.8}, "mean_length needs measured_k"),
    ({"mean_length": 5, "measured_k": 3}, "at most K + 1 tokens"),
    ({"mean_length": 0.5, "measured_k": 3}, "greater than or equal to 1"),
    ({"rates": [0.5, 0.7]}, "must not increase"),
    ({"rates": [1.2]}, "each be in [0, 1]"),
    ({"rates": [0.5], "measured_k": 2}, "measured_k goes with mean_length"),
    ({}, "give one of mean_length"),
    ({"mean_length": 2, "measured_k": 3, "rates": [0.5]}, "give one of mean_length"),
])
def test_a_bad_profile_names_the_field_and_the_fix(given: dict[str, Any], said: str) -> None:
    data = {"model": "m", "shape_only": True, "acceptance": {"ngram": given}}
    with pytest.raises(ConfigError) as e:
        parse_model(ServerConfig, data, "study.yaml: server")
    assert "acceptance.ngram" in str(e.value) and said in str(e.value)


def test_a_method_name_is_checked() -> None:
    with pytest.raises(ConfigError, match="not a speculative method name"):
        parse_model(ServerConfig, {"model": "m", "acceptance": {"N-gram": {"rates": [0.5]}}},
                    "server")


def test_random_weights_launch_with_synthetic_acceptance_the_deploy_line_without() -> None:
    s = ServerConfig(model="m", shape_only=True,
                     acceptance={"draft_model": AcceptanceProfile(rates=[0.8, 0.6, 0.45])})
    draft = {"method": "draft_model", "model": "/d", "num_speculative_tokens": 3}
    params = {"speculative_config": dict(draft)}
    launched = s.launch_flags(params)["speculative_config"]
    assert launched == {**draft, "rejection_sample_method": "synthetic",
                        "synthetic_acceptance_rates": [0.8, 0.6, 0.45]}
    assert s.serve_flags(params)["speculative_config"] == draft  # what export writes
    assert s.launch_flags({"max_num_seqs": 4}) == {"load_format": "dummy", "max_num_seqs": 4}


def test_a_text_drafted_method_launches_without_its_profile_on_random_weights() -> None:
    """n-gram drafts from the text, which random weights never repeat: a declared profile has
    no drafts to accept, so wherever its config comes from (a start, fixed args, a by-load
    boot) the launch keeps vLLM's standard sampler."""
    s = ServerConfig(model="m", shape_only=True,
                     acceptance={"ngram": AcceptanceProfile(rates=[0.8, 0.6, 0.45])})
    params = {"speculative_config": dict(NGRAM)}
    assert s.launch_flags(params)["speculative_config"] == NGRAM


def test_the_models_own_weights_and_undeclared_methods_launch_as_they_are() -> None:
    real = ServerConfig(model="m", acceptance={"ngram": AcceptanceProfile(rates=[0.8])})
    params = {"speculative_config": dict(NGRAM)}
    assert real.launch_flags(params) == params
    draft = {"speculative_config": {"method": "draft_model", "num_speculative_tokens": 2}}
    assert synthetic(draft, {"ngram": AcceptanceProfile(rates=[0.8])}) == draft
    no_k = {"speculative_config": {"method": "ngram"}}
    assert synthetic(no_k, {"ngram": AcceptanceProfile(rates=[0.8])}) == no_k
