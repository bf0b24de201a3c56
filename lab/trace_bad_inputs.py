#!/usr/bin/env python3
"""Malformed traces and trace settings through the real CLI (`autotune study`), each case's
exit code and its one-line error, for docs/results/trace/summary.json (`bad_trace_inputs`).

    python -m lab.trace_bad_inputs --model DIR --out bad.json

None of them reaches vLLM: the trace is read in full before `vllm serve --help` and any boot
(tuning/preflight.py), the settings are checked when the study file is read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

GOOD = {"timestamp": 0.0, "input_length": 300, "output_length": 16, "hash_ids": [0, 1, 2]}
LATER = {"timestamp": 1.5, "input_length": 200, "output_length": 16, "hash_ids": [0, 3]}

# (case, file name, file text or None, profile settings, capacity settings)
CASES: list[tuple[str, str, str | None, dict[str, Any], dict[str, Any]]] = [
    ("a line that is not JSON", "t.jsonl", json.dumps(GOOD) + "\n{\"timestamp\": 2,\n",
     {}, {}),
    ("a request with no arrival", "t.jsonl", json.dumps(GOOD) + "\n"
     + json.dumps({"input_length": 5, "output_length": 2}) + "\n", {}, {}),
    ("an arrival that is neither a number nor a date", "t.jsonl", json.dumps(
        GOOD | {"timestamp": "noon"}) + "\n", {}, {}),
    ("neither input_length nor prompt", "t.jsonl", json.dumps(
        {"timestamp": 0, "output_length": 8}) + "\n", {}, {}),
    ("an output length of 0", "t.jsonl", json.dumps(GOOD | {"output_length": 0}) + "\n", {},
     {}),
    ("hash ids that do not cover the prompt's blocks", "t.jsonl", json.dumps(
        GOOD | {"hash_ids": [0]}) + "\n", {}, {}),
    ("hash ids written as a word", "t.jsonl", json.dumps(GOOD | {"hash_ids": "abc"}) + "\n",
     {}, {}),
    ("an unknown key", "t.jsonl", json.dumps(GOOD | {"arrival": 1}) + "\n", {}, {}),
    ("numbers and dates mixed", "t.jsonl", json.dumps(GOOD) + "\n" + json.dumps(
        LATER | {"timestamp": "2024-05-01T12:00:00"}) + "\n", {}, {}),
    ("every request at the same time", "t.jsonl", json.dumps(GOOD) + "\n"
     + json.dumps(LATER | {"timestamp": 0.0}) + "\n", {}, {}),
    ("a CSV with an unknown column", "t.csv", "ts,input_length,output_length\n0,5,2\n1,5,2\n",
     {}, {}),
    ("a CSV row with more cells than the header", "t.csv",
     "timestamp,input_length,output_length\n0,5,2\n1,5,2,7\n", {}, {}),
    ("a file that does not exist", "missing.jsonl", None, {}, {}),
    ("the speedup axis on a profile that is no trace", "t.jsonl", None,
     {"name": "random", "path": None}, {}),
    ("a trace on the rate axis", "t.jsonl", json.dumps(GOOD) + "\n" + json.dumps(LATER) + "\n",
     {}, {"axis": "rate"}),
    ("a trace with a request rate", "t.jsonl", json.dumps(GOOD) + "\n" + json.dumps(LATER)
     + "\n", {"request_rate": 4}, {}),
    ("a time unit that is neither s nor ms", "t.jsonl", json.dumps(GOOD) + "\n"
     + json.dumps(LATER) + "\n", {"time_unit": "min"}, {}),
]


def run_case(model: str, root: Path, name: str, fname: str, text: str | None,
             profile: dict[str, Any], capacity: dict[str, Any]) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(dir=root))
    trace = d / fname
    if text is not None:
        trace.write_text(text)
    prof = {"name": "trace", "path": str(trace), "block_size": 128} | profile
    prof = {k: v for k, v in prof.items() if v is not None}
    if prof["name"] != "trace":
        prof.pop("block_size")
    cfg = {"name": "bad", "server": {"model": model}, "search_space": "cpu-demo",
           "workdir": str(d / "w"), "profile": prof,
           "capacity": {"axis": "speedup", "low": 1, "high": 8, "requests_per_point": 100}
           | capacity,
           "slos": [{"metric": "p99_ttft_ms", "max": 1000}],
           "objectives": [{"metric": "capacity", "direction": "maximize"}]}
    (d / "study.yaml").write_text(yaml.safe_dump(cfg))
    argv = [sys.executable, "-m", "autotune", "study", "--config", str(d / "study.yaml")]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    return {"case": name, "file": text, "profile": prof, "capacity": cfg["capacity"],
            "command": "autotune study --config study.yaml", "exit_code": p.returncode,
            "error": " ".join(" ".join(errors).split()).replace(str(d) + "/", ""),
            "error_lines": len(errors), "traceback": "Traceback" in p.stderr,
            "booted": any(d.rglob("server.log"))}


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--model", required=True)
    a.add_argument("--out", type=Path, required=True)
    args = a.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bad-trace-"))
    got = [run_case(args.model, root, *c) for c in CASES]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(got, indent=2) + "\n")
    for g in got:
        print(f"{g['exit_code']} {g['case']}: {g['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
