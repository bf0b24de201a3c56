#!/usr/bin/env bash
# On a lent GPU machine (after lab/gpu/install_wheels.sh): the head-to-head's vLLM contender,
# lab/auto_tune_contender.sh, detached from the call, its settings after AUTO_TUNE_SH (a fetched
# copy of vLLM's benchmarks/auto_tune/auto_tune.sh, carried: never committed) as that script
# takes them; AUTO_TUNE_LIMIT_S (default 1380) stops it there and claims its best so far. Waits
# up to WAIT seconds, then copies contender.json, changes.txt, its log and result.txt and the
# copy that ran into $OUT (with its vLLM and benchmark logs, tarred).
#   bash lab/gpu/auto_tune.sh start AUTO_TUNE_SH WAIT [CONTENDER-ARGS...]
#       e.g. start .gpu-state/auto_tune.sh 480 $PWD/lab/gpu/models/qwen3-8b-dummy 2048 64 2000 150
#            "128 256 512" "2048 8192 16384"   (model, lengths, TTFT and TPOT SLOs, the grid)
#   bash lab/gpu/auto_tune.sh wait [WAIT]
# auto_tune.sh stops servers with `pkill -if vllm`: nothing else of ours may run beside it.
set -uo pipefail
cmd=$1; shift
source "$(dirname "${BASH_SOURCE[0]}")/detached.sh"
source /root/site/activate
w=/root/at  # a folder without "vllm" in its name: pkill -if vllm would match the script
running() { [ -f $w/at.pid ] && kill -0 "$(cat $w/at.pid)" 2>/dev/null; }
if [ "$cmd" = start ]; then
  running && { echo "auto_tune.sh is running: wait for it" >&2; exit 1; }
  src=$1 wait_s=${2:-480}; shift $(( $# < 2 ? $# : 2 ))
  mkdir -p $w/out && cp "$src" $w/auto_tune.sh && cp -r lab/auto_tune_contender.sh lab/auto_tune_shims $w/
  AUTO_TUNE_LIMIT_S=${AUTO_TUNE_LIMIT_S:-1380} setsid nohup bash $w/auto_tune_contender.sh \
    $w/auto_tune.sh "$1" $w/out "${@:2}" > $w/contender.log 2>&1 < /dev/null &
  echo $! > $w/at.pid
else
  wait_s=${1:-540}
fi
wait_pid $w/at.pid "$wait_s" && echo "AUTO_TUNE FINISHED" || echo "AUTO_TUNE STILL RUNNING"
tail -c 3000 $w/contender.log
tail -c 3000 $w/out/auto_tune.log 2>/dev/null
cp $w/contender.log $w/out/contender.json $w/out/changes.txt $w/out/auto_tune.log \
  $w/out/auto_tune.run.sh "$OUT/" 2>/dev/null
find $w/out -name result.txt -exec cp {} "$OUT/" \; 2>/dev/null
(cd $w/out && find . -type f -size -2M -name '*.txt' | tar -czf "$OUT/auto_tune.tgz" -T -)
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > "$OUT/gpu.txt"
