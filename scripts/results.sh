#!/usr/bin/env bash
# The raw files behind docs/results (run logs, study databases, archives, per-run records) live
# on the `results` branch, at the same paths; main keeps each result's summary.json, plots and
# small tables (docs/results <= 10 MB, tests/unit/test_house.py), and docs/results/raw-manifest.tsv
# lists every raw file with its size. Why a branch: the files stay in this repository's history
# with the commit that made them (no other store to keep alive), a clone of main (`git clone
# --depth 1`) does not download them, and nothing in main's history is rewritten.
#   bash scripts/results.sh list [PATH ...]      the raw files (under PATHs)
#   bash scripts/results.sh fetch [PATH ...]     copy them into results/ (git-ignored), same paths
#   bash scripts/results.sh add FILE ...         commit files of the working tree (under
#                                                docs/results) to the results branch, without
#                                                checking it out, and list them in the manifest
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
branch=${RESULTS_BRANCH:-results}
have() { git rev-parse -q --verify "refs/heads/$branch" >/dev/null; }
if ! have; then
  git fetch -q origin "$branch:$branch" 2>/dev/null || { echo "no $branch branch here or at origin" >&2; exit 1; }
fi
cmd=${1:-}; shift || true
case $cmd in
  list) git ls-tree -r --name-only "$branch" -- "$@" ;;
  fetch)
    mkdir -p results
    git archive "$branch" -- "${@:-docs/results}" | tar -x -C results
    echo "in results/ ($(du -sh results | cut -f1)): $(git ls-tree -r --name-only "$branch" -- "${@:-docs/results}" | wc -l) files"
    ;;
  add)
    [ $# -gt 0 ] || { echo "add: name the files" >&2; exit 2; }
    for f in "$@"; do
      case $f in docs/results/*) ;; *) echo "add: $f is not under docs/results" >&2; exit 2 ;; esac
      [ -f "$f" ] || { echo "add: no file $f" >&2; exit 2; }
    done
    idx=$(mktemp); trap 'rm -f "$idx"' EXIT
    GIT_INDEX_FILE=$idx git read-tree "$branch"
    GIT_INDEX_FILE=$idx git update-index --add -- "$@"
    tree=$(GIT_INDEX_FILE=$idx git write-tree)
    commit=$(git commit-tree "$tree" -p "$branch" -m "results: $(printf '%s ' "$@" | cut -c1-180)")
    git update-ref "refs/heads/$branch" "$commit"
    for f in "$@"; do
      grep -q "^$f	" docs/results/raw-manifest.tsv || printf '%s\t%s\n' "$f" "$(stat -c %s "$f")" >> docs/results/raw-manifest.tsv
    done
    echo "committed to $branch: $*; now remove them here (git rm --cached / rm) and commit the manifest"
    ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
