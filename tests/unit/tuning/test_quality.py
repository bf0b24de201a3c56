"""The quality guard's rules without a server: which configs it judges, its figures from
recorded completions, its verdict against the thresholds, and what it says on dummy weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.load.record import Request
from autotune.measure.quality import Completion, compare
from autotune.tuning.quality import Guard, changes_outputs, drop_text
from tests.fakes import study_cfg


def c(ids: list[int], lps: list[float], text: str = "") -> Completion:
    return Completion([1, 2], ids, lps, text or " ".join(map(str, ids)))


def test_the_flags_that_can_change_outputs() -> None:
    assert changes_outputs({"kv_cache_dtype": "fp8", "max_num_seqs": 8}) == ["kv_cache_dtype"]
    assert changes_outputs({"kv_cache_dtype": "auto", "quantization": None}) == []
    assert changes_outputs({"speculative_config": {"method": "ngram"}}) == ["speculative_config"]


def test_drift_counts_exact_matches_and_the_log_prob_drop() -> None:
    ref = [c([5, 6, 7], [-0.1, -0.2, -0.3]), c([8, 9], [-0.5, -0.5])]
    same = compare(ref, ref, [r.logprobs for r in ref])
    assert same.exact_match == 1.0 and same.logprob_drop == 0.0 and same.first_diff == ""
    other = [c([5, 6, 7], [-0.1, -0.2, -0.3]), c([8, 4], [-0.5, -0.4], "eight four")]
    d = compare(ref, other, [[-0.1, -0.2, -0.3], [-0.5, -1.5]])
    assert d.exact_match == 0.5 and d.logprob_drop == pytest.approx(1.0 / 5)
    assert d.first_diff == "'8 9' became 'eight four'"
    # its own greedy log-probs against its prompt_logprobs, over the shared tokens only: 5 6 7
    # (0 gap) and 8 (0.0 gap); 4 is not the reference's 9, so its reading is not compared
    assert d.logprob_self_gap == pytest.approx(0.0) and d.logprob_drop_greedy == 0.0


def test_a_server_whose_prompt_logprobs_contradict_its_greedy_ones_is_read_greedy() -> None:
    """The shape of the H200 run (vLLM 0.26.0, a 0.5B drafting for a 1.5B): every greedy
    completion equals the defaults', its greedy log-probs agree with theirs, and its
    prompt_logprobs read about 9.6 nats/token lower."""
    ref = [c([5, 6, 7], [-0.1, -0.2, -0.3]), c([8, 9], [-0.5, -0.5])]
    mine = [c([5, 6, 7], [-0.1, -0.2, -0.4]), c([8, 9], [-0.5, -0.5])]
    d = compare(ref, mine, [[-9.7, -9.8, -9.9], [-10.1, -10.1]])
    assert d.exact_match == 1.0 and d.logprob_drop == pytest.approx(9.6)
    assert d.logprob_self_gap == pytest.approx((9.6 * 4 + 9.5) / 5)
    assert d.logprob_drop_greedy == pytest.approx(0.1 / 5)
    # nothing shared, a missing score (-inf), another tokenization: no reading, not infinity
    assert compare(ref, [c([1], [-0.1])] * 2, [[-1.0] * 3, [-1.0] * 2]).logprob_self_gap is None
    missing = compare(ref, mine, [[float("-inf"), -9.8, -9.9], [-10.1, -10.1]])
    assert missing.logprob_self_gap == pytest.approx((9.6 * 3 + 9.5) / 4)
    other = [Completion([1, 3], m.ids, m.logprobs, m.text) for m in mine]
    assert compare(ref, other, [[-9.7] * 3, [-10.1] * 2]).logprob_self_gap is None


def test_the_verdict_reads_the_greedy_drop_where_prompt_logprobs_are_wrong(
        tmp_path: Path) -> None:
    cfg = study_cfg(tmp_path, server={"model": "/m", "executable": ["vllm"]})
    g = Guard(cfg, tmp_path, [Request(prompt="hi", prompt_len=1, output_len=4)])
    spec = {"speculative_config": {"method": "draft_model", "model": "/d"}}
    found = {"judged": True, "prompts": 16, "exact_match": 1.0, "logprob_drop": 9.57,
             "logprob_self_gap": 9.5, "logprob_drop_greedy": 0.004}
    facts, violation, cause = g.verdict(spec, False, found)
    assert violation == 0.0 and cause is None  # alike, and the greedy drop is small
    assert facts is not None and facts["logprob_judged"] is False
    assert facts["logprob_why"].startswith("prompt_logprobs 9.50 nats/token from its own")
    assert drop_text(facts) == "0.004 (greedy; its prompt_logprobs 9.5 off)"
    # a config that also changed the model (fp8 + a draft model) still fails on the greedy drop
    facts, violation, cause = g.verdict(spec, False, {**found, "exact_match": 0.5,
                                                      "logprob_drop_greedy": 0.3})
    assert violation == pytest.approx(0.2) and cause is not None
    assert "log-prob drop (greedy, over the shared tokens) 0.300 nats/token (max 0.1)" in cause
    # a gap within the limit: the prompt_logprobs drop is judged as before
    facts, violation, cause = g.verdict(spec, False, {**found, "logprob_self_gap": 0.02})
    assert violation == pytest.approx(9.47) and "logprob_judged" not in (facts or {})
    assert drop_text(facts or {}) == "9.570"


def test_a_trial_that_only_the_guard_failed_reads_as_a_quality_miss() -> None:
    from autotune.tuning.record import Status, TrialFacts, TrialRecord

    def rec(**constraints: float) -> TrialRecord:
        return TrialRecord(1, Status.SLO_MISS, TrialFacts(), {}, {"mean_tpot_ms": 9.9},
                           constraints)

    assert rec(quality_ok=0.25, requests_ok=0.0).label() == "quality miss"
    assert rec(quality_ok=0.25, slo_p99_tpot_ms=3.0).label() == "SLO miss"
    assert rec(slo_p99_tpot_ms=3.0).label() == "SLO miss"
