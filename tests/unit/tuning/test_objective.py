"""The objective's bookkeeping, the typed records it writes, and export's choice, with
run_boot replaced by a stand-in (the real thing is exercised in
tests/integration/test_study_real.py)."""

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.config.study import StudyConfig
from autotune.outputs.export import bench_command, config_yaml, serve_command
from autotune.tuning import objective as objective_mod
from autotune.tuning.front import front
from autotune.tuning.objective import BOOT_OK, Objective
from autotune.tuning.record import Status, baseline, deltas, records
from autotune.tuning.search_space import SearchSpace
from autotune.tuning.summary import choose, summarize
from tests.fakes import fake_bench

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


def test_failures_are_infeasible_and_never_booted_twice(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(objective_mod, "run_boot", fake_bench(calls))
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
    study.set_metric_names(["total_token_throughput", "mean_tpot_ms"])
    recs = records(study)
    assert deltas(recs[1], baseline(recs))["total_token_throughput"] == pytest.approx(-0.5)
    front_ = front(study)
    assert front_ and not any(r.facts.failure for r in front_)
    assert recs[2].feasible is False and recs[2].cause
    # a trial without a measurement shows no values: the sampler's worst case stays inside
    assert recs[2].status == Status.INFEASIBLE and recs[2].values == {} and recs[2].metrics == {}

    # export: preferences pick the ends of the front
    summary = summarize(study, c)
    fast = choose(summary, c, "throughput")
    assert fast.params["max_num_seqs"] == 16
    low = choose(summary, c, "latency")
    assert low.params["max_num_seqs"] == 4
    assert choose(summary, c, max_tpot_ms=20).params["max_num_seqs"] == 4
    with pytest.raises(Exception, match="no feasible trial has mean TPOT"):
        choose(summary, c, max_tpot_ms=1)
    argv = serve_command(c, fast)
    assert argv[:3] == ["vllm", "serve", "/m"] and "--max-num-seqs" in argv
    assert "load-format: dummy" in config_yaml(c, fast)
    b = bench_command(c.profile, "/m", "/m", ["vllm"])
    assert b[:3] == ["vllm", "bench", "serve"] and "--random-input-len" in b


def test_resumed_study_does_not_replay_random_draws(tmp_path: Path) -> None:
    from autotune.tuning.study import open_study

    c = cfg(tmp_path).model_copy(update={"sampler": cfg(tmp_path).sampler.model_copy(
        update={"name": "random"})})
    first = open_study(c)
    a = [SPACE.suggest(first.ask()) for _ in range(2)]
    resumed = open_study(c)  # a new process: same config, same seed
    b = [SPACE.suggest(resumed.ask()) for _ in range(2)]
    fresh = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=c.sampler.seed))
    assert a == [SPACE.suggest(fresh.ask()) for _ in range(2)]  # first run: the plain seed
    assert a != b


