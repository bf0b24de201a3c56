"""Which compile key each trial's boot used, and what a shared compile cache saves whatever the
order of the trials. Reads each trial's server.log (vLLM's "torch_compile_cache/<hash>" path,
"init engine ... (compilation: X s)", and "Directly load" when the cache hit).

    python -m lab.compile_keys OUT.json STUDY_DIR [STUDY_DIR ...]

A boot whose key an earlier boot on the machine already compiled loads it from a shared cache
root (autotune.measure.runner.server_env) in about CACHED_S. The saving counts every repeat of
a key, so it does not depend on the order of the trials: each key compiles once either way.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

KEY = re.compile(r"torch_compile_cache/([0-9a-f]+)")
INIT = re.compile(r"init engine .* took ([0-9.]+) s \(compilation: ([0-9.]+) s\)")
CACHED_S = 9.0  # compilation seconds of a boot that loaded its key (trials 13, 14 on the H100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("dirs", nargs="+", type=Path)
    a = ap.parse_args()
    boots: list[dict[str, Any]] = []
    for d in a.dirs:
        for log in sorted(d.glob("trial-*/server.log")):
            text = log.read_text(errors="replace")
            key, init = KEY.search(text), INIT.search(text)
            if not (key and init):
                continue  # the boot failed before compiling
            boots.append({"trial": f"{d.name}/{log.parent.name}", "key": key.group(1),
                          "init_engine_s": float(init.group(1)),
                          "compilation_s": float(init.group(2)),
                          "hit": "Directly load" in text})
    seen: set[str] = set()
    saving = 0.0
    for b in boots:
        b["repeat"] = b["key"] in seen
        if b["repeat"] and not b["hit"]:
            saving += max(b["compilation_s"] - CACHED_S, 0.0)
        seen.add(b["key"])
    out = {"boots": len(boots), "distinct_keys": len(seen),
           "repeats": sum(b["repeat"] for b in boots),
           "repeats_that_compiled_again": sum(b["repeat"] and not b["hit"] for b in boots),
           "compilation_s": round(sum(b["compilation_s"] for b in boots), 1),
           "shared_cache_saving_s": round(saving, 1), "per_boot": boots}
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print({k: v for k, v in out.items() if k != "per_boot"})


if __name__ == "__main__":
    main()
