#!/usr/bin/env bash
# On the GPU machine, for lab/gpu/launch_ab.py (issue #46 step 1), after the chunk calls of
# lab/gpu/prepare.sh. Run from the project root (the call's working directory).
#   bash lab/gpu/launch_ab.sh start DEADLINE_IN [WAIT] [launch_ab.py run args...]
#       installs the chunks' wheels (lab/gpu/install_wheels.sh), copies the
#       checkout to /root/ab/at, starts the A/B there detached (setsid), then waits as `wait`
#   bash lab/gpu/launch_ab.sh wait [WAIT]
#       waits up to WAIT seconds (default 560) for the A/B to end, then packs what it has into
#       $OUT: results.jsonl, bench.tgz (vllm bench serve's result files), logs-excerpt.tgz
set -uo pipefail
cmd=$1; shift
ab=/root/ab
export PYTHONUNBUFFERED=1
case $cmd in
  start)
    deadline=$1; wait_s=${2:-480}; shift 2
    t0=$(date +%s)
    bash lab/gpu/install_wheels.sh || exit 1
    source /root/site/activate
    mkdir -p $ab/res
    rm -rf $ab/at && mkdir -p $ab/at
    tar --exclude=./.gpu --exclude=./.git --exclude=./.venv --exclude=./docs -cf - . \
      | tar -C $ab/at -xf -
    cd $ab/at || exit 1
    left=$(( deadline - ($(date +%s) - t0) ))
    setsid nohup python3 -m lab.gpu.launch_ab run --deadline-in "$left" "$@" \
      > $ab/res/orchestrator.log 2>&1 < /dev/null &
    echo $! > $ab/pid
    echo "started the A/B (pid $(cat $ab/pid)), deadline in $left s"
    ;;
  wait)
    wait_s=${1:-560}
    source /root/site/activate
    ;;
  *) echo "start or wait" >&2; exit 2 ;;
esac
pid=$(cat $ab/pid)
end=$((SECONDS + wait_s))
while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 3; done
kill -0 "$pid" 2>/dev/null && echo "STILL RUNNING" || echo "FINISHED"
PYTHONPATH=$ab/at python3 -m lab.gpu.launch_ab pack --res $ab/res --out "$OUT"
cp $ab/res/orchestrator.log "$OUT/orchestrator.log" 2>/dev/null
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
# a compact view of what landed
python3 - <<'PY'
import json
for line in open("/root/ab/res/results.jsonl"):
    r = json.loads(line)
    k = r.get("kind")
    if k == "point":
        c, s = r.get("client", {}), r.get("server", {})
        t = s.get("request_time_per_output_token", {})
        print(f'{r["t"]:7.1f} {r["shape"]:5} {r["tag"]:6} {r["launch"]:7} p{r["pair"]} '
              f'r{r["rate"]:g} s{r["seed"]} n{r["num_prompts"]} wall {r["wall_s"]} | '
              f'srv tpot {t.get("mean_ms")} | cli tpot {c.get("mean_tpot_ms")} '
              f'p99 {c.get("p99_tpot_ms")} ttft {c.get("mean_ttft_ms")} p99 {c.get("p99_ttft_ms")}'
              f' | jit {len(r.get("jit_events", []))} {r.get("error", "")}')
    elif k in ("boot",):
        print(f'{r["t"]:7.1f} boot {r["shape"]} {r["launch"]} {r["boot_s"]} s '
              f'{r.get("launch_seen", "")} kv {r.get("kv_cache_tokens")} tok '
              f'{r.get("kv_cache_gib")} GiB gpu {r.get("gpu_used_mib")} MiB')
    else:
        print(json.dumps(r)[:400])
PY
tail -c 1500 $ab/res/orchestrator.log | grep -v '^{' | tail -5
