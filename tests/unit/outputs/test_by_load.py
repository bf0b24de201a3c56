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
    assert "trial 1 (no speculation) above" in out["text"]


def test_nothing_to_compare_is_none() -> None:
    pick = rec(1, {"max_num_seqs": 64}, [30, 30], 2)
    assert by_load(cfg(), pick, [pick]) is None  # no speculative config measured
    plain = StudyConfig.model_validate({"name": "s", "server": {"model": "/m",
                                        "executable": ["vllm"]}, "search_space": "cpu-demo"})
    assert by_load(plain, pick, [pick, rec(2, NGRAM, [10, 10], 2)]) is None  # no capacity
