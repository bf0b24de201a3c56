"""Issue #48 Build 5 on the GPU machine: the real-weights capacity study with n-gram speculation
and fp8 / fp8 KV (examples/h100-real-spec.yaml), then a low-load study of the same server: the
defaults and the n-gram starts, or every start with LOWLOAD_STARTS=all (fp8 ones first).

    python3 -m lab.gpu.real_spec lowload SRC DST   the low-load study file derived from SRC
    python3 -m lab.gpu.real_spec run --res DIR --deadline EPOCH [--studies capacity,lowload]
        (REAL_SPEC_CONFIG=FILE: another capacity study file, e.g. examples/h100-real-draft.yaml)
        (on the device, detached by real_spec.sh) both studies through `autotune study`, the
        product path, each with --timeout so that no trial starts past the deadline; vLLM's
        help for the flags the space uses; each study's trials table and a JSON dump
    python3 -m lab.gpu.real_spec dump --config CFG --storage URL --out FILE
        every trial's record (flags, metrics, capacity points, quality, cause) as JSON
    python3 -m lab.gpu.real_spec summary --capacity FILE --lowload FILE [--meta FILE]
        (here) fills gpu_study of docs/results/quality/summary.json from the two dumps

The low-load profile is a second study, not a second profile of the first: a capacity study
searches every profile of a suite (there is no fixed-load profile inside one), and the quality
guard runs only on a one-profile capacity trial (tuning/objective.py `_capacity`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

SUMMARY = Path("docs/results/quality/summary.json")
RESERVE_S = {"lowload": 330}
LOWLOAD = {"name": "sharegpt", "num_prompts": 64, "max_concurrency": 1, "warmup": 4, "seed": 0}


def lowload(src: Path, dst: Path) -> None:
    """The low-load study: the same server, space, starts and guard; ShareGPT with one request
    in flight; p50 and mean TPOT as objectives (no capacity search, no SLOs)."""
    d = yaml.safe_load(src.read_text())
    d["name"] = d["name"] + "-lowload"
    for k in ("capacity", "slos"):
        d.pop(k, None)
    d["profile"] = dict(LOWLOAD)
    d["objectives"] = [{"metric": "median_tpot_ms", "direction": "minimize"},
                       {"metric": "mean_tpot_ms", "direction": "minimize"}]
    # speculation is what the low load tells about most: by default the defaults and the
    # n-gram starts only, to fit one lent machine; LOWLOAD_STARTS=all keeps every start in the
    # file's order (fp8 and fp8 KV first: issue #48 wants each trial's low-load p50 TPOT), and
    # the study's --timeout cuts what does not fit
    if os.environ.get("LOWLOAD_STARTS", "spec") != "all":
        d["starts"] = [s for s in d.get("starts", []) if s.get("speculative_method")]
    d["n_trials"] = 1 + len(d["starts"])
    dst.write_text(yaml.safe_dump(d, sort_keys=False))


def sh(cmd: list[str], log: Path, timeout: float) -> int:
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                  timeout=max(timeout, 1)).returncode
        except subprocess.TimeoutExpired:
            f.write("TIMEOUT\n")
            return 124


def note(res: Path, **kv: Any) -> None:
    with (res / "events.jsonl").open("a") as f:
        f.write(json.dumps({"t": round(time.time(), 1), **kv}) + "\n")


def run(res: Path, deadline: float, studies: list[str]) -> None:
    res.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    help_txt = subprocess.run(["vllm", "serve", "--help=all"], capture_output=True, text=True,
                              timeout=300).stdout
    (res / "vllm-serve-help.txt").write_text(help_txt)
    note(res, step="help", flags={f: f in help_txt for f in (
        "--speculative-config", "--quantization", "--kv-cache-dtype")})
    # REAL_SPEC_CONFIG: the capacity study's file (examples/h100-real-draft.yaml: the draft pair)
    cap = Path(os.environ.get("REAL_SPEC_CONFIG") or "examples/h100-real-spec.yaml")
    cfgs = {"capacity": cap,
            "lowload": Path(f"/root/rs/{yaml.safe_load(cap.read_text())['name']}-lowload.yaml")}
    lowload(cfgs["capacity"], cfgs["lowload"])
    storage = "sqlite:////root/rs/mlruns/optuna.db"
    for i, name in enumerate(studies):
        # the capacity study leaves RESERVE_S to the low-load one after it
        later = sum(RESERVE_S.get(n, 0) for n in studies[i + 1:])
        left = deadline - time.time() - 45 - later
        if left < 240:
            note(res, step=name, skipped=f"{left:.0f} s left")
            continue
        note(res, step=name, started=True, left_s=round(left))
        rc = sh([sys.executable, "-m", "autotune", "study", "--config", str(cfgs[name]),
                 "--storage", storage, "--timeout", str(int(left)), "--no-mlflow"],
                res / f"{name}.log", left + 120)
        note(res, step=name, rc=rc)
        for what in ("trials",):
            sh([sys.executable, "-m", "autotune", what, "--config", str(cfgs[name]),
                "--storage", storage], res / f"{name}-{what}.txt", 120)
        dump(cfgs[name], storage, res / f"{name}-trials.json")
    note(res, step="done")


def dump(cfg_path: Path, storage: str, out: Path) -> None:
    from autotune.api import StudyError, load_study_config, study_summary

    cfg = load_study_config(cfg_path, {"storage": storage})
    try:
        recs = study_summary(cfg).records
    except StudyError:  # no such study in the storage (yet)
        out.write_text("[]\n")
        return
    rows = []
    for r in recs:
        rows.append({"number": r.number, "status": str(r.status), "params": r.params,
                     "baseline": r.baseline, "flags": r.flags, "values": r.values,
                     "cause": r.cause, "constraints": r.constraints,
                     "speculation": r.speculation,
                     "facts": r.facts.to_attrs()})
    out.write_text(json.dumps(rows, indent=1, default=str) + "\n")


def summary(cap_path: Path, low_path: Path, meta: dict[str, Any]) -> None:
    cap = json.loads(cap_path.read_text()) if cap_path.is_file() else []
    low = json.loads(low_path.read_text()) if low_path.is_file() else []
    # matched by the params (the flags of a trial that never ran are empty, like the defaults')
    low_by = {json.dumps(r["params"], sort_keys=True): r for r in low}
    trials = []
    for r in cap:
        m = r["facts"].get("metrics") or {}
        q = r["facts"].get("quality") or {}
        lo = low_by.get(json.dumps(r["params"], sort_keys=True))
        lm = (lo or {}).get("facts", {}).get("metrics") or {}
        spec_flags = bool(r["params"].get("speculative_method"))
        trials.append({
            "number": r["number"], "flags": r["flags"], "status": r["status"],
            "cause": r["cause"],
            "capacity": (None if r["status"] == "waiting" or ((r["facts"].get("capacity") or {})
                         .get("stopped") or "").startswith("not a server verdict at")
                         and not m.get("capacity") else m.get("capacity")),
            "capacity_search": (r["facts"].get("capacity") or {}).get("stopped") or (
                "not run: the deadline" if r["status"] == "waiting" else None),
            "capacity_req_s": m.get("capacity_req_s"),
            "at_capacity": {k: m.get(k) for k in ("p99_ttft_ms", "p99_tpot_ms", "mean_tpot_ms",
                                                  "total_token_throughput")},
            "load_speculation": r.get("speculation") if spec_flags else None,
            "low_load": None if lo is None else {
                "trial": lo["number"], "status": lo["status"],
                "median_tpot_ms": lm.get("median_tpot_ms"), "mean_tpot_ms": lm.get("mean_tpot_ms"),
                "median_ttft_ms": lm.get("median_ttft_ms"),
                "output_throughput": lm.get("output_throughput"),
                "speculation": (lo or {}).get("speculation") if spec_flags else None},
            "guard": {"verdict": ("reference" if r["baseline"] else q.get("verdict") or (
                                  "not judged" if not q.get("judged") else
                                  "fails" if r.get("constraints", {}).get("quality_ok", 0) > 0
                                  else "passes")),
                      "exact_match_vs_defaults": q.get("exact_match"),
                      "logprob_drop": q.get("logprob_drop"), "why": q.get("why"),
                      "kl_mean": (q.get("kl") or {}).get("kl_mean"),  # the calibrated guard's
                      "reason": q.get("reason"),
                      "acceptance_rate": (q["spec_accepted_tokens"] / q["spec_draft_tokens"]
                                          if q.get("spec_draft_tokens") else None),
                      "mean_accepted_length": q.get("spec_mean_accepted_len"),
                      "drafts": q.get("spec_drafts")},
        })
    doc = json.loads(SUMMARY.read_text())
    doc["gpu_study"] = {**meta, "trials": trials}
    SUMMARY.write_text(json.dumps(doc, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("lowload")
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p = sub.add_parser("run")
    p.add_argument("--res", type=Path, required=True)
    p.add_argument("--deadline", type=float, required=True)
    p.add_argument("--studies", default="capacity,lowload")
    p = sub.add_parser("dump")
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--storage", required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("summary")
    p.add_argument("--capacity", type=Path, required=True)
    p.add_argument("--lowload", type=Path, required=True)
    p.add_argument("--meta", type=Path)
    a = ap.parse_args()
    if a.cmd == "lowload":
        lowload(a.src, a.dst)
    elif a.cmd == "run":
        run(a.res, a.deadline, a.studies.split(","))
    elif a.cmd == "dump":
        dump(a.config, a.storage, a.out)
    else:
        summary(a.capacity, a.lowload, json.loads(a.meta.read_text()) if a.meta else {})


if __name__ == "__main__":
    main()
