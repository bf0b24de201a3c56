"""Export's `by_load` (outputs/by_load.py): the exported trial against the best measured config
of the other kind, by the study's first objective, crossed over on their load points."""

from __future__ import annotations

from typing import Any

from autotune.config.study import StudyConfig
from autotune.measure.capacity import CapacityResult, LoadPoint
from autotune.outputs.by_load import by_load
from autotune.tuning.record import Status, TrialFacts, TrialRecord

NGRAM = {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}


def cfg() -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "s", "server": {"model": "/m", "executable": ["vllm"]},
        "search_space": "cpu-demo", "slos": [{"metric": "p99_tpot_ms", "max": 50}],
        "capacity": {"axis": "rate", "low": 1, "high": 16},
        "objectives": [{"metric": "capacity", "direction": "maximize"}]})


def rec(n: int, flags: dict[str, Any], tpot: list[float], cap: float) -> TrialRecord:
    loads = [1.0, 2.0, 4.0, 8.0][:len(tpot)]
    pts = tuple(LoadPoint(x, x <= cap, (), {"mean_tpot_ms": t}) for x, t in zip(
        loads, tpot, strict=True))
    search = CapacityResult("rate", cap, None, pts, None)
    return TrialRecord(n, Status.OK, TrialFacts(flags=flags, flags_key=str(flags),
                                                capacity=search.to_json()),
                       {"capacity": cap}, {"capacity": cap})


def test_the_pick_against_the_best_speculative_config() -> None:
    pick = rec(1, {"max_num_seqs": 64}, [30, 30, 30, 32], 8)
    spec_a = rec(2, NGRAM, [15, 20, 40, 60], 4)
    spec_b = rec(3, {**NGRAM, "max_num_seqs": 8}, [15, 25, 45], 2)  # lower capacity: not it
    out = by_load(cfg(), pick, [pick, spec_a, spec_b])
    assert out is not None and out["speculative_trial"] == 2 and out["other_trial"] == 1
    assert 2 < out["pays_up_to"] < 4 and not out["everywhere"]
    assert out["text"].startswith("trial 2 (speculative: ngram, K 3) up to")
    assert "not measured for both" not in out["text"]  # both searches began at the low end
    assert "trial 1 (no speculation) above" in out["text"]


def test_nothing_to_compare_is_none() -> None:
    pick = rec(1, {"max_num_seqs": 64}, [30, 30], 2)
    assert by_load(cfg(), pick, [pick]) is None  # no speculative config measured
    plain = StudyConfig.model_validate({"name": "s", "server": {"model": "/m",
                                        "executable": ["vllm"]}, "search_space": "cpu-demo"})
    assert by_load(plain, pick, [pick, rec(2, NGRAM, [10, 10], 2)]) is None  # no capacity


