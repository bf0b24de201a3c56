"""vLLM's runtime-compilation signals (lines from a real H100 server's log, vLLM 0.26.0) and the
capacity search's rule: a point during which a kernel compiled is measured again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.config.capacity import CapacityConfig
from autotune.config.workload import ProfileConfig, SLOConfig
from autotune.load import LoadSettings
from autotune.load.record import Request, RequestRecord
from autotune.measure import draw, on_server
from autotune.measure.metrics import compute_metrics
from autotune.measure.on_server import capacity_on
from autotune.measure.point import Point
from autotune.server.jit import MONITOR_ON, LogSpan, jit_events, untuned_moe

# docs/results/warm-server-h100/summary.json jit_lines: the MoE servers' first points, and lines
# of the same boots that are not runtime compilations
JIT_LINE = ("(EngineCore pid=1322) WARNING 11-25 20:43:14 [jit_monitor.py:135] Triton kernel JIT "
            "compilation during inference: fused_moe_kernel. This causes a latency spike; "
            "consider extending warmup to cover this shape/config.")
BOOT_LINES = [
    "(EngineCore pid=1322) INFO 11-25 20:43:09 [jit_monitor.py:79] Kernel JIT monitor "
    "activated; monitored JIT compilations during inference will use mode=warn.",
    "(EngineCore pid=1322) 2026-11-25 20:42:44,502 - INFO - autotuner.py:651 - flashinfer.jit: "
    "[Autotuner]: Autotuning process starts ...",
    "(EngineCore pid=1322) WARNING 11-25 20:42:44 [kernel_warmup.py:258] No FlashInfer autotune "
    "cache entries found.Falling back to default tactics.",
    "(EngineCore pid=1322) WARNING 11-25 20:40:30 [fused_moe.py:1107] Using default MoE config. "
    "Performance might be sub-optimal! Config file not found at /root/site/vllm/model_executor/"
    "layers/fused_moe/configs/E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
]


def test_the_monitors_warning_is_a_runtime_compilation_and_boot_lines_are_not() -> None:
    events = jit_events("\n".join([*BOOT_LINES, JIT_LINE, "INFO: 127.0.0.1 - POST 200"]))
    assert [e.kernel for e in events] == ["fused_moe_kernel"]
    assert events[0].line == JIT_LINE
    assert jit_events("\n".join(BOOT_LINES)) == []
    assert MONITOR_ON in BOOT_LINES[0]


# machine D's MoE defaults server, 2026-11-27 (raw/2026-11-27-moe-defaults): bf16, one path
UNTUNED_BF16 = ("(EngineCore pid=887) WARNING 11-27 14:39:06 [fused_moe.py:1107] Using default MoE "
                "config. Performance might be sub-optimal! Config file not found at /root/site/"
                "vllm/model_executor/layers/fused_moe/configs/E=128,N=768,device_name=NVIDIA_"
                "H100_80GB_HBM3.json")


def test_an_untuned_fused_moe_config_is_named_once(tmp_path: Path) -> None:
    """vLLM's fused-MoE kernel without a tuned config for the GPU says so once per process; the
    file names it looked for are what a user would tune. A user folder comes first in the
    line (VLLM_TUNED_CONFIG_FOLDER), then vLLM's own."""
    from autotune.session.bench import untuned_note

    assert untuned_moe("\n".join([*BOOT_LINES, UNTUNED_BF16, UNTUNED_BF16])) == [
        "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
        "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json"]
    both = UNTUNED_BF16.replace("found at /root", "found at /tuned/E=128,N=768,device_name="
                                "NVIDIA_H100_80GB_HBM3.json, /root")
    assert untuned_moe(both) == ["E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json"]
    assert untuned_moe("\n".join([BOOT_LINES[0], JIT_LINE])) == []
    log = tmp_path / "server.log"
    log.write_text(UNTUNED_BF16 + "\n")
    note = untuned_note(log)
    assert note is not None and "no tuned config E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3" \
        ".json" in note and "VLLM_TUNED_CONFIG_FOLDER" in note
    log.write_text(BOOT_LINES[0] + "\n")
    assert untuned_note(log) is None and untuned_note(tmp_path / "gone.log") is None


def test_a_span_sees_only_what_was_logged_since_its_mark(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join([*BOOT_LINES, JIT_LINE]) + "\n")  # during the warm-up of the boot
    span = LogSpan(log)
    span.mark()
    assert span.events() == []
    with log.open("a") as f:
        f.write(JIT_LINE + "\n")
    assert len(span.events()) == 1
    assert LogSpan(None).events() == [] and LogSpan(tmp_path / "none").events() == []


def _point(tpot_s: float) -> Point:
    recs = [RequestRecord(index=i, send_time=0.0, prompt_len=4, expected_output_len=4,
                          first_token_time=0.05, end_time=0.05 + 3 * tpot_s,
                          chunk_times=tuple(0.05 + k * tpot_s for k in range(4)),
                          prompt_tokens=4, output_tokens=4) for i in range(200)]
    return Point(compute_metrics(recs, 1.0), recs, {}, LoadSettings())


