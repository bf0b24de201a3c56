#!/usr/bin/env bash
# On the GPU machine (after lab/GPU-MACHINES.md's install): the capacity search with and without
# settling (autotune.measure.settle) on the same boot of each config, in a random order, with
# the H100 capacity study's workload (as lab/gpu/capacities.sh). Detached from the call; wait
# up to WAIT seconds, then copy every finished search's JSON, the timings and logs into $OUT.
#   bash lab/gpu/settle_ab.sh start PLAN [WAIT]   # PLAN: one boot a line, LABEL[:settle] [VLLM-FLAGS...]
#   bash lab/gpu/settle_ab.sh wait [WAIT]
# Each config is booted with the study's cache root (/root/w/vcache: the same variables as
# autotune.measure.runner.server_env), timed to /health, then searched twice over --url. The
# first line's config is booted once before, cold, and stopped: every timed boot is warm. A label
# ending in ':settle' is searched once, with settling only. AB_COLD=0 skips the cold boot (then the
# first line's timed boot is a fresh machine's).
set -uo pipefail
cmd=$1; shift
root=${AB_ROOT:-/root}
[ -f "$root/site/activate" ] && source "$root/site/activate"
export PYTHONUNBUFFERED=1
res=$root/w/ab
mkdir -p "$res"
pack() {
  tar -C "$res" -czf "$OUT/ab.tgz" --exclude='*.sqlite*' . 2>/dev/null
  cp "$res"/*.json "$res"/times.txt "$OUT/" 2>/dev/null || true
  cat "$res"/times.txt 2>/dev/null
}
case $cmd in
  start)
    plan=$(realpath "$1"); wait_s=${2:-540}
    rm -rf "$root/at" && mkdir -p "$root/at"
    tar --exclude=./.gpu --exclude=./.venv --exclude=./.git -cf - . | tar -C "$root/at" -xf -
    cp "$plan" "$res/plan.txt"
    cat > "$res/run.sh" <<EOF
set -u
cd $root/at
model=\${AB_MODEL:-/root/w/qwen3-8b-dummy}
c=$root/w/vcache
export VLLM_CACHE_ROOT=\$c TRITON_CACHE_DIR=\$c/triton TORCHINDUCTOR_CACHE_DIR=\$c/inductor \\
  FLASHINFER_WORKSPACE_BASE=\$c/flashinfer CUDA_CACHE_PATH=\$c/nv
search="--model \$model --profile \${AB_PROFILE:-sharegpt} --client-processes auto \\
  --capacity-axis rate --low 4 --start 64 --high 512 --tolerance 0.1 --min-duration-s 20 \\
  --point-warmup 8 --slo p99_ttft_ms<=2000 --slo p99_tpot_ms<=60 \${AB_SEARCH:-}"
boot() {  # label flags...: start vllm serve, wait for /health, print the seconds
  local label=\$1; shift
  local t0=\$(date +%s.%N)
  setsid \${AB_VLLM:-vllm} serve \$model --load-format dummy --port 8011 "\$@" \\
    > $res/\$label.server.log 2>&1 < /dev/null &
  echo \$! > $res/server.pid
  until curl -sf http://127.0.0.1:8011/health > /dev/null; do
    kill -0 \$(cat $res/server.pid) 2>/dev/null || { echo "boot failed" >&2; return 1; }
    sleep 1
  done
  python3 -c "print(round(\$(date +%s.%N) - \$t0, 1))"
}
stop() {
  kill -- -\$(cat $res/server.pid) 2>/dev/null
  while kill -0 \$(cat $res/server.pid) 2>/dev/null; do sleep 1; done
  sleep 3
}
first=${AB_COLD:-1}
while read -r label flags; do
  [ -z "\$label" ] && continue
  case \$label in \#*) continue ;; esac
  modes=\$(python3 -c "import random; m=['settle','no-settle']; random.shuffle(m); print(*m)")
  case \$label in *:settle) label=\${label%:settle}; modes=settle ;; esac
  if [ \$first = 1 ]; then
    s=\$(boot cold-\$label \$flags) && echo "\$label cold_boot \$s" >> $res/times.txt
    stop
    first=0
  fi
  s=\$(boot \$label \$flags) || { echo "\$label boot failed" >> $res/times.txt; stop; continue; }
  echo "\$label boot \$s" >> $res/times.txt
  for mode in \$modes; do
    t0=\$(date +%s.%N)
    python3 -m autotune bench --url http://127.0.0.1:8011 \$search --\$mode \\
      --workdir $res/\$label-\$mode --output $res/\$label-\$mode.json \\
      > $res/\$label-\$mode.out 2>&1 < /dev/null
    rc=\$?
    echo "\$label \$mode search \$(python3 -c "print(round(\$(date +%s.%N) - \$t0, 1))") rc=\$rc" >> $res/times.txt
  done
  stop
done < $res/plan.txt
echo ALL-DONE >> $res/times.txt
EOF
    setsid nohup bash "$res/run.sh" > "$res/run.log" 2>&1 < /dev/null &
    echo $! > "$res/pid"
    ;&
  wait)
    wait_s=${wait_s:-${1:-540}}
    pid=$(cat "$res/pid")
    end=$((SECONDS + wait_s))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
    kill -0 "$pid" 2>/dev/null && echo "STILL RUNNING" || echo "FINISHED"
    pack
    ;;
esac
