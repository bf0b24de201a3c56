"""The quality guard's settings (`quality:` in a study file; docs/quality.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autotune.config import flags
from autotune.config.base import StrictModel

QUALITY_OK = "quality_ok"  # the guard's Optuna constraint: > 0 when a trial fails it
# the flags whose value can change what the model says: the flag registry's (config/flags.py)
OUTPUT_FLAGS = flags.OUTPUT_FLAGS


class QualityConfig(StrictModel):
    """Compare each output-changing config's greedy outputs with vLLM's defaults' on a fixed
    prompt set drawn from the study's workload; a config that drifts beyond the thresholds is
    infeasible, with the measured figures as its cause."""

    when: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: on a model with real weights (not --load-format dummy), "
        "for each trial whose flags can change outputs (OUTPUT_FLAGS); always: every trial; "
        "never: off.")
    prompts: int = Field(16, ge=1, description="Prompts of the fixed set (the study's first "
                         "requests).")
    max_tokens: int = Field(32, ge=1, description="Greedy tokens generated per prompt.")
    min_exact_match: float = Field(
        0.5, ge=0, le=1, description="Least share of prompts whose greedy completion equals "
        "the defaults' token for token.")
    max_logprob_drop: float = Field(
        0.1, ge=0, description="Most drop, in nats per token, of the mean log-probability the "
        "config gives the defaults' completions (0: it agrees with them exactly).")
