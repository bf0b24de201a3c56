"""The machines a study's trials ran on: recorded once per machine, a warning when a study's
earlier trials ran on another, and the report's line."""

from __future__ import annotations

import optuna

from autotune.server.machine import hardware
from autotune.tuning.machines import identity, machines, machines_line, note_machine

A = {"id": "GPU-5d3b266f-e437", "host": "gpu-a", "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": "1", "driver": "580.159.04",
     "cpu": "Intel(R) Xeon(R) Processor", "cpus": "16"}
B = {**A, "id": "GPU-0a1b2c3d-0000", "host": "gpu-b"}
C = {**A, "id": "GPU-77aa88bb-1111"}  # same name, GPU, driver and CPU: another machine


def new_study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(directions=["maximize"])


def test_this_machine_names_its_host_cpu_and_gpu() -> None:
    me = identity()
    assert me["host"] and me["cpu"] and int(me["cpus"]) >= 1
    assert me["gpu"] == hardware()["gpu"]
    assert "cpu" in hardware()  # on a GPU too: the host's CPU feeds the engine


def test_one_machine_is_recorded_once_and_never_warns() -> None:
    study = new_study()
    assert note_machine(study, A) is None
    study.enqueue_trial({})
    assert note_machine(study, A) is None  # a resume on the same machine
    assert [m["host"] for m in machines(study)] == ["gpu-a"]
    assert machines(study)[0]["from_trial"] == 0
    assert machines_line(study) == ("- machine: gpu-a (GPU-5d3b266f): 1x NVIDIA H100 80GB HBM3 "
                                    "(driver 580.159.04), Intel(R) Xeon(R) Processor x16")


def test_a_resume_on_another_machine_warns_and_is_recorded() -> None:
    study = new_study()
    note_machine(study, A)
    for _ in range(3):
        study.enqueue_trial({})
    why = note_machine(study, B)
    assert why is not None
    assert "2 machines" in why and "this one: gpu-b" in why and "before: gpu-a" in why
    assert [(m["host"], m["from_trial"]) for m in machines(study)] == [("gpu-a", 0),
                                                                      ("gpu-b", 3)]
    line = machines_line(study)
    assert line is not None and line.startswith("- **2 machines**")
    assert "gpu-b (GPU-0a1b2c3d): " in line and "from trial 3" in line
    assert note_machine(study, A) is not None  # back on the first: still two machines


def test_machines_alike_in_every_name_are_told_apart_by_their_id() -> None:
    study = new_study()
    note_machine(study, A)
    why = note_machine(study, C)
    assert why is not None and "(GPU-77aa88bb)" in why and "(GPU-5d3b266f)" in why
    assert len(machines(study)) == 2


def test_a_study_without_the_attribute_has_no_line() -> None:
    assert machines_line(new_study()) is None
