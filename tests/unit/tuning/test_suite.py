"""A suite's score and its config (the measurement runs in tests/integration/test_suite_real.py)."""

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from autotune.config.study import StudyConfig
from autotune.tuning.suite import combine, ratio, worst_case_gain


def test_ratios_and_scores() -> None:
    assert ratio(120.0, 100.0) == pytest.approx(1.2)
    assert ratio(0.0, 0.0) == 1.0 and math.isinf(ratio(1.0, 0.0))
    r = {"a": 1.2, "b": 0.9, "c": 1.05}
    w = {"a": 1.0, "b": 1.0, "c": 2.0}
    assert combine(r, w, "maximize", "worst") == 0.9  # the worst profile decides
    assert combine(r, w, "minimize", "worst") == 1.2  # a minimized metric: the largest ratio
    assert combine(r, w, "maximize", "weighted") == pytest.approx((1.2 + 0.9 + 2.1) / 4)
    assert worst_case_gain(r, "maximize") == pytest.approx(-0.1)
    assert worst_case_gain({"a": 0.8, "b": 0.95}, "minimize") == pytest.approx(0.05)


def cfg(**kw: Any) -> dict[str, Any]:
    return {"name": "s", "server": {"model": "/m", "executable": ["vllm"]},
            "search_space": "cpu-demo", **kw}


TWO = [{"name": "random", "input_len": 8, "output_len": 4},
       {"label": "long", "name": "random", "input_len": 64, "output_len": 4, "weight": 2}]


def test_suite_config() -> None:
    c = StudyConfig.model_validate(cfg(profiles=TWO))
    assert [p.key for p in c.workloads()] == ["random", "long"]
    assert c.metric_names() == ["suite_total_token_throughput", "suite_mean_tpot_ms"]
    assert "long/mean_tpot_ms" in c.profile_metrics()
    field = StudyConfig.model_validate(cfg(profiles="field", suite_scale=0.1))
    assert [(p.key, p.num_prompts) for p in field.workloads()] == [
        ("sharegpt", 100), ("1024-128", 100), ("32000-100", 6), ("1000-2000", 6)]
    assert StudyConfig.model_validate(cfg()).metric_names()[0] == "total_token_throughput"


@pytest.mark.parametrize("extra, expect", [
    ({"profiles": []}, "profiles: an empty suite"),
    ({"profiles": [{**TWO[0], "weight": 0}]}, "profiles.0.weight: Input should be greater than 0"),
    ({"profiles": [TWO[0], TWO[0]]}, "two profiles share a label"),
    ({"profiles": TWO, "baseline": False}, "keep baseline: true"),
    ({"profiles": TWO, "profile": TWO[0]}, "profile and profiles: set one"),
    ({"profiles": "gpu-lab"}, "no built-in suite 'gpu-lab'"),
])
def test_bad_suites(extra: dict[str, Any], expect: str) -> None:
    from autotune.config.base import parse_model
    from autotune.errors import ConfigError

    with pytest.raises((ValidationError, ConfigError), match=expect):
        parse_model(StudyConfig, cfg(**extra), "study.yaml")


def test_cli_refuses_a_suite_with_workers(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(cfg(profiles=TWO, workdir=str(tmp_path / "w"))))
    r = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(p),
                        "--workers", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--workers: a suite scores every trial against the baseline trial" in r.stderr


CAP = {"axis": "rate", "low": 1, "high": 256, "tolerance": 0.05, "requests_per_point": 100}
SLOS = [{"metric": "p99_ttft_ms", "max": 2000}]


def test_a_suite_composes_with_capacity() -> None:
    c = StudyConfig.model_validate(cfg(profiles=TWO, capacity=CAP, slos=SLOS,
                                       objectives=[{"metric": "capacity",
                                                    "direction": "maximize"}]))
    assert c.metric_names() == ["suite_capacity"]
    assert c.profile_metrics() == ["random/capacity", "long/capacity"]
    # the built-in field suite: the rate axis sets each profile's load, its own rate gives way
    field = StudyConfig.model_validate(cfg(profiles="field", suite_scale=0.1, capacity=CAP,
                                           slos=SLOS, objectives=[{"metric": "capacity",
                                                                   "direction": "maximize"}]))
    assert all(math.isinf(p.request_rate) for p in field.workloads())
    # a profile of the user's own that sets the axis's quantity: one error naming it
    bad = [TWO[0], {**TWO[1], "request_rate": 2.0}]
    with pytest.raises(ValidationError, match=r"profiles\.1, long.*request_rate"):
        StudyConfig.model_validate(cfg(profiles=bad, capacity=CAP, slos=SLOS,
                                       objectives=[{"metric": "capacity",
                                                    "direction": "maximize"}]))


