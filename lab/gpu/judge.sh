#!/usr/bin/env bash
# On a lent GPU machine (after lab/gpu/install_wheels.sh): lab/head_to_head.py judge
# detached from the call, from a copy of the checkout in /root/judge (each call lays the checkout
# again in place; JUDGE_CONFIG: the study file, lab/examples/h100-certified.yaml by default); wait up
# to WAIT seconds, then copy judged.json, the log and each contender's server log and reference
# runs (tarred) into $OUT.
#   bash lab/gpu/judge.sh start CONTENDERS [WAIT] [JUDGE-ARGS...]  # e.g. --samples 3 --at 85.2
#   bash lab/gpu/judge.sh wait  [WAIT]
#   bash lab/gpu/judge.sh stop            # SIGTERM the judge and its server
set -uo pipefail
cmd=$1; shift
source "$(dirname "${BASH_SOURCE[0]}")/detached.sh"
source /root/site/activate
export PYTHONUNBUFFERED=1
w=${JUDGE_DIR:-/root/judge}  # another folder for a second judge on the same machine
running() { [ -f $w/judge.pid ] && kill -0 "$(cat $w/judge.pid)" 2>/dev/null; }
if [ "$cmd" = start ]; then
  running && { echo "a judge is running: wait for it" >&2; exit 1; }
  contenders=$1 wait_s=${2:-540}; shift $(( $# < 2 ? $# : 2 ))
  mkdir -p $w/out
  copy_checkout $w
  cd $w
  # lab/ is the script's folder, not the package's: the copy goes on the path
  PYTHONPATH=$w${PYTHONPATH:+:$PYTHONPATH} setsid nohup python3 -m lab.head_to_head judge \
    --config "${JUDGE_CONFIG:-lab/examples/h100-certified.yaml}" --contenders "$contenders" \
    --out $w/out/judged.json "$@" > $w/judge.log 2>&1 < /dev/null &
  echo $! > $w/judge.pid
elif [ "$cmd" = stop ]; then
  # the judge's group (setsid), then a server it started (in a session of its own); from this
  # file, not a call's command line, which would hold the pattern and match itself
  running && kill -TERM -- "-$(cat $w/judge.pid)"
  for _ in $(seq 60); do running || break; sleep 1; done
  pkill -TERM -f 'bin/vllm serve'; sleep 5
  wait_s=0
else
  wait_s=${1:-540}
fi
wait_pid $w/judge.pid "$wait_s" && echo "JUDGE FINISHED" || echo "JUDGE STILL RUNNING"
tail -c 5000 $w/judge.log
cp $w/judge.log $w/out/judged.json "$OUT/" 2>/dev/null
# what comes back is 16 MiB a file at most: the runs' logs and small records, not their per-request JSON
(cd $w/out && find . -type f -size -2M | tar -czf "$OUT/judge.tgz" -T -)
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > "$OUT/gpu.txt"