def test_a_measurement_warning_is_kept_with_its_trial(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    from autotune.errors import MeasurementWarning

    inner = fake_bench([])

    def warned(*a: Any, **kw: Any) -> Any:
        warnings.warn("benchmark too short to measure: 1.0 requests per concurrency slot",
                      MeasurementWarning, stacklevel=2)
        warnings.warn("some library's own warning", UserWarning, stacklevel=2)
        return inner(*a, **kw)

    monkeypatch.setattr(objective_mod, "run_boot", warned)
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.enqueue_trial({}, user_attrs={"baseline": True})  # booted: no pre-boot refusal
    with pytest.warns(MeasurementWarning, match="too short"):
        study.optimize(Objective(cfg(tmp_path), SPACE, [], tmp_path), n_trials=1)
    assert study.trials[0].user_attrs["warnings"] == [
        "benchmark too short to measure: 1.0 requests per concurrency slot"]


def test_a_confirm_repeat_of_a_capacity_trial_never_stops_early(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An early stop below the incumbent records a lower bound, not a capacity: the confirm
    phase's repeats (of the baseline above all) must search to the end."""
    from autotune.measure.capacity import CapacityResult, LoadPoint
    from autotune.measure.runner import BootRun, Timings

    seen: list[tuple[float | None, float | None]] = []

    def fake_capacity(server: Any, profiles: Any, flags: dict[str, Any], workdir: Path, *,
                      starts: dict[str, float] | None = None,
                      stop_below: float | None = None, **kw: Any) -> BootRun:
        seen.append((next(iter((starts or {}).values()), None), stop_below))
        load = 8.0 if flags.get("kv_cache_dtype") == "fp8" else 4.0
        pt = LoadPoint(load, True, (), {"request_throughput": load, "total_token_throughput":
                                        100 * load, "p99_ttft_ms": 10.0, "mean_tpot_ms": 5.0})
        return BootRun(["vllm"], flags, Timings(), str(workdir / "server.log"),
                       capacities={profiles[0].key: CapacityResult("concurrency", load, pt,
                                                                   (pt,), None)})

    monkeypatch.setattr(objective_mod, "run_boot", fake_capacity)
    c = StudyConfig.model_validate({
        **cfg(tmp_path).model_dump(exclude={"objectives", "slos", "capacity"}),
        "capacity": {"axis": "concurrency", "low": 1, "high": 64},
        "slos": [{"metric": "p99_ttft_ms", "max": 1000}],
        "objectives": [{"metric": "capacity", "direction": "maximize"}]})
    study = optuna.create_study(directions=["maximize"])
    study.enqueue_trial({}, user_attrs={"baseline": True})
    study.enqueue_trial({"max_num_seqs": 16, "kv_cache_dtype": "fp8"})
    obj = Objective(c, SPACE, [], tmp_path)
    study.optimize(obj, n_trials=2)
    study.enqueue_trial({}, user_attrs={"repeat_of": 0})
    study.optimize(obj, n_trials=1)
    assert seen[0] == (None, None)  # the baseline: nothing to start from
    assert seen[1] == (4.0, 4.0)  # a first-pass trial starts at, and may stop below, the best
    assert seen[2] == (8.0, None)  # the baseline's repeat starts at the best, searches it all
    assert study.trials[2].values == [4.0]


def test_a_capacity_the_client_could_not_measure_is_unmeasured_and_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search that no load passed before the load generator ended it (here its first point
    sent late on a 2-core machine) judged nothing of the config: the trial is unmeasured, never
    an SLO miss (vLLM's defaults read "SLO miss: capacity -" so, and the study had no baseline
    to compare with; a certify boot read "capacity 0.00" so), and its config is enqueued again
    once."""
    from autotune.errors import Unmeasured
    from autotune.measure.capacity import CapacityResult, LoadPoint
    from autotune.measure.runner import BootRun, Timings
    from autotune.tuning.failures import retry_unmeasured
    from autotune.tuning.record import facts_of

    def late_client(server: Any, profiles: Any, flags: dict[str, Any], workdir: Path,
                    **kw: Any) -> BootRun:
        flag = "client limit: p99 send lag 151 ms (> 50 ms): the load generator sent late"
        pt = LoadPoint(8.0, True, (), {"p99_ttft_ms": 90.0}, flag=flag)
        return BootRun(["vllm"], flags, Timings(), str(workdir / "server.log"),
                       capacities={profiles[0].key: CapacityResult(
                           "rate", 0.0, None, (pt,), 8.0, f"not a server verdict at 8: {flag}")})

    monkeypatch.setattr(objective_mod, "run_boot", late_client)
    c = StudyConfig.model_validate({
        **cfg(tmp_path).model_dump(exclude={"objectives", "slos", "capacity"}),
        "capacity": {"axis": "rate", "low": 1, "high": 64, "start": 8},
        "slos": [{"metric": "p99_ttft_ms", "max": 1000}],
        "objectives": [{"metric": "capacity", "direction": "maximize"}]})
    study = optuna.create_study(directions=["maximize"])
    study.enqueue_trial({}, user_attrs={"baseline": True})
    study.optimize(Objective(c, SPACE, [], tmp_path), n_trials=1, catch=(Unmeasured,))
    t = study.trials[0]
    assert t.state == optuna.trial.TrialState.FAIL
    why = facts_of(t).unmeasured or ""
    assert why.startswith("no load passed before the load generator") and "151 ms" in why
    assert retry_unmeasured(study, t)  # enqueued again, as the baseline
    again = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert len(again) == 1 and again[0].user_attrs.get("baseline")


def test_a_failed_boot_records_its_seconds_as_the_servers() -> None:
    """A boot that failed after 29 s was counted by report.md as the tuner's overhead: the
    failure now records the boot (and any bench) seconds up to it."""
    import time

    from autotune.tuning.objective import failed_timings

    now = time.monotonic()
    assert failed_timings({}) == {}  # refused before the boot: no server time
    t = failed_timings({"boot": now - 29.0})
    assert t["boot_s"] == pytest.approx(29.0, abs=0.5) and t["bench_s"] == 0.0
    t = failed_timings({"boot": now - 40.0, "after": now - 10.0})
    assert t["boot_s"] == pytest.approx(30.0, abs=0.5)
    assert t["bench_s"] == pytest.approx(10.0, abs=0.5)


def test_a_client_process_that_died_leaves_the_trial_unmeasured_and_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H200 x4 a client process could not import autotune mid-trial (its files were
    being replaced): that is the machine's doing, not the config's. The trial is unmeasured and
    its config enqueued again, where before a ClientError stopped the whole study; a
    ClientError from the request path itself (a bug) still stops it."""
    from autotune.errors import ClientError, ClientProcessError, TrialError, Unmeasured
    from autotune.tuning.failures import retry_unmeasured
    from autotune.tuning.record import facts_of

    def dies(server: Any, profiles: Any, flags: dict[str, Any], workdir: Path, **kw: Any) -> Any:
        raise ClientProcessError("load generator process 2 failed: exited with code 1")

    monkeypatch.setattr(objective_mod, "run_boot", dies)
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.enqueue_trial({"max_num_seqs": 8, "kv_cache_dtype": "auto"})
    study.optimize(Objective(cfg(tmp_path), SPACE, [], tmp_path), n_trials=1,
                   catch=(Unmeasured,))
    t = study.trials[0]
    assert t.state == optuna.trial.TrialState.FAIL
    assert "exited with code 1" in (facts_of(t).unmeasured or "")
    assert retry_unmeasured(study, t)
    again = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [a.system_attrs.get("fixed_params") for a in again] == [
        {"max_num_seqs": 8, "kv_cache_dtype": "auto"}]

    def bug(server: Any, profiles: Any, flags: dict[str, Any], workdir: Path, **kw: Any) -> Any:
        raise ClientError("the load generator failed: TypeError: a payload")

    monkeypatch.setattr(objective_mod, "run_boot", bug)
    with pytest.raises(TrialError):
        study.optimize(Objective(cfg(tmp_path), SPACE, [], tmp_path), n_trials=1,
                       catch=(Unmeasured,))
