#!/usr/bin/env python3
"""Is synthetic acceptance faithful (issue 82 item 4)? A draft model's speculation served on the
target's own weights against the same speculation on random weights accepting at the profile
measured on the own weights: the same compute, the acceptance declared instead of earned. If
the emulation is faithful, mean TPOT and throughput at each load agree within the spread
between boots of one arm.

First `autotune acceptance` (the product's command) measures the profile of the draft at K on
the study's workload, unless --profile names one. Then boots in ABBA order (own, random,
random, own: a drift over the run falls on both arms alike), each with the study's workload at
every load of --loads (fixed concurrency, fixed output length, warm-up load first), and, as
time allows, one boot of vLLM's defaults on the own weights (where the draft pays by load).
The random-weights arm is a shape-only server declaring the measured profile: the product's
own launch (config/acceptance.launch_flags) turns it into vLLM's synthetic rejection sampling.

Each (boot, load) row lands in OUT/runs.jsonl as it ends; OUT/summary.json compares the arms.

    python -m lab.spec_fidelity --config STUDY.yaml --draft DIR --out DIR [--k 3]
        [--profile ACCEPTANCE.json] [--loads 1,16,64,192] [--output-len 128] [--deadline EPOCH]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from autotune.api import ServerConfig, load_study_config
from autotune.api.parts import run_boot
from lab.ngram_drafts import parser, row_of

ORDER = ("own", "random", "random", "own")
BOOT_S = 240  # a boot and its loads, until one is timed: none starts without that much left
KEYS = ("mean_tpot_ms", "p99_tpot_ms", "output_throughput")


def acceptance(a: Any) -> dict[str, Any]:
    if a.profile:
        given: dict[str, Any] = json.loads(Path(a.profile).read_text())
        return given
    dest = a.out / "profile.json"
    cmd = [sys.executable, "-m", "autotune", "acceptance", "--config", str(a.config),
           "--method", "draft_model", "--draft", a.draft, "--k", str(a.k),
           "--num-prompts", str(a.acceptance_prompts), "--output", str(dest)]
    t0 = time.time()
    with (a.out / "acceptance.log").open("w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        sys.exit(f"autotune acceptance exited {rc}: {a.out / 'acceptance.log'}")
    doc: dict[str, Any] = json.loads(dest.read_text())
    doc["seconds"] = round(time.time() - t0, 1)
    dest.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def servers(cfg: Any, profile: dict[str, Any]) -> dict[str, ServerConfig]:
    own = cfg.server
    entry = profile.get("study_file_entry", {}).get("server", {}).get("acceptance", {})
    if "draft_model" not in entry:  # else the random arm would reject real drafts, not emulate
        sys.exit("the profile has no server.acceptance.draft_model entry (study_file_entry)")
    random_weights = ServerConfig.model_validate(
        {**own.model_dump(mode="json"), "shape_only": True, "acceptance": entry})
    return {"own": own, "random": random_weights, "defaults": own}


def row(arm: str, boot: int, load: int, res: Any, label: str) -> dict[str, Any]:
    pt = res.points[label]
    m = pt.metrics
    return {"arm": arm, "boot": boot, "concurrency": load, "boot_s": round(res.timings.boot_s, 1),
            "argv": res.argv, "failed": m.failed, "mean_tpot_ms": round(m.tpot_ms.mean, 3),
            "median_tpot_ms": round(m.tpot_ms.median, 3), "p99_tpot_ms": round(m.tpot_ms.p99, 3),
            "mean_ttft_ms": round(m.ttft_ms.mean, 2), "p99_ttft_ms": round(m.ttft_ms.p99, 2),
            "output_throughput": round(m.output_throughput, 1),
            "request_throughput": round(m.request_throughput, 3),
            "late_read_share": round(m.late_read_share, 4),
            **row_of(pt.server_stats, m.completed, m.total_output_tokens)}


def compare(rows: list[dict[str, Any]], loads: list[int]) -> dict[str, Any]:
    """Per load and metric: each arm's values over its boots, the spread (max - min) within each
    arm, the gap between the arms' medians, and whether the gap is within the wider spread."""
    out: dict[str, Any] = {}
    for load in loads:
        at = {arm: [r for r in rows if r["arm"] == arm and r["concurrency"] == load]
              for arm in ("own", "random", "defaults")}
        entry: dict[str, Any] = {}
        for key in KEYS:
            vals = {arm: [r[key] for r in rs] for arm, rs in at.items() if rs}
            if len(vals.get("own", [])) < 1 or len(vals.get("random", [])) < 1:
                continue
            own, rnd = statistics.median(vals["own"]), statistics.median(vals["random"])
            spread = max(max(v) - min(v) for a, v in vals.items() if a != "defaults")
            entry[key] = {"values": vals, "gap_pct": round(100 * (rnd - own) / own, 2),
                          "spread_pct": round(100 * spread / own, 2),
                          "within_spread": abs(rnd - own) <= spread
                          if min(len(vals["own"]), len(vals["random"])) > 1 else None}
        entry["mean_length"] = {arm: [r["mean_length"] for r in rs] for arm, rs in at.items()
                                if rs and arm != "defaults"}
        out[str(load)] = entry
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--draft", required=True, help="the draft model's folder")
    ap.add_argument("--profile", help="an `autotune acceptance` JSON instead of measuring it")
    ap.add_argument("--acceptance-prompts", type=int, default=100)
    ap.add_argument("--loads", default="1,16,64,192")
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds (0: none)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    # one compile cache for every boot, the acceptance boot's included: the later boots of the
    # same shapes (own or random weights) then skip torch.compile
    doc = yaml.safe_load(a.config.read_text())
    doc["server"]["cache_root"] = str((a.out / "vllm-cache").resolve())
    # the profile measured on the replies the boots run: acceptance differs with the workload
    doc["profile"]["output_len"] = a.output_len
    a.config = a.out / "study.yaml"
    a.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    cfg = load_study_config(a.config)
    loads = [int(x) for x in a.loads.split(",")]
    profile = acceptance(a)
    print(json.dumps({k: profile.get(k) for k in ("mean_length", "rates", "drafts",
                                                  "draft_share")}), flush=True)
    srv = servers(cfg, profile)
    base = cfg.workloads()[0].model_copy(update={"output_len": a.output_len, "warmup": 4})
    warm = base.model_copy(update={"max_concurrency": 32, "num_prompts": 64, "label": "warm"})
    profiles = [warm] + [base.model_copy(update={
        "max_concurrency": c, "num_prompts": max(32, 3 * c), "label": f"c{c}"}) for c in loads]
    spec = {"method": "draft_model", "model": a.draft, "num_speculative_tokens": a.k}
    rows: list[dict[str, Any]] = []
    (a.out / "runs.jsonl").write_text("")  # this run's rows only, as summary.json has them

    def land(r: dict[str, Any]) -> None:
        print(json.dumps({k: r.get(k) for k in ("arm", "boot", "concurrency", "mean_tpot_ms",
                                                "output_throughput", "mean_length", "skipped",
                                                "error") if k in r}), flush=True)
        with (a.out / "runs.jsonl").open("a") as f:
            f.write(json.dumps(r) + "\n")

    runs = [(arm, i) for i, arm in enumerate(ORDER)] + [("defaults", len(ORDER))]
    took: list[float] = []  # each boot's seconds (its loads included, failed or not)
    for arm, i in runs:
        left = a.deadline - time.time()
        if a.deadline and left < max(took, default=BOOT_S) + 30:
            land({"arm": arm, "boot": i, "skipped": f"{left:.0f} s left to the deadline"})
            continue
        run_dir = a.out / "boots" / f"{i}-{arm}"
        run_dir.mkdir(parents=True, exist_ok=True)
        flags = {} if arm == "defaults" else {"speculative_config": spec}
        t0 = time.time()
        try:  # a boot or a load that fails is a row too, and the rest still run
            res = run_boot(srv[arm], profiles, flags, run_dir)
            got = [row(arm, i, c, res, f"c{c}") for c in loads]
        except Exception as e:
            land({"arm": arm, "boot": i, "error": f"{type(e).__name__}: {e}"[:2000]})
            continue
        finally:
            took.append(time.time() - t0)
        for r in got:
            rows.append(r)
            land(r)
        (a.out / "summary.json").write_text(json.dumps({
            "profile": {k: profile.get(k) for k in ("mean_length", "rates", "drafts",
                                                    "draft_share", "requests", "seconds")},
            "k": a.k, "loads": loads, "output_len": a.output_len,
            "compare": compare(rows, loads)}, indent=1) + "\n")

if __name__ == "__main__":
    main()
