"""The preflight's and the warm start's errors name where the bad value was written: a flag in
the study file's server.args is reported as server.args (it read "search space 'cpu-demo'",
which has no such flag), and a bad storage URL after --warm-start NAME@ as --warm-start."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.config.study import StudyConfig
from autotune.errors import ConfigError
from autotune.server.vllm_help import VllmInfo
from autotune.tuning import preflight as pf
from autotune.tuning.search_space import study_space

FLAGS = frozenset({"max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill",
                   "enable_prefix_caching", "kv_cache_dtype", "quantization", "max_model_len",
                   "load_format"})


def cfg(tmp_path: Path, tiny_model: Path, args: dict[str, Any],
        space: str = "cpu-demo") -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "s", "server": {"model": str(tiny_model), "executable": ["/bin/true"],
                                "args": args},
        "profile": {"name": "random", "input_len": 8, "output_len": 4},
        "search_space": space, "workdir": str(tmp_path / "w")})


@pytest.fixture(autouse=True)
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pf, "get_vllm_info", lambda *_a, **_k: VllmInfo("0.32.0", FLAGS))


def test_a_server_arg_vllm_lacks_is_named_as_server_args(tmp_path: Path,
                                                         tiny_model: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        pf.preflight(cfg(tmp_path, tiny_model, {"load_format": "dummy", "no_such_flag": 1}))
    assert str(ei.value).startswith("server.args: no_such_flag: vLLM 0.32.0 has no flag "
                                    "--no-such-flag")
    assert "search space" not in str(ei.value)


def test_bad_flags_in_both_places_are_each_named(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "space.yaml").write_text(
        "name: x\nparameters: {bogus_knob: {type: int, low: 1, high: 4}}\n")
    with pytest.raises(ConfigError) as ei:
        pf.preflight(cfg(tmp_path, tiny_model, {"no_such_flag": 1},
                         str(tmp_path / "space.yaml")))
    lines = str(ei.value).splitlines()
    assert lines[0].startswith("server.args: no_such_flag:")
    assert lines[1].startswith("search space 'x': bogus_knob:")


def test_good_server_args_pass(tmp_path: Path, tiny_model: Path) -> None:
    assert pf.preflight(cfg(tmp_path, tiny_model, {"load_format": "dummy"})).space.name \
        == "cpu-demo"


def test_warm_start_storage_error_names_the_option(tmp_path: Path, tiny_model: Path) -> None:
    from autotune.tuning.warm_start import warm_start

    st = optuna.create_study(directions=["maximize", "minimize"])
    with pytest.raises(ConfigError) as ei:
        warm_start(st, cfg(tmp_path, tiny_model, {}), None, "old@notaurl")  # type: ignore[arg-type]
    assert str(ei.value).startswith("--warm-start old@notaurl: storage: 'notaurl' is not a "
                                    "database URL")


def test_a_server_arg_the_space_overrules_is_said_once(tmp_path: Path,
                                                        tiny_model: Path) -> None:
    """Issue 84, item 8: server.args.max_model_len lost to the space's fixed value without a
    word. A fixed value, or a searched flag, over a study file's arg is one warning each."""
    c = cfg(tmp_path, tiny_model, {"max_model_len": 4096, "max_num_seqs": 8,
                                   "load_format": "dummy"})
    with pytest.warns(UserWarning) as got:
        pf.preflight(c)
    said = [str(w.message) for w in got]
    assert said == [
        "server.args.max_model_len: 4096 is overruled in every trial, the baseline too, by "
        "search space 'cpu-demo' (fixed: max_model_len: 512); drop it from one of them",
        "server.args.max_num_seqs: 8 is searched by search space 'cpu-demo' "
        "(parameters.max_num_seqs); a trial that sets it overrules this value, which only the "
        "baseline and trials leaving it unset run with; drop it from server.args, or from the "
        "space"]
    with warnings.catch_warnings(record=True) as again:  # as the CLI runs: said once a run
        warnings.simplefilter("default")
        pf.preflight(c)
        pf.preflight(c)
    assert [str(w.message) for w in again] == said
    # the same value as the space's changes nothing; an arg the space leaves alone neither
    assert pf.overruled(cfg(tmp_path, tiny_model, {"max_model_len": 512,
                                                   "load_format": "dummy"}),
                        study_space("cpu-demo", [])) == []
