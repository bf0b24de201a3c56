"""A trace through the real CLI: `make-trace` writes one the study reads, and a malformed trace
or trace setting is one error naming the line and the field, exit 1, before any boot."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=120)


def study(tmp_path: Path, model: Path, trace: Path, **profile: object
          ) -> subprocess.CompletedProcess[str]:
    cfg = {"name": "s", "server": {"model": str(model)}, "search_space": "cpu-demo",
           "workdir": str(tmp_path / "w"),
           "profile": {"name": "trace", "path": str(trace), "block_size": 128} | profile,
           "capacity": {"axis": "speedup", "low": 1, "high": 8},
           "slos": [{"metric": "p99_ttft_ms", "max": 1000}],
           "objectives": [{"metric": "capacity", "direction": "maximize"}]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(cfg))
    return cli("study", "--config", str(tmp_path / "s.yaml"))


@pytest.mark.parametrize(("lines", "expect"), [
    (['{"timestamp": 0, "input_length": 300, "output_length": 8, "hash_ids": [0, 1, 2]}',
      '{"timestamp": 1, "input_length": 300, "output_length": 8, "hash_ids": [0, 1]}'],
     "profile.path: {path}, line 2: hash_ids: 2 ids for input_length 300, which fills 3 "
     "blocks of 128 tokens"),
    (['{"timestamp": 0, "input_length": 30, "output_length": 8}', '{"timestamp": 1,'],
     "profile.path: {path}, line 2: not JSON"),
    # issue 84 item 11: a 0 placeholder among epoch seconds (the replay waited years)
    ([f'{{"timestamp": {0 if i == 1 else 1_715_000_000 + i}, "input_length": 30, '
      '"output_length": 8}' for i in range(30)],
     "profile.path: {path}, line 2: timestamp 0 lies 1,715,000,000 s (54 years) before the "
     "trace's other 29 requests"),
    # issue 84 item 12: Mooncake's milliseconds read as seconds (a point of 55 hours)
    ([f'{{"timestamp": {1000 * i}, "input_length": 300, "output_length": 8, "hash_ids": '
      f'[0, 1, {i + 2}]}}' for i in range(30)],
     "capacity.low: at 1x a load point replays 200 requests of {path} at 0.001 req/s, 55.3 "
     "hours of arrivals; 0.001 req/s recorded is a request every 1,000 s: if its timestamps "
     "are milliseconds (Mooncake's are), set profile.time_unit: ms (1 req/s)"),
])
def test_a_malformed_trace_stops_the_study_before_any_boot(
        tmp_path: Path, tiny_model: Path, lines: list[str], expect: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    p = study(tmp_path, tiny_model, trace)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode == 1 and len(errors) == 1 and "Traceback" not in p.stderr
    assert expect.format(path=trace) in " ".join(p.stderr.split())
    assert not (tmp_path / "w" / "optuna.db").exists()
    assert not list(tmp_path.rglob("server.log"))


def test_make_trace_writes_what_the_trace_profile_reads(tmp_path: Path,
                                                        tiny_model: Path) -> None:
    out = tmp_path / "t.csv"
    p = cli("make-trace", str(out), "--tokenizer", str(tiny_model), "--requests", "50",
            "--rate", "2", "--arrivals", "onoff", "--system-len", "256", "--block-size", "128")
    assert p.returncode == 0, p.stderr
    said = " ".join((p.stdout + p.stderr).split())
    assert "50 requests over 24.5 s (2 req/s)" in said and "block_size: 128" in said
    assert out.read_text().splitlines()[0] == "timestamp,input_length,output_length,hash_ids"
    from autotune.load.datasets import load_tokenizer
    from autotune.load.trace import read_trace

    t = read_trace(str(out), "s", 128, load_tokenizer(str(tiny_model)), None)
    assert len(t.entries) == 50 and all(e.hash_ids[:2] in {(0, 1), (2, 3), (4, 5), (6, 7)}
                                        for e in t.entries)
    bad = cli("make-trace", str(tmp_path), "--tokenizer", str(tiny_model))
    assert bad.returncode == 1 and "OUT_PATH: " in bad.stderr and "is a folder" in bad.stderr
    zero = cli("make-trace", str(out), "--tokenizer", str(tiny_model), "--rate", "0")
    assert zero.returncode == 2 and "--rate" in zero.stderr
    assert "\n" not in t.note() and t.note().startswith(f"trace {out}: 50 requests")
