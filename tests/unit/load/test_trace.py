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
    ([{"timestamp": 0, "input_length": 5, "output_len": 2}],
     "line 1: unknown key 'output_len': is it output_length?"),
    ([{"arrival": 3, "input_length": 5, "output_length": 2}],
     "line 1: timestamp: missing (every request needs its arrival and the tokens it generated) "
     "(its arrival is no field of a trace"),
    ([{"timestamp": 0, "input_length": 5, "prompt_tokens": 5, "output_length": 2}],
     "line 1: input_length and prompt_tokens both give input_length: keep one"),
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
    with pytest.raises(ConfigError, match="line 1: no timestamp column: the header names ts, "):
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


def epoch(tmp_path: Path, stamps: list[Any], name: str = "e.jsonl") -> str:
    """A trace of these arrivals (epoch seconds, or dates), every request alike."""
    return write(tmp_path, [{"timestamp": t, "input_length": 5, "output_length": 2}
                            for t in stamps], name)


@pytest.mark.parametrize(("stray", "said"), [
    (0, "line 40: timestamp 0 lies 1,715,000,000 s (54 years) before the trace's other 99 "
        "requests, which span 50 s with a median gap of 0.5 s"),
    (-1, "line 40: timestamp -1 lies 1,715,000,001 s (54 years) before"),
    (9_999_999_999, "line 40: timestamp 9999999999 lies 8,284,999,950 s (263 years) after"),
])
def test_a_stray_timestamp_is_refused_naming_its_line(tmp_path: Path, tok: Any, stray: float,
                                                      said: str) -> None:
    """Issue 84 item 11: a 0 (or -1) placeholder among epoch seconds was counted as "out of
    order" and put the other requests 1.7e9 s later: the replay waited until killed."""
    stamps: list[Any] = [1_715_000_000 + 0.5 * i for i in range(100)]
    stamps[39] = stray
    with pytest.raises(ConfigError) as e:
        read_trace(epoch(tmp_path, stamps), "s", 512, tok, 4096)
    assert said in str(e.value) and "remove the line or correct its timestamp" in str(e.value)
    assert str(e.value).startswith("profile.path: ") and "\n" not in str(e.value)


def test_stray_dates_are_named_together(tmp_path: Path, tok: Any) -> None:
    stamps: list[Any] = [f"2024-05-01T12:{i // 60:02d}:{i % 60:02d}" for i in range(100)]
    stamps[3] = stamps[70] = "1970-01-01T00:00:00"
    with pytest.raises(ConfigError, match=r"lines 4, 71: timestamps '1970-01-01T00:00:00', "
                       r"'1970-01-01T00:00:00' lie 1,714,564,800 s \(54 years\) before the "
                       r"trace's other 98 requests.*remove those lines"):
        read_trace(epoch(tmp_path, stamps), "s", 512, tok, 4096)


def test_a_lull_is_no_stray(tmp_path: Path, tok: Any) -> None:
    """A quiet night is a gap too, but not one that dwarfs everything else together: 50
    requests over an hour, five hours of nothing, 50 more; a few requests an hour apart."""
    night = [72.0 * i for i in range(50)] + [6 * 3600 + 72.0 * i for i in range(50)]
    assert read_trace(epoch(tmp_path, night), "s", 512, tok, 4096).span_s > 6 * 3600
    assert len(read_trace(epoch(tmp_path, [0, 1, 3600]), "s", 512, tok, 4096).entries) == 3


def test_azure_csv_reads_as_it_is(tmp_path: Path, tok: Any) -> None:
    """Issue 84 item 12: Azure's LLM inference trace was refused on its column names."""
    p = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,396,0\n"
                 "2023-11-16 18:15:51.4259370,879,109\n")
    t = read_trace(str(p), "s", 512, tok, 4096)
    assert [(e.input_len, e.output_len) for e in t.entries] == [(374, 44), (879, 109)]
    assert [e.at_s for e in t.entries] == pytest.approx([0.0, 4.745347])
    assert t.skipped == 1 and t.hint is None and not t.ignored


def test_openai_names_and_extra_keys_read(tmp_path: Path, tok: Any) -> None:
    """A gateway's log: OpenAI's usage names, an id and a model beside them (read past and
    named in the note); a failed request's 0 completion tokens is skipped, as BurstGPT's."""
    path = write(tmp_path, [
        {"timestamp": 1_715_000_000_000, "prompt_tokens": 40, "completion_tokens": 7,
         "model": "m", "request_id": "a"},
        {"timestamp": 1_715_000_000_400, "prompt_tokens": 50, "completion_tokens": 0,
         "model": "m", "request_id": "b"},
        {"timestamp": 1_715_000_001_000, "input_tokens": 30, "output_tokens": 9,
         "model": "m", "request_id": "c"}])
    t = read_trace(path, "ms", 512, tok, 4096)
    assert [(e.at_s, e.input_len, e.output_len) for e in t.entries] == [(0.0, 40, 7),
                                                                        (1.0, 30, 9)]
    assert t.ignored == ("model", "request_id") and t.skipped == 1
    assert "read past model, request_id (no field of a trace)" in t.note()


def test_a_rate_that_fits_the_other_unit_is_said(tmp_path: Path, tok: Any) -> None:
    """A Mooncake trace (ms) read without time_unit: ms became a 0.001 req/s trace, with no
    word; the note now says which unit fits, and the right unit reads without one."""
    path = write(tmp_path, [{"timestamp": 1000 * i, "input_length": 5, "output_length": 2,
                             "hash_ids": [i]} for i in range(20)])
    assert read_trace(path, "ms", 512, tok, 4096).hint is None
    t = read_trace(path, "s", 512, tok, 4096)
    assert t.hint is not None and "warning: 0.001 req/s recorded is a request every 1,000 s: " \
        "if its timestamps are milliseconds (Mooncake's are), set profile.time_unit: ms " \
        "(1 req/s)" in t.note()
    seconds = write(tmp_path, [{"timestamp": 0.5 * i, "input_length": 5, "output_length": 2}
                               for i in range(20)], "s.jsonl")
    fast = read_trace(seconds, "ms", 512, tok, 4096)
    assert fast.hint is not None and "remove profile.time_unit: ms (2 req/s)" in fast.hint


def test_a_point_of_hours_is_refused_before_any_boot() -> None:
    from autotune.config.capacity import CapacityConfig
    from autotune.config.workload import ProfileConfig
    from autotune.load.trace_checks import check_replay_time

    p = ProfileConfig(name="trace", path="m.jsonl")
    cap = CapacityConfig(axis="speedup", low=1, requests_per_point=200)
    with pytest.raises(ConfigError, match=r"^capacity.low: at 1x a load point replays 200 "
                       r"requests of m.jsonl at 0.001 req/s, 55.3 hours of arrivals; if its "
                       r"timestamps are ms, or raise capacity.low to 55.3 or more"):
        check_replay_time(0.001, "m.jsonl", "if its timestamps are ms", p, cap)
    check_replay_time(1.0, "m.jsonl", None, p, cap)  # 200 s a point
    with pytest.raises(ConfigError, match=r"^profile.speedup: at 1x .* 200 requests"):
        check_replay_time(0.01, "m.jsonl", None, p.model_copy(update={"num_prompts": 200}),
                          None)
