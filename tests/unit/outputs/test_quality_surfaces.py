"""The guard's verdict reads the same on every surface (the trial table, the report, MLflow's
tags, export), each from the trial's record, with the floor beside it."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from autotune.outputs.export import export
from autotune.outputs.report import quality_markdown
from autotune.outputs.tables import trials_table
from autotune.tuning.record import Status, TrialFacts, TrialRecord
from autotune.tuning.verdict import quality_tags, verdict_text
from tests.fakes import study_cfg, summary_of

FLOOR = {"kl_mean": 0.0005, "kl_p99": 0.004, "top1_agree": 0.995, "task_drop": None,
         "conditions": "same boot"}
KL = {"prompts": 48, "positions": 9000, "kl_mean": [0.0148, 0.0099, 0.0185],
      "kl_p99": [0.12, 0.1, 0.15], "top1_agree": [0.97, 0.96, 0.98],
      "ll_change": [-0.01, -0.02, 0.0], "ties": 0.03, "rest_mass": 0.05, "coverage": 0.95}
FAILED = {"judged": True, "why": "sets kv_cache_dtype", "verdict": "fails", "kl": KL,
          "reason": "KL 0.0148 [0.0099, 0.0185] nats/token over 48 texts (9000 tokens), "
                    "line 0.0055: above the line", "floor": FLOOR, "seconds": 21.5}
M = {"total_token_throughput": 9000.0, "mean_tpot_ms": 5.0}


def records() -> list[TrialRecord]:
    base = TrialRecord(0, Status.OK, TrialFacts(flags={}, flags_key="b", baseline=True,
                                                metrics=M, quality={
                                                    "judged": False, "floor": FLOOR,
                                                    "why": "vLLM's defaults: the reference "
                                                           "and the floor"}), {}, dict(M))
    cause = f"quality: {verdict_text(FAILED)}"
    fp8 = TrialRecord(1, Status.SLO_MISS, TrialFacts(
        flags={"kv_cache_dtype": "fp8"}, flags_key="k", metrics=M, quality=FAILED,
        cause=cause), {"kv_cache_dtype": "fp8"}, dict(M), {"quality_ok": 1.3})
    return [base, fp8]


def test_every_surface_shows_the_one_verdict_with_its_floor(tmp_path: Path) -> None:
    recs = records()
    said = verdict_text(FAILED, failed=True)
    assert said.startswith("fails: KL 0.0148 [0.0099, 0.0185]") and "floor KL 0.0005" in said
    cfg = study_cfg(tmp_path)
    out = Console(width=240, record=True)
    out.print(trials_table(summary_of(recs, tmp_path), cfg, width=240))
    table = " ".join(out.export_text().replace("│", " ").split())  # the cell, unwrapped
    assert "quality miss" in table and f"quality: {said}" in table
    assert "vLLM's defaults: the reference and the floor; floor KL 0.0005" in table
    md = "\n".join(quality_markdown(recs))
    assert "| 1 | fails | 0.0148 [0.0099, 0.0185] | 0.12 [0.1, 0.15] | 0.970 [0.960, 0.980] " \
        "| - | 0.0005 | 22 |" in md
    assert quality_tags(FAILED, True) == {"autotune.quality": said,
                                          "autotune.quality_verdict": "fails"}
    assert export(cfg, recs[1])["quality"] == {"verdict": "fails", "text": said}
