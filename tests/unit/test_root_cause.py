from autotune.server import free_port, port_is_free, root_cause

ENGINE_LOG = """\
INFO 11-22 10:00:01 [api_server.py:1] vLLM API server version 0.32.0
ERROR 11-22 10:00:09 [core.py:700] EngineCore failed to start.
ERROR 11-22 10:00:09 [core.py:700] Traceback (most recent call last):
ERROR 11-22 10:00:09 [core.py:700]   File "/x/core.py", line 12, in run
ERROR 11-22 10:00:09 [core.py:700] NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.
Traceback (most recent call last):
  File "/x/api_server.py", line 3, in <module>
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_engine_root_cause_skips_wrappers() -> None:
    assert root_cause(ENGINE_LOG) == (
        "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    )


def test_argparse_error_wins() -> None:
    log = "usage: vllm serve ...\nvllm serve: error: unrecognized arguments: --bogus\n"
    assert root_cause(log) == "vllm serve: error: unrecognized arguments: --bogus"


def test_qualified_exception_name_is_shortened() -> None:
    log = "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'x'\n"
    assert root_cause(log) == "HFValidationError: Repo id must be in the form 'x'"


def test_nothing_found() -> None:
    assert root_cause("INFO all good\n") is None


def test_free_port_is_free() -> None:
    assert port_is_free(free_port())


def test_pydantic_validation_error_takes_the_next_line() -> None:
    log = ("(APIServer pid=1872) pydantic_core._pydantic_core.ValidationError: 1 validation "
           "error for SchedulerConfig\n(APIServer pid=1872)   Value error, max_num_batched_tokens "
           "(2067) is smaller than max_model_len (8192). [type=value_error, input_value=x]\n")
    assert root_cause(log) == (
        "ValidationError: 1 validation error for SchedulerConfig: Value error, "
        "max_num_batched_tokens (2067) is smaller than max_model_len (8192).")
