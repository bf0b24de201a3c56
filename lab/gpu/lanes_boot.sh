#!/usr/bin/env bash
# On a host of several GPUs, after the chunk calls of lab/gpu/prepare.sh: one cold
# `vllm serve` per GPU at once (the MoE on the first two, the dense 8B shape on the rest), each
# with its own cache root as moe_accept.sh's ACC_LANES gives each lane, and the time each takes
# to answer /health. What four cold boots at once cost before a lanes run is planned on it.
#   bash lab/gpu/lanes_boot.sh LIMIT_S      (results under $OUT as they land)
set -uo pipefail
limit=${1:-300}
bash lab/gpu/install_wheels.sh > "$OUT/boots.txt" || exit 1
cat "$OUT/boots.txt"
source /root/site/activate
n=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader >> "$OUT/boots.txt"
nproc >> "$OUT/boots.txt"
moe=$PWD/lab/gpu/models/qwen3-30b-a3b-dummy
t1=$(date +%s)
for g in $(seq 0 $((n - 1))); do
  model=/root/w/qwen3-8b-dummy; [ "$g" -lt 2 ] && model=$moe
  c=/root/lanes/cache$g; mkdir -p $c
  # the caches as a study lays them under one root (autotune.measure.runner.cache_env); the
  # run of 2026-11-27 spelled the same five variables out, under $c/vllm and beside it
  mapfile -t caches < <(python3 -c 'import sys; from pathlib import Path
from autotune.api.parts import cache_env
print("\n".join(f"{k}={v}" for k, v in cache_env(Path(sys.argv[1])).items()))' "$c")
  env "${caches[@]}" CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$g \
    setsid nohup vllm serve "$model" --load-format dummy --port $((8010 + g)) \
    > "$OUT/boot$g.log" 2>&1 < /dev/null &
  echo "gpu $g: $(basename "$model") (pid $!)" >> "$OUT/boots.txt"
done
up=""
while [ $(( $(date +%s) - t1 )) -lt "$limit" ]; do
  for g in $(seq 0 $((n - 1))); do
    [[ $up == *",$g,"* ]] && continue
    if curl -sf "localhost:$((8010 + g))/health" > /dev/null; then
      up+=",$g,"; echo "gpu $g up after $(( $(date +%s) - t1 )) s" | tee -a "$OUT/boots.txt"
    fi
  done
  [ "$(echo "$up" | tr -cd ',' | wc -c)" -ge $((2 * n)) ] && break
  sleep 2
done
echo "after $(( $(date +%s) - t1 )) s: up ${up:-none}" | tee -a "$OUT/boots.txt"
uptime >> "$OUT/boots.txt"
for g in $(seq 0 $((n - 1))); do grep -h "init engine\|torch.compile takes\|Loading weights took\|Available KV cache" "$OUT/boot$g.log" | sed "s/^/gpu $g: /" | cut -c1-220; done >> "$OUT/boots.txt"
pkill -f "vllm serve"
true
