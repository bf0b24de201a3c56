#!/usr/bin/env bash
# For a GPU machine without network (the lent machines: lab/GPU-MACHINES.md): downloads the wheels of
# lab/gpu/wheels.txt (vLLM 0.26.0 for torch 2.11.0 + CUDA 13, optuna, mlflow and the rest the
# machine's image lacks) into $GPU_WHEEL_CACHE (default /tmp/gpu-wheels) and lays them out as
# chunks .gpu/c1, .gpu/c2, ... sized to what this checkout leaves of a call's 64 MiB (a wheel
# larger than a chunk travels as NAME.whl.part000, .part001, ...), with the Qwen3-8B-shaped dummy
# model for the scripts that read it from /root/w. Run it from the project root, then make the
# calls it prints; the last one runs lab/gpu/install_wheels.sh, which installs them into
# /root/site (`source /root/site/activate` in every later call). .gpu/ is git-ignored.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
here=$root/lab/gpu
# the tracked files plus the untracked ones a call carries too (git ignores the rest)
tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 du -cb \
        | tail -1 | cut -f1)
cap=$(( (64 * 1048576 - tree) / 1048576 - 2 ))  # 2 MiB to spare
if [ "$cap" -lt 8 ]; then
  echo "the checkout takes $((tree / 1048576)) MiB of a call's 64: too little is left for chunks" >&2
  exit 1
fi
echo "checkout $((tree / 1048576)) MiB: chunks of at most $cap MiB"
cache=${GPU_WHEEL_CACHE:-/tmp/gpu-wheels}
mkdir -p "$cache"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 manylinux_2_24_x86_64 manylinux_2_26_x86_64 manylinux_2_31_x86_64 \
         manylinux_2_34_x86_64 manylinux_2_35_x86_64 manylinux_2_5_x86_64 manylinux2010_x86_64 \
         manylinux_2_12_x86_64; do platforms+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$cache" -r "$here/wheels.txt"
rm -rf .gpu && mkdir -p .gpu
python3 - "$cache" "$here" "$cap" <<'PY'
import os, shutil, sys
cache, here, cap = sys.argv[1], sys.argv[2], int(sys.argv[3]) * 2**20
wanted = {l.split("==")[0].lower().replace("_", "-") for l in open(os.path.join(here, "wheels.txt")) if l.strip()}
files = []
for f in sorted(os.listdir(cache)):
    name = f.split("-")[0].lower().replace("_", "-")
    if f.endswith(".whl") and name in wanted:
        files.append((os.path.getsize(os.path.join(cache, f)), f))
chunks = [[]]; sizes = [0]
def put(path, size, arcname):
    for i, s in enumerate(sizes):
        if s + size <= cap:
            chunks[i].append((path, arcname)); sizes[i] += size; return
    chunks.append([(path, arcname)]); sizes.append(size)
for size, f in sorted(files, reverse=True):
    src = os.path.join(cache, f)
    if size <= cap:
        put(src, size, f); continue
    with open(src, "rb") as fh:  # a wheel larger than a chunk travels in numbered parts
        k = 0
        while part := fh.read(cap - 4 * 2**20):
            p = f"/tmp/gpu-part-{f}.{k:03d}"; open(p, "wb").write(part)
            chunks.append([(p, f"{f}.part{k:03d}")]); sizes.append(len(part)); k += 1
model = os.path.join(here, "models", "qwen3-8b-dummy")
msize = sum(os.path.getsize(os.path.join(model, x)) for x in os.listdir(model))
put(model, msize, "qwen3-8b-dummy")
for i, chunk in enumerate(chunks, 1):
    d = f".gpu/c{i}"; os.makedirs(d)
    for src, arc in chunk:
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(d, arc))
print(len(chunks))
PY
n=$(ls -d .gpu/c* | wc -l)
echo "prepared $n chunks in .gpu/ ($(du -sh .gpu | cut -f1)). Now make these calls to the GPU machine, one right after another"
echo "(the machine stays warm only 30 s after each call):"
for i in $(seq 1 "$n"); do
  echo "  run  command='mkdir -p /root/w && cp -r .gpu/c$i/* /root/w/'  carry=['.gpu/c$i']"
done
echo "  run  command='bash lab/gpu/install_wheels.sh && source /root/site/activate && python3 -c \"import vllm; print(vllm.__version__)\"'"
echo "Afterwards, in every call on that machine:  source /root/site/activate"
