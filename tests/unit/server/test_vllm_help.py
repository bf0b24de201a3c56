import pytest

from autotune.errors import ConfigError
from autotune.server.vllm_help import check_flags, parse_help

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
