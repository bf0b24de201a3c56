from autotune.datasets import (
    SHAREGPT_CONVERSATIONS,
    iter_sharegpt,
    requests_digest,
    sample_random,
    sample_sharegpt,
)


def test_sharegpt_streaming_recovers_all_conversations() -> None:
    assert sum(1 for _ in iter_sharegpt()) == SHAREGPT_CONVERSATIONS


def test_sharegpt_sampling_is_seeded_and_filtered(tiny_model) -> None:  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    a = sample_sharegpt(tok, 50, seed=0)
    b = sample_sharegpt(tok, 50, seed=0)
    c = sample_sharegpt(tok, 50, seed=1)
    assert requests_digest(a) == requests_digest(b) != requests_digest(c)
    for r in a:
        assert isinstance(r.prompt, str)
        assert 4 <= r.prompt_len <= 1024 and r.output_len >= 4
        assert r.prompt_len + r.output_len <= 2048
        assert len(tok.encode(r.prompt, add_special_tokens=False).ids) == r.prompt_len


def test_random_prompts_have_exact_lengths_without_special_ids(tiny_model) -> None:  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    reqs = sample_random(tok, 10, input_len=64, output_len=16, seed=3)
    specials = {tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}
    for r in reqs:
        assert isinstance(r.prompt, list) and len(r.prompt) == 64 and r.output_len == 16
        assert not specials & set(r.prompt)
