"""The study loop: `timeout_s` stops a run between trials, never starting one it does not expect
to finish."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import optuna
import pytest

import autotune.tuning.study as study_mod
from autotune.tuning.study import fits_before, run_trials, trial_estimate


def test_estimate_is_the_longest_trial_after_the_cold_first_one() -> None:
    assert trial_estimate([]) == 0.0
    assert trial_estimate([250.0]) == 250.0  # only the cold one: all there is to go by
    assert trial_estimate([250.0, 90.0, 180.0, 120.0]) == 180.0


def test_fits_before() -> None:
    assert fits_before(deadline=1000.0, now=0.0, durations=[])
    assert fits_before(1000.0, 800.0, [250.0, 150.0])
    assert not fits_before(1000.0, 900.0, [250.0, 150.0])
    assert not fits_before(1000.0, 1000.0, [])


def test_run_stops_before_a_trial_that_would_overrun(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake clock; trials take 300 s (cold), then 100, 150, 100... With 700 s, trials start at
    0, 300, 400 and 550 would end at 700: no fourth trial. Optuna's own timeout would start it."""
    clock = [0.0]
    lengths = iter([300.0, 100.0, 150.0, 100.0, 100.0])

    class FakeObjective:
        def __init__(self, *a: Any, **k: Any) -> None:
            pass

        def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
            clock[0] += next(lengths)
            return 1.0, 1.0

    monkeypatch.setattr(study_mod, "Objective", FakeObjective)
    monkeypatch.setattr(study_mod.time, "monotonic", lambda: clock[0])
    phases: list[str] = []
    cfg = SimpleNamespace(n_trials=10, timeout_s=700.0, study_dir=lambda: None,
                          sampler=SimpleNamespace(name="tpe"), budget_gpu_minutes=None)
    st = optuna.create_study(directions=["maximize", "minimize"])
    ran = run_trials(st, cfg, SimpleNamespace(space=None), [],  # type: ignore[arg-type]
                     on_phase=lambda i, text, extra: phases.append(text))
    assert ran == 3 and clock[0] == 550.0
    assert len(st.trials) == 3 and all(t.state.is_finished() for t in st.trials)
    assert phases == ["timeout: the next trial (about 150 s) would end after it; stopping"]


def test_a_waiting_trial_shows_the_config_enqueued_for_it() -> None:
    from autotune.outputs.console import params_text
    from autotune.tuning.record import Status, TrialRecord

    st = optuna.create_study()
    st.enqueue_trial({})  # the baseline
    st.enqueue_trial({"quantization": "fp8", "kv_cache_dtype": "fp8"})  # a start
    recs = [TrialRecord.of(t, ["x"]) for t in st.get_trials()]
    assert [r.status for r in recs] == [Status.WAITING, Status.WAITING]
    assert params_text(recs[0].params) == "(vLLM defaults)"
    # the H100 study showed a waiting start as "(vLLM defaults)"
    assert params_text(recs[1].params) == "quantization=fp8 kv_cache_dtype=fp8"


def test_a_capacity_search_stopped_early_is_not_on_the_front() -> None:
    """A trial stopped early below the incumbent has a capacity bound and a mean TPOT from its
    floor load: lower than the incumbent's at capacity, but no trade-off (trials 9 and 17 of
    the H100 study sat on the front that way)."""
    from autotune.measure.capacity import EARLY_STOP
    from autotune.tuning.front import front_numbers

    st = optuna.create_study(directions=["maximize", "minimize"])
    for capacity, tpot, stopped in ((94.9, 32.8, None), (47.5, 12.6, f"{EARLY_STOP}'s 94.9"),
                                    (60.0, 23.4, None), (45.0, 10.0, None)):
        t = st.ask()
        t.set_user_attr("capacity", {"capacity": capacity, "stopped": stopped})
        st.tell(t, [capacity, tpot])
    assert {t.number for t in st.best_trials} == {0, 1, 2, 3}  # Optuna's own keeps 1
    assert front_numbers(st) == {0, 2, 3}  # a full search with a low TPOT stays on it
    # the Pareto plot draws it apart, not on Optuna's front
    from autotune.outputs.plots import bound_points, measured_study

    st.set_metric_names(["capacity", "mean_tpot_ms"])
    assert {t.number for t in measured_study(st, full_only=True).best_trials} == {0, 1, 2}
    assert bound_points(st) == [(1, 47.5, 12.6)]


