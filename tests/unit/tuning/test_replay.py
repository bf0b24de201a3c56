"""The replay harness against toy tables whose curves are computed by hand."""

from typing import Any

import optuna
import pytest

from autotune.config.study import SamplerConfig
from autotune.tuning.replay import (
    Plan,
    Table,
    default_config,
    key,
    replay,
    trials_to,
)


def toy(noise: bool = False) -> Table:
    """Two knobs: a in (None, 8), b in (False, True). True means: (None, False) 1, (8, False) 2,
    (None, True) 1.5, (8, True) 4; with `noise`, (8, True) was measured 3.6 and 4.4."""
    cells = {(None, False): [1.0], (8, False): [2.0], (None, True): [1.5],
             (8, True): [3.6, 4.4] if noise else [4.0]}
    params = {key({"a": a, "b": b}): {"a": a, "b": b} for a, b in cells}
    values = {key({"a": a, "b": b}): v for (a, b), v in cells.items()}
    return Table(values, params, "maximize")


def test_one_knob_at_a_time_by_hand() -> None:
    """From the defaults (None, False): a=8 -> 2 (kept), then b=True -> 4: the incumbents are
    1, 2, 4 of the best 4; afterwards it has nothing left to try."""
    t = toy()
    assert default_config(t) == {"a": None, "b": False}
    s = replay(t, ["one-knob"], seeds=3, budget=5)["one-knob"]
    assert s.curves == [[0.25, 0.5, 1.0, 1.0, 1.0]] * 3
    assert s.median_trials_to_2pct == 3 and s.median_trials_to_5pct == 3
    assert s.share_within_2pct_at_16 == 1.0


def test_grid_in_random_order_and_noise() -> None:
    t = toy(noise=True)
    assert t.mean(key({"a": 8, "b": True})) == 4.0
    # pooled relative sd of the one repeated config: stdev(3.6, 4.4) / 4 = 0.1414
    assert t.noise() == pytest.approx(0.5657 / 4, rel=1e-3)
    s = replay(t, ["grid"], seeds=20, budget=4)["grid"]
    assert all(len(c) == 4 for c in s.curves)
    # by trial 4 every seed has measured the whole grid; the best config (4 +- 0.57) stands out
    # from the next (2 +- 0.28) by far more than the noise
    assert all(c[-1] == 1.0 for c in s.curves)
    assert trials_to([0.25, 0.5, 0.97, 0.99], 0.02) == 4 and trials_to([0.5], 0.02) is None


@pytest.mark.parametrize("name", ["tpe", "random", "nsga2", "gp"])
def test_optuna_samplers_run_against_the_table(name: str) -> None:
    s = replay(toy(), [name], seeds=2, budget=6)[name]
    assert len(s.curves) == 2 and all(len(c) == 6 for c in s.curves)
    assert all(0 < q <= 1 for c in s.curves for q in c)


@pytest.mark.parametrize("name", ["tpe", "tpe-starts", "random", "nsga2", "gp"])
def test_the_baseline_is_the_first_trial_as_in_a_study(name: str) -> None:
    """vLLM's defaults (None, False) score 1 of 4 (0.25); without the baseline the first trial
    is the sampler's own."""
    for c in replay(toy(), [name], seeds=5, budget=3)[name].curves:
        assert c[0] == 0.25
    firsts = {c[0] for c in replay(toy(), [name], seeds=8, budget=3,
                                   plan=Plan(baseline=False))[name].curves}
    assert firsts != {0.25}


@pytest.mark.parametrize("cls", ["TPESampler", "GPSampler"])
def test_start_up_trials_follow_the_product_default_or_the_plan(
        cls: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay's TPE and GP take a study's n_startup_trials unless the plan says otherwise,
    so a change of the product's default is what the replay measures."""
    seen: list[int] = []
    real = getattr(optuna.samplers, cls)

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["n_startup_trials"])
        return real(*args, **kwargs)

    monkeypatch.setattr(optuna.samplers, cls, spy)
    name = "tpe" if cls == "TPESampler" else "gp"
    replay(toy(), [name], seeds=2, budget=3)
    replay(toy(), [name], seeds=2, budget=3, plan=Plan(startup=2))
    assert seen == [SamplerConfig().n_startup_trials] * 2 + [2, 2]


def test_starts_come_right_after_the_baseline() -> None:
    """A start at the best config (8, True): every seed is at 1.0 from trial 2, where plain TPE
    has only its start-up draws; a partial start leaves the rest to the sampler."""
    best = Plan(starts=({"a": 8, "b": True},))
    s = replay(toy(), ["tpe-starts", "tpe"], seeds=10, budget=4, plan=best)
    assert all(c[:2] == [0.25, 1.0] for c in s["tpe-starts"].curves)
    assert s["tpe-starts"].median_trials_to_2pct == 2
    assert any(c[1] < 1.0 for c in s["tpe"].curves)  # the plain TPE ignores the starts
    partial = replay(toy(), ["tpe-starts"], seeds=10, budget=2,
                     plan=Plan(starts=({"a": 8},)))["tpe-starts"]
    assert {c[1] for c in partial.curves} <= {0.5, 1.0}  # (8, False) or (8, True)


def test_replay_starts_read_from_the_option_or_the_config() -> None:
    from autotune.config.study import load_study_config
    from autotune.tuning.replay import replay_starts

    t = toy()
    assert replay_starts(t, ["a=8, b=true", "a=null,c=1"], None) == [
        {"a": 8, "b": True}, {"a": None}]  # c: not a parameter of the table, left out
    with pytest.raises(ValueError, match=r"--start 1: a=16 was never measured .*None, 8"):
        replay_starts(t, ["a=16"], None)
    with pytest.raises(ValueError, match="is not K=V"):
        replay_starts(t, ["a"], None)
    # a study's own starts (fp8 + fp8 KV with four API servers first), then capacity-dummy's
    # two (the published recommendation, 512 sequences, last), cut to the table's knobs
    h100 = Table({}, {}, "maximize", domain={"quantization": [None, "fp8"],
                                             "kv_cache_dtype": ["auto", "fp8"],
                                             "max_num_seqs": [None, 256, 512]})
    got = replay_starts(h100, [], load_study_config("lab/examples/h100-capacity.yaml"))
    assert got[0] == {"quantization": "fp8", "kv_cache_dtype": "fp8", "max_num_seqs": None}
    assert got[1] == {"quantization": None, "kv_cache_dtype": "auto", "max_num_seqs": None}
    assert got[-1]["max_num_seqs"] == 512


def test_lower_is_better_for_latencies_durations_and_failures() -> None:
    """`replay --metric` on a metric that is not an objective takes its direction from it."""
    from autotune.config.metric_names import lower_is_better

    assert all(lower_is_better(m) for m in ("p99_ttft_ms", "mean_tpot_ms", "duration_s",
                                             "failed"))
    assert not any(lower_is_better(m) for m in ("request_throughput", "capacity",
                                                "capacity_per_gpu", "goodput_tok_s"))
