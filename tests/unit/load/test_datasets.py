import re
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.load.datasets import (
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


# -- a user's own requests, shared prefixes, spread lengths (issue 18) ---------------------------

def _jsonl(tmp_path: Path, *lines: str) -> str:
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_dataset_lines_are_read_counted_and_dropped_when_too_long(tmp_path: Path,
                                                                   tiny_model: Path) -> None:
    from autotune.load.datasets import load_tokenizer
    from autotune.load.user_dataset import read_dataset

    tok = load_tokenizer(str(tiny_model))
    path = _jsonl(tmp_path, '{"prompt": "hello there", "output_tokens": 5}', "",
                  '{"messages": [{"role": "user", "content": "hi"}]}',
                  '{"prompt": "' + "word " * 400 + '"}')
    ds = read_dataset(path, "chat", tok, str(tiny_model), 7, max_len=200)
    assert ds.lines == 3 and ds.dropped == 1 and len(ds.requests) == 2
    assert [r.output_len for r in ds.requests] == [5, 7]
    assert isinstance(ds.requests[1].prompt, list)
    assert "1 dropped before the first boot (prompt + output longer than 200 tokens" in \
        ds.note(path)
    # completions: text encoded with the tokenizer's special tokens, as the server does
    one = read_dataset(_jsonl(tmp_path, '{"prompt": "hello there"}'), "completions", tok,
                       str(tiny_model), 7, None)
    assert one.requests[0].prompt_len == len(tok.encode("hello there").ids)


@pytest.mark.parametrize("line, endpoint, expect", [
    ("{not json", "completions", "line 1: not JSON"),
    ('{"text": "x"}', "completions", 'line 1: neither "prompt" nor "messages"'),
    ('{"messages": [{"role": "user", "content": "x"}]}', "completions",
     "line 1: chat messages need the chat endpoint; set profile.endpoint: chat"),
    ('{"prompt": "x", "output_tokens": 0}', "completions", "line 1: output_tokens: 0"),
    ('{"messages": [{"content": "x"}]}', "chat", "line 1: messages: a list of"),
    ('{"prompt": "x", "temperature": 0.7}', "completions",
     "line 1: unknown key 'temperature': a line holds \"prompt\" or \"messages\""),
    ('{"prompt": "a\tb\u0001\x01"}', "completions",
     "line 1: not JSON (Invalid control character at column"),
])
def test_bad_dataset_lines_name_the_line(tmp_path: Path, tiny_model: Path, line: str,
                                         endpoint: str, expect: str) -> None:
    from autotune.errors import ConfigError
    from autotune.load.datasets import load_tokenizer
    from autotune.load.user_dataset import read_dataset

    with pytest.raises(ConfigError, match=re.escape(f"profile.path: {tmp_path}/r.jsonl, {expect}")):
        read_dataset(_jsonl(tmp_path, line), endpoint, load_tokenizer(str(tiny_model)),
                     str(tiny_model), 8, None)


def test_a_line_cut_short_is_placed_at_its_end_not_on_the_next_line(
        tmp_path: Path, tiny_model: Path) -> None:
    """Issue 70, item 8: a line cut short was reported at "column 1" (json read the line with
    its newline and placed the error at the start of the next line); it is now placed where
    the line ends, with Unix and Windows line ends alike."""
    from autotune.errors import ConfigError
    from autotune.load.datasets import load_tokenizer
    from autotune.load.user_dataset import read_dataset

    tok = load_tokenizer(str(tiny_model))
    for end in ("\n", "\r\n"):
        p = tmp_path / "cut.jsonl"
        p.write_text(end.join(['{"prompt": "hi"}', '{"prompt": "hello"', '{"prompt": "x"}'])
                     + end, newline="")
        with pytest.raises(ConfigError) as e:
            read_dataset(str(p), "completions", tok, str(tiny_model), 8, None)
        assert str(e.value).endswith("line 2: not JSON (Expecting ',' delimiter at column 19)")


def test_a_dataset_with_a_byte_order_mark_reads_as_without(tmp_path: Path,
                                                            tiny_model: Path) -> None:
    from autotune.load.datasets import load_tokenizer
    from autotune.load.user_dataset import read_dataset

    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + b'{"prompt": "hello there"}\n')
    ds = read_dataset(str(p), "completions", load_tokenizer(str(tiny_model)), str(tiny_model),
                      8, None)
    assert ds.lines == 1 and ds.requests[0].prompt == "hello there"


def test_dataset_sampling_in_order_and_at_random() -> None:
    from autotune.load.record import Request
    from autotune.load.user_dataset import Dataset, sample_dataset

    ds = Dataset([Request(f"p{i}", 1, 1) for i in range(5)], 5, 0, None)
    assert [r.prompt for r in sample_dataset(ds, 7, "order", 0)] == \
        ["p0", "p1", "p2", "p3", "p4", "p0", "p1"]
    a = sample_dataset(ds, 3, "random", 1)
    assert a == sample_dataset(ds, 3, "random", 1) and len({r.prompt for r in a}) == 3


