#!/usr/bin/env bash
# On a GPU machine after the chunk calls of lab/gpu/prepare.sh (lab/GPU-MACHINES.md):
# install the wheels, then read vLLM's help and its option types as a study's preflight does
# (autotune/server/vllm_help.py with server/vllm_kinds.py), time it, and check a few values.
# Writes kinds.json and kinds.txt into $OUT.
set -uo pipefail
bash lab/gpu/install_wheels.sh --upgrade || exit 1
export PYTHONPATH=/root/site:$PWD PATH=/root/site/bin:$PATH AUTOTUNE_CACHE_DIR=/root/kinds-cache
python3 - <<'PY' 2>&1 | tee "$OUT/kinds.txt"
import json, os, time
from autotune.api import ConfigError
from autotune.api.parts import check_flags, vllm_info
t = time.time()
info = vllm_info(["/root/site/bin/vllm"])
took = time.time() - t
print("vLLM", info.version, "help + kinds in", round(took, 1), "s;", len(info.flags), "flags,",
      len(info.kinds), "kinds")
keys = ["max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "enforce_eager",
        "tensor_parallel_size", "api_server_count", "max_model_len", "kv_cache_dtype"]
print({k: info.kinds.get(k) for k in keys})
bad = {"max_num_seqs": ["many"], "max_num_batched_tokens": ["32k", "lots"],
       "enforce_eager": ["yes"], "tensor_parallel_size": [2]}
try:
    check_flags(info, bad, "server.args")
    print("NOT REFUSED")
except ConfigError as e:
    print("refused:\n" + str(e))
json.dump({"version": info.version, "seconds": round(took, 1), "kinds": info.kinds},
          open(os.path.join(os.environ["OUT"], "kinds.json"), "w"), indent=1)
PY
