"""The machines a study's trials ran on: recorded once per machine (one attribute each, so
workers starting together do not overwrite each other), a warning when a study's trials ran
on another, the report's line; and the machine facts behind them, with nvidia-smi answering,
failing or hanging."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.server import machine
from autotune.tuning import machines as mod
from autotune.tuning.machines import key, machines, machines_line, note_machine

A = {"id": "GPU-5d3b266f-e437", "host": "vm", "gpu": "NVIDIA H100 80GB HBM3",
     "gpu_count": "1", "driver": "580.159.04", "cpu": "Intel(R) Xeon(R) Processor", "cpus": "16"}
B = {**A, "id": "GPU-77aa88bb-1111"}  # named, built and driven alike: another machine


def new_study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(directions=["maximize"])


def test_one_machine_is_recorded_once_and_never_warns() -> None:
    study = new_study()
    study.enqueue_trial({})  # the baseline, queued before any worker runs: not started
    assert note_machine(study, A) is None
    assert note_machine(study, A) is None  # a resume on the same machine
    assert [(m["id"], m["from_trial"]) for m in machines(study)] == [(A["id"], 0)]
    assert machines_line(study) == ("- machine: vm (GPU-5d3b266f): 1x NVIDIA H100 80GB HBM3 "
                                    "(driver 580.159.04), Intel(R) Xeon(R) Processor x16")


def test_a_resume_on_a_machine_alike_in_every_name_warns_and_is_recorded() -> None:
    study = new_study()
    note_machine(study, A)
    for _ in range(3):
        study.optimize(lambda t: 1.0, n_trials=1)
    why = note_machine(study, B)
    assert why is not None
    assert "2 machines" in why and "this one: vm (GPU-77aa88bb)" in why
    assert "others: vm (GPU-5d3b266f)" in why
    assert [(m["id"], m["from_trial"]) for m in machines(study)] == [(A["id"], 0),
                                                                    (B["id"], 3)]
    line = machines_line(study)
    assert line is not None and line.startswith("- **2 machines**")
    assert line.endswith("Intel(R) Xeon(R) Processor x16 from trial 3")
    assert note_machine(study, A) is not None  # back on the first: still two machines


def test_workers_that_start_together_keep_each_others_record() -> None:
    """Each machine writes its own attribute: the one that writes second (both having read
    none) keeps the first's, where one shared list would have lost it."""
    study = new_study()
    before = dict(study.user_attrs)
    assert not before
    note_machine(study, A)
    assert note_machine(study, B) is not None
    assert {m["id"] for m in machines(study)} == {A["id"], B["id"]}


def test_without_an_id_a_new_host_name_is_the_same_machine() -> None:
    """A container gets a new host name each start: without an id, the hardware decides."""
    bare = {**A, "id": ""}
    assert key(bare) == key({**bare, "host": "c0ffee"})
    assert key(bare) != key({**bare, "cpus": "8"})
    assert key(A) != key(B)


def test_attributes_of_another_shape_are_left_out() -> None:
    study = new_study()
    study.set_user_attr("machine:junk", "not a record")
    study.set_user_attr("machines", None)  # a name outside the prefix: not ours
    assert machines(study) == [] and machines_line(study) is None
    assert note_machine(study, A) is None
    assert len(machines(study)) == 1


def fake_smi(monkeypatch: pytest.MonkeyPatch, run: Any) -> None:
    monkeypatch.setattr(machine.shutil, "which", lambda _name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(subprocess, "run", run)


def test_a_gpu_machine_names_its_gpus_and_its_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        out = ("GPU-1111\nGPU-2222\n" if "--query-gpu=uuid" in argv else
               "NVIDIA H100 80GB HBM3, 580.159.04\nNVIDIA H100 80GB HBM3, 580.159.04\n")
        return subprocess.CompletedProcess(argv, 0, out, "")

    fake_smi(monkeypatch, run)
    hw = machine.hardware()
    assert (hw["gpu"], hw["gpu_count"], hw["driver"]) == ("NVIDIA H100 80GB HBM3", "2",
                                                           "580.159.04")
    assert hw["cpu"] == machine.cpu_model()
    assert mod.machine_id() == "GPU-1111,GPU-2222"


@pytest.mark.parametrize("how", ["fails", "hangs", "odd"])
def test_a_broken_nvidia_smi_is_no_gpu(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    def run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        if how == "hangs":
            raise subprocess.TimeoutExpired(argv, 20)
        if how == "fails":
            return subprocess.CompletedProcess(argv, 9, "", "NVIDIA-SMI has failed")
        return subprocess.CompletedProcess(argv, 0, "No devices were found\n", "")

    fake_smi(monkeypatch, run)
    assert machine.hardware()["gpu"] == "none"
    etc = Path("/etc/machine-id")
    assert mod.machine_id() == (etc.read_text().strip() if etc.exists() else "")


def test_a_core_set_a_cpu_quota_or_a_vllm_is_a_machine_of_its_own() -> None:
    """One host's two core sets (taskset) or CPU quotas serve apart, and so do two vLLMs: each
    is a machine the certify rule compares within (issue 80)."""
    assert key(A) != key({**A, "cpus": "8"})
    assert key(A) != key({**A, "cpu_quota": "100000 100000"})
    assert key({**A, "vllm": "0.26.0"}) != key({**A, "vllm": "0.32.0"})
    assert key(A) == key({**A, "host": "elsewhere"})
