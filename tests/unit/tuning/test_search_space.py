from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.errors import ConfigError
from autotune.tuning.search_space import CategoricalParam, builtin_spaces, load_search_space

SPEC = """
name: t
fixed: {max_model_len: 4096}
parameters:
  max_num_seqs: {type: int, low: 8, high: 64, log: true}
  enable_chunked_prefill: {type: bool}
  quantization: {type: categorical, choices: [null, fp8]}
  speculative_method: {type: categorical, choices: [null, ngram], into: speculative_config, key: method}
  num_speculative_tokens:
    {type: int, low: 1, high: 5, into: speculative_config, when: {speculative_method: [ngram]}}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return p


def test_builtin_spaces_load() -> None:
    assert {"cpu-demo", "throughput", "latency"} <= set(builtin_spaces())
    for name in builtin_spaces():
        assert load_search_space(name).parameters


def test_builtin_spaces_load_from_a_checkout_without_the_package_installed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU machine autotune runs from the checkout, not installed: the wheel's
    autotune.search_spaces is not importable and the spaces come from search_spaces/ beside
    the package (a layout change once pointed this inside autotune/ and found none)."""
    from autotune.tuning import search_space

    def missing(name: str) -> None:
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(search_space.resources, "files", missing)
    assert {"throughput-dummy", "capacity-dummy", "cpu-demo"} <= set(builtin_spaces())
    assert load_search_space("throughput-dummy")  # found and valid


