"""`autotune acceptance` (session/acceptance.py): vLLM's spec_decode counters over a run read as
the profile a shape-only study declares; what it refuses, before any boot."""

from __future__ import annotations

import pytest

from autotune.config.acceptance import AcceptanceProfile
from autotune.config.study import StudyConfig
from autotune.errors import ConfigError
from autotune.session.acceptance import AcceptanceOptions, profile_of


def cfg(**server: object) -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "s", "server": {"model": "/m", "executable": ["vllm"], **server},
        "search_space": "cpu-demo"})


def test_the_counters_read_as_a_profile_the_study_file_takes() -> None:
    counts = {"server_spec_drafts": 200.0, "server_spec_accepted_tokens": 170.0,
              "server_spec_accepted_pos_0": 100.0, "server_spec_accepted_pos_1": 50.0,
              "server_spec_accepted_pos_2": 20.0}
    found = profile_of(counts, 3)
    assert found == {"mean_length": 1.85, "measured_k": 3, "drafts": 200.0,
                     "rates": [0.5, 0.25, 0.1]}
    declared = AcceptanceProfile(rates=found["rates"])
    assert declared.mean_length_at(3) == pytest.approx(found["mean_length"])
    # a vLLM without the per-position counter: the mean length alone
    assert profile_of({"server_spec_drafts": 10.0, "server_spec_accepted_tokens": 5.0}, 2) == {
        "mean_length": 1.5, "measured_k": 2, "drafts": 10.0}
    assert profile_of({}, 3) is None


def test_what_it_refuses_before_a_boot() -> None:
    with pytest.raises(ConfigError, match="measured on the model's own weights"):
        AcceptanceOptions("ngram", 3).check(cfg(shape_only=True))
    with pytest.raises(ConfigError, match="--draft PATH"):
        AcceptanceOptions("draft_model", 3).check(cfg())
    with pytest.raises(ConfigError, match="use --method draft_model"):
        AcceptanceOptions("ngram", 3, draft="/d").check(cfg())
    AcceptanceOptions("ngram", 3).check(cfg())