def test_a_point_that_overlapped_a_compile_is_measured_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run of the only point compiles a kernel (and reads slow); the run that counts
    is the second, with fresh requests, and the point says so."""
    log = tmp_path / "server.log"
    log.write_text("\n".join(BOOT_LINES) + "\n")
    seeds: list[int] = []

    def fake_measure(url: str, model: str, profile: ProfileConfig, reqs: list[Request],
                     **kw: Any) -> Point:
        seeds.append(profile.seed)
        if len(seeds) == 1:
            with log.open("a") as f:
                f.write(JIT_LINE + "\n")
            return _point(0.2)  # 200 ms a token while compiling: would miss
        return _point(0.01)

    monkeypatch.setattr(on_server, "measure", fake_measure)
    monkeypatch.setattr(on_server, "load_tokenizer", lambda d: None)
    monkeypatch.setattr(draw, "sample_requests",
                        lambda prof, tok, n, seed, d, *_: [Request([1], 1, 4)] * n)
    cap = CapacityConfig(axis="concurrency", low=4, high=4, settle=False)
    res = capacity_on("http://x", "m", "tok", ProfileConfig(name="random", input_len=1,
                                                             output_len=4), cap,
                      [SLOConfig(metric="p99_tpot_ms", max=60)], tmp_path, log_path=log)
    [point] = res.points
    assert len(seeds) == 2 and seeds[0] != seeds[1]
    assert point.passed
    assert point.server["jit_remeasured"] == 1.0 and point.server["jit_events_discarded"] == 1
    assert point.server["jit_events"] == 0.0


def test_the_first_point_waits_for_a_warm_server(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A synthetic server whose first window is slow (a kernel compiles in it): the warm-up runs
    windows at the first point's load until two in a row agree with no compile in the later
    one, then the point is measured once, warm; later points are not warmed again."""
    log = tmp_path / "server.log"
    log.write_text("\n".join(BOOT_LINES) + "\n")
    calls: list[int] = []

    def fake_measure(url: str, model: str, profile: ProfileConfig, reqs: list[Request],
                     **kw: Any) -> Point:
        calls.append(len(reqs))
        if len(calls) == 1:
            with log.open("a") as f:
                f.write(JIT_LINE + "\n")
            return _point(0.2)
        return _point(0.01)

    monkeypatch.setattr(on_server, "measure", fake_measure)
    monkeypatch.setattr(on_server, "load_tokenizer", lambda d: None)
    monkeypatch.setattr(draw, "sample_requests",
                        lambda prof, tok, n, seed, d, *_: [Request([1], 1, 4)] * n)
    cap = CapacityConfig(axis="concurrency", low=4, high=8, start=4, settle=False,
                         warm_windows=4, tolerance=0.9)
    res = capacity_on("http://x", "m", "tok", ProfileConfig(name="random", input_len=1,
                                                             output_len=4), cap,
                      [SLOConfig(metric="p99_tpot_ms", max=60)], tmp_path, log_path=log)
    first = res.points[0]
    # slow (compiling), fast, fast: warm after 3 windows of a quarter of the point's requests
    assert calls[:3] == [50, 50, 50] and calls[3] == 200
    assert first.server["warm_windows"] == 3 and first.server["warm_stable"] == 1.0
    assert first.server["warm_jit_events"] == 1 and first.passed
    assert "jit_remeasured" not in first.server  # the compile fell in the warm-up
    assert all("warm_windows" not in p.server for p in res.points[1:])
    assert len(calls) == 3 + len(res.points)


