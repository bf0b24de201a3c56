#!/usr/bin/env bash
# On the GPU machine, for lab/gpu/moe_accept.py (issue #46 steps 2, 3, 5 on the MoE), after
# the chunk calls of lab/gpu/prepare.sh. Run from the project root (the call's directory).
#   bash lab/gpu/moe_accept.sh start DEADLINE_IN [WAIT]
#       installs the chunks' wheels, copies the checkout to /root/acc/at, starts the run there
#       detached (setsid) with its deadline DEADLINE_IN seconds from now, then waits as `wait`
#   bash lab/gpu/moe_accept.sh wait [WAIT]
#       waits up to WAIT seconds (default 540) for the run to end, then packs what has landed
#       into $OUT (results.jsonl, orchestrator.log, acc.tgz) and prints a compact view
# With ACC_LANES="GPU|MODEL|PLAN;GPU|MODEL|PLAN;..." (e.g. "0|moe|defaults:24;1|dense|fp8:51,
# pick:80") `start` runs one orchestrator per lane at once, each with CUDA_VISIBLE_DEVICES=GPU,
# ACC_MODEL=MODEL, ACC_PLAN=PLAN and its own results folder (res/laneGPU: its own cache root),
# so the configs of one plan share a host; `wait` waits for every lane and packs each into
# $OUT/laneGPU, then tars $OUT into one all.tar (a call brings back at most 8 files: four lanes'
# files and the host's telemetry are 15). ACC_NO_INSTALL=1 skips the wheels (a dry run of the
# lanes off the GPU machine). ACC_DIR holds the cache roots too (res/laneGPU/work/vllm-cache):
# a second run with a new ACC_DIR boots cold (2026-11-27: four searches lost at their deadline).
set -uo pipefail
cmd=$1; shift
acc=${ACC_DIR:-/root/acc}  # ACC_DIR: elsewhere, for a dry run
export PYTHONUNBUFFERED=1
case $cmd in
  start)
    deadline_in=$1; wait_s=${2:-480}
    lanes_in=${ACC_LANES:-}  # unset: one run (2026-11-27: `set -u` stopped it unset)
    IFS=';' read -ra lanes <<< "${lanes_in// /}"
    seen=,
    for lane in "${lanes[@]}"; do  # every lane checked before anything starts
      [ -n "$lane" ] || continue
      IFS='|' read -r gpu model plan <<< "$lane"
      if [ -z "$gpu" ] || [ -z "$model" ] || [ -z "$plan" ] || [[ $seen == *",$gpu,"* ]]; then
        echo "ACC_LANES: lane '$lane' needs GPU|MODEL|PLAN, each GPU once" >&2; exit 2
      fi
      seen+="$gpu,"
    done
    t0=$(date +%s)
    if [ "${ACC_NO_INSTALL:-0}" != 1 ]; then
      bash lab/gpu/install_wheels.sh || exit 1
      source /root/site/activate
    fi
    mkdir -p $acc/res
    rm -rf $acc/at && mkdir -p $acc/at
    tar --exclude=./.gpu --exclude=./.git --exclude=./.venv --exclude=./venv --exclude=./docs \
      --exclude=./mlruns -cf - . | tar -C $acc/at -xf -
    cd $acc/at || exit 1
    # the machine while it runs: GPU clocks, power, temperature and the host's CPU (steal); an
    # earlier run's loggers stop first (2026-11-27: a second `start` on one machine left them
    # writing into the new files, which came back holding NUL bytes)
    [ -f $acc/telemetry.pids ] && kill $(cat $acc/telemetry.pids) 2>/dev/null
    setsid nohup nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
      --format=csv -l 5 > $acc/res/gpu-telemetry.csv 2>&1 < /dev/null &
    echo $! > $acc/telemetry.pids
    setsid nohup nvidia-smi --query-gpu=timestamp,clocks_event_reasons.active --format=csv -l 5 \
      > $acc/res/gpu-reasons.csv 2>&1 < /dev/null &
    echo $! >> $acc/telemetry.pids
    setsid nohup vmstat -t 5 > $acc/res/vmstat.log 2>&1 < /dev/null &
    echo $! >> $acc/telemetry.pids
    : > $acc/pids
    if [ -n "${lanes_in//[ ;]/}" ]; then  # ";" or " ": no lane, one run
      for lane in "${lanes[@]}"; do
        [ -n "$lane" ] || continue
        IFS='|' read -r gpu model plan <<< "$lane"
        mkdir -p "$acc/res/lane$gpu"
        # a lane runs its plan only: ACC_REF, ACC_CHECK and ACC_AB would boot stock servers
        # on one fixed port in every lane
        env -u ACC_REF -u ACC_CHECK -u ACC_AB CUDA_DEVICE_ORDER=PCI_BUS_ID \
          CUDA_VISIBLE_DEVICES="$gpu" ACC_MODEL="$model" ACC_PLAN="$plan" setsid nohup python3 -m \
          lab.gpu.moe_accept run --res "$acc/res/lane$gpu" \
          --deadline $(( t0 + deadline_in )) > "$acc/res/lane$gpu/orchestrator.log" 2>&1 \
          < /dev/null &
        echo "$! lane$gpu" >> $acc/pids
        echo "lane $gpu: $model $plan (pid $!)"
      done
    else
      setsid nohup python3 -m lab.gpu.moe_accept run --res $acc/res \
        --deadline $(( t0 + deadline_in )) > $acc/res/orchestrator.log 2>&1 < /dev/null &
      echo "$! ." >> $acc/pids
    fi
    echo "started, deadline in $(( t0 + deadline_in - $(date +%s) )) s"
    cd - > /dev/null || exit 1
    ;;
  wait)
    wait_s=${1:-540}
    [ -e /root/site/activate ] && source /root/site/activate
    ;;
  *) echo "start or wait" >&2; exit 2 ;;
