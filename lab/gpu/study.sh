#!/usr/bin/env bash
# On a lent GPU machine (after lab/GPU-MACHINES.md's install): start or resume a study detached from the
# call, wait up to WAIT seconds, then pack the study's storage, MLflow store and logs into $OUT.
#   bash lab/gpu/study.sh start CONFIG [WAIT] [STUDY-ARGS...]  # resumes .gpu-state/study.tgz
#   bash lab/gpu/study.sh wait  CONFIG [WAIT]
#   bash lab/gpu/study.sh confirm CONFIG [WAIT] [CONFIRM-ARGS...]  # `start` for `autotune confirm`
#   bash lab/gpu/study.sh stop                         # SIGTERM the study, wait for its exit
#   bash lab/gpu/study.sh run   AUTOTUNE-ARGS...          # foreground, e.g. export --validate
# A call carries at most 64 MiB: a set-up chunk (.gpu/cN) plus the checkout. Cut the chunks with
# lab/gpu/prepare.sh, which sizes them to what the checkout leaves; commit a study's
# final archive only, recompressed (`gunzip -c study.tgz | xz -9e > study.tar.xz`, 55% smaller).
# STUDY-ARGS: pass `--timeout S` with the machine's lease left, less the export's time, so the
# study stops between trials instead of being cut off in one.
# Everything runs from a copy of the checkout in /root/run (its mlruns is the study's workdir):
# each call lays the checkout again in place, and a study running from there once had a client
# process fail to import autotune mid-copy (a worker then hung, docs/results/certified). `start`
# and `run` refresh the copy's code while no study runs; `.gpu-state/study.tgz` resumes into it.
set -uo pipefail
cmd=$1; shift
cfg="" wait_s=560 extra=() sub=study
if [ "$cmd" = confirm ]; then sub=confirm cmd=start; fi
case $cmd in
  run) extra=("$@") ;;
  start|wait) cfg=$1 wait_s=${2:-560}; shift $(( $# < 2 ? $# : 2 )); extra=("$@") ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/detached.sh"
source /root/site/activate
export PYTHONUNBUFFERED=1
if [ ! -e /root/site/plotly ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /root/site .whl/*.whl
fi
mkdir -p /root/w /root/run
running() { [ -f /root/w/study.pid ] && kill -0 "$(cat /root/w/study.pid)" 2>/dev/null; }
if [ "$cmd" = start ] || [ "$cmd" = run ]; then
  if running; then
    [ "$cmd" = start ] && { echo "a study is running (pid $(cat /root/w/study.pid)): wait or stop it" >&2; exit 1; }
  else  # the code, not the study's state (mlruns) nor the set-up chunks
    copy_checkout /root/run
  fi
fi
cd /root/run
# the examples' workdir is the checkout's mlruns (git ignores it; a call keeps it in place)
pack() {
  cp /root/w/*.log "$OUT/" 2>/dev/null || true
  [ -d mlruns/studies ] || return 0
  tar -czf "$OUT/study.tgz" --exclude='vllm-cache' --exclude='*.tmp' --exclude='mlruns/models' \
    mlruns
  nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > "$OUT/gpu.txt"
}
case $cmd in
  start)
    if [ -f .gpu-state/study.tgz ] && [ ! -d mlruns/studies ]; then
      tar -xzf .gpu-state/study.tgz  # mlruns/..., as pack wrote it
    fi
    log=/root/w/$(basename "$cfg" .yaml).log  # one log a study: several can follow on a machine
    setsid nohup python3 -m autotune "$sub" --config "$cfg" "${extra[@]}" >> "$log" 2>&1 < /dev/null &
    echo $! > /root/w/study.pid
    echo "$log" > /root/w/study.logpath
    ;&
  wait)
    wait_pid /root/w/study.pid "$wait_s" && echo "STUDY FINISHED" || echo "STUDY STILL RUNNING"
    tail -c 6000 "$(cat /root/w/study.logpath)"
    pack
    ;;
  stop)
    pid=$(cat /root/w/study.pid)
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    tail -c 3000 "$(cat /root/w/study.logpath)"
    pack
    ;;
  run)
    python3 -m autotune "${extra[@]}" 2>&1 | tee "$OUT/run.log"
    pack
    ;;
esac