def test_shared_prefixes_and_spread_lengths(tiny_model: Path) -> None:
    from autotune.load.datasets import load_tokenizer, sample_random

    tok = load_tokenizer(str(tiny_model))
    reqs = sample_random(tok, 40, 100, 50, seed=3, prefix_len=32, num_prefixes=2,
                         range_ratio=0.5)
    assert reqs == sample_random(tok, 40, 100, 50, seed=3, prefix_len=32, num_prefixes=2,
                                 range_ratio=0.5)
    heads = [tuple(r.prompt[:32]) for r in reqs]  # type: ignore[index]
    assert len(set(heads)) == 2 and heads[0] == heads[2] != heads[1]
    ins = [r.prompt_len - 32 for r in reqs]
    outs = [r.output_len for r in reqs]
    assert min(ins) >= 50 and max(ins) <= 150 and len(set(ins)) > 10
    assert min(outs) >= 25 and max(outs) <= 75 and len(set(outs)) > 10
    plain = sample_random(tok, 3, 100, 50, seed=3)
    assert {r.prompt_len for r in plain} == {100} and {r.output_len for r in plain} == {50}


@pytest.mark.parametrize("profile, expect", [
    ({"name": "dataset"}, "path: the dataset profile needs a JSONL file"),
    ({"name": "random", "path": "x.jsonl"}, "path: only the dataset and trace profiles read a file"),
    ({"name": "sharegpt", "prefix_len": 8}, "prefix_len: shapes random prompts"),
    ({"name": "random", "num_prefixes": 4}, "num_prefixes: set prefix_len too"),
    ({"name": "random", "range_ratio": 1.0}, "range_ratio"),
    ({"name": "trace"}, "path: the trace profile needs a JSONL or CSV file"),
    ({"name": "random", "speedup": 2}, "speedup: shapes the replay of a trace (name: trace)"),
    ({"name": "sharegpt", "time_unit": "ms"}, "time_unit: shapes the replay of a trace"),
    ({"name": "trace", "path": "t.jsonl", "request_rate": 2},
     "request_rate: a trace's requests arrive on its own timeline"),
    ({"name": "trace", "path": "t.jsonl", "endpoint": "chat"}, "endpoint: chat needs text"),
])
def test_workload_config_errors(profile: dict, expect: str) -> None:
    from pydantic import ValidationError

    from autotune.config.workload import ProfileConfig

    with pytest.raises(ValidationError, match=re.escape(expect)):
        ProfileConfig.model_validate(profile)


def test_required_model_len_counts_prefix_and_spread() -> None:
    from autotune.config.workload import ProfileConfig

    p = ProfileConfig(name="random", input_len=100, output_len=50, prefix_len=200,
                      range_ratio=0.5)
    assert p.required_model_len() == 200 + 150 + 75


def test_a_jsonl_over_the_spaces_fixed_max_model_len_is_dropped_and_counted(
        tmp_path: Path, tiny_model: Path) -> None:
    """The CPU demo's space fixes max_model_len: 512 while the model allows 8192: a JSONL
    request longer than 512 tokens was kept, the server answered HTTP 400 and the study ended
    with an empty front and no word why. The limit is now the space's, named as the source,
    and the long request never reaches a server."""
    from autotune.load.datasets import study_requests
    from autotune.tuning.preflight import check_dataset, request_limit
    from autotune.tuning.search_space import SearchSpace
    from tests.fakes import study_cfg

    path = _jsonl(tmp_path, '{"prompt": "hello there", "output_tokens": 5}',
                  '{"prompt": "' + "word " * 700 + '", "output_tokens": 5}')
    cfg = study_cfg(tmp_path, server={"model": str(tiny_model), "executable": ["vllm"]},
                    profile={"name": "dataset", "path": path, "num_prompts": 4})
    space = SearchSpace.model_validate({
        "name": "s", "fixed": {"max_model_len": 512},
        "parameters": {"max_num_seqs": {"type": "int", "low": 1, "high": 4}}})
    limit, source = request_limit(cfg, space)
    assert (limit, source) == (512, "search space 's': fixed: max_model_len")
    note = check_dataset(cfg, limit, source)
    assert note is not None and "1 dropped before the first boot" in note and source in note
    assert all(r.prompt_len + r.output_len <= 512 for r in study_requests(cfg, limit))
    # every request too long: one error naming the limit's source and the fix
    only_long = _jsonl(tmp_path, '{"prompt": "' + "word " * 700 + '"}')
    cfg = study_cfg(tmp_path, server={"model": str(tiny_model), "executable": ["vllm"]},
                    profile={"name": "dataset", "path": only_long, "num_prompts": 4})
    with pytest.raises(ConfigError, match="fixed: max_model_len.*raise that limit"):
        check_dataset(cfg, limit, source)


@pytest.mark.parametrize("axis, profile, expect", [
    ("speedup", {"name": "random"}, "capacity.axis: speedup compresses a trace's timeline; it "
     "needs the trace profile"),
    ("rate", {"name": "trace", "path": "t.jsonl"}, "capacity.axis: a trace's load is its own "
     "timeline; use axis: speedup"),
    ("speedup", {"name": "trace", "path": "t.jsonl", "speedup": 2},
     "capacity.axis: speedup sets it per point; remove profile.speedup"),
])
def test_the_speedup_axis_goes_with_a_trace(axis: str, profile: dict, expect: str) -> None:
    from autotune.config.capacity import CapacityConfig
    from autotune.config.workload import ProfileConfig, SLOConfig

    cap = CapacityConfig(axis=axis)  # type: ignore[arg-type]
    slo = SLOConfig(metric="p99_ttft_ms", max=1000)
    with pytest.raises(ValueError, match=re.escape(expect)):
        cap.check(ProfileConfig.model_validate(profile), [slo])
    if axis == "speedup":  # with a trace it passes
        cap.check(ProfileConfig(name="trace", path="t.jsonl", time_unit="ms"), [slo])