def test_a_capacity_suite_scores_the_worst_profile_and_names_a_miss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a synthetic server (autotune.measure.capacity.search on a known knee per profile): the
    baseline scores 1.0, a config that doubles one profile's knee and halves the other's
    scores the worse ratio, and one that misses the SLOs at the lowest load on a profile is
    infeasible with that profile named."""
    import optuna

    from autotune.measure.runner import BootRun, Timings
    from autotune.measure.search import search
    from autotune.tuning import objective as objective_mod
    from autotune.tuning.objective import Objective
    from autotune.tuning.search_space import SearchSpace
    from tests.unit.measure.test_capacity import server

    knees = {8: {"random": 40.0, "long": 20.0}, 16: {"random": 80.0, "long": 10.0},
             4: {"random": 40.0, "long": -10.0}}
    starts: list[dict[str, float]] = []

    def fake(server_cfg: Any, profiles: Any, flags: dict[str, Any], workdir: Path, *,
             capacity: Any, **kw: Any) -> BootRun:
        cap = capacity
        starts.append(dict(kw.get("starts") or {}))
        seqs = flags.get("max_num_seqs", 8)
        results = {p.key: search(server(knees[seqs][p.key])[0], axis="rate", low=cap.low,
                                 high=cap.high, tolerance=cap.tolerance,
                                 start=(kw.get("starts") or {}).get(p.key))
                   for p in profiles}
        return BootRun(["vllm"], flags, Timings(1, 1, 0, 2), "x", capacities=results)

    monkeypatch.setattr(objective_mod, "run_boot", fake)
    c = StudyConfig.model_validate(cfg(profiles=TWO, capacity=CAP, slos=SLOS,
                                       objectives=[{"metric": "capacity",
                                                    "direction": "maximize"}],
                                       workdir=str(tmp_path)))
    space = SearchSpace.model_validate({"name": "s", "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [4, 8, 16]}}})
    st = optuna.create_study(directions=["maximize"])
    st.set_metric_names(c.metric_names())
    st.enqueue_trial({}, user_attrs={"baseline": True})
    st.enqueue_trial({"max_num_seqs": 16})
    st.enqueue_trial({"max_num_seqs": 4})
    st.optimize(Objective(c, space, [], tmp_path), n_trials=3)
    base, mixed, miss = st.get_trials()
    assert base.values == [1.0]
    r, lo = base.user_attrs["metrics"]["random/capacity"], base.user_attrs["metrics"]["long/capacity"]
    m = mixed.user_attrs["metrics"]
    assert m["random/capacity"] > 1.5 * r and m["long/capacity"] < lo
    assert mixed.values[0] == pytest.approx(m["long/capacity"] / lo)  # the worst profile
    assert starts[1] == {"random": r, "long": lo}  # each profile starts at its incumbent
    assert miss.constraints["capacity_ok"] == 1.0 and miss.user_attrs["cause"].startswith("long:")
    assert set(miss.user_attrs["capacity"]["profiles"]) == {"random", "long"}
    # each profile's load curve, for MLflow's histories and plots and the report
    from autotune.tuning.record import TrialRecord, curve_profiles

    recs = [TrialRecord.of(t, c.metric_names()) for t in st.get_trials()]
    assert curve_profiles(recs) == ["random", "long"] and recs[1].curve() == []
    pts = recs[1].curve("long")
    assert pts and [p.load for p in pts] == sorted(p.load for p in pts)


def test_a_capacity_suite_sizes_a_replica_by_its_lowest_profile() -> None:
    from autotune.outputs.deploy import sizing
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    c = StudyConfig.model_validate(cfg(profiles=TWO, capacity=CAP, slos=SLOS,
                                       objectives=[{"metric": "capacity",
                                                    "direction": "maximize"}]))
    rec = TrialRecord(3, Status.OK, TrialFacts(flags={}, metrics={
        "random/capacity": 12.0, "long/capacity": 5.0, "suite_capacity": 1.1}),
        {}, {"suite_capacity": 1.1})
    s = sizing(c, rec, 21.0)
    assert (s.per_replica_req_s, s.binding, s.replicas) == (5.0, "long", 5)
    assert "the lowest: long" in s.text("p99_ttft_ms <= 2000")
    assert "one boot: `autotune confirm`" in s.text("p99_ttft_ms <= 2000")


def test_sizing_counts_every_boot_of_the_config() -> None:
    """Once the confirm phase has booted a config again, its median sizes the replica and the
    replica count divides by the interval's low end (with three boots, the lowest boot)."""
    from autotune.outputs.deploy import sizing
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    c = StudyConfig.model_validate(cfg(capacity=CAP, slos=SLOS, objectives=[
        {"metric": "capacity", "direction": "maximize"}]))

    def rec(n: int, cap: float, flags: dict[str, Any], repeat_of: int | None = None
            ) -> TrialRecord:
        return TrialRecord(n, Status.OK, TrialFacts(
            flags=flags, flags_key=str(sorted(flags.items())), repeat_of=repeat_of,
            baseline=not flags, metrics={"capacity": cap}), {}, {"capacity": cap})

    best = rec(1, 20.0, {"max_num_seqs": 8})
    recs = [rec(0, 10.0, {}), best, rec(2, 10.0, {}, 0), rec(3, 12.0, {"max_num_seqs": 8}, 1),
            rec(4, 16.0, {"max_num_seqs": 8}, 1)]
    assert sizing(c, best, 40.0).per_replica_req_s == 20.0  # without the records: one boot
    s = sizing(c, best, 40.0, recs)
    assert (s.per_replica_req_s, s.boots, s.replicas) == (16.0, 3, 4)  # 40 / 12, rounded up
    assert s.low_req_s == 12.0 and s.high_req_s == 20.0
    text = s.text("p99_ttft_ms <= 2000")
    assert "median of 3 boots [12.00, 20.00]: range of 3 boots, covers 75%" in text
    assert "4 replicas" in text and "sized on the interval's low end" in text