def test_conditions_and_json_flags(tmp_path: Path) -> None:
    space = load_search_space(write(tmp_path, SPEC))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen_spec = seen_plain = False
    for _ in range(40):
        trial = study.ask()
        values = space.suggest(trial)
        flags = space.to_flags(values)
        if values["speculative_method"] == "ngram":
            seen_spec = True
            assert flags["speculative_config"] == {
                "method": "ngram", "num_speculative_tokens": values["num_speculative_tokens"]}
        else:
            seen_plain = True
            assert "num_speculative_tokens" not in values and "speculative_config" not in flags
        if values["quantization"] is None:
            assert "quantization" not in flags
        study.tell(trial, 0.0)
    assert seen_spec and seen_plain
    assert space.flag_names() == {"max_num_seqs", "enable_chunked_prefill", "quantization",
                                  "speculative_config", "max_model_len"}


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("name: x\nparameters: {a: {type: int, low: 1, high: 2}\n", "malformed YAML: "),
        ("name: x\nparameters: {a: {type: int, low: 1, high: 2, bogus: 1}}\n",
         "parameters.a.int.bogus: unknown key"),
        ("name: x\nparameters: {a: {type: int, low: 'x', high: 2}}\n", "parameters.a.int.low"),
        ("name: x\nparameters: {a: {type: int, low: 5, high: 2}}\n", "low (5) must be <= high (2)"),
        ("name: x\nparameters: {}\n", "parameters: "),
        ("name: x\nparameters: {a: {type: bool, when: {zz: [1]}}}\n", "unknown parameter 'zz'"),
        ("- 1\n", "expected a mapping"),
        ("name: x\nfixed: {a: 3}\nparameters: {a: {type: int, low: 1, high: 2}}\n",
         "fixed.a: also searched under parameters"),
    ],
    ids=["malformed", "unknown-key", "wrong-type", "out-of-range", "empty", "bad-condition",
         "not-mapping", "fixed-and-searched"],
)
def test_bad_spaces_name_the_problem(tmp_path: Path, text: str, expect: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load_search_space(p)
    assert str(p) in str(ei.value) and expect in str(ei.value)


def test_malformed_yaml_gives_line(tmp_path: Path) -> None:
    p = write(tmp_path, "name: x\nparameters:\n  a: {type: int\n  b: 3\n")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+"):
        load_search_space(p)


def test_unknown_space_lists_builtins() -> None:
    with pytest.raises(ConfigError, match="cpu-demo"):
        load_search_space("no-such-space")


def test_stepped_floats_read_as_stepped() -> None:
    from autotune.outputs.console import params_text

    assert params_text({"gpu_memory_utilization": 0.8500000000000001, "max_num_seqs": 256}) == \
        "gpu_memory_utilization=0.85 max_num_seqs=256"


def test_draft_models_join_a_shipped_space_as_a_speculative_method() -> None:
    """server.draft_models: the shipped latency space searches draft_model over them beside
    n-gram, with num_speculative_tokens for both; prompt lookup stays n-gram's."""
    from autotune.tuning.search_space import with_draft_models

    base = load_search_space("latency")
    assert with_draft_models(base, []) is base
    space = with_draft_models(base, ["/m/qwen2.5-coder-0.5b"])
    names = list(space.parameters)
    assert names.index("speculative_model") == names.index("speculative_method") + 1
    method = space.parameters["speculative_method"]
    assert isinstance(method, CategoricalParam) and method.choices == [None, "ngram",
                                                                       "draft_model"]
    assert space.parameters["num_speculative_tokens"].when == {
        "speculative_method": ["ngram", "draft_model"]}
    assert space.parameters["prompt_lookup_max"].when == {"speculative_method": ["ngram"]}
    flags = space.to_flags({"speculative_method": "draft_model",
                            "speculative_model": "/m/qwen2.5-coder-0.5b",
                            "num_speculative_tokens": 3})
    assert flags == {"speculative_config": {"method": "draft_model",
                                            "model": "/m/qwen2.5-coder-0.5b",
                                            "num_speculative_tokens": 3}}
    assert not space.active("speculative_model", {"speculative_method": "ngram"})
    assert with_draft_models(base, ["/a", "/a"]).parameters["speculative_model"].choices == ["/a"]
    with pytest.raises(ConfigError, match="server.draft_models: the search space "
                                          "'cpu-demo' has no speculative_method"):
        with_draft_models(load_search_space("cpu-demo"), ["/m/d"])
    with pytest.raises(ConfigError, match="searches draft_model itself"):
        with_draft_models(space, ["/m/other"])


def test_a_study_files_starts_run_before_the_spaces_and_each_config_once() -> None:
    """On a budget that pays the defaults and one start (two GPUs, 45 GPU-minutes), the start
    that runs is the first one: the study file's own, not the space's generic one."""
    space = load_search_space("capacity-dummy")
    own = {**space.starts[0], "api_server_count": 4}
    got = space.study_starts([own, space.starts[1]])
    assert got == [own, space.starts[1], space.starts[0]]
    assert space.study_starts([]) == space.starts


def test_a_resumed_study_enqueues_a_start_added_to_its_file_and_no_start_twice() -> None:
    """Starts are remembered by config, not by count: with the study file's first, a start
    added to the file between runs shifted the space's along, and a count enqueued a space
    start twice and the new one never. A study that kept only a count (before 2026-11-29)
    enqueued the space's starts, then the file's."""
    from autotune.tuning.record import StudyFacts, queued_params, study_facts, write_study_facts
    from autotune.tuning.study import enqueue_starts

    def enqueued(study: optuna.Study, starts: list[dict[str, Any]],
                 before: list[dict[str, Any]] | None = None) -> int:
        """As prepare_study does: the facts read, the starts enqueued, the facts written."""
        n = len(study.trials)
        write_study_facts(study, enqueue_starts(study, study_facts(study), starts, before))
        return len(study.trials) - n

    space = load_search_space("capacity-dummy")
    st = optuna.create_study(directions=["maximize"])
    assert enqueued(st, space.study_starts([])) == 2
    added = {**space.starts[0], "api_server_count": 4}
    assert enqueued(st, space.study_starts([added])) == 1
    assert [queued_params(t) for t in st.trials] == [space.starts[0], space.starts[1], added]
    assert enqueued(st, space.study_starts([added])) == 0
    old = optuna.create_study(directions=["maximize"])  # one study enqueued by count
    write_study_facts(old, StudyFacts(starts_enqueued=2))
    assert enqueued(old, space.study_starts([added]), [*space.starts, added]) == 1
    assert [queued_params(t) for t in old.trials] == [added]
