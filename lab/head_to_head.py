#!/usr/bin/env python3
"""The head-to-head's contenders and their judging (issue 66): every way of tuning one study's
workload (autotune with a budget, a random search, vLLM's auto_tune.sh, a recipe) names a config
and the capacity it claims; each config is then booted as a stock `vllm serve` (the study's
fixed args and environment plus its flags) and `vllm bench serve` judges it against the study's
SLOs at its own claim C, at C x (1 + tolerance) and at the best claim of all, `--samples` fresh
request samples a rate (autotune.measure.verify, as `export --verify` runs it).

    python -m lab.head_to_head claim --config STUDY --study-name NAME --name autotune \\
        --minutes 12.3 --contenders OUT/contenders.json
    python -m lab.head_to_head claim-auto-tune --dir OUT/auto_tune --name auto_tune_sh \\
        --contenders OUT/contenders.json
    python -m lab.head_to_head claim-flags --name recipe --flags '{"max_num_seqs": 256}' \\
        --source "..." --contenders OUT/contenders.json
    python -m lab.head_to_head judge --config STUDY --contenders OUT/contenders.json \\
        --samples 3 --out OUT/judged.json
    python -m lab.head_to_head summarize --judged OUT/judged.json --shape NAME \\
        --budget 15 --machine "..." --raw "..."   # into docs/results/certified/summary.json

`claim` reads the study's recommendation through `autotune export` (its flags, its capacity,
the certification when the study ran one); `claim-auto-tune` reads lab/auto_tune_contender.sh's
contender.json (or lab/auto_tune_sharded.sh's, its grid split over GPUs). `judge` boots the
contenders in a random order, one at a time (with `--gpus 0,1,2,3` up to four at once, each on
its own GPU of the host), and writes per contender `reference_capacity_verdicts`: each rate's
verdict, its p99 TTFT and TPOT (the samples' medians) and the share of samples that met.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shlex
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from autotune.api import StudyConfig, load_study_config
from autotune.api.parts import (
    Reference,
    ServerProcess,
    capacity_target,
    free_port,
    launch_env,
    reference_check,
    reference_client,
    serve_argv,
)


def _store(path: Path, name: str, entry: dict[str, Any]) -> None:
    doc = json.loads(path.read_text()) if path.is_file() else {}
    doc[name] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{name}: {json.dumps(entry)}")


def _trials(cfg: StudyConfig) -> int:
    import optuna

    st = optuna.load_study(study_name=cfg.name, storage=cfg.storage_url())
    return sum(tr.state.is_finished() for tr in st.get_trials())


def claim(a: argparse.Namespace) -> None:
    cfg = load_study_config(a.config).model_copy(update={"name": a.study_name})
    out = cfg.study_dir() / "export"
    before = set(out.glob("trial-*/export.json"))
    p = subprocess.run([sys.executable, "-m", "autotune", "export", "--config", str(a.config),
                        "--study-name", a.study_name], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"claim: autotune export failed ({p.returncode}): {p.stderr[-800:]}")
    new = sorted(set(out.glob("trial-*/export.json")) - before) or sorted(
        out.glob("trial-*/export.json"), key=lambda f: f.stat().st_mtime)[-1:]
    exp = json.loads(new[-1].read_text())
    cert_path = cfg.study_dir() / "certify.json"
    cert = json.loads(cert_path.read_text()) if cert_path.is_file() else None
    said = " ".join(line for line in p.stderr.splitlines() if line.startswith("recommended"))
    _store(a.contenders, a.name, {
        "config": exp["flags"], "claimed_capacity": exp["values"].get("capacity"),
        "gpu_minutes": a.minutes, "trial": exp["trial"], "said": said,
        "trials": _trials(cfg),
        "certify": None if cert is None else {k: cert.get(k) for k in
                                              ("status", "pick", "gain", "reference",
                                               "minutes", "why")},
        "source": f"autotune study {a.study_name} ({a.config})", "machine": a.machine})


def claim_auto_tune(a: argparse.Namespace) -> None:
    c = json.loads((a.dir / "contender.json").read_text())
    best = c.get("best") or {}
    _store(a.contenders, a.name, {
        # the flags auto_tune.sh booted its best with, besides the study's fixed ones
        "config": {k: best[k] for k in ("max_num_seqs", "max_num_batched_tokens")
                   if k in best} | ({"enable_prefix_caching": True, "max_model_len":
                                     c["input_len"] + c["output_len"] + 64} if best else {})
        | ({"gpu_memory_utilization": c["gpu_memory_utilization"]}
           if best and c.get("gpu_memory_utilization") else {}),
        "claimed_capacity": c.get("claimed_capacity"), "gpu_minutes": c["gpu_minutes"],
        "auto_tune": c, "source": "vLLM benchmarks/auto_tune/auto_tune.sh "
        "(lab/auto_tune_contender.sh)", "machine": a.machine})


def claim_flags(a: argparse.Namespace) -> None:
    _store(a.contenders, a.name, {"config": json.loads(a.flags), "claimed_capacity": None,
                                  "gpu_minutes": 0.0, "source": a.source,
                                  "machine": a.machine})


def _rates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"label": r["label"], "rate": r["rate"], "verdict": r["verdict"],
             "meets_share": r["meets_share"], "misses": r["misses"],
             "p99_ttft_ms": r["metrics"].get("p99_ttft_ms"),
             "p99_tpot_ms": r["metrics"].get("p99_tpot_ms")} for r in doc["rates"]]


def judge_one(cfg: StudyConfig, name: str, c: dict[str, Any], best: float, samples: int,
              out: Path, seed: int, gpu: str | None = None, at: float | None = None
              ) -> dict[str, Any]:
    s = cfg.server
    argv = serve_argv(s.executable, s.model, s.serve_flags(dict(c["config"])), s.extra_args)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **launch_env(s)} | ({"CUDA_VISIBLE_DEVICES": gpu} if gpu else {})
    proc = ServerProcess(argv, log_path=out / "server.log", port=free_port(s.host),
                         host=s.host, env=env)
    res: dict[str, Any] = {"serve_argv": shlex.join(argv)} | ({"gpu": gpu} if gpu else {})
    # every `vllm bench serve` run of this contender in one process, vLLM's import in it
    # overlapping the server's boot
    with reference_client(s.executable, out / "reference-client.log", start=True):
        try:
            proc.start()
            res["boot_s"] = round(proc.wait_healthy(s.boot_timeout_s), 1)
            ref = Reference(s.executable, proc.base_url, s.model, s.tokenizer_dir,
                            cfg.workloads()[0], out / "server.log")
            assert cfg.capacity is not None
            checks: list[dict[str, Any]] = []
            own = at or c.get("claimed_capacity")  # --at: every contender at one rate pair
            if own:
                d = reference_check(ref, capacity_target(cfg.capacity, own), cfg.slos, samples,
                                    out / "own", seed,
                                    on_run=lambda line: print(f"  {name}: {line}", flush=True))
                checks += _rates(d)
                res["own_agrees"] = d["verdicts_agree"]
            if best and best != own and not at:
                d = reference_check(ref, capacity_target(cfg.capacity, best), cfg.slos, samples,
                                    out / "best", seed + 100, ceiling=True,
                                    on_run=lambda line: print(f"  {name} at the best claim: "
                                                              f"{line}", flush=True))
                checks += [r | {"label": "best claim"} for r in _rates(d)]
            res["reference_capacity_verdicts"] = checks
        except Exception as e:  # a config that does not boot or serve: said, the rest judged
            res["error"] = f"{type(e).__name__}: {e}"
        finally:
            proc.stop()
    return res


def judge(a: argparse.Namespace) -> None:
    """Each contender in turn, or with --gpus several at once, each on its own GPU of the host
    (a contender takes the next free GPU in the shuffled order, so which GPU judges which
    contender is as random as the order)."""
    cfg = load_study_config(a.config)
    contenders = json.loads(a.contenders.read_text())
    best = max((c["claimed_capacity"] or 0.0) for c in contenders.values())
    order = list(contenders)
    random.Random(a.seed).shuffle(order)
    gpus = a.gpus.split(",") if a.gpus else [None]
    doc: dict[str, Any] = {"config": str(a.config), "samples": a.samples, "order": order,
                           "best_claim": best, "slos": [x.text() for x in cfg.slos],
                           "gpus": a.gpus, "at": a.at, "contenders": {}}
    free: queue.Queue[str | None] = queue.Queue()
    for g in gpus:
        free.put(g)
    lock = threading.Lock()

    def one(name: str) -> None:
        gpu = free.get()
        try:
            t0 = time.monotonic()
            print(f"judging {name}{f' on GPU {gpu}' if gpu else ''}: "
                  f"{json.dumps(contenders[name]['config'])}", flush=True)
            res = judge_one(cfg, name, contenders[name], best, a.samples,
                            a.out.parent / "judge" / name, a.seed, gpu, a.at)
            res["minutes"] = round((time.monotonic() - t0) / 60, 2)
            with lock:
                doc["contenders"][name] = contenders[name] | res
                a.out.write_text(json.dumps(doc, indent=1) + "\n")  # each as it lands
        finally:
            free.put(gpu)

    with ThreadPoolExecutor(max_workers=len(gpus)) as pool:
        for f in [pool.submit(one, name) for name in order]:
            f.result()
    print(f"written to {a.out}")


def _verdicts(j: dict[str, Any]) -> list[dict[str, Any]] | None:
    return j.get("reference_capacity_verdicts") or ([{"error": j["error"]}] if "error" in j
                                                     else None)


def _reference(j: dict[str, Any], samples: int | None) -> dict[str, Any] | None:
    """The judge's verdicts by rate, as the issue asks for them: {rate: samples, met, p99 TTFT
    and TPOT (the samples' medians), the share of samples that met, which rate it was}."""
    if "error" in j:
        return {"error": j["error"]}
    rows = j.get("reference_capacity_verdicts")
    if not rows:
        return None
    return {f"{r['rate']:g}": {"label": r["label"], "samples": r.get("samples_n", samples),
                               "met": r["verdict"] == "meets", "meets_share": r["meets_share"],
                               "p99_ttft_ms": r["p99_ttft_ms"], "p99_tpot_ms": r["p99_tpot_ms"]}
            for r in rows}


def reading(contenders: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Which claims held (the judge met the SLOs at the contender's own claim) and which config
    the judge ranks first: the highest rate it met, ties to the lower p99 TTFT there."""
    refs: dict[str, dict[str, Any]] = {n: c["reference"] for n, c in contenders.items()
                                       if c.get("reference")}
    if not refs:
        return None

    def held_(n: str, claim: float | None) -> bool | None:
        r = refs.get(n)
        if not claim or not r or "error" in r:
            return None
        return bool(r.get(f"{claim:g}", {}).get("met"))

    held = {n: held_(n, c["claimed_capacity"]) for n, c in contenders.items()}
    best = {n: max(((float(rate), -(row["p99_ttft_ms"] or 0.0)) for rate, row in r.items()
                    if row["met"]), default=(0.0, 0.0))
            for n, r in refs.items() if "error" not in r}
    first = max(best, key=lambda n: best[n]) if best else None
    return {"claims_held": held, "ranked_first": first,
            "met_at_most": {n: b[0] or None for n, b in best.items()}}


def summarize(a: argparse.Namespace) -> None:
    """The shape's entry of docs/results/certified/summary.json from judged.json (or, before
    the judge has run, from contenders.json: the claims without a reference): the issue's fields
    for autotune, and `contenders` for every contender, autotune among them."""
    judged = json.loads(a.judged.read_text())
    if "contenders" not in judged:  # contenders.json: nothing judged yet
        judged = {"config": None, "contenders": judged, "samples": None, "order": None,
                  "slos": None, "best_claim": max((c["claimed_capacity"] or 0.0)
                                                  for c in judged.values()) or None}
    cs = judged["contenders"]
    me = cs[a.ours]
    cert = me.get("certify") or {}
    gain, ref = cert.get("gain"), cert.get("reference")
    contenders = {n: {"config": c["config"], "gpu_minutes": c["gpu_minutes"],
                      "claimed_capacity": c["claimed_capacity"], "machine": c.get("machine"),
                      "source": c["source"], "reference": _reference(c, judged["samples"]),
                      **({"trials": c["trials"]} if "trials" in c else {}),
                      **({"auto_tune": c["auto_tune"]} if "auto_tune" in c else {})}
                  for n, c in cs.items()}
    shape = {
        "config": judged["config"] or a.config, "machine": a.machine,
        "budget_gpu_minutes": a.budget,
        "gpu_minutes_used": me["gpu_minutes"], "trials": me.get("trials"),
        "pick": me["config"], "pick_trial": me.get("trial"),
        "claimed_capacity": me["claimed_capacity"], "said": me.get("said"),
        "certified": cert.get("status") == "certified", "status": cert.get("status"),
        "why": cert.get("why") or None,
        "gain": None if not gain else {
            "median": gain.get("ratio"), "low": gain.get("low"), "high": gain.get("high"),
            "coverage": gain.get("coverage"), "boots_pick": gain.get("boots_pick"),
            "boots_defaults": gain.get("boots_defaults")},
        "reference_at_C": None if not ref else {
            k: ref.get(k) for k in ("load", "samples", "met", "p99_ttft_ms", "p99_tpot_ms")},
        "gpu_minutes_to_certified": me["gpu_minutes"] if cert.get("status") == "certified"
        else None,
        "reference_capacity_verdicts": _verdicts(me),
        "best_claim": judged["best_claim"], "judge_samples": judged["samples"],
        "judge_order": judged["order"], "slos": judged["slos"],
        "contenders": contenders, "reading": reading(contenders), "raw": a.raw}
    doc = json.loads(a.summary.read_text())
    doc.setdefault("shapes", {})[a.shape] = shape
    a.summary.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(shape, indent=1)[:3000])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("claim")
    c.add_argument("--config", type=Path, required=True)
    c.add_argument("--study-name", required=True)
    c.add_argument("--name", required=True)
    c.add_argument("--minutes", type=float, required=True, help="the run's wall minutes")
    c.add_argument("--contenders", type=Path, required=True)
    c.add_argument("--machine", default=None, help="the GPU it tuned on (name, UUID)")
    t = sub.add_parser("claim-auto-tune")
    t.add_argument("--dir", type=Path, required=True)
    t.add_argument("--name", default="auto_tune_sh")
    t.add_argument("--contenders", type=Path, required=True)
    t.add_argument("--machine", default=None, help="the GPU it tuned on (name, UUID)")
    f = sub.add_parser("claim-flags")
    f.add_argument("--name", required=True)
    f.add_argument("--flags", required=True, help="the config's flags (JSON)")
    f.add_argument("--source", required=True, help="where the recipe comes from")
    f.add_argument("--contenders", type=Path, required=True)
    f.add_argument("--machine", default=None, help="none: a recipe is not tuned")
    j = sub.add_parser("judge")
    j.add_argument("--config", type=Path, required=True)
    j.add_argument("--contenders", type=Path, required=True)
    j.add_argument("--samples", type=int, default=3)
    j.add_argument("--seed", type=int, default=0)
    j.add_argument("--out", type=Path, required=True)
    j.add_argument("--gpus", default="", help="judge several at once, one a GPU (e.g. 0,1,2,3)")
    j.add_argument("--at", type=float, default=None,
                   help="judge every contender at this capacity and one step above (the same "
                        "rates for all, whatever each claims)")
    s = sub.add_parser("summarize")
    s.add_argument("--judged", type=Path, required=True,
                   help="judge's judged.json, or contenders.json before the judge has run")
    s.add_argument("--config", default=None, help="the study file (with contenders.json)")
    s.add_argument("--summary", type=Path, default=Path("docs/results/certified/summary.json"))
    s.add_argument("--shape", required=True)
    s.add_argument("--ours", default="autotune")
    s.add_argument("--budget", type=float, required=True)
    s.add_argument("--machine", required=True)
    s.add_argument("--raw", required=True, help="where the run's raw files are kept")
    a = ap.parse_args()
    {"claim": claim, "claim-auto-tune": claim_auto_tune, "claim-flags": claim_flags,
     "judge": judge, "summarize": summarize}[a.cmd](a)


if __name__ == "__main__":
    main()
