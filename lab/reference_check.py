#!/usr/bin/env python3
"""Check a found capacity against the reference client: `vllm bench serve` at the capacity C
and at C x (1 + tolerance), each judged against the SLOs. A capacity the reference agrees with
meets at C and misses above (issue 46, build 3).

    python -m lab.reference_check --model MODEL --capacity 23.8 --url http://127.0.0.1:8000 \\
        [--server-log server.log] [--tolerance 0.1] [--slo 'p99_ttft_ms<=2000' ...] --out check.json
    python -m lab.reference_check --model MODEL --capacity 23.8 --serve --out check.json \\
        -- --load-format dummy --quantization fp8 --kv-cache-dtype fp8

With --serve it boots a stock `vllm serve MODEL FLAGS...` (the flags after --), as a user
deploys it, and stops it after. Before the two measured rates it runs --warmup-s of arrivals at
C, not judged: the first load after a boot compiles kernels (the MoE's fused_moe_kernel) and
reads several times slower (docs/results/warm-server-h100). Given the server's log (--serve
has it), a measured rate whose span of the log holds vLLM's "JIT compilation during inference"
warning is run once more, as a capacity point is. The profile is the H100 capacity study's
(examples/h100-capacity.yaml): ShareGPT, at least --min-duration-s of arrivals a rate.

One run a rate is not enough for a p99 SLO: on one warm H100 MoE server, one sample's p99 TPOT
at a fixed rate ranged over 30-66% of that rate's median, more than a 10% step in rate moves it
(docs/results/warm-server-h100, `verdict_wellposed`). --samples N runs N fresh request samples
(new seeds) at each rate, C and C x (1 + tolerance) alternating in a shuffled order, and judges
each rate on the median over its samples of each reported figure (a failed request in any
sample is a miss); each sample's own verdict is kept beside it.

The JSON: per rate, the reference's p99 and mean TTFT and TPOT (the samples' medians), what
missed and the verdict (meets / misses), `meets_share` over the samples and the samples
themselves; `verdicts_agree`: meets at C and misses at C x (1 + tolerance). Exit 0 when it ran
(whatever the verdicts), 1 when the server or `vllm bench serve` failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.api import AutotuneError, ConfigError, ProfileConfig, parse_model, parse_slo
from autotune.api.parts import (
    Reference,
    ServerProcess,
    Target,
    free_port,
    reference_check,
    serve_argv,
    verify_lines,
)


def run(a: argparse.Namespace) -> dict[str, Any]:
    slos = [parse_slo(s) for s in a.slo]
    if a.capacity <= 0:
        raise ConfigError(f"--capacity {a.capacity:g}: must be a request rate above 0 (the "
                          "capacity the search found, in requests/s)")
    if not 0 < a.tolerance < 1:
        raise ConfigError(f"--tolerance {a.tolerance:g}: must be between 0 and 1 (the "
                          "search's, e.g. 0.1)")
    if a.samples < 1:
        raise ConfigError(f"--samples {a.samples}: at least 1 (4 or more to judge a p99)")
    if (a.url is None) == (not a.serve):
        raise ConfigError("give either --url (a running server) or --serve (boot one)")
    if shutil.which(a.vllm[0]) is None:
        raise ConfigError(f"--vllm {shlex.join(a.vllm)}: {a.vllm[0]} is not on PATH (install "
                          "vLLM, or pass the command that runs its CLI)")
    if a.url is not None and a.flags:
        raise ConfigError("--url: the server is already running; vLLM flags after -- apply "
                          "only with --serve")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    out_dir = a.out.parent / (a.out.stem + "-runs")
    target = Target(a.capacity, "rate", a.tolerance, a.requests_per_point, a.min_duration_s)
    profile = parse_model(ProfileConfig, {"name": a.profile, "warmup": a.point_warmup},
                          "profile")
    doc: dict[str, Any] = {"model": a.model, "profile": a.profile,
                           "min_duration_s": a.min_duration_s}
    proc: ServerProcess | None = None
    log: Path | None = a.server_log
    try:
        if a.serve:
            argv = serve_argv(a.vllm, a.model, {}, a.flags)
            out_dir.mkdir(parents=True, exist_ok=True)
            log = out_dir / "server.log"
            proc = ServerProcess(argv, log_path=log, port=free_port())
            proc.start()
            doc["boot_s"] = round(proc.wait_healthy(a.boot_timeout), 1)
            doc["serve_argv"] = shlex.join(argv)
            url = proc.base_url
        else:
            url = a.url
        ref = Reference(a.vllm, url, a.model, a.tokenizer or a.model, profile, log)
        # the unjudged warm-up: --warmup-s of arrivals at C
        warm = max(1, math.ceil(a.warmup_s * a.capacity)) if a.warmup_s > 0 else 0
        doc |= reference_check(ref, target, slos, a.samples, out_dir, a.seed, warm)
    finally:
        if proc is not None:
            proc.stop()
    return doc


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Flags after -- go to `vllm serve` (with --serve).")
    p.add_argument("--model", required=True, help="the model the server serves (its path or "
                   "name, as given to vllm serve)")
    p.add_argument("--tokenizer", help="tokenizer directory (default: the model's)")
    p.add_argument("--capacity", type=float, required=True, help="C, in requests/s")
    p.add_argument("--tolerance", type=float, default=0.1, help="the search's (default 0.1)")
    p.add_argument("--slo", action="append", help="METRIC<=VALUE, repeat it (default: "
                   "p99_ttft_ms<=2000 and p99_tpot_ms<=60)")
    p.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000")
    p.add_argument("--server-log", type=Path, help="with --url: the server's log, to find "
                   "kernels compiling during a measured rate")
    p.add_argument("--serve", action="store_true", help="boot a stock vllm serve, stop it after")
    p.add_argument("--vllm", default="vllm", help="command that runs vLLM's CLI (default vllm)")
    p.add_argument("--boot-timeout", type=float, default=900.0)
    p.add_argument("--profile", choices=("sharegpt", "random"), default="sharegpt")
    p.add_argument("--min-duration-s", type=float, default=20.0, help="arrivals a rate, at "
                   "least (default 20)")
    p.add_argument("--requests-per-point", type=int, default=200, help="requests a rate, at "
                   "least (default 200)")
    p.add_argument("--point-warmup", type=int, default=8, help="vllm bench serve's "
                   "--num-warmups (default 8)")
    p.add_argument("--warmup-s", type=float, default=20.0, help="arrivals at C before the "
                   "measured rates, not judged; 0: none (default 20)")
    p.add_argument("--samples", type=int, default=1, help="fresh request samples a rate, "
                   "judged on their median (default 1; 4 or more for a p99 SLO)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="the JSON to write; the "
                   "reference's own files go in a folder beside it")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    flags = args[args.index("--") + 1:] if "--" in args else []
    a = parser().parse_args(args[:args.index("--")] if "--" in args else args)
    a.flags = flags
    a.vllm = shlex.split(a.vllm)
    a.slo = a.slo or ["p99_ttft_ms<=2000", "p99_tpot_ms<=60"]
    try:
        doc = run(a)
    except ConfigError as e:
        print(f"reference_check: {e}", file=sys.stderr)
        return 2
    except (AutotuneError, subprocess.TimeoutExpired) as e:
        print(f"reference_check: {e}", file=sys.stderr)
        return 1
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    for line in verify_lines(doc):
        print(line)
    print(f"written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
