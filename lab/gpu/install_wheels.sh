#!/usr/bin/env bash
# On the GPU machine, after the chunk calls (lab/gpu/prepare.sh): the carried wheels made
# whole (a wheel over a chunk's size travels as NAME.whl.part000, .part001, ...) and installed
# into one folder, with an activate file beside them. Every lab/gpu/*.sh that installs
# runs this, then `source "$GPU_SITE/activate"`. Run from anywhere; prints the time it took.
# It installs what lab/gpu/prepare.sh carried (the lent machines' install, lab/GPU-MACHINES.md), with
# no version check (importing vLLM, optuna, mlflow and torch is slow on a fresh machine).
#   bash lab/gpu/install_wheels.sh [PIP_ARG ...]      (e.g. --upgrade on a warm machine)
# GPU_WHEELS (default /root/w) and GPU_SITE (default /root/site) move it (the tests do).
set -uo pipefail
wheels=${GPU_WHEELS:-/root/w}
site=${GPU_SITE:-/root/site}
t0=$(date +%s)
for first in "$wheels"/*.part000; do
  [ -e "$first" ] || continue
  whl=${first%.part000}
  cat "$whl".part* > "$whl" && rm "$whl".part*
done
"${GPU_PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target "$site" "$@" "$wheels"/*.whl || exit 1
echo "export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH} PATH=$site/bin:\$PATH" \
  > "$site/activate"
echo "installed in $(( $(date +%s) - t0 )) s"
