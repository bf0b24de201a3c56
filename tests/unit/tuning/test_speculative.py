"""A shape-only study leaves out the speculative methods it cannot judge (no draft of random
weights is accepted) and says so; with a declared acceptance profile it searches those that
draft every step, never those that draft from the text (ngram, suffix: random weights' text
does not repeat, so they propose nothing to accept)."""

from __future__ import annotations

from pathlib import Path

import yaml

from autotune.config.study import ServerConfig
from autotune.tuning.search_space import CategoricalParam
from autotune.tuning.speculative import (
    left_out_notes,
    shape_only_notes,
    space_of,
    unused_profiles,
    without,
)

SPACE = {
    "name": "spec",
    "parameters": {
        "speculative_method": {"type": "categorical", "choices": [None, "ngram", "suffix", "mtp"],
                               "into": "speculative_config", "key": "method"},
        "num_speculative_tokens": {"type": "int", "low": 1, "high": 5,
                                   "into": "speculative_config",
                                   "when": {"speculative_method": ["ngram", "suffix", "mtp"]}},
        "prompt_lookup_max": {"type": "int", "low": 2, "high": 5,
                              "into": "speculative_config",
                              "when": {"speculative_method": ["ngram"]}},
        "max_num_seqs": {"type": "int", "low": 8, "high": 64},
    },
    "starts": [{"speculative_method": "ngram", "num_speculative_tokens": 3,
                "max_num_seqs": 16}, {"max_num_seqs": 32}],
}


def space_file(tmp_path: Path) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    return str(path)


def test_the_models_own_weights_search_every_method(tmp_path: Path) -> None:
    space, left = space_of(space_file(tmp_path), ServerConfig(model="m"))
    assert left == [] and "prompt_lookup_max" in space.parameters


def test_random_weights_without_a_profile_leave_speculation_out(tmp_path: Path) -> None:
    space, left = space_of(space_file(tmp_path), ServerConfig(model="m", shape_only=True))
    assert left == ["ngram", "suffix", "mtp"]
    assert list(space.parameters) == ["max_num_seqs"]  # the method fixed at None: flag out
    assert space.starts == [{"max_num_seqs": 32}]
    drafting, text = left_out_notes(left, space.name)
    assert "(mtp) left out" in drafting and "server.acceptance.mtp" in drafting
    assert "(ngram, suffix) left out" in text and "text repeats itself" in text
    assert "server.acceptance" not in text.split(". Study")[0]  # no profile to declare for them


def test_a_profile_keeps_its_method_and_what_is_sampled_for_it(tmp_path: Path) -> None:
    server = ServerConfig(model="m", shape_only=True,
                          acceptance={"mtp": {"mean_length": 1.8, "measured_k": 3}})
    space, left = space_of(space_file(tmp_path), server)
    assert left == ["ngram", "suffix"]
    method = space.parameters["speculative_method"]
    assert isinstance(method, CategoricalParam) and method.choices == [None, "mtp"]
    assert space.parameters["num_speculative_tokens"].when == {"speculative_method": ["mtp"]}
    assert "prompt_lookup_max" not in space.parameters  # sampled for ngram only


def test_a_text_drafted_method_is_left_out_of_random_weights_even_with_a_profile(
        tmp_path: Path) -> None:
    server = ServerConfig(model="m", shape_only=True,
                          acceptance={"ngram": {"mean_length": 1.8, "measured_k": 3}})
    space, left = space_of(space_file(tmp_path), server)
    assert left == ["ngram", "suffix", "mtp"] and list(space.parameters) == ["max_num_seqs"]
    note = " ".join(left_out_notes(left, space.name, server.acceptance))
    assert "(server.acceptance.ngram: not applied)" in note
    both = {"ngram": {"rates": [0.5]}, "suffix": {"rates": [0.5]}}
    two = ServerConfig(model="m", shape_only=True, acceptance=both)
    note = " ".join(left_out_notes(left, space.name, iter(two.acceptance)))  # read once
    assert "(server.acceptance.ngram, server.acceptance.suffix: not applied)" in note
    assert unused_profiles(two, left) is None  # said in the note above
    own, _ = space_of(space_file(tmp_path), server.model_copy(update={"shape_only": False}))
    assert own.parameters["speculative_method"].choices == [None, "ngram", "suffix", "mtp"]


def test_without_drops_a_parameter_whose_condition_can_no_longer_hold(tmp_path: Path) -> None:
    space, _ = space_of(space_file(tmp_path), ServerConfig(model="m"))
    cut = without(space, "speculative_method", ["ngram"])
    assert "prompt_lookup_max" not in cut.parameters
    assert cut.parameters["num_speculative_tokens"].when == {"speculative_method": ["suffix", "mtp"]}
    assert cut.starts == [{"max_num_seqs": 32}]


def test_a_declared_profile_is_refused_where_vllm_samples_on_the_cpu(tmp_path: Path) -> None:
    import pytest

    from autotune.errors import ConfigError
    from autotune.tuning.speculative import check_emulation

    server = ServerConfig(model="m", shape_only=True,
                          acceptance={"mtp": {"rates": [0.8, 0.5]}})
    space, _ = space_of(space_file(tmp_path), server)
    with pytest.raises(ConfigError, match="server.acceptance: vLLM 0.32.0\\+cpu samples on"):
        check_emulation(server, space, "0.32.0+cpu")
    check_emulation(server, space, "0.26.0")  # a GPU build emulates it
    plain, _ = space_of(space_file(tmp_path), ServerConfig(model="m", shape_only=True))
    check_emulation(server, plain, "0.32.0+cpu")  # nothing speculative searched: nothing to run


def test_a_text_drafted_profile_the_space_does_not_search_is_said_to_be_unused() -> None:
    server = ServerConfig(model="m", shape_only=True,
                          acceptance={"ngram": {"mean_length": 1.8, "measured_k": 3}})
    said = unused_profiles(server, [])
    assert said is not None and said.startswith("server.acceptance.ngram: not applied")
    own = ServerConfig(model="m", acceptance={"ngram": {"mean_length": 1.8, "measured_k": 3}})
    assert unused_profiles(own, []) is None
    # a space whose fixed args serve random weights makes the study shape only all the same
    fixed = unused_profiles(own, [], {"load_format": "dummy"})
    assert fixed is not None and fixed.startswith("server.acceptance.ngram: not applied")


def test_preflights_notes_read_random_weights_from_the_spaces_fixed_args(tmp_path: Path) -> None:
    doc = {**SPACE, "fixed": {"load_format": "dummy"}, "starts": [{"max_num_seqs": 32}]}
    doc["parameters"] = {
        "speculative_method": {"type": "categorical", "choices": [None, "mtp"],
                               "into": "speculative_config", "key": "method"},
        "max_num_seqs": {"type": "int", "low": 8, "high": 64}}
    path = tmp_path / "fixed.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    own = ServerConfig(model="m", acceptance={"ngram": {"mean_length": 1.8, "measured_k": 3}})
    space, left = space_of(str(path), own)
    assert left == ["mtp"]  # no profile for it: left out, said first
    notes = shape_only_notes(own, space, left)
    assert len(notes) == 2 and notes[1].startswith("server.acceptance.ngram: not applied")
