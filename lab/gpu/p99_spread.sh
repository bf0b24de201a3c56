#!/usr/bin/env bash
# On the GPU machine, for lab/gpu/p99_spread.py (p99 TPOT at fixed rates on one warm stock
# MoE server), after the wheel calls (.gpu/ chunks copied to /root/w). Run from the project root.
#   bash lab/gpu/p99_spread.sh start DEADLINE_IN [WAIT]
#       installs the wheels into /root/site, copies the checkout to /root/p99/at, starts the run
#       there detached (setsid) with its deadline DEADLINE_IN s from now, then waits as `wait`
#   bash lab/gpu/p99_spread.sh wait [WAIT]
#       waits up to WAIT s (default 540) for the run to end, packs what landed into $OUT
#   (fresh, after run: see p99_spread.py; on 2026-11-26 started by hand with setsid)
set -uo pipefail
cmd=$1; shift
top=/root/p99
export PYTHONUNBUFFERED=1
case $cmd in
  start)
    deadline_in=$1; wait_s=${2:-480}
    t0=$(date +%s)
    bash lab/gpu/install_wheels.sh || exit 1
    source /root/site/activate
    mkdir -p $top/res
    rm -rf $top/at && mkdir -p $top/at
    tar --exclude=./.gpu --exclude=./.git --exclude=./docs -cf - . | tar -C $top/at -xf -
    cd $top/at || exit 1
    setsid nohup python3 -m lab.gpu.p99_spread run --res $top/res \
      --deadline $(( t0 + deadline_in )) > $top/res/orchestrator.log 2>&1 < /dev/null &
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
PYTHONPATH=$top/at python3 -m lab.gpu.p99_spread pack --res $top/res --out "$OUT"
python3 - <<'PY'
import json
for line in open("/root/p99/res/results.jsonl"):
    r = json.loads(line)
    if r.get("kind") == "run":
        print(r["tag"], r["i"], r["rate"], r["seed"], "p99/mean TPOT", r.get("p99_tpot_ms"),
              r.get("mean_tpot_ms"), "p99 TTFT", r.get("p99_ttft_ms"), "done",
              r.get("completed"), "short", r.get("short_lt16"), "pc", r.get("prefix_hit_rate"),
              "jit", len(r.get("jit_lines", [])), "wall", r.get("wall_s"), r.get("error", ""))
    else:
        print(json.dumps(r)[:400])
PY
tail -c 600 $top/res/orchestrator.log | grep -v '^{'