def test_export_by_load_measures_both_at_one_ladder_low_loads_included(
        tmp_path: Any, monkeypatch: Any) -> None:
    """`export --by-load` (session/by_load.py): the pick and the best speculative config are
    each booted once (a random order) and measured at one ladder, every load on both (each
    boot's loads shuffled), so the low loads the capacity searches skipped are read: here
    speculation pays up to between 2 and 4 req/s, which their searches' points (4-8 only for
    the speculative one) could not say."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from autotune.session import by_load as mod

    c = cfg().model_copy(update={"workdir": str(tmp_path)})
    pick = rec(1, {"max_num_seqs": 64}, [30, 30, 30, 32], 8)
    spec = rec(2, NGRAM, [40, 60], 4)  # its search measured 4 and 8 only
    spec.facts.capacity["points"] = [
        {**p, "load": x} for p, x in zip(spec.facts.capacity["points"], [4.0, 8.0],
                                         strict=True)]
    searched = by_load(c, pick, [pick, spec])  # the searches' common loads: 4 and 8 only
    assert searched is not None and searched["pays_up_to"] is None
    assert "below 4 not measured for both: `autotune export --by-load`" in searched["text"]
    def truth(n: int, x: float) -> float:  # mean TPOT (ms) at load x
        return 9.0 * x if n == 2 else 30.0 if x <= 8 else 80.0
    booted_flags: list[dict[str, Any]] = []
    measured: dict[int, list[float]] = {}

    @contextmanager
    def booted(server: Any, flags: dict[str, Any], run_dir: Any, phase: Any) -> Any:
        booted_flags.append(flags)
        yield SimpleNamespace(base_url="http://x", alive=lambda: True, log_path=None)

    def capacity_on(url: str, model: str, tok: str, profile: Any, cap: Any, slos: Any,
                    run_dir: Any, *, loads: list[float], **_kw: Any) -> CapacityResult:
        n = 2 if "speculative_config" in booted_flags[-1] else 1
        measured[n] = list(loads)
        pts = tuple(LoadPoint(x, truth(n, x) <= 50, (), {"mean_tpot_ms": truth(n, x)})
                    for x in loads)
        top = max((p.load for p in pts if p.passed), default=0.0)
        return CapacityResult("rate", top, None, pts, None)

    monkeypatch.setattr(mod, "booted", booted)
    monkeypatch.setattr(mod, "capacity_on", capacity_on)
    doc = mod.measure_by_load(c, pick, [pick, spec], lambda _p: None)
    assert mod.ladder(c, [8.0, 4.0]) == doc["loads"] == [1.0, 1.68, 2.83, 4.76, 8.0]
    assert len(booted_flags) == 2 and set(doc["order"]) == {1, 2}
    assert sorted(measured[1]) == sorted(measured[2]) == doc["loads"]
    doc = mod.measure_by_load(c, pick, [pick, spec], lambda _p: None, [1.0, 2.0, 4.0, 8.0])
    assert 2 < doc["pays_up_to"] < 4 and "trial 1 (no speculation) above" in doc["text"]
    assert [p["load"] for p in doc["points"]["2"]] == [1.0, 2.0, 4.0, 8.0]
    from pathlib import Path

    assert Path(doc["path"]).exists() and Path(doc["path"]).parent.name == "by-load"


def test_the_ladder_and_its_option() -> None:
    import pytest

    from autotune.errors import ConfigError
    from autotune.session.by_load import ladder, loads_option
    from autotune.session.inspect import ExportOptions

    conc = cfg().model_copy(update={"capacity": cfg().capacity.model_copy(  # type: ignore[union-attr]
        update={"axis": "concurrency"})})
    assert ladder(conc, [16.0, 8.0]) == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert ladder(conc, [0.0, 0.0]) == [1.0, 2.0, 4.0, 8.0, 16.0]  # none met: to the high end
    assert loads_option("4, 1,2") == [1.0, 2.0, 4.0] and loads_option(None) is None
    for bad in ("a,b", "0,2", ""):
        with pytest.raises(ConfigError, match="--by-load-loads"):
            loads_option(bad)
    with pytest.raises(ConfigError, match="add --by-load"):
        ExportOptions(by_load_loads="1,2").check()


def test_one_server_for_both_sides_of_the_line_k_by_batch_size() -> None:
    """Where speculation stops paying at load L, vLLM's K-by-batch-size key deploys both sides
    on one server: K up to the batch run at L, none above (concurrency: L in flight; rate:
    Little's law, L times the time a request runs, vLLM's queue wait left out)."""
    from autotune.outputs.by_load import SCHEDULE_KEY, batch_at, schedule

    spec = rec(2, {**NGRAM, "max_num_seqs": 64}, [15, 20], 2)
    plan = schedule("concurrency", spec, (), {"pays_up_to": 6.4, "everywhere": False})
    assert plan is not None and plan["batch_up_to"] == 6
    assert plan["speculative_config"] == {**NGRAM["speculative_config"],
                                          SCHEDULE_KEY: [[1, 6, 3], [7, 64, 0]]}
    assert "K 3 up to a batch of 6 and none above" in plan["text"]
    for found in ({"pays_up_to": None, "everywhere": False},
                  {"pays_up_to": 8.0, "everywhere": True}):
        assert schedule("concurrency", spec, (), found) is None
    no_k = rec(3, {"speculative_config": {"method": "ngram"}}, [15], 1)
    assert schedule("concurrency", no_k, (), {"pays_up_to": 3.0, "everywhere": False}) is None
    pts = (LoadPoint(2.0, True, (), {"mean_e2el_ms": 1000.0}, server={
               "server_mean_queue_ms": 0.0}),
           LoadPoint(4.0, True, (), {"mean_e2el_ms": 2000.0}, server={
               "server_mean_queue_ms": 500.0}),
           LoadPoint(8.0, False, (), {"mean_e2el_ms": 9000.0}))  # no queue read: left out
    assert batch_at("rate", pts, 2.0) == 2.0 and batch_at("rate", pts, 4.0) == 6.0
    assert abs(batch_at("rate", pts, 3.0) - 12 ** 0.5) < 1e-9  # log-linear between them
    assert batch_at("rate", pts, 6.0) is None and batch_at("concurrency", pts, 9.0) == 9.0
    line = {"pays_up_to": 6.4, "everywhere": False}
    # the batch reaches max_num_seqs (the K-0 range would never apply), or data parallel
    assert schedule("concurrency", rec(4, {**NGRAM, "max_num_seqs": 6}, [15], 1), (), line) \
        is None
    assert schedule("concurrency", spec, (), line, {"data_parallel_size": 2}) is None


def test_export_by_load_measures_the_schedule_third(tmp_path: Any, monkeypatch: Any) -> None:
    """With a line found, `export --by-load` boots the speculative config once more with K by
    batch size and measures it at the same ladder, against the better of the two at each
    load."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from autotune.outputs.by_load import SCHEDULE_KEY
    from autotune.session import by_load as mod

    base = cfg()
    c = base.model_copy(update={"workdir": str(tmp_path), "capacity": base.capacity.model_copy(
        update={"axis": "concurrency"})})  # type: ignore[union-attr]
    pick = rec(1, {"max_num_seqs": 64}, [30, 30, 30, 32], 8)
    spec = rec(2, NGRAM, [10, 20, 40, 60], 4)
    booted_flags: list[dict[str, Any]] = []

    def truth(flags: dict[str, Any], x: float) -> float:
        sc = flags.get("speculative_config") or {}
        if SCHEDULE_KEY in sc:  # K 3 up to its last batch (10% slower: piecewise CUDA
            return 9.9 * x if x <= sc[SCHEDULE_KEY][0][1] else 30.0  # graphs), then none
        return 9.0 * x if sc else 30.0

    @contextmanager
    def booted(server: Any, flags: dict[str, Any], run_dir: Any, phase: Any) -> Any:
        booted_flags.append(flags)
        yield SimpleNamespace(base_url="http://x", alive=lambda: True, log_path=None)

    def capacity_on(*_a: Any, loads: list[float], **_kw: Any) -> CapacityResult:
        pts = tuple(LoadPoint(x, truth(booted_flags[-1], x) <= 50, (),
                              {"mean_tpot_ms": truth(booted_flags[-1], x)}) for x in loads)
        return CapacityResult("concurrency", max(p.load for p in pts if p.passed), None, pts,
                              None)

    monkeypatch.setattr(mod, "booted", booted)
    monkeypatch.setattr(mod, "capacity_on", capacity_on)
    doc = mod.measure_by_load(c, pick, [pick, spec], lambda _p: None, [1.0, 2.0, 4.0, 8.0])
    assert 2 < doc["pays_up_to"] < 4 and len(booted_flags) == 3
    plan = doc["schedule"]
    assert plan["measured"] and plan["batch_up_to"] == int(doc["pays_up_to"])
    assert booted_flags[-1]["speculative_config"][SCHEDULE_KEY] == [[1, 3, 3], [4, 1024, 0]]
    assert [r["slower_by"] for r in plan["slower_than_the_better"]] == [0.1, 0.1, 0.0, 0.0]
    # a third boot that fails (vLLM refusing the key) keeps the pair's answer, and says why
    from pathlib import Path

    from autotune.errors import ServerBootError

    def refused(server: Any, flags: dict[str, Any], run_dir: Any, phase: Any) -> Any:
        if SCHEDULE_KEY in (flags.get("speculative_config") or {}):
            raise ServerBootError(1, "unknown key")
        return booted(server, flags, run_dir, phase)

    monkeypatch.setattr(mod, "booted", refused)
    doc = mod.measure_by_load(c, pick, [pick, spec], lambda _p: None, [1.0, 2.0, 4.0, 8.0])
    assert 2 < doc["pays_up_to"] < 4 and not doc["schedule"]["measured"]
    assert "unknown key" in doc["schedule"]["error"]
    import json

    assert json.loads(Path(doc["path"]).read_text())["schedule"]["error"] == \
        doc["schedule"]["error"]
