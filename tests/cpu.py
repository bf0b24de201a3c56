"""How the tests run vLLM on CPU: the flags every test server gets, and a config that vLLM
refuses on every CPU (whether or not it accepts fp8 KV, which depends on the CPU)."""

# vLLM-CPU reads --gpu-memory-utilization as the fraction of the NUMA node's memory it reserves,
# and refuses to boot when less than that is available at start (its default, 0.92, failed on a
# 12.2 GiB node with 10.6 GiB available after the tests had warmed the page cache). The KV cache
# itself is sized by VLLM_CPU_KVCACHE_SPACE (1 GiB, ServerConfig's default env), so this value
# only sets what must be free at boot: 30% leaves room for the other servers and processes of
# a test run on a 24 GiB machine.
CPU_MEMORY_FRACTION = 0.3
CPU_BASE = {"load_format": "dummy", "enforce_eager": True,
            "gpu_memory_utilization": CPU_MEMORY_FRACTION}
CPU_ARGS = {**CPU_BASE, "max_model_len": 4096}
# vLLM's switch for its worker process (tests/integration/conftest.py: off for every server the
# tests start but those whose processes a fault test strikes)
V1_MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
# the same as `vllm serve` flags, for the CLI tests
CPU_ARGV = ["--load-format", "dummy", "--enforce-eager",
            "--gpu-memory-utilization", str(CPU_MEMORY_FRACTION)]
# A config that vLLM refuses on every platform, during its argument validation (before any
# model is loaded): a token budget below max_model_len with chunked prefill off.
INFEASIBLE = {"max_model_len": 512, "max_num_batched_tokens": 256,
              "enable_chunked_prefill": False}
INFEASIBLE_CAUSE = "max_num_batched_tokens (256) is smaller than max_model_len (512)"


def refusing_fp8_env() -> dict[str, str]:
    """Environment under which vLLM-CPU answers as a CPU without AVX-512 and AMX does: it
    refuses an fp8 KV cache (tests/no_avx512/sitecustomize.py)."""
    import os
    from pathlib import Path

    hook = str(Path(__file__).resolve().parent / "no_avx512")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (hook, os.environ.get("PYTHONPATH", "")) if p)}


# vLLM-CPU's message on such a CPU (vllm/v1/attention/backends/cpu_attn.py)
REFUSED_FP8_CAUSE = "FP8 KV cache on CPU requires x86 with AVX-512 or AMX"
