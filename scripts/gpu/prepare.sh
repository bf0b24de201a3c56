#!/usr/bin/env bash
# ../shared/gpu/prepare.sh with its chunks sized to what this checkout leaves of a call's 64 MiB.
# The shared script cuts 56 MiB chunks and so assumes a checkout under 8 MiB; with the results'
# raw archives this one is larger, and the first chunk call is refused ("the working tree is
# larger than 64 MiB"). Run it from the project root, then make the calls it prints.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
shared=$(cd "$root/../shared/gpu" && pwd)
# the tracked files plus the untracked ones a call carries too (git ignores the rest)
tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 du -cb \
        | tail -1 | cut -f1)
cap=$(( (64 * 1048576 - tree) / 1048576 - 2 ))  # 2 MiB to spare
if [ "$cap" -lt 8 ]; then
  echo "the checkout takes $((tree / 1048576)) MiB of a call's 64: too little is left for chunks" >&2
  exit 1
fi
echo "checkout $((tree / 1048576)) MiB: chunks of at most $cap MiB"
sed -e "s/cap = 56 \* 2\*\*20/cap = $cap * 2**20/" -e "s|^here=.*|here=$shared|" \
  "$shared/prepare.sh" > "${TMPDIR:-/tmp}/autotune-gpu-prepare.sh"
grep -q "cap = $cap \* 2\*\*20" "${TMPDIR:-/tmp}/autotune-gpu-prepare.sh" || {
  echo "../shared/gpu/prepare.sh changed: its chunk size is no longer where this script sets it" >&2
  exit 1
}
exec bash "${TMPDIR:-/tmp}/autotune-gpu-prepare.sh"