esac
end=$((SECONDS + wait_s))
running() { local p; for p in $(cut -d' ' -f1 $acc/pids); do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
while running && [ $SECONDS -lt $end ]; do sleep 3; done
running && echo "STILL RUNNING" || echo "FINISHED"
while read -r pid sub; do
  res=$acc/res/$sub out=$OUT/$sub
  [ "$sub" = . ] && res=$acc/res out=$OUT
  PYTHONPATH=$acc/at python3 -m lab.gpu.moe_accept pack --res "$res" --out "$out" < /dev/null
  # a file over 16 MiB does not come back: split the tarball (cat acc.tgz.part* > acc.tgz here)
  if [ "$(stat -c %s "$out/acc.tgz")" -gt 15000000 ]; then
    (cd "$out" && split -b 14M acc.tgz acc.tgz.part && rm acc.tgz)
  fi
  echo "== $sub"
  # a lane that stopped before its first step (a bad plan) has no results.jsonl: its reason is
  # the orchestrator.log tail below
  [ -f "$res/results.jsonl" ] && RES=$res python3 - <<'PY'
import json, os
for line in open(os.path.join(os.environ["RES"], "results.jsonl")):
    r = json.loads(line)
    if r.get("kind") == "boot":
        print(r["step"], "rc", r["rc"], "wall", r["wall_s"], "cap", r.get("capacity"),
              "timings", r.get("timings"), "jit lines", len(r.get("jit_lines", [])))
        for p in r.get("points", []):
            print("   ", json.dumps(p))
    else:
        print(json.dumps(r)[:700])
PY
  tail -c 1200 "$res/orchestrator.log" | grep -v '^{' | tail -4
  for f in $(ls -t "$res"/*.out 2>/dev/null | head -1); do echo "== $f"; tail -c 1500 "$f"; done
done < $acc/pids
if grep -qv ' \.$' $acc/pids; then  # lanes (a later `wait` has no ACC_LANES): the host's telemetry
  cp $acc/res/gpu-telemetry.csv $acc/res/gpu-reasons.csv $acc/res/vmstat.log "$OUT"/ 2>/dev/null
  # one file back instead of 15 (tar xf all.tar here; split over 15 MB: cat all.tar.part* first)
  (cd "$OUT" && tar cf all.tar --remove-files lane* gpu-*.csv vmstat.log 2>/dev/null
   if [ "$(stat -c %s all.tar)" -gt 15000000 ]; then split -b 14M all.tar all.tar.part && rm all.tar; fi)
fi
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