def test_the_front_is_optunas_best_trials_less_the_repeats() -> None:
    import random

    from autotune.tuning.front import front_numbers

    rng = random.Random(0)
    for _ in range(30):
        st = optuna.create_study(directions=["maximize", "minimize"])
        for _trial in range(12):
            t = st.ask()
            t.set_constraint("slo", rng.choice([0.0, 0.0, 1.0]))  # some infeasible
            st.tell(t, [rng.choice([1.0, 2.0, 3.0]), rng.choice([1.0, 2.0, 3.0])])
        want = {t.number for t in st.best_trials}
        assert front_numbers(st) == want
        # a repeat of a front trial with better values is a measurement, not a config
        t = st.ask()
        t.set_user_attr("repeat_of", min(want) if want else 0)
        st.tell(t, [10.0, 0.0])
        assert front_numbers(st) == want


def test_the_budget_stops_a_study_between_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    """--budget-gpu-minutes: the first trial always runs; after it, no trial starts whose
    expected length (the longest so far) would take the study past the budget."""
    class FakeObjective:
        def __init__(self, *a: Any, **k: Any) -> None:
            pass

        def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
            return 1.0, 1.0

    monkeypatch.setattr(study_mod, "Objective", FakeObjective)
    phases: list[str] = []
    cfg = SimpleNamespace(n_trials=10, timeout_s=None, study_dir=lambda: None,
                          sampler=SimpleNamespace(name="tpe"), budget_gpu_minutes=1e-9,
                          gpus_per_trial=None)
    st = optuna.create_study(directions=["maximize", "minimize"])
    ran = run_trials(st, cfg, SimpleNamespace(space=None), [],  # type: ignore[arg-type]
                     on_phase=lambda _n, p, _f: phases.append(p))
    assert ran == 1 and len(st.trials) == 1
    assert phases[-1].startswith("budget: ") and "would end past it; stopping" in phases[-1]


def test_the_bill_splits_each_trial_and_counts_idle_and_the_rest() -> None:
    from datetime import datetime, timedelta

    from autotune.tuning.bill import bill, over_budget
    from autotune.tuning.record import TrialFacts

    t0 = datetime(2026, 11, 24, 12, 0, 0)
    st = optuna.create_study(directions=["maximize", "minimize"])
    # (start s, length s, boot s, load s, a confirm repeat?)
    for start, length, boot, load, rep in ((0, 300, 200, 90, None), (330, 120, 60, 50, None),
                                           (450, 120, 60, 50, 0), (5000, 60, 30, 20, None)):
        facts = TrialFacts(timings={"boot_s": boot, "bench_s": load}, repeat_of=rep)
        st.add_trial(optuna.trial.FrozenTrial(
            number=0, state=optuna.trial.TrialState.COMPLETE, value=None, values=[1.0, 1.0],
            datetime_start=t0 + timedelta(seconds=start),
            datetime_complete=t0 + timedelta(seconds=start + length), params={},
            distributions={}, user_attrs=facts.to_attrs(), system_attrs={},
            intermediate_values={}, trial_id=0))
    cfg = SimpleNamespace(gpus_per_trial=2, n_trials=5)
    b = bill(st, cfg, "GPU-min")  # type: ignore[arg-type]
    assert [round(t.minutes, 1) for t in b.trials] == [10.0, 4.0, 4.0, 2.0]  # 2 GPUs each
    assert b.part(True) == pytest.approx(4.0) and b.part(False) == pytest.approx(16.0)
    assert b.idle == pytest.approx(1.0)  # the 30 s gap; the 4,430 s one is a stop, not idle
    assert b.total == pytest.approx(21.0) and b.left == 2
    assert b.next_trial() == pytest.approx(4.0)  # the longest after the cold first
    assert b.estimate_left() == pytest.approx(8.0)  # the median first-pass trial, twice
    lines = b.lines()
    assert lines[0] == ("bill: 21.0 GPU-min (2 GPUs per trial): 3 trials 16.0, 1 repeat boots "
                        "4.0, idle 1.0; boots 11.7, load 7.0, the rest of the trials 1.3")
    assert lines[2] == "  2 trials left: about 8.0 GPU-min more (the median trial)"
    # without GPUs the unit is the machine's own minutes, and the line says so
    assert bill(st, cfg, "CPU-min").lines()[0].startswith(  # type: ignore[arg-type]
        "bill: 21.0 CPU-min (the machine's minutes): 3 trials")
    assert over_budget(b, 30.0) is None
    assert over_budget(b, 24.0) == ("budget: 21.0 of 24 GPU-min spent; the next trial (about "
                                    "4.0) would end past it")
    # after the cold first trial alone, the next is judged warm: 0.6 of it
    from autotune.tuning.record import records

    first = bill(records(st)[:1], cfg, "GPU-min")  # type: ignore[arg-type]
    assert first.next_trial() == pytest.approx(6.0)
    # the quality guard's seconds (issue 67) are their own part of the bill
    t = st.trials[1]
    st2 = optuna.create_study(directions=["maximize", "minimize"])
    st2.add_trial(optuna.trial.FrozenTrial(
        number=0, state=t.state, value=None, values=[1.0, 1.0], datetime_start=t.datetime_start,
        datetime_complete=t.datetime_complete, params={}, distributions={},
        user_attrs=TrialFacts(timings={"boot_s": 60, "bench_s": 30, "guard_s": 24}).to_attrs(),
        system_attrs={}, intermediate_values={}, trial_id=0))
    g = bill(st2, SimpleNamespace(gpus_per_trial=1, n_trials=1), "GPU-min")  # type: ignore[arg-type]
    assert g.lines()[0].endswith("boots 1.0, load 0.5, quality guard 0.4, the rest of the trials "
                                 "0.1")
    assert g.metrics()["bill_guard_min"] == pytest.approx(0.4)


