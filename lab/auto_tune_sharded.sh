#!/usr/bin/env bash
# vLLM's auto_tune.sh on several GPUs of one host at once (issue 66's contender with the GPU time
# a --workers study gets): its grid split by max-num-seqs, one shard per GPU, each shard
# lab/auto_tune_contender.sh unchanged in its own PID and network namespace. auto_tune.sh
# stops servers with `pkill -if vllm` and serves on port 8004, so two copies on one host would
# kill each other's servers and share a port; in a namespace each sees only its own processes
# and its own loopback. Needs root (unshare); the GPU is the shard's CUDA_VISIBLE_DEVICES.
#
#   bash lab/auto_tune_sharded.sh "GPUS" AUTO_TUNE_SH MODEL OUT_DIR \
#        [INPUT_LEN OUTPUT_LEN TTFT_MS TPOT_MS NUM_SEQS_LIST NUM_BATCHED_TOKENS_LIST]
# e.g. on four H200s: the seqs list dealt over the GPUs round-robin (3 values: three shards)
#   bash lab/auto_tune_sharded.sh "0 1 2 3" auto_tune.sh $PWD/lab/gpu/models/qwen3-8b-dummy \
#        $OUT 256 256 2000 60 "128 256 512" "2048 8192 16384"
# Writes OUT_DIR/shard-K/ (each shard's own contender.json and logs) and OUT_DIR/contender.json
# in auto_tune_contender.sh's format: the best shard's best config (auto_tune.sh's rule: the
# highest throughput among configs that met its latency limit), gpu_minutes summed over shards,
# wall_minutes as waited. lab/head_to_head.py claim-auto-tune --dir OUT_DIR reads it.
# AUTO_TUNE_LIMIT_S (each shard's limit: the budget's GPU-minutes over the shards) passes through.
set -uo pipefail
read -r -a gpus <<< "$1"; shift
src=$1 model=$2 out=$3
in_len=${4:-256} out_len=${5:-256} ttft=${6:-2000} tpot=${7:-60}
read -r -a seqs <<< "${8:-128 256 512}"
tokens=${9:-"2048 8192 16384"}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v unshare >/dev/null || { echo "no unshare on this host: run auto_tune_contender.sh alone" >&2; exit 1; }
mkdir -p "$out"
n=$(( ${#seqs[@]} < ${#gpus[@]} ? ${#seqs[@]} : ${#gpus[@]} ))
declare -a lists
for i in "${!seqs[@]}"; do lists[i % n]="${lists[i % n]:-} ${seqs[i]}"; done
t0=$(date +%s)
pids=()
for k in $(seq 0 $(( n - 1 ))); do
  d="$out/shard-$k"; mkdir -p "$d"
  echo "shard $k: GPU ${gpus[k]}, max-num-seqs${lists[k]}, max-num-batched-tokens $tokens"
  CUDA_VISIBLE_DEVICES=${gpus[k]} unshare --pid --net --fork --mount-proc \
    bash -c 'ip link set lo up && exec bash "$0" "$@"' "$here/auto_tune_contender.sh" \
    "$src" "$model" "$d" "$in_len" "$out_len" "$ttft" "$tpot" "${lists[k]# }" "$tokens" \
    > "$d/shard.log" 2>&1 &
  pids+=($!)
done
# one line a minute while shards run (a log file shows nothing else for up to the limit)
while [ -n "$(jobs -rp)" ]; do
  sleep "${PROGRESS_S:-60}" & wait $!
  lines=""
  for k in $(seq 0 $(( n - 1 ))); do
    # auto_tune.sh echoes each config's outcome as it writes it to its result file
    c=$(grep -cE 'request_rate: |does not meet latency' "$out/shard-$k/auto_tune.log" 2>/dev/null)
    lines="$lines shard $k: ${c:-0} configs done;"
  done
  echo "$(( ($(date +%s) - t0) / 60 )) min:$lines $(jobs -rp | wc -l) running"
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
wall=$(( $(date +%s) - t0 ))
python3 - "$out" "$n" "$rc" "$wall" <<'PY'
import json, os, sys
out, n, rc, wall = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
shards = []
for k in range(n):
    path = os.path.join(out, f"shard-{k}", "contender.json")
    shards.append(json.load(open(path)) if os.path.isfile(path) else {"exit": None, "best": None})
done = [s for s in shards if s.get("best")]
best = max(done, key=lambda s: s["best"]["throughput"], default=None)
first = next((s for s in shards if "e2el_limit_ms" in s), {})
doc = {"exit": rc, "gpu_minutes": round(sum(s.get("gpu_minutes") or 0 for s in shards), 2),
       "wall_minutes": round(wall / 60, 2), "shards": shards,
       "stopped_at_limit": any(s.get("stopped_at_limit") for s in shards),
       **{k: first.get(k) for k in ("e2el_limit_ms", "input_len", "output_len")},
       "best": None if best is None else best["best"],
       "claimed_capacity": None if best is None else best["claimed_capacity"]}
json.dump(doc, open(os.path.join(out, "contender.json"), "w"), indent=1)
print(json.dumps({k: v for k, v in doc.items() if k != "shards"}))
PY
exit $rc
