from autotune.server.command import flag_name, param_name, params_to_args, serve_argv, shell_join


def test_flag_roundtrip() -> None:
    assert flag_name("max_num_seqs") == "--max-num-seqs"
    assert param_name("--max-num-seqs") == "max_num_seqs"


def test_params_to_args_types() -> None:
    args = params_to_args(
        {
            "max_num_seqs": 256,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": False,
            "quantization": None,
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
        }
    )
    assert args == [
        "--max-num-seqs", "256",
        "--enable-chunked-prefill",
        "--no-enable-prefix-caching",
        "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}',
    ]


def test_serve_argv_and_shell_join() -> None:
    argv = serve_argv(["vllm"], "/m dir", {"kv_cache_dtype": "fp8"}, ["--enforce-eager"])
    assert argv == ["vllm", "serve", "/m dir", "--kv-cache-dtype", "fp8", "--enforce-eager"]
    assert shell_join(argv) == "vllm serve '/m dir' --kv-cache-dtype fp8 --enforce-eager"
