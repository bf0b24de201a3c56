#!/usr/bin/env bash
# The test suite, as CI runs it (README command 2, .ci/run), in two parts:
#   1. everything but the `serial` tests on pytest-xdist workers (default 2, one per core of the
#      2-core CI machine; AUTOTUNE_TEST_WORKERS=N changes it). The tests of a module that share a
#      module-scoped server or study stay on one worker (tests/conftest.py).
#   2. the `serial` tests alone: they time vLLM against a reference (the client reading on time,
#      a search against a dense sweep), and a second vLLM beside them breaks that.
# Extra arguments go to both pytest runs (CI: -v --durations=20). Exit status: non-zero if
# either part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
"$py" -m pytest -n "${AUTOTUNE_TEST_WORKERS:-2}" --dist loadgroup -m "not gpu and not serial" "$@"
first=$?
# every serial test lives in tests/integration: collect only it, unless paths are given
where=tests/integration
for a in "$@"; do case $a in tests/*|./tests/*) where="" ;; esac; done
"$py" -m pytest -m "serial and not gpu" $where "$@"
second=$?
echo "tests: parallel part exit $first, serial part exit $second"
[ "$first" -eq 0 ] && [ "$second" -eq 0 ]
