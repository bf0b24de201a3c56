"""The guard's verdict: passes, fails or cannot tell, each measure against its line (the KL
budget or a multiple of the defaults' own floor; the task's drop beyond the defaults'), and what
a verdict that cannot tell says it would take."""

from __future__ import annotations

from autotune.config.quality import QualityConfig
from autotune.measure.divergence import Divergence, Interval
from autotune.measure.paired import paired
from autotune.tuning import verdict as v

Q = QualityConfig.model_validate({})


def div(value: float, low: float, high: float, prompts: int = 48) -> Divergence:
    one = Interval(0.0, 0.0, 0.0)
    return Divergence(prompts, prompts * 100, Interval(value, low, high), one,
                      Interval(0.99, 0.98, 1.0), one, 0.03, 0.01, 0.95)


def test_the_kl_line_is_the_budget_or_the_floor_times_its_multiple() -> None:
    assert v.kl_line(Q, None) == Q.max_kl
    assert v.kl_line(Q, div(0.0005, 0.0002, 0.0009)) == Q.max_kl  # 3 x 0.0005 < 0.0055
    assert v.kl_line(Q, div(0.004, 0.003, 0.005)) == 3 * 0.004  # a noisy machine's floor


def test_a_config_fails_only_when_its_whole_interval_is_above_the_line() -> None:
    # fp8 KV on Gemma 3 270M (issue 67): 0.0148 [0.0099, 0.0185] against a 0.0005 floor
    assert v.kl_part(div(0.0148, 0.0099, 0.0185), div(0.0005, 0.0002, 0.0009), Q).verdict \
        == v.FAILS
    # float32 against the bf16 defaults there: 0.00054, within the budget
    assert v.kl_part(div(0.00054, 0.0003, 0.0008), None, Q).verdict == v.PASSES
    # the same fp8 KV figures against a floor 10x higher: within 3 x the floor
    assert v.kl_part(div(0.0148, 0.0099, 0.0185), div(0.007, 0.006, 0.008), Q).verdict \
        == v.PASSES


def test_an_interval_across_the_line_cannot_tell_and_says_what_would() -> None:
    part = v.kl_part(div(0.005, 0.003, 0.008), None, Q)
    assert part.verdict == v.CANNOT_TELL
    # the upper half-width (0.003) must shrink below the gap (0.0005): 48 x 36 texts
    assert "about 1728 texts would decide it" in part.reason
    few = v.kl_part(div(0.0, 0.0, 0.0, prompts=5), None, Q)
    assert few.verdict == v.CANNOT_TELL and "5 texts, fewer than quality.min_units (8)" \
        in few.reason


def test_the_task_fails_beyond_the_drop_and_cannot_tell_without_power() -> None:
    base = [True] * 60 + [False] * 104
    lost = paired(base, [False] * 30 + [True] * 30 + [False] * 104)  # 30 of 60 lost
    assert v.task_part("humaneval", lost, None, Q).verdict == v.FAILS
    same = paired(base, base)
    assert v.task_part("humaneval", same, None, Q).verdict == v.PASSES  # [-0.023, 0.023]
    two = paired(base, [False] * 6 + [True] * 54 + [False] * 104)
    t = v.task_part("humaneval", two, None, Q)
    assert t.verdict == v.CANNOT_TELL and "items would decide it" in t.reason
    # a model that solves almost nothing: no drop can show (Gemma 270M: 5 of 164)
    weak = paired([True] * 5 + [False] * 159, [True] * 4 + [False] * 160)
    w = v.task_part("humaneval", weak, None, Q)
    assert w.verdict == v.CANNOT_TELL and "too few items" in w.reason
    # the defaults' own drop raises the line
    assert v.task_line(Q, paired(base, [False] * 3 + [True] * 57 + [False] * 104)) \
        == Q.max_task_drop + 3 / 164


def test_speculation_fails_only_on_a_divergence_where_the_defaults_clearly_led() -> None:
    ok = v.GreedyCheck(32, 29, 2, 1, 0, "")
    assert v.spec_part(ok, Q).verdict == v.PASSES
    bug = v.GreedyCheck(32, 29, 2, 0, 1, "' a' became ' b'")
    assert v.spec_part(bug, Q).verdict == v.FAILS
    assert ok.to_json()["exact_match"] == 29 / 32


def test_the_parts_combine_fail_first_then_the_deciding_part() -> None:
    p, f, c = (v.Part("kl", v.PASSES, "kl ok"), v.Part("task", v.FAILS, "task lost"),
               v.Part("task", v.CANNOT_TELL, "task weak"))
    assert v.combine([p, f], "kl") == (v.FAILS, "task lost")
    assert v.combine([p, c], "kl") == (v.PASSES, "kl ok; task weak")
    assert v.combine([v.Part("kl", v.CANNOT_TELL, "kl wide"), c], "kl")[0] == v.CANNOT_TELL
    assert v.combine([c], "kl") == (v.CANNOT_TELL, "no kl reading")


def test_every_surface_reads_one_text_with_the_floor() -> None:
    rec = {"judged": True, "verdict": v.FAILS, "reason": "KL 0.0148 above the line",
           "floor": {"kl_mean": 0.0005, "conditions": "same boot"}}
    assert v.verdict_text(rec) == ("fails: KL 0.0148 above the line; floor KL 0.0005 (the "
                                   "defaults against themselves, same boot)")
    assert v.verdict_text({**rec, "floor": None}).endswith("floor: not measured")
    old = {"judged": True, "exact_match": 0.3125, "logprob_drop": 0.051}
    assert v.verdict_text(old, failed=True) == ("fails (earlier guard): 31% exact, log-prob "
                                                "drop 0.051")
    assert v.verdict_text({"judged": False, "why": "dummy"}) == "not judged: dummy"
    m = v.quality_metrics({"kl": {"kl_mean": [0.01, 0.005, 0.02]}, "verdict": v.CANNOT_TELL,
                           "floor": {"kl_mean": 0.001, "conditions": "x"}, "seconds": 12.5})
    assert m == {"quality_kl_mean": 0.01, "quality_kl_mean_low": 0.005,
                 "quality_kl_mean_high": 0.02, "quality_floor_kl_mean": 0.001,
                 "quality_seconds": 12.5, "quality_verdict": 0.5}