def test_a_boot_that_timed_out_on_a_starved_machine_is_unmeasured_not_infeasible(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 70, item 5: a config that booted in 34 s in the demo hit the 300 s boot timeout on
    a busy machine and was recorded `infeasible: boot timeout`. A boot timeout on a starved
    machine (runner.booted has booted once more) is now no verdict: the trial is recorded
    unmeasured (failed: no sampler learns from it), its config enqueued again once, and the
    study goes on to its n_trials measured trials; three such trials in a row stop it."""
    from autotune.errors import ServerBootStarved, StudyError
    from autotune.tuning import objective as objective_mod
    from autotune.tuning.record import Status, records
    from tests.fakes import fake_bench
    from tests.unit.tuning.test_objective import SPACE, cfg

    calls: list[dict[str, Any]] = []
    real = fake_bench(calls)
    starve = {"left": 1}

    def run(server: Any, profiles: Any, flags: dict[str, Any], workdir: Any, **kw: Any) -> Any:
        if flags.get("max_num_seqs") == 16 and starve["left"]:
            starve["left"] -= 1
            raise ServerBootStarved("not healthy", "other processes took 93% of the CPUs' "
                                    "time", cause="boot timeout (300 s)", log_path="x")
        return real(server, profiles, flags, workdir, **kw)

    monkeypatch.setattr(objective_mod, "run_boot", run)
    c = cfg(tmp_path).model_copy(update={"n_trials": 3})
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(c.metric_names())
    st.enqueue_trial({}, user_attrs={"baseline": True})
    st.enqueue_trial({"max_num_seqs": 16, "kv_cache_dtype": "auto"})
    run_trials(st, c, SimpleNamespace(space=SPACE), [])  # type: ignore[arg-type]
    recs = records(st)
    assert [r.status for r in recs[:3]] == [Status.OK, Status.UNMEASURED, Status.OK]
    assert recs[1].label() == "unmeasured" and recs[1].cause == (
        "boot timeout (300 s) while other work starved the machine (other processes took 93% "
        "of the CPUs' time), where trial 0 booted in 1 s: the machine's, not the config's")
    assert recs[2].flags.get("max_num_seqs") == 16 and recs[2].facts.retry_of == 1
    assert sum(r.status != Status.UNMEASURED for r in recs) == 3  # n_trials complete
    from autotune.tuning.bill import bill

    b = bill(recs, c)  # the spoiled boot held the machine; it counts toward no trial budget
    assert 1 in [t.number for t in b.trials] and b.left == 0
    # a machine that stays starved: the study stops, saying why, after three in a row
    starve["left"] = 99
    c2 = cfg(tmp_path / "b").model_copy(update={"n_trials": 5})
    st2 = optuna.create_study(directions=["maximize", "minimize"])
    st2.set_metric_names(c2.metric_names())
    st2.enqueue_trial({}, user_attrs={"baseline": True})  # boots in 1 s: the timeout is ample
    for _ in range(4):
        st2.enqueue_trial({"max_num_seqs": 16, "kv_cache_dtype": "auto"})
    with pytest.raises(StudyError, match="3 trials in a row measured nothing"):
        run_trials(st2, c2, SimpleNamespace(space=SPACE), [])  # type: ignore[arg-type]
    assert [r.status for r in records(st2)][1:4] == [Status.UNMEASURED] * 3
    # a study none of whose boots has shown the timeout ample: a starved timeout is the
    # config's verdict as before (tests/integration/test_faults_real.py's 4 s boot timeout)
    st3 = optuna.create_study(directions=["maximize", "minimize"])
    st3.set_metric_names(c2.metric_names())
    st3.enqueue_trial({"max_num_seqs": 16, "kv_cache_dtype": "auto"})
    run_trials(st3, c2.model_copy(update={"n_trials": 1}), SimpleNamespace(space=SPACE), [])  # type: ignore[arg-type]
    (only,) = records(st3)
    assert only.status == Status.INFEASIBLE and only.cause == "boot timeout (300 s)"


def test_a_boot_timeout_after_the_same_flags_booted_is_the_machines(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where nothing measured the starvation (no PSI, a load average that had not risen yet),
    a boot timeout of flags that booted in under half the timeout earlier in the study is
    still the machine's: unmeasured, not infeasible."""
    import contextlib

    from autotune.errors import ServerBootTimeout, StudyError
    from autotune.tuning import objective as objective_mod
    from autotune.tuning.record import Status, records
    from tests.fakes import fake_bench
    from tests.unit.tuning.test_objective import SPACE, cfg

    calls: list[dict[str, Any]] = []
    real = fake_bench(calls)

    def run(server: Any, profiles: Any, flags: dict[str, Any], workdir: Any, **kw: Any) -> Any:
        if len(calls) >= 2 and flags.get("max_num_seqs") == 16:
            calls.append(flags)
            raise ServerBootTimeout("not healthy", cause="boot timeout (300 s)", log_path="x")
        return real(server, profiles, flags, workdir, **kw)

    monkeypatch.setattr(objective_mod, "run_boot", run)
    c = cfg(tmp_path).model_copy(update={"n_trials": 2})
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.set_metric_names(c.metric_names())
    st.enqueue_trial({}, user_attrs={"baseline": True})
    st.enqueue_trial({"max_num_seqs": 16, "kv_cache_dtype": "auto"})
    run_trials(st, c, SimpleNamespace(space=SPACE), [])  # type: ignore[arg-type]
    st.enqueue_trial({"max_num_seqs": 16, "kv_cache_dtype": "auto"})
    c3 = c.model_copy(update={"n_trials": 3})
    with contextlib.suppress(StudyError):  # where TPE draws those flags a third time
        run_trials(st, c3, SimpleNamespace(space=SPACE), [])  # type: ignore[arg-type]
    third = records(st)[2]
    assert third.status == Status.UNMEASURED and not third.facts.failure
    assert "where the same flags booted in 1 s in trial 1" in (third.cause or "")


def test_a_worker_states_its_plan_after_its_trial_even_when_it_was_the_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan (the reserve, printed by `reserve()`) is asked after each trial, before the
    loop sees the study full: two workers whose trials end in the same second each print it
    (issue 84: the test of two workers asserted a plan line that only the first to finish
    printed)."""
    class FakeObjective:
        def __init__(self, *a: Any, **k: Any) -> None:
            pass

        def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
            return 1.0, 1.0

    monkeypatch.setattr(study_mod, "Objective", FakeObjective)
    asked: list[int] = []
    cfg = SimpleNamespace(n_trials=1, timeout_s=None, study_dir=lambda: None,
                          sampler=SimpleNamespace(name="tpe"), budget_gpu_minutes=None,
                          gpus_per_trial=None)
    st = optuna.create_study(directions=["maximize", "minimize"])

    def reserve() -> float:
        asked.append(len(st.trials))
        return 0.0

    ran = run_trials(st, cfg, SimpleNamespace(space=None), [],  # type: ignore[arg-type]
                     reserve=reserve)
    assert ran == 1 and asked == [0, 1]  # before the trial, and after it though n_trials is met
