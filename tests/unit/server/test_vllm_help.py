from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.server import vllm_kinds
from autotune.server.vllm_help import VllmInfo, check_flags, get_vllm_info, parse_help
from autotune.server.vllm_kinds import interpreter, wrong_type

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
    ("int", 512, None), ("int", "512", None), ("int", None, None),
    ("int", "many", "takes a whole number, not 'many'"), ("int", 4.5, "takes a whole number"),
    # rendered "256.0", which vLLM's int() refuses; sizes only where vLLM parses them
    ("int", 256.0, "takes a whole number"), ("int", "32k", "takes a whole number"),
    ("size", "32k", None), ("size", "2M", None), ("size", "25.6k", None), ("size", 8192, None),
    ("size", "1.5K", "or a size such as 32k"), ("int", True, "takes a number, not True"),
    ("float", "0.9", None), ("float", 0.9, None), ("float", 1, None),
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
    script.write_text("#!/usr/bin/env -S PYTHONPATH=/x python3 -u\n")
    assert interpreter([str(script)]) == "python3"
    script.write_text("#!/bin/sh\nexec vllm \"$@\"\n")
    assert interpreter([str(script)]) is None
    assert interpreter(["/usr/bin/python3", "-m", "vllm"]) == "/usr/bin/python3"


def test_cached_info_keeps_the_kinds() -> None:
    info = VllmInfo("0.32.0", frozenset({"max_num_seqs"}), {}, {"max_num_seqs": "int"})
    assert VllmInfo.from_json(info.to_json()) == info
    old = {"version": "0.26.0", "flags": ["max_num_seqs"], "choices": {}}  # before the kinds
    assert VllmInfo.from_json(old).kinds == {}


def fake_vllm(tmp_path: Path, probe: str) -> list[str]:
    """A console script whose "Python" is a shell script: run as the script's interpreter it
    answers the version and the help like vLLM; asked to run the kinds probe (`-c ...`), it runs
    `probe` (shell)."""
    py = tmp_path / "python3"
    py.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then {probe}; exit $?; fi\n'
                  "case \"$*\" in *--version*) echo 0.0.test;; "
                  "*) printf '  --max-num-seqs N\\n';; esac\n")
    py.chmod(0o755)
    exe = tmp_path / "vllm"
    exe.write_text(f"#!{py}\n")  # a console script: its shebang names the interpreter
    exe.chmod(0o755)
    return [str(exe)]


@pytest.mark.parametrize(("probe", "kinds", "cached"), [
    ('echo \'KINDS {"--max-num-seqs": "int"}\'', {"max_num_seqs": "int"}, True),
    ("exit 1", {}, True),  # another layout of vLLM: unchecked, and kept (it will not change)
    ("sleep 5", {}, False),  # no answer in time: unchecked this once, asked again next time
], ids=["read", "parser-not-built", "no-answer"])
def test_the_kinds_probe_beside_the_help(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         probe: str, kinds: dict[str, str], cached: bool) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(vllm_kinds, "PROBE_TIMEOUT_S", 0.5)
    exe = fake_vllm(tmp_path, probe)
    if kinds:
        info = get_vllm_info(exe)
    else:
        with pytest.warns(UserWarning, match="option types could not be read"):
            info = get_vllm_info(exe)
    assert info.version == "0.0.test" and "max_num_seqs" in info.flags
    assert info.kinds == kinds
    assert bool(list((tmp_path / "cache").rglob("*.json"))) is cached
