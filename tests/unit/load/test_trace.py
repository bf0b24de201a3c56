"""Reading a trace: the schema, and one error naming the line and field for each malformed
input (the cases docs/results/trace/summary.json lists from the real CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.load.trace import read_trace


@pytest.fixture(scope="module")
def tok(tiny_model: Path) -> Any:
    from autotune.load.datasets import load_tokenizer

    return load_tokenizer(str(tiny_model))


def write(tmp_path: Path, lines: list[Any], name: str = "t.jsonl") -> str:
    p = tmp_path / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(p)


def test_mooncake_lines_in_ms_rebased_with_their_blocks(tmp_path: Path, tok: Any) -> None:
    path = write(tmp_path, [
        {"timestamp": 27482, "input_length": 1000, "output_length": 20, "hash_ids": [0, 1]},
        {"timestamp": 27732, "input_length": 600, "output_length": 10, "hash_ids": [0, 2]},
        {"timestamp": 29482, "prompt": "Hello there, how are you?", "output_length": 5},
    ])
    t = read_trace(path, "ms", 512, tok, 4096)
    assert [e.at_s for e in t.entries] == pytest.approx([0.0, 0.25, 2.0])
    assert [e.hash_ids for e in t.entries] == [(0, 1), (0, 2), ()]
    assert t.entries[2].text is not None and t.entries[2].input_len == len(
        tok.encode("Hello there, how are you?", add_special_tokens=True).ids)
    assert t.span_s == pytest.approx(2.0) and t.rate == pytest.approx(1.0)
    assert t.has_text and "3 requests over 2.0 s (1 req/s recorded), 3 kept" in t.note()
    assert "1 of 4 prompt blocks repeat an earlier one" in t.note()


def test_csv_iso_dates_out_of_order_and_too_long(tmp_path: Path, tok: Any) -> None:
    p = tmp_path / "t.csv"
    p.write_text("timestamp,input_length,output_length,hash_ids\n"
                 "2024-05-01T12:00:01.500Z,100,10,3 4\n"
                 "2024-05-01T12:00:00Z,100,10,3 5\n"
                 "2024-05-01T12:00:03Z,5000,10,\n")
    t = read_trace(str(p), "s", 64, tok, 4096)
    assert [e.at_s for e in t.entries] == [0.0, 1.5]
    assert [e.line for e in t.entries] == [3, 2]  # sorted by arrival, lines kept
    assert t.reordered == 1 and t.dropped == 1
    assert "1 dropped (prompt + output longer than 4096" in t.note()
    assert "1 out of order (sorted by arrival)" in t.note()


def test_burstgpt_csv_reads_as_it_is(tmp_path: Path, tok: Any) -> None:
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n"
                 "45,ChatGPT,1087,0,1087,Conversation log\n"
                 "118,GPT-4,417,276,693,API log\n")
    t = read_trace(str(p), "s", 512, tok, None)
    assert [(e.at_s, e.input_len, e.output_len) for e in t.entries] == [(0, 472, 18),
                                                                         (113, 417, 276)]
    assert t.skipped == 1 and "1 skipped (no response tokens" in t.note()


BAD: list[tuple[list[Any], str]] = [
    (["{\"timestamp\": 1, "], "line 1: not JSON (Expecting property name enclosed in double "
                             "quotes at column"),
    ([[1, 2]], "line 1: not a request"),
    ([{"timestamp": 0, "input_length": 5, "output_length": 2},
      {"input_length": 5, "output_length": 2}], "line 2: timestamp: missing"),
    ([{"timestamp": "soon", "input_length": 5, "output_length": 2}],
     "line 1: timestamp: 'soon' is neither a number nor an ISO-8601 date-time"),
    ([{"timestamp": 0, "output_length": 2}], "line 1: give input_length or prompt"),
    ([{"timestamp": 0, "input_length": 5, "prompt": "x", "output_length": 2}],
     "line 1: input_length and prompt: give one"),
    ([{"timestamp": 0, "input_length": -3, "output_length": 2}],
     "line 1: input_length: -3 is not a token count (1 or more)"),
    ([{"timestamp": 0, "input_length": 5, "output_length": 0}],
     "line 1: output_length: 0 is not a token count (1 or more)"),
    ([{"timestamp": 0, "input_length": 1000, "output_length": 2, "hash_ids": [1]}],
     "line 1: hash_ids: 1 ids for input_length 1000, which fills 2 blocks of 512 tokens"),
    ([{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": "abc"}],
     "line 1: hash_ids: 'abc' is not a list of block ids"),
    ([{"timestamp": 0, "input_length": 5, "output_length": 2, "arrival": 3}],
     "line 1: unknown key 'arrival'"),
    ([{"timestamp": 0, "input_length": 5, "output_length": 2},
      {"timestamp": "2024-05-01T12:00:00", "input_length": 5, "output_length": 2}],
     "line 2: timestamp: numbers and date-times mixed"),
    ([{"timestamp": 0, "input_length": 5, "output_length": 2}], "1 request(s) left to replay"),
    ([{"timestamp": 3, "input_length": 5, "output_length": 2},
      {"timestamp": 3, "input_length": 5, "output_length": 2}],
     "every request arrives at the same time"),
    ([], "holds no request"),
]


@pytest.mark.parametrize(("lines", "expect"), BAD)
def test_a_malformed_trace_is_one_error_naming_line_and_field(
        tmp_path: Path, tok: Any, lines: list[Any], expect: str) -> None:
    with pytest.raises(ConfigError) as e:
        read_trace(write(tmp_path, lines), "s", 512, tok, 4096)
    assert expect in str(e.value) and str(e.value).startswith("profile.path: ")
    assert "\n" not in str(e.value)


def test_bad_csv_and_missing_file(tmp_path: Path, tok: Any) -> None:
    p = tmp_path / "t.csv"
    p.write_text("ts,input_length,output_length\n0,5,2\n")
    with pytest.raises(ConfigError, match="line 1: unknown column 'ts'"):
        read_trace(str(p), "s", 512, tok, None)
    p.write_text("timestamp,input_length,output_length\n0,5,2\n1,5,2,9\n")
    with pytest.raises(ConfigError, match="line 3: 4 cells, the header names 3"):
        read_trace(str(p), "s", 512, tok, None)
    with pytest.raises(ConfigError, match="does not exist"):
        read_trace(str(tmp_path / "none.jsonl"), "s", 512, tok, None)


def test_jsonl_is_told_by_its_first_request_not_its_name(tmp_path: Path, tok: Any) -> None:
    p = tmp_path / "trace.txt"
    p.write_text('\n\n{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
                 '{"timestamp": 1, "input_length": 5, "output_length": 2}\n')
    assert len(read_trace(str(p), "s", 512, tok, None).entries) == 2
