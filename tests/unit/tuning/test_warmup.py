"""How many warm-up windows a boot runs, from the study's earlier boots of its config
(autotune.tuning.warmup), and the objective passing it down and recording it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.config.study import ServerConfig, StudyConfig
from autotune.measure.capacity import CapacityResult, LoadPoint
from autotune.tuning import objective as objective_mod
from autotune.tuning.objective import Objective
from autotune.tuning.record import Status, TrialFacts, TrialRecord
from autotune.tuning.warmup import QUICK, compiled_late, for_boot
from tests.unit.tuning.test_objective import SPACE, cfg

SERVER = ServerConfig(model="/m", executable=["vllm"])
CLEAN = {"warm_windows": 3.0, "warm_stable": 1.0, "warm_jit_events": 2.0,
         "warm_jit_late": 0.0}  # the MoE's 2 compilations, both in the first window


def boot(tmp_path: Path, number: int, warm: dict[str, float] | None = None, *,
         key: str = "k", machine: str = "m", folder: str = "", **later: float) -> TrialRecord:
    """A capacity trial's record: its first point carries the warm-up (`warm`), its second
    point's server figures are `later`."""
    first = LoadPoint(8.0, True, (), {}, server=dict(CLEAN if warm is None else warm))
    second = LoadPoint(8.8, False, ("p99",), {}, server=dict(later))
    log = tmp_path / folder / f"trial-{number:04d}" / "server.log"
    return TrialRecord(number, Status.OK, TrialFacts(
        flags_key=key, machine=machine, log_path=str(log),
        capacity=CapacityResult("rate", 8.0, first, (first, second), 8.8).to_json()),
        {}, {"capacity": 8.0})


def size(tmp_path: Path, recs: list[TrialRecord], number: int = 9, key: str = "k",
         machine: str = "m") -> Any:
    (tmp_path / "vllm-cache").mkdir(exist_ok=True)
    return for_boot(recs, number, key, machine, SERVER, tmp_path / f"trial-{number:04d}")


def test_a_config_whose_boot_compiled_only_in_its_first_window_warms_short(
        tmp_path: Path) -> None:
    got = size(tmp_path, [boot(tmp_path, 3)])
    assert got.enough == QUICK == 2 and got.of_trial == 3
    assert got.facts()["size"] == "short" and "trial 3" in got.why


@pytest.mark.parametrize(("recs", "why"), [
    ([], "no earlier boot"),
    ([lambda p: boot(p, 3, key="other")], "no earlier boot"),  # another config
    ([lambda p: boot(p, 3, machine="elsewhere")], "no earlier boot"),  # another machine
    ([lambda p: boot(p, 3, folder="validate/run-1")], "no earlier boot"),  # other caches
    ([lambda p: boot(p, 12)], "no earlier boot"),  # a later trial
    ([lambda p: boot(p, 3, {**CLEAN, "warm_jit_late": 1.0})], "compiled after"),
    ([lambda p: boot(p, 3, jit_remeasured=1.0)], "compiled after"),  # in a measured point
    ([lambda p: boot(p, 3, {"warm_windows": 4.0, "warm_stable": 0.0})], "no record"),
    ([lambda p: boot(p, 3), lambda p: boot(p, 5, {**CLEAN, "warm_jit_late": 2.0})],
     "trial 5"),  # the latest boot of the config decides
])
def test_every_other_boot_warms_as_the_study_says(tmp_path: Path, recs: list[Any],
                                                   why: str) -> None:
    got = size(tmp_path, [r(tmp_path) for r in recs])
    assert got.enough == 0 and got.facts()["size"] == "full" and why in got.why


def test_caches_that_are_gone_warm_in_full(tmp_path: Path) -> None:
    got = for_boot([boot(tmp_path, 3)], 9, "k", "m", SERVER, tmp_path / "trial-0009")
    assert not (tmp_path / "vllm-cache").exists() and got.enough == 0


def test_a_boot_recorded_before_warm_jit_late_is_read_where_it_can_be(tmp_path: Path) -> None:
    def of(**warm: float) -> bool | None:
        return compiled_late(boot(tmp_path, 1, warm))
    assert of(warm_windows=4.0, warm_jit_events=0.0) is False  # nothing compiled at all
    # two windows that agreed: the second had none, so any fell in the first
    assert of(warm_windows=2.0, warm_stable=1.0, warm_jit_events=2.0) is False
    assert of(warm_windows=4.0, warm_stable=0.0, warm_jit_events=2.0) is None
    assert of(warm_windows=3.0, warm_stable=1.0) is None  # no log watched
    assert of(warm_windows=0.0) is None and of() is None  # no warm-up ran


def test_a_repeat_boot_passes_its_short_warm_up_down_and_records_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.measure.runner import BootRun, Timings

    passed: list[int] = []

    def fake_capacity(server: Any, profiles: Any, flags: dict[str, Any], workdir: Path, *,
                      warm_enough: int = 0, **kw: Any) -> BootRun:
        passed.append(warm_enough)
        (workdir.parent / "vllm-cache").mkdir(exist_ok=True)  # the boot filled the caches
        pt = LoadPoint(4.0, True, (), {"request_throughput": 4.0,
                                       "total_token_throughput": 400.0}, server=dict(CLEAN))
        return BootRun(["vllm"], flags, Timings(), str(workdir / "server.log"),
                       capacities={profiles[0].key: CapacityResult("concurrency", 4.0, pt,
                                                                   (pt,), None)})

    monkeypatch.setattr(objective_mod, "run_boot", fake_capacity)
    c = StudyConfig.model_validate({
        **cfg(tmp_path).model_dump(exclude={"objectives", "slos", "capacity"}),
        "capacity": {"axis": "concurrency", "low": 1, "high": 64, "warm_windows": 4},
        "slos": [{"metric": "p99_ttft_ms", "max": 1000}],
        "objectives": [{"metric": "capacity", "direction": "maximize"}]})
    study = optuna.create_study(directions=["maximize"])
    study.enqueue_trial({}, user_attrs={"baseline": True})
    obj = Objective(c, SPACE, [], tmp_path)
    study.optimize(obj, n_trials=1)
    study.enqueue_trial({}, user_attrs={"repeat_of": 0, "check_at": 4.0})  # a certify boot
    study.optimize(obj, n_trials=1)
    assert passed == [0, QUICK]
    first, again = (t.user_attrs["warm_up"] for t in study.trials)
    assert first["size"] == "full" and "no earlier boot" in first["why"]
    assert again["size"] == "short" and again["of_trial"] == 0 and again["windows"] == QUICK
