#!/usr/bin/env bash
# On the GPU machine, for scripts/gpu/moe_accept.py (issue #46 steps 2, 3, 5 on the MoE), after
# the chunk calls of scripts/gpu/prepare.sh. Run from the project root (the call's directory).
#   bash scripts/gpu/moe_accept.sh start DEADLINE_IN [WAIT]
#       installs the chunks' wheels, copies the checkout to /root/acc/at, starts the run there
#       detached (setsid) with its deadline DEADLINE_IN seconds from now, then waits as `wait`
#   bash scripts/gpu/moe_accept.sh wait [WAIT]
#       waits up to WAIT seconds (default 540) for the run to end, then packs what has landed
#       into $OUT (results.jsonl, orchestrator.log, acc.tgz) and prints a compact view
set -uo pipefail
cmd=$1; shift
acc=/root/acc
export PYTHONUNBUFFERED=1
case $cmd in
  start)
    deadline_in=$1; wait_s=${2:-480}
    t0=$(date +%s)
    cd /root/w || exit 1
    for first in *.part000; do
      [ -e "$first" ] || continue
      whl=${first%.part000}
      cat "$whl".part* > "$whl" && rm "$whl".part*
    done
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /root/site \
      ./*.whl || exit 1
    cat > /root/site/activate <<'A'
export PYTHONPATH=/root/site${PYTHONPATH:+:$PYTHONPATH} PATH=/root/site/bin:$PATH
A
    cd - > /dev/null || exit 1
    source /root/site/activate
    echo "installed in $(( $(date +%s) - t0 )) s"
    mkdir -p $acc/res
    rm -rf $acc/at && mkdir -p $acc/at
    tar --exclude=./.gpu --exclude=./.git --exclude=./.venv --exclude=./venv --exclude=./docs \
      --exclude=./mlruns -cf - . | tar -C $acc/at -xf -
    cd $acc/at || exit 1
    # the machine while it runs: GPU clocks, power, temperature and the host's CPU (steal)
    setsid nohup nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
      --format=csv -l 5 > $acc/res/gpu-telemetry.csv 2>&1 < /dev/null &
    setsid nohup nvidia-smi --query-gpu=timestamp,clocks_event_reasons.active --format=csv -l 5 \
      > $acc/res/gpu-reasons.csv 2>&1 < /dev/null &
    setsid nohup vmstat -t 5 > $acc/res/vmstat.log 2>&1 < /dev/null &
    setsid nohup python3 scripts/gpu/moe_accept.py run --res $acc/res \
      --deadline $(( t0 + deadline_in )) > $acc/res/orchestrator.log 2>&1 < /dev/null &
    echo $! > $acc/pid
    echo "started (pid $(cat $acc/pid)), deadline in $(( t0 + deadline_in - $(date +%s) )) s"
    cd - > /dev/null || exit 1
    ;;
  wait)
    wait_s=${1:-540}
    source /root/site/activate
    ;;
  *) echo "start or wait" >&2; exit 2 ;;
esac
pid=$(cat $acc/pid)
end=$((SECONDS + wait_s))
while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 3; done
kill -0 "$pid" 2>/dev/null && echo "STILL RUNNING" || echo "FINISHED"
python3 $acc/at/scripts/gpu/moe_accept.py pack --res $acc/res --out "$OUT"
# a file over 16 MiB does not come back: split the tarball (cat acc.tgz.part* > acc.tgz here)
if [ "$(stat -c %s "$OUT/acc.tgz")" -gt 15000000 ]; then
  (cd "$OUT" && split -b 14M acc.tgz acc.tgz.part && rm acc.tgz)
fi
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
python3 - <<'PY'
import json
for line in open("/root/acc/res/results.jsonl"):
    r = json.loads(line)
    if r.get("kind") == "boot":
        print(r["step"], "rc", r["rc"], "wall", r["wall_s"], "cap", r.get("capacity"),
              "timings", r.get("timings"), "jit lines", len(r.get("jit_lines", [])))
        for p in r.get("points", []):
            print("   ", json.dumps(p))
    else:
        print(json.dumps(r)[:700])
PY
tail -c 1200 $acc/res/orchestrator.log | grep -v '^{' | tail -4
for f in $(ls -t $acc/res/*.out 2>/dev/null | head -1); do echo "== $f"; tail -c 1500 "$f"; done
