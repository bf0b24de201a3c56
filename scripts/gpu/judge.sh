#!/usr/bin/env bash
# On a lent GPU machine (after scripts/gpu/install_wheels.sh): bench/head_to_head.py judge
# detached from the call, from a copy of the checkout in /root/judge (each call lays the checkout
# again in place); wait up to WAIT seconds, then copy judged.json, the log and each contender's
# server log and reference runs (tarred) into $OUT.
#   bash scripts/gpu/judge.sh start CONTENDERS [WAIT] [JUDGE-ARGS...]  # e.g. --samples 3 --at 85.2
#   bash scripts/gpu/judge.sh wait  [WAIT]
set -uo pipefail
cmd=$1; shift
source /root/site/activate
export PYTHONUNBUFFERED=1
w=/root/judge
running() { [ -f /root/w/judge.pid ] && kill -0 "$(cat /root/w/judge.pid)" 2>/dev/null; }
if [ "$cmd" = start ]; then
  running && { echo "a judge is running: wait for it" >&2; exit 1; }
  contenders=$1 wait_s=${2:-540}; shift $(( $# < 2 ? $# : 2 ))
  mkdir -p $w/out /root/w
  tar --exclude=./mlruns --exclude=./.gpu --exclude=./.whl --exclude=./.venv --exclude=./results \
    -cf - . | tar -xf - -C $w
  cd $w
  setsid nohup python3 bench/head_to_head.py judge --config examples/h100-certified.yaml \
    --contenders "$contenders" --out $w/out/judged.json "$@" > /root/w/judge.log 2>&1 < /dev/null &
  echo $! > /root/w/judge.pid
else
  wait_s=${1:-540}
fi
end=$((SECONDS + wait_s))
while running && [ $SECONDS -lt $end ]; do sleep 5; done
running && echo "JUDGE STILL RUNNING" || echo "JUDGE FINISHED"
tail -c 5000 /root/w/judge.log
cp /root/w/judge.log $w/out/judged.json "$OUT/" 2>/dev/null
tar -czf "$OUT/judge.tgz" -C $w/out . 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > "$OUT/gpu.txt"
