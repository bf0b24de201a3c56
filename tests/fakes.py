"""Stand-ins for the measurement, for unit tests of the study loop and its bookkeeping (the
real thing runs in tests/integration/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.errors import ServerBootError
from autotune.load import LoadSettings
from autotune.load.record import RequestRecord
from autotune.measure.metrics import compute_metrics
from autotune.measure.point import Point
from autotune.measure.runner import BootRun, Timings


def fake_bench(calls: list[dict[str, Any]],
               raise_first: BaseException | None = None) -> Callable[..., BootRun]:
    """A run_boot (one profile, load mode) that records its flags, refuses kv_cache_dtype fp8 as a boot failure, and
    measures throughput in proportion to max_num_seqs. `raise_first` is raised by the first
    call (an unexpected exception inside a trial)."""
    pending = [raise_first] if raise_first is not None else []

    def run(server: Any, profiles: Any, flags: dict[str, Any], workdir: Path,
            **kw: Any) -> BootRun:
        calls.append(dict(flags))
        if pending:
            raise pending.pop()
        if flags.get("kv_cache_dtype") == "fp8":
            raise ServerBootError(1, "ValueError: fp8 refused", log_path="x")
        seqs = flags.get("max_num_seqs", 8)
        recs = [RequestRecord(index=i, send_time=0.0, prompt_len=8, expected_output_len=4,
                              first_token_time=0.1, end_time=0.1 + 0.01 * seqs,
                              chunk_times=(0.1, 0.1 + 0.01 * seqs), prompt_tokens=8,
                              output_tokens=4) for i in range(2)]
        m = compute_metrics(recs, duration_s=1.0 / seqs)
        return BootRun(argv=["vllm"], params=flags, timings=Timings(1, 1, 0, 2), log_path="x",
                       points={profiles[0].key: Point(m, recs, {}, LoadSettings())})
    return run


def study_cfg(tmp_path: Any, objectives: list[tuple[str, str]] | None = None,
              **extra: Any) -> Any:
    """A small study config (random profile, the cpu-demo space) with these objectives."""
    from autotune.config.study import StudyConfig

    objs = objectives or [("total_token_throughput", "maximize"), ("mean_tpot_ms", "minimize")]
    return StudyConfig.model_validate({
        "name": "t", "server": {"model": "/m", "executable": ["vllm"]},
        "profile": {"name": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "objectives": [{"metric": m, "direction": d} for m, d in objs],
        "search_space": "cpu-demo", "workdir": str(tmp_path)} | extra)


def summary_of(recs: list[Any], tmp_path: Any, objectives: list[tuple[str, str]] | None = None,
               **extra: Any) -> Any:
    """The StudySummary of these records, as every surface reads it (no confirm phase)."""
    from autotune.tuning.summary import summarize_records

    return summarize_records("t", recs, study_cfg(tmp_path, objectives, **extra), False)
