"""Same-machine A/B of one boot, started directly against forked from the preloaded vLLM
(autotune.server.forkserver), on a study's warm cache root: seconds to /health, one JSON line
a boot. python3 -m lab.gpu.boot_ab CACHE_ROOT OUT_DIR ORDER (e.g. direct,fork,direct,fork)"""

import json
import os
import sys
import time
from pathlib import Path

from autotune.api.parts import (
    BOOT_ENV,
    ServerProcess,
    cache_env,
    fork_server,
    free_port,
    stop_fork_servers,
)

cache, out, order = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
exe = ["/root/site/bin/vllm"]
env = {**cache_env(cache), **BOOT_ENV, **os.environ, "VLLM_CACHE_ROOT": str(cache)}
argv = [*exe, "serve", "/root/w/qwen3-8b-dummy", "--load-format", "dummy"]
out.mkdir(parents=True, exist_ok=True)
t = time.monotonic()
fs = fork_server(exe, env, out / "forkserver.log")  # its imports before the first timed boot
assert not isinstance(fs, str), fs
fs.wait_ready(time.monotonic() + 600)
print(json.dumps({"forkserver_ready_s": round(time.monotonic() - t, 1)}), flush=True)
for i, mode in enumerate(order):
    p = ServerProcess(argv, log_path=out / f"{i}-{mode}.log", port=free_port(), env=env,
                      preload=exe if mode == "fork" else None, preload_log=out / "forkserver.log")
    p.start()
    try:
        s = p.wait_healthy(600)
    finally:
        p.stop()
    print(json.dumps({"boot": i, "mode": mode, "launch": p.launch, "boot_s": round(s, 1)}),
          flush=True)
stop_fork_servers()
