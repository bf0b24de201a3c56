#!/usr/bin/env bash
# The head-to-head's vLLM contender (issue 66): vLLM's own benchmarks/auto_tune/auto_tune.sh, at
# the installed version, run from a fetched copy (never committed here), on the GPU machine.
# auto_tune.sh keeps its settings as variables at its top; this sets them for our model and
# workload and runs it: a grid of max-num-seqs x max-num-batched-tokens, each booted, its request
# rate lowered 1 req/s at a time from its throughput until p99 E2EL fits. It knows one latency
# limit (p99 E2EL) and one workload (random lengths), so the limit comes from our SLOs:
# E2EL <= TTFT_SLO + TPOT_SLO x (OUTPUT_LEN - 1), and the lengths from our workload's means.
# Its best config is then judged like ours (export --verify's reference check at its claimed
# rate and at the best contender's).
#
#   bash bench/gpu/auto_tune_contender.sh AUTO_TUNE_SH MODEL OUT_DIR \
#        [INPUT_LEN OUTPUT_LEN TTFT_MS TPOT_MS NUM_SEQS_LIST NUM_BATCHED_TOKENS_LIST]
# e.g. (dense 8B, ShareGPT-like lengths, p99 TTFT <= 2 s, p99 TPOT <= 60 ms):
#   bash bench/gpu/auto_tune_contender.sh /root/w/auto_tune.sh $PWD/scripts/gpu/models/qwen3-8b-dummy $OUT \
#        256 256 2000 60 "128 256 512" "2048 8192 16384"
# Writes OUT_DIR/result.txt (auto_tune's own), its logs, and OUT_DIR/contender.json: the best
# config, its claimed rate, the GPU minutes the run took. A fetched copy: the `fetch` tool's
# snapshot of vllm-project/vllm at the installed version's tag, benchmarks/auto_tune/auto_tune.sh.
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
for v in MODEL INPUT_LEN OUTPUT_LEN MAX_LATENCY_ALLOWED_MS NUM_SEQS_LIST BASE; do
  grep -q "^$v=" "$work/tune/auto_tune.sh" || {
    echo "auto_tune.sh has no $v= line: this version's settings moved; read it" >&2; exit 1; }
done
t0=$(date +%s)
bash "$work/tune/auto_tune.sh" > "$out/auto_tune.log" 2>&1
rc=$?
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
doc = {"exit": rc, "gpu_minutes": secs / 60, "e2el_limit_ms": e2el, "input_len": i,
       "output_len": o, "best": best,
       "claimed_capacity": None if best is None or best["request_rate"] == "inf"
       else float(best["request_rate"])}
json.dump(doc, open(f"{out}/contender.json", "w"), indent=1)
print(json.dumps(doc))
PY
