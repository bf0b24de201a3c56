"""The objective's bookkeeping and export's choice, with run_bench replaced by a stand-in
(the real thing is exercised in tests/integration/test_study_real.py)."""

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune import objective as objective_mod
from autotune.bench import BenchResult, Timings
from autotune.config import StudyConfig
from autotune.errors import ServerBootError
from autotune.export import bench_command, choose, config_yaml, knee, serve_command
from autotune.metrics import RequestRecord, compute_metrics
from autotune.objective import BOOT_OK, Objective
from autotune.search_space import SearchSpace
from autotune.study import feasible_front, trial_rows

SPACE = SearchSpace.model_validate({
    "name": "t",
    "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [4, 8, 16]},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8"]},
    },
})


def cfg(tmp_path: Path) -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "t", "server": {"model": "/m", "executable": ["vllm"],
                                "args": {"load_format": "dummy"}},
        "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "search_space": "cpu-demo", "workdir": str(tmp_path),
        "slos": [{"metric": "p99_ttft_ms", "max": 1000}],
    })


def fake_bench(calls: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    def run(server, profile, flags, workdir, **kw):  # type: ignore[no-untyped-def]
        calls.append(dict(flags))
        if flags.get("kv_cache_dtype") == "fp8":
            raise ServerBootError(1, "ValueError: fp8 refused", log_path="x")
        seqs = flags.get("max_num_seqs", 8)
        recs = [RequestRecord(index=i, send_time=0.0, prompt_len=8, expected_output_len=4,
                              first_token_time=0.1, end_time=0.1 + 0.01 * seqs,
                              chunk_times=(0.1, 0.1 + 0.01 * seqs), prompt_tokens=8,
                              output_tokens=4) for i in range(2)]
        m = compute_metrics(recs, duration_s=1.0 / seqs)
        return BenchResult(argv=["vllm"], params=flags, metrics=m, records=recs,
                           timings=Timings(1, 1, 0, 2), log_path="x")
    return run


def test_failures_are_infeasible_and_never_booted_twice(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(objective_mod, "run_bench", fake_bench(calls))
    c = cfg(tmp_path)
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.enqueue_trial({}, user_attrs={"baseline": True})
    for seqs in (4, 16):
        for kv in ("auto", "fp8"):
            study.enqueue_trial({"max_num_seqs": seqs, "kv_cache_dtype": kv})
    study.enqueue_trial({"max_num_seqs": 4, "kv_cache_dtype": "fp8"})  # a repeat of a failure
    study.optimize(Objective(c, SPACE, [], tmp_path), n_trials=6)

    trials = study.get_trials()
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    failed = [t for t in trials if t.user_attrs.get("failure")]
    assert len(failed) == 3
    for t in failed:
        assert t.constraints[BOOT_OK] == 1.0 and t.values == [0.0, 1e6]
        assert t.user_attrs["cause"] == "ValueError: fp8 refused"
    assert trials[5].user_attrs["reused_from"] == trials[2].number
    assert len(calls) == 5  # the repeated failing flags were not booted again
    assert calls[0] == {}  # the baseline runs vLLM's defaults
    ok = [t for t in trials if not t.user_attrs.get("failure")]
    assert all(t.constraints[BOOT_OK] == 0.0 for t in ok)
    assert trials[1].user_attrs["delta_vs_baseline"]["total_token_throughput"] == pytest.approx(
        -0.5)
    front = feasible_front(study)
    assert front and not any(t.user_attrs.get("failure") for t in front)
    rows = trial_rows(study, ["total_token_throughput", "mean_tpot_ms"])
    assert rows[2]["feasible"] is False and rows[2]["cause"]

    # export: preferences pick the ends of the front
    fast = choose(study, c, "throughput")
    assert fast.params["max_num_seqs"] == 16
    low = choose(study, c, "latency")
    assert low.params["max_num_seqs"] == 4
    assert choose(study, c, max_tpot_ms=20).params["max_num_seqs"] == 4
    with pytest.raises(Exception, match="no feasible trial has mean TPOT"):
        choose(study, c, max_tpot_ms=1)
    argv = serve_command(c, fast)
    assert argv[:3] == ["vllm", "serve", "/m"] and "--max-num-seqs" in argv
    assert "load-format: dummy" in config_yaml(c, fast)
    b = bench_command(c.profile, "/m", "/m", ["vllm"])
    assert b[:3] == ["vllm", "bench", "serve"] and "--random-input-len" in b


def test_knee_picks_the_balanced_point() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for v in ([100.0, 100.0], [90.0, 20.0], [10.0, 10.0]):
        study.add_trial(optuna.trial.create_trial(values=v))
    assert knee(study.best_trials, ["maximize", "minimize"]).values == [90.0, 20.0]


def test_resumed_study_does_not_replay_random_draws(tmp_path: Path) -> None:
    from autotune.study import open_study

    c = cfg(tmp_path).model_copy(update={"sampler": cfg(tmp_path).sampler.model_copy(
        update={"name": "random"})})
    first = open_study(c)
    a = [SPACE.suggest(first.ask()) for _ in range(2)]
    resumed = open_study(c)  # a new process: same config, same seed
    b = [SPACE.suggest(resumed.ask()) for _ in range(2)]
    fresh = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=c.sampler.seed))
    assert a == [SPACE.suggest(fresh.ask()) for _ in range(2)]  # first run: the plain seed
    assert a != b
