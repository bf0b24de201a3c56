"""Does a certify boot's short search agree with a full search on the same boot?
(docs/results/certified/summary.json `check_vs_full`)

A certify boot (autotune.tuning.certify) measures a config at the capacity C already found and
steps one tolerance at a time (`bracket: step`): two points where the boot agrees. This boots a
study's config several times; on each boot it runs both, in a random order: the step search from
C (C: the first boot's full search) and a full search as a trial runs it (the config's bracket
from its start); and reports each pair's capacities, points and seconds, and whether they agree
within one tolerance step (the full search's own resolution).

    .venv/bin/python -m lab.check_vs_full --config examples/cpu-capacity.yaml --boots 6 \
        --out docs/results/certified/check-vs-full-cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
import time
from pathlib import Path

from autotune.api import load_study_config
from autotune.api.parts import booted, capacity_on


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--boots", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    cfg = load_study_config(args.config)
    cap = cfg.capacity
    if cap is None:
        raise SystemExit(f"{args.config}: not a capacity study")
    order = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="check-vs-full-"))
    rows: list[dict[str, object]] = []
    at: float | None = None

    def run(kind: str, where: Path, url: str, log: Path) -> dict[str, object]:
        t0 = time.monotonic()
        # as a certify boot searches (with its warm-up) or as a trial does
        use = cap.model_copy(update={"bracket": "step"}) if kind == "step" else cap
        res = capacity_on(url, cfg.server.model, cfg.server.tokenizer_dir, cfg.profile, use,
                          list(cfg.slos), where / kind, start=at if kind == "step" else None,
                          log_path=log)
        return {"capacity": res.capacity, "fail": res.fail, "points": len(res.points),
                "loads": [p.load for p in res.points], "seconds": time.monotonic() - t0}

    for boot in range(args.boots + 1):
        where = work / f"boot-{boot}"
        where.mkdir(parents=True)
        with booted(cfg.server, {}, where, lambda p: None) as proc:
            if at is None:  # the capacity "already found": a full search on a first boot
                first = run("full", where, proc.base_url, proc.log_path)
                at = float(first["capacity"])  # type: ignore[arg-type]
                rows.append({"boot": boot, "found_c": at, "full": first})
                print(json.dumps(rows[-1]), flush=True)
                continue
            kinds = ["step", "full"]
            order.shuffle(kinds)
            got = {k: run(k, where, proc.base_url, proc.log_path) for k in kinds}
        step_c, full_c = float(got["step"]["capacity"]), float(got["full"]["capacity"])  # type: ignore[arg-type]
        agree = step_c > 0 and full_c > 0 and \
            abs(math.log(step_c / full_c)) <= math.log1p(cap.tolerance) + 1e-9
        rows.append({"boot": boot, "order": kinds, **got, "agree": agree})
        print(json.dumps(rows[-1]), flush=True)
    pairs = [r for r in rows if "agree" in r]
    doc = {"config": str(args.config), "tolerance": cap.tolerance, "axis": cap.axis,
           "c_from_first_boot": at, "boots": rows,
           "agree": sum(bool(r["agree"]) for r in pairs), "pairs": len(pairs),
           "points_step_mean": sum(r["step"]["points"] for r in pairs) / len(pairs),  # type: ignore[index]
           "points_full_mean": sum(r["full"]["points"] for r in pairs) / len(pairs),  # type: ignore[index]
           "seconds_step_mean": sum(r["step"]["seconds"] for r in pairs) / len(pairs),  # type: ignore[index]
           "seconds_full_mean": sum(r["full"]["seconds"] for r in pairs) / len(pairs),  # type: ignore[index]
           "raw": str(work)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"agree within one step: {doc['agree']} of {doc['pairs']}; points "
          f"{doc['points_step_mean']:.1f} vs {doc['points_full_mean']:.1f}; seconds "
          f"{doc['seconds_step_mean']:.0f} vs {doc['seconds_full_mean']:.0f}")


if __name__ == "__main__":
    main()
