"""The quality guard's rules without a server: which configs it judges, the greedy diagnostic
(whether each divergence fell on a tie), the reference, the floor and a verdict from readings
given by hand (the server's readings stubbed), and what it says on dummy weights or without a
reference."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.load.record import Request
from autotune.measure.divergence import Position
from autotune.measure.quality import Completion, greedy_check, self_gap
from autotune.tuning import quality as guard_mod
from autotune.tuning.quality import Guard, changes_outputs
from tests.fakes import study_cfg


def test_the_flags_that_can_change_outputs() -> None:
    assert changes_outputs({"kv_cache_dtype": "fp8", "max_num_seqs": 8}) == ["kv_cache_dtype"]
    assert changes_outputs({"kv_cache_dtype": "auto", "quantization": None}) == []
    assert changes_outputs({"speculative_config": {"method": "ngram"}}) == ["speculative_config"]


def test_the_replaced_thresholds_name_their_replacement(tmp_path: Path) -> None:
    from autotune.config.base import parse_model
    from autotune.config.quality import QualityConfig

    with pytest.raises(ConfigError, match=r"quality: .*quality\.min_exact_match was replaced "
                       r"by the KL budget \(quality\.max_kl\)"):
        parse_model(QualityConfig, {"min_exact_match": 0.5}, "quality")


def at(top: dict[int, float], token: int) -> Position:
    return Position(top, token, top.get(token, -9.0))


def test_the_greedy_diagnostic_says_where_each_divergence_fell() -> None:
    # prompt [1, 2]; the defaults complete 5 6 7; the reading of 1 2 5 6 7 gives, at each
    # position, the distribution of the next token: 2, then 5, 6 and 7 (the completion's)
    ref = [Completion([1, 2], [5, 6, 7], [-0.1, -0.69, -0.3], "a")] * 4
    read = [at({2: -0.1}, 2), at({5: -0.1, 9: -3.0}, 5),
            at({6: -0.69, 8: -0.69}, 6),  # the defaults' top two tied at the second token
            at({7: -0.3, 4: -0.4}, 7)]
    cand = [Completion([1, 2], [5, 6, 7], [-0.1, -0.69, -0.3], "a"),  # equal
            Completion([1, 2], [5, 8, 1], [-0.1, -0.7, -1.0], "b"),  # at the exact tie
            Completion([1, 2], [5, 6, 4], [-0.1, -0.69, -0.4], "c"),  # 0.1 nats: near
            Completion([1, 2], [9, 9, 9], [-0.1, -0.1, -0.1], "d")]  # 2.9 nats: beyond
    got = greedy_check(ref, [read] * 4, cand, tie_margin=0.125)
    assert got == {"prompts": 4, "equal": 1, "at_ties": 1, "near_ties": 1, "beyond": 1,
                   "first_diff": "'a' became 'b'"}
    assert greedy_check(ref, [read] * 4, cand, tie_margin=0.0)["beyond"] == 2
    # the config's own greedy log-probs against its reading of the same tokens
    assert self_gap(ref[:1], cand[:1], [read]) == pytest.approx(0.0)
    wrong = [[at({2: 0.0}, 2), at({5: -9.7}, 5), at({6: -10.29}, 6), at({7: -9.9}, 7)]]
    assert self_gap(ref[:1], cand[:1], wrong) == pytest.approx(9.6)


def dist(shift: float) -> list[list[list[Any]]]:
    """A reading of 3 texts x 10 positions: token 1's probability 0.6 - shift, token 2's the
    rest (as the reference file stores it: [[token, logprob]...], token, its logprob)."""
    a, b = math.log(0.6 - shift), math.log(0.4 + shift)
    return [[[[[1, a], [2, b]], 1, a] for _ in range(10)] for _ in range(3)]


@pytest.fixture
def guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Guard, dict[str, Any]]:
    """A guard whose server readings come from `state` (the shift each server reads)."""
    cfg = study_cfg(tmp_path, server={"model": "/m", "executable": ["vllm"]},
                    quality={"prompts": 2, "texts": 1, "min_units": 2})
    state: dict[str, Any] = {"shift": 0.0, "tokens": [5, 6]}
    monkeypatch.setattr(guard_mod, "prompt_ids", lambda url, m, p, keep: [[1, 2], [1, 3]])
    monkeypatch.setattr(guard_mod, "dataset_texts", lambda url, m, n, length: [[4] * 11])
    monkeypatch.setattr(guard_mod, "spec_counters", lambda url: {})
    monkeypatch.setattr(Guard, "guard_prompts", lambda self: ["hi", "ho"])

    def greedy(url: str, model: str, prompts: list[list[int]], n: int, c: int = 1
               ) -> list[Completion]:
        return [Completion(p, list(state["tokens"]), [-0.5, -0.5], "x") for p in prompts]

    def read_texts(url: str, model: str, texts: list[list[int]], k: int, c: int = 1
                   ) -> list[list[Position]]:
        return guard_mod._positions(dist(state["shift"]))
    monkeypatch.setattr(guard_mod, "greedy", greedy)
    monkeypatch.setattr(guard_mod, "read_texts", read_texts)
    return Guard(cfg, tmp_path, [Request(prompt="hi", prompt_len=1, output_len=4)] * 2), state


def test_the_guard_draws_its_prompts_apart_from_the_loads(tiny_model: Path, tmp_path: Path
                                                         ) -> None:
    """Drawn with another seed: the reference, read before the defaults' load, leaves none of
    the load's own prompts in vLLM's prefix cache."""
    from autotune.load.datasets import build_requests

    cfg = study_cfg(tmp_path, server={"model": str(tiny_model), "executable": ["vllm"]},
                    profile={"name": "random", "input_len": 8, "output_len": 4,
                             "num_prompts": 40}, quality={"prompts": 8})
    load = build_requests(cfg.profile, str(tiny_model))
    mine = Guard(cfg, tmp_path, load).guard_prompts()
    assert len(mine) == 8 and not {tuple(p) for p in mine} & {tuple(r.prompt) for r in load}


def test_the_reference_then_the_floor_then_a_verdict(guard: tuple[Guard, dict[str, Any]]
                                                     ) -> None:
    g, state = guard
    base_before, base_after = g.before({}, True), g.after({}, True)
    assert base_before is not None and base_after is not None
    assert g.before({"kv_cache_dtype": "fp8"}, False) is None  # the reference: defaults only
    base_before("http://x")
    ref = json.loads(g.path.read_text())
    assert ref["conditions"] == guard_mod.COLD and len(ref["texts"]) == 3
    assert ref["texts"][0] == [1, 2, 5, 6]  # a prompt and the defaults' completion
    found = base_after("http://x")
    facts, violation, cause = g.verdict({}, True, found)
    assert violation == 0.0 and cause is None and facts is not None
    assert facts["floor"]["kl_mean"] == 0.0 and g.floor_path.is_file()
    # a config that reads the same: passes, the floor beside it
    fp8 = {"kv_cache_dtype": "fp8"}
    judge = g.after(fp8, False)
    assert judge is not None
    facts, violation, cause = g.verdict(fp8, False, judge("http://x"))
    assert violation == 0.0 and cause is None and facts is not None
    assert facts["verdict"] == "passes" and facts["floor"]["kl_mean"] == 0.0
    assert facts["greedy"]["equal"] == 2
    # a config that moves the distribution: KL 0.6 ln(0.6/0.3) + 0.4 ln(0.4/0.7) = 0.192
    state["shift"] = 0.3
    facts, violation, cause = g.verdict(fp8, False, judge("http://x"))
    assert facts is not None and facts["verdict"] == "fails" and violation >= 1.0
    assert cause is not None and cause.startswith("quality: fails: KL 0.192")
    assert "floor KL 0 (the defaults against themselves" in cause


def test_speculation_alone_is_judged_by_its_bug_check(guard: tuple[Guard, dict[str, Any]]
                                                      ) -> None:
    g, state = guard
    g.before({}, True)("http://x")  # type: ignore[misc]
    g.after({}, True)("http://x")  # type: ignore[misc]
    spec = {"speculative_config": {"method": "ngram"}}
    state["shift"] = 0.3  # its teacher-forced reading moved: shown, not judged
    facts, violation, _ = g.verdict(spec, False, g.after(spec, False)("http://x"))  # type: ignore[misc]
    assert facts is not None and facts["verdict"] == "passes" and violation == 0.0
    assert "KL (shown, not judged: speculation) 0.192" in facts["reason"]
    state["tokens"] = [9, 9]  # a greedy pick outside the defaults' top-k: a bug
    facts, violation, cause = g.verdict(spec, False, g.after(spec, False)("http://x"))  # type: ignore[misc]
    assert facts is not None and facts["verdict"] == "fails" and "a bug" in (cause or "")


def test_without_a_reference_or_on_dummy_weights_it_never_passes_silently(
        guard: tuple[Guard, dict[str, Any]]) -> None:
    g, _ = guard
    fp8 = {"kv_cache_dtype": "fp8"}
    facts, violation, cause = g.verdict(fp8, False, g.after(fp8, False)("http://x"))  # type: ignore[misc]
    assert facts is not None and facts["verdict"] == "cannot tell" and violation == 0.5
    assert cause is not None and cause.startswith("quality: cannot tell: no reference")
    dummy = {**fp8, "load_format": "dummy"}
    assert g.after(dummy, False) is None and g.before({"load_format": "dummy"}, True) is None
    facts, violation, _ = g.verdict(dummy, False, None)
    assert facts == {"judged": False, "why": guard_mod.DUMMY} and violation == 0.0


def test_a_trial_that_only_the_guard_failed_reads_as_a_quality_miss() -> None:
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    def rec(**constraints: float) -> TrialRecord:
        return TrialRecord(1, Status.SLO_MISS, TrialFacts(), {}, {"mean_tpot_ms": 9.9},
                           constraints)

    assert rec(quality_ok=0.25, requests_ok=0.0).label() == "quality miss"
    assert rec(quality_ok=0.25, slo_p99_tpot_ms=3.0).label() == "SLO miss"
    assert rec(slo_p99_tpot_ms=3.0).label() == "SLO miss"


def test_a_task_is_paired_item_by_item_against_the_defaults_cold_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.measure.task import TaskRun

    cfg = study_cfg(tmp_path, server={"model": "/m", "executable": ["vllm"]},
                    quality={"prompts": 2, "texts": 1, "min_units": 2, "task": "gsm8k",
                             "task_items": 100})
    g = Guard(cfg, tmp_path, [Request(prompt="hi", prompt_len=1, output_len=4)] * 2)
    assert len(g.items) == 100
    passed = {"now": [True] * 60 + [False] * 40}
    monkeypatch.setattr(guard_mod, "prompt_ids", lambda url, m, p, keep: [[1, 2], [1, 3]])
    monkeypatch.setattr(guard_mod, "dataset_texts", lambda url, m, n, length: [[4] * 11])
    monkeypatch.setattr(guard_mod, "spec_counters", lambda url: {})
    monkeypatch.setattr(Guard, "guard_prompts", lambda self: ["hi", "ho"])
    monkeypatch.setattr(guard_mod, "greedy", lambda url, m, p, n, c=1: [
        Completion(x, [5, 6], [-0.5, -0.5], "x") for x in p])
    monkeypatch.setattr(guard_mod, "read_texts", lambda *a, **k: guard_mod._positions(dist(0)))
    monkeypatch.setattr(guard_mod, "run_task", lambda url, m, name, items, n, c: TaskRun(
        name, ["a"] * len(items), list(passed["now"])))
    g.before({}, True)("http://x")  # type: ignore[misc]
    floor = g.after({}, True)("http://x")  # type: ignore[misc]
    assert floor["floor"]["task_drop"] == 0.0
    fp8 = {"quantization": "fp8"}
    passed["now"] = [True] * 30 + [False] * 70  # 30 of the defaults' 60 lost
    facts, violation, cause = g.verdict(fp8, False, g.after(fp8, False)("http://x"))  # type: ignore[misc]
    assert facts is not None and facts["verdict"] == "fails" and facts["parts"] == {
        "kl": "passes", "task": "fails"}
    assert facts["task"]["lost"] == 30 and facts["task"]["low"] > 0.05
    # which items it lost, by the task's own ids, for the report and export to show
    assert facts["task"]["lost_items"] == [it.id for it in g.items[30:60]]
    assert facts["task"]["gained_items"] == []
    assert "gsm8k: the defaults pass 60 of 100, the config 30" in (cause or "")
    first = ", ".join(it.id for it in g.items[30:35])
    assert f"worse beyond the line; lost {first} and 25 more" in (cause or ""), cause
