#!/usr/bin/env python3
"""Fidelity: autotune's load generator against `vllm bench serve`, on one server, one workload.

Boots one vLLM server (the tiny CPU model by default), then alternates rounds of
`vllm bench serve --dataset-name random` and autotune's `random` profile with the same lengths,
prompt count and concurrency, and prints both total token throughputs and mean TPOTs.

    python scripts/fidelity.py [--model DIR] [--rounds 3] [--input-len 256] [--output-len 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from autotune.bench import server_env
from autotune.command import serve_argv
from autotune.config import ServerConfig
from autotune.datasets import build_requests
from autotune.load import LoadSettings, run_load
from autotune.metrics import compute_metrics
from autotune.process import free_port
from autotune.profile import ProfileConfig
from autotune.server import ServerProcess
from autotune.tinymodel import make_tiny_model


def vllm_bench(exe: list[str], url: str, model: str, a: argparse.Namespace, out: Path) -> dict:
    argv = [*exe, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", model,
            "--tokenizer", model, "--dataset-name", "random",
            "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
            "--ignore-eos", "--num-prompts", str(a.num_prompts),
            "--max-concurrency", str(a.concurrency), "--num-warmups", str(a.warmup),
            "--seed", "0", "--disable-tqdm", "--save-result", "--result-dir", str(out.parent),
            "--result-filename", out.name]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra `vllm serve` argument (repeatable)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fidelity-"))
    model = a.model or str(make_tiny_model(work / "tiny"))
    args = {"load_format": "dummy"} if not a.server_arg else {}
    if not a.server_arg:
        args["enforce_eager"] = True
    server = ServerConfig(model=model, args=args, extra_args=a.server_arg)
    argv = serve_argv(server.executable, model, server.args, server.extra_args)
    profile = ProfileConfig(name="random", input_len=a.input_len, output_len=a.output_len,
                            num_prompts=a.num_prompts, max_concurrency=a.concurrency,
                            warmup=a.warmup)
    reqs = build_requests(profile, model)
    reqs, warm = reqs[: a.num_prompts], reqs[a.num_prompts :]
    settings = LoadSettings(max_concurrency=a.concurrency, warmup=a.warmup)
    rows = []
    with ServerProcess(argv, log_path=work / "server.log", port=free_port(),
                       env=server_env(server, work / "srv")) as proc:
        proc.wait_healthy(server.boot_timeout_s)
        for r in range(a.rounds):
            v = vllm_bench(server.executable, proc.base_url, model, a, work / f"vllm-{r}.json")
            res = run_load(proc.base_url, model, reqs, settings, warmup_requests=warm)
            m = compute_metrics(res.records, res.duration_s)
            rows.append((v["total_token_throughput"], m.total_token_throughput,
                         v["mean_tpot_ms"], m.tpot_ms.mean))
            print(f"round {r + 1}: vllm bench serve {rows[-1][0]:9.1f} tok/s TPOT "
                  f"{rows[-1][2]:7.2f} ms | autotune {rows[-1][1]:9.1f} tok/s TPOT "
                  f"{rows[-1][3]:7.2f} ms", flush=True)
    v_tp, a_tp, v_tpot, a_tpot = (statistics.mean(c) for c in zip(*rows, strict=True))
    print(f"workload: random {a.input_len} in / {a.output_len} out, {a.num_prompts} prompts, "
          f"concurrency {a.concurrency}, {a.rounds} alternating rounds, vLLM "
          f"{os.environ.get('VLLM_VERSION', '')}".rstrip())
    print(f"mean total token throughput: vllm bench serve {v_tp:.1f}, autotune {a_tp:.1f} "
          f"tok/s ({100 * (a_tp - v_tp) / v_tp:+.1f}%)")
    print(f"mean TPOT: vllm bench serve {v_tpot:.2f}, autotune {a_tpot:.2f} ms "
          f"({100 * (a_tpot - v_tpot) / v_tpot:+.1f}%)")


if __name__ == "__main__":
    main()
