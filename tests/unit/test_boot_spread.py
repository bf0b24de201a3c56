"""scripts/boot_spread.py: boots of one config side by side, at the loads they share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "boot_spread.py"


def _search(path: Path, capacity: float, points: list[tuple[float, bool, float, float]]) -> Path:
    """A capacity search's JSON as `autotune bench --output` writes it: (load, met, client p99
    TPOT, vLLM's own mean TPOT) per point."""
    path.write_text(json.dumps({"capacity": capacity, "points": [
        {"load": load, "passed": met, "metrics": {"p99_tpot_ms": p99, "mean_tpot_ms": own + 1,
                                                  "p99_ttft_ms": 400.0},
         "server": {"server_mean_tpot_ms": own, "server_mean_queue_ms": 0.0}}
        for load, met, p99, own in points]}))
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60)


def test_boots_side_by_side_at_the_loads_they_share(tmp_path: Path) -> None:
    """The H200 host's MoE fp8 boots of 2026-11-27, cut down: they agree at 26 req/s and part at
    34.6 inside vLLM's engine (its own mean TPOT 20.2 against 14.3)."""
    slow = _search(tmp_path / "a.json", 28.15, [(26.0, True, 30.0, 14.1),
                                                (34.6, False, 104.7, 20.2), (30.3, False, 69.5,
                                                                             15.7)])
    fast = _search(tmp_path / "b.json", 40.35, [(26.0, True, 37.6, 12.7),
                                                (34.6, True, 52.6, 14.3), (46.1, False, 88.5,
                                                                           26.8)])
    third = _search(tmp_path / "c.json", 37.475, [(26.0, True, 47.4, 14.7)])
    out = tmp_path / "spread.json"
    p = run(str(slow), str(fast), str(third), "--name", "gpu0", "--name", "gpu1",
            "--name", "gpu1b", "--out", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["capacities"] == {"gpu0": 28.15, "gpu1": 40.35, "gpu1b": 37.475}
    assert doc["median"] == 37.475 and doc["spread_pct"] == 32.6
    assert list(doc["common_loads"]) == ["26", "34.6"]  # 30.3 and 46.1: one boot each
    at = doc["common_loads"]["34.6"]
    assert set(at) == {"gpu0", "gpu1"}
    assert (at["gpu0"]["met"], at["gpu0"]["server_mean_tpot_ms"]) == (False, 20.2)
    assert (at["gpu1"]["met"], at["gpu1"]["server_mean_tpot_ms"]) == (True, 14.3)
    assert at["gpu0"]["server_mean_outside_engine_ms"] is None  # not in that point: not invented
    assert "spread 32.6% of the median 37.475" in p.stdout
    assert "gpu0: missed, p99 TPOT 104.7 ms" in p.stdout
    assert doc["engine"] == {}  # searches before the step figures: no engine comparison


def _stepped(path: Path, capacity: float, met: bool, tokens: float, wall_ms: float) -> Path:
    """One boot's first point at 26 req/s with vLLM's step figures."""
    path.write_text(json.dumps({"capacity": capacity, "points": [
        {"load": 26.0, "passed": met, "metrics": {"p99_tpot_ms": 40.0},
         "server": {"server_mean_step_tokens": tokens, "server_wall_ms_per_step": wall_ms}}]}))
    return path


def test_one_engine_at_different_batches(tmp_path: Path) -> None:
    """The H200 host's six MoE fp8 boots of 2026-11-27 at 26 req/s, three of them: the boot that
    missed carried 154.5 tokens a step against 88.5 and 94.4, at the same wall time a token
    (0.108-0.115 ms): one engine, a different batch."""
    files = [_stepped(tmp_path / "a.json", 34.6, True, 88.5, 9.53),
             _stepped(tmp_path / "b.json", 23.75, False, 154.5, 17.73),
             _stepped(tmp_path / "c.json", 30.3, True, 94.4, 10.06)]
    out = tmp_path / "spread.json"
    p = run(*map(str, files), "--out", str(out))
    assert p.returncode == 0, p.stderr
    e = json.loads(out.read_text())["engine"]["26"]
    assert e["step_tokens"] == {"a.json": 88.5, "b.json": 154.5, "c.json": 94.4}
    assert e["ms_per_step_token"]["b.json"] == round(17.73 / 154.5, 4)
    assert e["step_tokens_spread_pct"] == round((154.5 - 88.5) / 94.4 * 100, 1)
    assert e["ms_per_step_token_spread_pct"] < 8 < e["step_tokens_spread_pct"]
    assert "engine at 26: wall ms a step per token a step spread" in p.stdout


def test_a_file_that_is_not_a_search_is_one_error(tmp_path: Path) -> None:
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"metrics": {}}))
    p = run(str(other))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip() == (f"error: {other}: not a capacity search's JSON (no points/"
                                "capacity); give the --output of `autotune bench "
                                "--capacity-axis ...`")
    p = run(str(other), str(other), "--name", "one")
    assert p.returncode == 2 and "--name: 1 names for 2 files" in p.stderr
