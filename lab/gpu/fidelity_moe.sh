#!/usr/bin/env bash
# On the GPU machine: lab/fidelity.py (autotune's client against `vllm bench serve`,
# interleaved in a shuffled order, a seed per tool, rate and run: no run cache-hot) on the
# Qwen3-30B-A3B-shaped MoE with fp8 + fp8 KV, after the wheel calls (.gpu/x chunks copied to
# /root/w). Run from the project root.
#   bash lab/gpu/fidelity_moe.sh start RATES [WAIT]
#       installs the wheels into /root/site, copies the checkout to /root/fid/at, starts the run
#       there detached (setsid), then waits as `wait`
#   bash lab/gpu/fidelity_moe.sh wait [WAIT]
#       waits up to WAIT s (default 540) for it to end and packs what landed into $OUT
set -uo pipefail
cmd=$1; shift
top=/root/fid
export PYTHONUNBUFFERED=1
case $cmd in
  start)
    rates=$1; wait_s=${2:-420}
    bash lab/gpu/install_wheels.sh || exit 1
    source /root/site/activate
    if [ -f $top/pid ] && kill -0 "$(cat $top/pid)" 2>/dev/null; then
      echo "a run is still going (pid $(cat $top/pid)): wait for it" >&2; exit 1
    fi
    rm -rf $top && mkdir -p $top/at $top/res
    tar --exclude=./.gpu --exclude=./.git --exclude=./docs -cf - . | tar -C $top/at -xf -
    cd $top/at || exit 1
    PYTHONPATH=$top/at:$PYTHONPATH setsid nohup python3 -m lab.fidelity --out $top/res \
      --model lab/gpu/models/qwen3-30b-a3b-dummy --rates "$rates" --runs "${RUNS:-3}" \
      --span-s 20 --fresh-seeds --warm-s 20 --server-arg=--quantization --server-arg=fp8 \
      --server-arg=--kv-cache-dtype --server-arg=fp8 --server-arg=--jit-monitor-verbose \
      ${EXTRA_SERVER_ARGS:-} \
      > $top/res/orchestrator.log 2>&1 < /dev/null &
    echo $! > $top/pid
    cd - > /dev/null || exit 1
    ;;
  wait)
    wait_s=${1:-540}
    source /root/site/activate
    ;;
  *) echo "start or wait" >&2; exit 2 ;;
esac
pid=$(cat $top/pid)
end=$((SECONDS + wait_s))
while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 3; done
kill -0 "$pid" 2>/dev/null && echo "STILL RUNNING" || echo "FINISHED"
tar -C $top/res -czf "$OUT/fid.tgz" --exclude='*.csv' . 2>/dev/null
(cd $top/res && find . -name '*.csv' -print0 | tar -czf "$OUT/fid-csv.tgz" --null -T -)
cp $top/res/runs.jsonl $top/res/orchestrator.log "$OUT/" 2>/dev/null
grep -v "POST\|GET " $top/res/orchestrator.log | tail -c 3000
