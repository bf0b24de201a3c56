from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.server.vllm_help import VllmInfo, check_flags, interpreter, parse_help, wrong_type

HELP = """\
options:
  --max-num-seqs MAX_NUM_SEQS
                        Maximum number of sequences.
  --enable-chunked-prefill, --no-enable-chunked-prefill
                        If True, prefill requests can be chunked.
  --kv-cache-dtype {auto,bfloat16,fp8,fp8_e4m3}
                        Data type for kv cache storage.
  --speculative-config SPECULATIVE_CONFIG, -sc SPECULATIVE_CONFIG
                        The configurations for speculative decoding.
  --performance-mode {balanced,interactivity,throughput}
                        Performance mode.
"""


def test_parse_help() -> None:
    info = parse_help(HELP, "0.32.0")
    assert {"max_num_seqs", "enable_chunked_prefill", "no_enable_chunked_prefill",
            "kv_cache_dtype", "speculative_config", "performance_mode"} <= info.flags
    assert info.choices["kv_cache_dtype"] == ("auto", "bfloat16", "fp8", "fp8_e4m3")


def test_check_flags_names_flag_and_choices() -> None:
    info = parse_help(HELP, "0.32.0")
    check_flags(info, {"max_num_seqs": None, "kv_cache_dtype": ["auto", "fp8"]}, "space")
    with pytest.raises(ConfigError) as ei:
        check_flags(info, {"max_num_sequences": None, "kv_cache_dtype": ["fp4"],
                           "performance_mode": ["turbo"]}, "space 'x'")
    msg = str(ei.value)
    assert "max_num_sequences: vLLM 0.32.0 has no flag --max-num-sequences" in msg
    assert "similar: max_num_seqs" in msg
    assert "kv_cache_dtype: vLLM 0.32.0 does not accept 'fp4'; accepted: auto, bfloat16" in msg
    assert "'turbo'" in msg and "balanced, interactivity, throughput" in msg


@pytest.mark.parametrize(("kind", "value", "why"), [
    ("int", 512, None), ("int", "512", None), ("int", "32k", None), ("int", None, None),
    ("int", "many", "takes a whole number, not 'many'"), ("int", 4.5, "takes a whole number"),
    ("int", True, "takes a number, not True"), ("float", "0.9", None), ("float", 0.9, None),
    ("float", "most", "takes a number, not 'most'"), ("bool", True, None), ("bool", False, None),
    ("bool", "yes", "takes true or false"), ("flag", True, None),
    ("flag", False, "has no --no- form"), (None, "anything", None),
], ids=lambda x: repr(x))
def test_wrong_type_says_what_vllm_would_refuse(kind: str | None, value: object,
                                                why: str | None) -> None:
    got = wrong_type(kind, value)
    assert got == why if why is None else (got is not None and why in got)


def test_check_flags_refuses_a_value_of_the_wrong_type() -> None:
    info = parse_help(HELP, "0.32.0")
    info = VllmInfo(info.version, info.flags, info.choices,
                    {"max_num_seqs": "int", "enable_chunked_prefill": "bool"})
    check_flags(info, {"max_num_seqs": [None, 256], "enable_chunked_prefill": [False]}, "space")
    with pytest.raises(ConfigError) as ei:
        check_flags(info, {"max_num_seqs": ["many"], "enable_chunked_prefill": ["on"]},
                    "server.args")
    msg = str(ei.value)
    assert "server.args: max_num_seqs: vLLM 0.32.0's --max-num-seqs takes a whole number, " \
           "not 'many'" in msg
    assert "enable_chunked_prefill" in msg and "takes true or false" in msg


def test_interpreter_of_a_console_script(tmp_path: Path) -> None:
    script = tmp_path / "vllm"
    script.write_text("#!/opt/venv/bin/python3.12\nimport sys\n")
    assert interpreter([str(script)]) == "/opt/venv/bin/python3.12"
    script.write_text("#!/usr/bin/env python3\n")
    assert interpreter([str(script)]) == "python3"
    script.write_text("#!/bin/sh\nexec vllm \"$@\"\n")
    assert interpreter([str(script)]) is None
    assert interpreter(["/usr/bin/python3", "-m", "vllm"]) == "/usr/bin/python3"


def test_cached_info_keeps_the_kinds() -> None:
    info = VllmInfo("0.32.0", frozenset({"max_num_seqs"}), {}, {"max_num_seqs": "int"})
    assert VllmInfo.from_json(info.to_json()) == info
    old = {"version": "0.26.0", "flags": ["max_num_seqs"], "choices": {}}  # before the kinds
    assert VllmInfo.from_json(old).kinds == {}