def test_a_server_without_its_log_is_not_watched(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench --url` without --server-log cannot see a kernel compile: its points and warm-up
    carry no JIT count at all (a 0 would read as watched and clean), and nothing is measured
    again for one. 2026-11-27, H100: such a search recorded jit_events 0 while the server's
    log held two fused_moe_kernel compilations inside its warm-up."""
    calls: list[int] = []

    def fake_measure(url: str, model: str, profile: ProfileConfig, reqs: list[Request],
                     **kw: Any) -> Point:
        calls.append(len(reqs))
        return _point(0.01)

    monkeypatch.setattr(on_server, "measure", fake_measure)
    monkeypatch.setattr(on_server, "load_tokenizer", lambda d: None)
    monkeypatch.setattr(draw, "sample_requests",
                        lambda prof, tok, n, seed, d, *_: [Request([1], 1, 4)] * n)
    cap = CapacityConfig(axis="concurrency", low=4, high=4, start=4, settle=False,
                         warm_windows=2)
    res = capacity_on("http://x", "m", "tok", ProfileConfig(name="random", input_len=1,
                                                             output_len=4), cap,
                      [SLOConfig(metric="p99_tpot_ms", max=60)], tmp_path)
    [point] = res.points
    assert point.passed and point.server["warm_windows"] == 2
    assert not {"jit_events", "warm_jit_events", "jit_remeasured"} & set(point.server)
    assert LogSpan(None).counted() == {} and LogSpan(tmp_path / "x").counted() == {
        "jit_events": 0.0}


def test_no_warm_up_windows_where_they_are_off(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(on_server, "measure",
                        lambda *a, **kw: calls.append(1) or _point(0.01))
    monkeypatch.setattr(on_server, "load_tokenizer", lambda d: None)
    monkeypatch.setattr(draw, "sample_requests",
                        lambda prof, tok, n, seed, d, *_: [Request([1], 1, 4)] * n)
    monkeypatch.setattr(on_server, "has_gpu", lambda: False)
    cap = CapacityConfig(axis="concurrency", low=4, high=4, settle=False)  # auto, no GPU: off
    res = capacity_on("http://x", "m", "tok", ProfileConfig(name="random", input_len=1,
                                                             output_len=4), cap,
                      [SLOConfig(metric="p99_tpot_ms", max=60)], tmp_path)
    assert len(calls) == 1 and "warm_windows" not in res.points[0].server
    with pytest.raises(ValueError, match="number of windows"):
        CapacityConfig(warm_windows=-1)


def _late(point: Point, share: float, processes: int) -> Point:
    recs = [RequestRecord(**{**r.__dict__, "coalesced": round(3 * share)}) for r in point.records]
    return Point(compute_metrics(recs, 1.0), recs, {}, LoadSettings(processes=processes))


def test_a_point_read_late_is_measured_again_with_more_client_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H100 one client process read 25-48% of a 0.5B model's token gaps late at 64
    requests in flight (docs/results/quality/gpu) and measuring again the same way could not
    help: the point is measured again with twice the processes (a 16-CPU machine allows 4),
    and the points after it start with them."""
    asked: list[Any] = []

    def fake_measure(url: str, model: str, profile: ProfileConfig, reqs: list[Request],
                     **kw: Any) -> Point:
        procs = profile.client_processes
        asked.append(procs)
        used = 1 if procs == "auto" else int(procs)
        return _late(_point(0.01), 0.67 if used == 1 else 0.0, used)

    monkeypatch.setattr(on_server, "measure", fake_measure)
    monkeypatch.setattr(on_server, "load_tokenizer", lambda d: None)
    monkeypatch.setattr(draw, "sample_requests",
                        lambda prof, tok, n, seed, d, *_: [Request([1], 1, 4)] * n)
    monkeypatch.setattr("autotune.load._run.os.sched_getaffinity", lambda pid: set(range(16)))
    cap = CapacityConfig(axis="concurrency", low=4, high=8, start=4, settle=False,
                         warm_windows=0, tolerance=0.9)
    res = capacity_on("http://x", "m", "tok", ProfileConfig(name="random", input_len=1,
                                                             output_len=4), cap,
                      [SLOConfig(metric="p99_tpot_ms", max=60)], tmp_path)
    assert asked[:2] == ["auto", 2] and all(p == 2 for p in asked[2:])
    first = res.points[0]
    assert first.server["late_reads_remeasured"] == 1.0 and first.flag is None and first.passed
    assert all(p.flag is None for p in res.points) and res.capacity == 8


def test_a_fixed_load_that_overlapped_a_compile_counts_it_and_warns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed-load trial (no capacity search, so no point to measure again with fresh
    requests): the compiles logged during its run are counted and warned of, by kernel; a run
    without one counts 0 and says nothing."""
    from types import SimpleNamespace

    from autotune.errors import MeasurementWarning

    log = tmp_path / "server.log"
    log.write_text("\n".join(BOOT_LINES) + "\n")
    proc = SimpleNamespace(base_url="http://x", log_path=log, alive=lambda: True,
                           check_alive=lambda: None)
    compiles = [True, False]

    def fake_measure(*a: Any, **kw: Any) -> Point:
        if compiles.pop(0):
            with log.open("a") as f:
                f.write(JIT_LINE + "\n")
        return _point(0.01)

    monkeypatch.setattr(on_server, "measure", fake_measure)
    profile = ProfileConfig(name="random", input_len=1, output_len=4, num_prompts=2)
    reqs = [Request([1], 1, 4)] * 3
    with pytest.warns(MeasurementWarning, match=r"compiled 1 kernel\(s\) .* \(fused_moe_kernel\)"):
        pt = on_server.measure_profile(proc, "m", profile, reqs)  # type: ignore[arg-type]
    assert pt.server_stats["jit_events"] == 1.0
    import warnings as w

    with w.catch_warnings():
        w.simplefilter("error")
        assert on_server.measure_profile(proc, "m", profile, reqs  # type: ignore[arg-type]
                                         ).server_stats["jit_events"] == 0.0
