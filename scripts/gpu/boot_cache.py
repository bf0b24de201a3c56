"""On the GPU machine: which caches make a boot cheap, and do they travel with the cache root?

Boots vLLM (the Qwen3-8B-shaped dummy model) through autotune's own runner, so the server gets
autotune's environment (every JIT cache under one root, `runner.cache_env`), and records per
boot: seconds to /health, vLLM's own timing lines, and the size of each cache folder after it.

    python3 scripts/gpu/boot_cache.py OUT_DIR STEP...

A STEP is LABEL:CONFIG:MACHINE: CONFIG `a` (vLLM's defaults) or `b` (a 4096-token batch
budget: another torch.compile range); MACHINE `keep`, or `wipe` (remove the machine's own
caches first, outside the cache root: ~/.cache, ~/.triton, ~/.nv, /tmp/torchinductor_*, as on
a new machine that got only the study's cache root), or `fresh` (also remove the cache root).
Each boot's result is written to OUT_DIR as it lands (boots.json), with its server log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from autotune.config.study import ServerConfig
from autotune.measure.runner import booted, cache_env

MODEL = "/root/w/qwen3-8b-dummy"
ROOT = Path("/root/w/boot-cache")
CACHE = ROOT / "cache-root"
CONFIGS = {"a": {}, "b": {"max_num_batched_tokens": 4096}}
HOME = Path.home()
TIMING = re.compile(r"(took|takes|finished in|in total)[^\n]*?\d+(\.\d+)?\s*(s\b|secs?|seconds)",
                    re.I)


def du(p: Path) -> int:
    if not p.exists():
        return 0
    out = subprocess.run(["du", "-sb", str(p)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout else 0


def sizes() -> dict[str, int]:
    here = {f"root/{k}": du(Path(v)) for k, v in cache_env(CACHE).items()}
    here["root/torch_compile_cache"] = du(CACHE / "torch_compile_cache")
    here["root/all"] = du(CACHE)
    for p in [HOME / ".cache", HOME / ".triton", HOME / ".nv",
              *Path("/tmp").glob("torchinductor_*")]:
        here[str(p)] = du(p)
    return here


def wipe(paths: list[Path]) -> None:
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    done: list[dict[str, object]] = []
    for step in sys.argv[2:]:
        label, config, machine = step.split(":")
        if machine in ("wipe", "fresh"):
            # keep what the interpreter itself needs (pip's cache is not a boot's)
            wipe([p for p in [HOME / ".triton", HOME / ".nv",
                              *Path("/tmp").glob("torchinductor_*")]]
                 + [p for p in (HOME / ".cache").glob("*") if p.name != "pip"])
        if machine == "fresh":
            wipe([CACHE])
        work = ROOT / label
        wipe([work])
        work.mkdir(parents=True)
        server = ServerConfig(model=MODEL, args={"load_format": "dummy"}, boot_timeout_s=1200,
                              cache_root=str(CACHE))
        t0 = time.monotonic()
        rec: dict[str, object] = {"label": label, "config": CONFIGS[config], "machine": machine}
        try:
            with booted(server, CONFIGS[config], work, lambda p: None) as proc:
                assert proc.started_at is not None and proc.healthy_at is not None
                rec["boot_s"] = round(proc.healthy_at - proc.started_at, 1)
        except Exception as e:  # a failed boot is a result too: its cause, then the next step
            rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        rec["wall_s"] = round(time.monotonic() - t0, 1)
        log = work / "server.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        rec["vllm_timing_lines"] = [ln.split("] ", 1)[-1][:300] for ln in text.splitlines()
                                    if TIMING.search(ln)]
        rec["cache_bytes_after"] = sizes()
        done.append(rec)
        if log.exists():
            shutil.copy(log, out / f"{label}.server.log")
        (out / "boots.json").write_text(json.dumps(done, indent=2) + "\n")
        print(json.dumps({k: rec[k] for k in ("label", "boot_s", "wall_s") if k in rec}),
              flush=True)
    os.sync()


if __name__ == "__main__":
    main()
