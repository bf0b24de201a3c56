"""What autotune knows about `vllm serve` flags, in one table (docs/flags.md: adding a flag to
the search). A flag searched or set that is not here is an ordinary one: vLLM's own help says
whether this vLLM has it and what its values may be (server/vllm_help.py, the preflight), and it
changes nothing but speed. A flag here says which of autotune's rules it takes part in:

- `changes_outputs`: its value can change what the model says (weights' or KV cache's
  precision, the compute dtype, overrides of the model's config): the quality guard judges a
  config that sets it (tuning/quality.py);
- `lossless`: it changes outputs only by rounding (speculative decoding: exact in exact
  arithmetic): the guard judges it by a bug check, not by the quality budget;
- `gpus`: its value multiplies the GPUs one server uses (the parallel sizes): the layout check,
  the workers' GPU groups and the sizing read it (config/study.py gpus_per_replica);
- `refusals`: the rules of server/refusals.py that can refuse a config setting it without a
  boot (each restates vLLM's own check, tested against a real boot);
- `runtime`: set per request rather than at boot (none yet: every flag here is a boot flag).

Names are `vllm serve`'s flags in snake_case, as search spaces and `server.args` write them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """What autotune knows about one flag (the module docstring says what each field does)."""

    why: str
    changes_outputs: bool = False
    lossless: bool = False
    gpus: bool = False
    refusals: tuple[str, ...] = ()
    runtime: bool = False


FLAGS: dict[str, Flag] = {
    "quantization": Flag("the weights' precision (fp8: 8-bit weights)", changes_outputs=True),
    "kv_cache_dtype": Flag("the KV cache's precision (fp8)", changes_outputs=True),
    "dtype": Flag("the compute dtype (bfloat16, float16, float32)", changes_outputs=True),
    "calculate_kv_scales": Flag("fp8 KV scales computed from the data", changes_outputs=True),
    "hf_overrides": Flag("overrides of the model's own config", changes_outputs=True),
    "override_generation_config": Flag("the model's sampling defaults overridden",
                                       changes_outputs=True),
    "tokenizer_mode": Flag("another tokenizer implementation", changes_outputs=True),
    "speculative_config": Flag(
        "speculative decoding (n-gram, a draft model): lossless in exact arithmetic, not in "
        "bf16", changes_outputs=True, lossless=True),
    "tensor_parallel_size": Flag("GPUs a layer is split over", gpus=True),
    "pipeline_parallel_size": Flag("GPUs the layers are staged over", gpus=True),
    "data_parallel_size": Flag("engine replicas, a GPU group each", gpus=True),
    "max_num_batched_tokens": Flag(
        "tokens an engine step takes (with chunked prefill off, below max_model_len is "
        "refused)", refusals=("budget_below_model_len",)),
    "enable_chunked_prefill": Flag("long prompts prefilled in chunks",
                                   refusals=("budget_below_model_len",)),
    "max_model_len": Flag("the longest request a server takes",
                          refusals=("budget_below_model_len",)),
}

OUTPUT_FLAGS = tuple(n for n, f in FLAGS.items() if f.changes_outputs)
LOSSLESS_FLAGS = tuple(n for n, f in FLAGS.items() if f.lossless)
PARALLEL_FLAGS = tuple(n for n, f in FLAGS.items() if f.gpus)
