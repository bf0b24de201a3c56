"""One request limit for a study (issue 84 item 10): the preflight, every trial's capacity search
and export read a trace (or a dataset) within the same limit, the lowest max_model_len the space
searches. A user's trace with Mooncake's lengths and a space whose max_model_len is 512: the
preflight dropped the long requests, the capacity search sent them (vLLM answered HTTP 400)
and every config scored capacity 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.config.study import StudyConfig
from autotune.load import LoadSettings
from autotune.load.record import Request, RequestRecord
from autotune.measure import on_server, runner
from autotune.measure.metrics import compute_metrics
from autotune.measure.point import Point
from autotune.server.vllm_help import VllmInfo
from autotune.tuning import objective as objective_mod
from autotune.tuning import preflight as pf
from autotune.tuning.search_space import SearchSpace

LIMIT = 512
SPACE = SearchSpace.model_validate({"name": "s", "parameters": {
    "max_model_len": {"type": "categorical", "choices": [LIMIT, 2048]},
    "max_num_seqs": {"type": "categorical", "choices": [4, 8]}}})


def mooncake(tmp_path: Path) -> Path:
    """40 requests a second apart (ms), every fourth a 1,433-token prompt that 512 cannot
    hold (the model itself allows 8,192)."""
    rows = []
    for i in range(40):
        n = 1433 if i % 4 == 0 else 300
        rows.append({"timestamp": 1_000 * i, "input_length": n, "output_length": 20,
                     "hash_ids": list(range(10 * i, 10 * i + -(-n // 512)))})
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def study(tmp_path: Path, model: Path) -> StudyConfig:
    return StudyConfig.model_validate({
        "name": "s", "server": {"model": str(model), "executable": ["/bin/true"]},
        "profile": {"name": "trace", "path": str(mooncake(tmp_path)), "time_unit": "ms"},
        "capacity": {"axis": "speedup", "low": 1, "high": 1, "warm_windows": 0, "samples": 1,
                     "settle": False, "requests_per_point": 20, "min_duration_s": 15,
                     "warmup": 2},
        "slos": [{"metric": "mean_ttft_ms", "max": 1000}],
        "objectives": [{"metric": "capacity", "direction": "maximize"}],
        "search_space": "cpu-demo", "workdir": str(tmp_path / "w")})


class FakeProc:
    base_url, log_path, argv, launch = "http://x", None, ["vllm"], "direct"
    started_at, healthy_at = 0.0, 1.0

    def alive(self) -> bool:
        return True


def test_the_capacity_search_sends_only_what_the_preflight_kept(
        tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = study(tmp_path, tiny_model)
    monkeypatch.setattr(pf, "get_vllm_info", lambda *_a, **_k: VllmInfo(
        "0.32.0", frozenset({"max_model_len", "max_num_seqs"})))
    pre = pf.preflight(cfg, SPACE)
    assert (pre.max_len, pre.max_len_source) == (LIMIT, "search space 's': "
                                                 "parameters.max_model_len.choices")
    assert pre.dataset is not None and "30 kept" in pre.dataset and "10 dropped" in pre.dataset

    sent: list[list[Request]] = []

    @contextmanager
    def booted(*_a: Any, **_k: Any) -> Iterator[FakeProc]:
        yield FakeProc()

    def measure(url: str, model: str, profile: Any, reqs: list[Request], **kw: Any) -> Point:
        sent.append([*reqs, *kw.get("warm", [])])
        recs = [RequestRecord(index=i, send_time=r.arrival_s or 0.0, prompt_len=r.prompt_len,
                              expected_output_len=r.output_len,
                              first_token_time=(r.arrival_s or 0.0) + 0.05,
                              end_time=(r.arrival_s or 0.0) + 0.1,
                              chunk_times=((r.arrival_s or 0.0) + 0.05,
                                           (r.arrival_s or 0.0) + 0.1),
                              prompt_tokens=r.prompt_len, output_tokens=r.output_len,
                              scheduled_time=r.arrival_s) for i, r in enumerate(reqs)]
        return Point(compute_metrics(recs, 30.0), recs, {}, LoadSettings())

    monkeypatch.setattr(runner, "booted", booted)
    monkeypatch.setattr(runner, "_serving", lambda proc: lambda: None)
    monkeypatch.setattr(on_server, "measure", measure)
    monkeypatch.setattr(on_server, "has_gpu", lambda: False)
    st = optuna.create_study(directions=["maximize"])
    st.enqueue_trial({"max_model_len": 2048, "max_num_seqs": 4})
    st.optimize(objective_mod.Objective(cfg, SPACE, [], tmp_path), n_trials=1)
    assert st.trials[0].values == [1.0]  # the point met the SLOs: no request refused
    lengths = [r.prompt_len + r.output_len for reqs in sent for r in reqs]
    assert sent and len(lengths) >= 20
    assert max(lengths) <= LIMIT  # the 1,433-token prompts stayed in the file


def test_exports_trace_window_holds_the_same_requests(tmp_path: Path, tiny_model: Path) -> None:
    """export's timed_trace window (and --verify's, from the same read) is drawn from the
    requests the study kept: cpu-demo fixes max_model_len: 512, the server's args set none."""
    from autotune.outputs.export import trace_window

    cfg = study(tmp_path, tiny_model)
    profile, _ = trace_window(cfg, cfg.profile, True, tmp_path / "export")
    assert profile.path is not None
    rows = [json.loads(line) for line in Path(profile.path).read_text().splitlines()]
    assert len(rows) >= 20
    assert max(r["input_length"] + r["output_length"] for r in rows) <= LIMIT