# a config's teacher-forced reading far from the defaults' (KL 0.4 nats/token over 16 texts)
KL_READ = {"prompts": 16, "positions": 1600, "kl_mean": [0.4, 0.3, 0.5],
           "kl_p99": [1.0, 0.9, 1.1], "top1_agree": [0.8, 0.75, 0.85],
           "ll_change": [-0.3, -0.4, -0.2], "ties": 0.03, "rest_mass": 0.01, "coverage": 0.95}


@pytest.mark.parametrize("capacity", [False, True])
def test_a_suite_trial_is_judged_by_the_quality_guard(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capacity: bool) -> None:
    """Issue 48: a suite's trials (plain and capacity) run the guard on their boot like a
    single profile's: the defaults record the reference, an fp8 KV cache that drifts is
    infeasible with the guard's figures as its cause (it passed unjudged before)."""
    import optuna

    from autotune.load.record import Request
    from autotune.measure.runner import BootRun, Timings
    from autotune.measure.search import search
    from autotune.tuning import objective as objective_mod
    from autotune.tuning.objective import Objective
    from autotune.tuning.search_space import SearchSpace
    from tests.fakes import fake_bench
    from tests.unit.measure.test_capacity import server

    hooks: list[bool] = []

    def fake(server_cfg: Any, profiles: Any, flags: dict[str, Any], workdir: Path, *,
             after: Any = None, **kw: Any) -> BootRun:
        hooks.append(after is not None)
        found = {"judged": False, "why": "vLLM's defaults: the reference"} if not flags else {
            "judged": True, "why": "sets kv_cache_dtype", "kl": KL_READ, "greedy": {
                "prompts": 16, "equal": 3, "at_ties": 0, "near_ties": 0, "beyond": 13,
                "first_diff": ""}, "self_gap": 0.0}
        run = BootRun(["vllm"], flags, Timings(1, 1, 0, 2), "x", quality=found)
        for p in profiles:
            if capacity:
                run.capacities[p.key] = search(server(40.0)[0], axis="rate", low=1, high=256,
                                               tolerance=0.05)
            else:
                run.points[p.key] = fake_bench([])(None, [p], {}, workdir).points[p.key]
        return run

    monkeypatch.setattr(objective_mod, "run_boot", fake)
    extra: dict[str, Any] = dict(capacity=CAP, slos=SLOS, objectives=[
        {"metric": "capacity", "direction": "maximize"}]) if capacity else {}
    c = StudyConfig.model_validate(cfg(profiles=TWO, workdir=str(tmp_path), **extra))
    space = SearchSpace.model_validate({"name": "s", "parameters": {
        "kv_cache_dtype": {"type": "categorical", "choices": ["fp8"]}}})
    st = optuna.create_study(directions=[o.direction for o in c.objectives])
    st.set_metric_names(c.metric_names())
    st.enqueue_trial({}, user_attrs={"baseline": True})
    st.optimize(Objective(c, space, [Request(prompt="hi", prompt_len=1, output_len=4)],
                          tmp_path), n_trials=2)
    base, fp8 = st.get_trials()
    assert hooks == [True, True]
    assert base.user_attrs["quality"]["why"] == "vLLM's defaults: the reference"
    assert base.constraints["quality_ok"] == 0.0
    assert fp8.constraints["quality_ok"] > 0
    assert fp8.user_attrs["cause"].startswith("quality: fails: KL 0.4 [0.3, 0.5]")
    assert fp8.user_attrs["metrics"]["quality_kl_mean"] == 0.4
