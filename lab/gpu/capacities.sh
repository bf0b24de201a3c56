#!/usr/bin/env bash
# On the GPU machine (after lab/GPU-MACHINES.md's install): measure the capacity of several configs, one
# boot each, in the order of a plan, detached from the call; wait up to WAIT seconds, then pack
# every finished boot's result JSON, the console output and the servers' logs into $OUT.
#   bash lab/gpu/capacities.sh start PLAN [WAIT]   # PLAN: one boot a line, LABEL [VLLM-FLAGS...]
#   bash lab/gpu/capacities.sh wait [WAIT]
# Each boot is `autotune bench --capacity-axis rate` with the H100 capacity study's workload and
# search (lab/examples/h100-capacity.yaml): ShareGPT, p99 TTFT <= 2 s, p99 TPOT <= 60 ms, start 64,
# tolerance 0.1, arrivals over at least 20 s a point. CAP_ARGS replaces those options.
# It runs from a copy of the checkout (/root/at), so a later call laying the tree again cannot
# pull the working directory from under it.
set -uo pipefail
cmd=$1; shift
root=${CAP_ROOT:-/root}  # another root for a trial run off the GPU machine
[ -f "$root/site/activate" ] && source "$root/site/activate"
export PYTHONUNBUFFERED=1
res=$root/w/cap
mkdir -p "$res"
pack() {
  tar -C "$res" -czf "$OUT/cap.tgz" --exclude='*.sqlite*' --exclude=vllm-cache . 2>/dev/null
  cp "$res"/*.json "$OUT/" 2>/dev/null || true
  cat "$res"/done.txt 2>/dev/null
}
case $cmd in
  start)
    plan=$(realpath "$1"); wait_s=${2:-540}
    rm -rf "$root/at" && mkdir -p "$root/at"
    tar --exclude=./.gpu --exclude=./.venv --exclude=./.git -cf - . | tar -C "$root/at" -xf -
    cp "$plan" "$res/plan.txt"
    cd "$root/at"
    default_args="--model /root/w/qwen3-8b-dummy --profile sharegpt --client-processes auto \
      --capacity-axis rate --low 4 --start 64 --high 512 --tolerance 0.1 --min-duration-s 20 \
      --point-warmup 8 --slo 'p99_ttft_ms<=2000' --slo 'p99_tpot_ms<=60' --boot-timeout 900"
    cat > "$res/run.sh" <<EOF
set -u
n=0
while read -r label flags; do
  [ -z "\$label" ] && continue
  case \$label in \#*) continue ;; esac
  n=\$((n + 1))
  start=\$(date +%s)
  python3 -m autotune bench ${CAP_ARGS:-$default_args} --workdir $res/\$n-\$label \
    --output $res/\$n-\$label.json -- --load-format dummy \$flags > $res/\$n-\$label.out 2>&1
  echo "\$n \$label rc=\$? \$(( \$(date +%s) - start ))s" >> $res/done.txt
done < $res/plan.txt
echo ALL-DONE >> $res/done.txt
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
    latest=$(ls -t "$res"/*.out 2>/dev/null | head -1)
    [ -n "$latest" ] && tail -c 3000 "$latest"
    pack
    ;;
esac
