#!/usr/bin/env bash
# The raw files behind docs/results (run logs, study databases, archives, per-run records) are
# kept in main's history, not in its tree: docs/results/raw-manifest.tsv lists each one (path,
# bytes, the commit that holds it), and main's tree keeps each result's summary.json, plots and
# small tables (docs/results <= 10 MB, tests/unit/test_house.py). Why history, not a branch or
# another store: a submitted main carries it (nothing else to keep alive), nothing published is
# rewritten, and a shallow clone (`git clone --depth 1`) downloads none of it.
#   bash lab/results.sh list [PATH ...]    the raw files (under PATHs)
#   bash lab/results.sh fetch [PATH ...]   copy them into results/ (git-ignored), same paths
#                                              (a shallow clone: `git fetch --unshallow` first)
#   bash lab/results.sh add FILE ...       file new raw files under docs/results: one commit
#                                              that adds them, one that removes them from the tree
#                                              and lists them in the manifest
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
manifest=docs/results/raw-manifest.tsv
under() {  # the manifest's lines under the given paths (all without)
  if [ $# -eq 0 ]; then cat "$manifest"; return; fi
  for p in "$@"; do awk -F'\t' -v p="${p%/}" '$1 == p || index($1, p "/") == 1' "$manifest"; done
}
cmd=${1:-}; shift || true
case $cmd in
  list) under "$@" | cut -f1 ;;
  fetch)
    mkdir -p results
    n=0
    while IFS=$'\t' read -r commit paths; do
      # shellcheck disable=SC2086
      git archive "$commit" -- $paths | tar -x -C results
      n=$((n + $(wc -w <<< "$paths")))
    done < <(under "$@" | awk -F'\t' '{a[$3] = a[$3] " " $1} END {for (c in a) print c "\t" a[c]}')
    echo "in results/: $n files ($(du -sh results | cut -f1))"
    ;;
  add)
    [ $# -gt 0 ] || { echo "add: name the files" >&2; exit 2; }
    for f in "$@"; do
      case $f in docs/results/*) ;; *) echo "add: $f is not under docs/results" >&2; exit 2 ;; esac
      [ -f "$f" ] || { echo "add: no file $f" >&2; exit 2; }
    done
    git add -f -- "$@"
    # already committed as they are (a commit that took them with other work): HEAD holds them
    git diff --cached --quiet -- "$@" ||
      git commit -q -m "results (raw): $(printf '%s ' "$@" | cut -c1-200)" -- "$@"
    sha=$(git rev-parse --short HEAD)
    for f in "$@"; do printf '%s\t%s\t%s\n' "$f" "$(stat -c %s "$f")" "$sha" >> "$manifest"; done
    git rm -q --cached -- "$@" && rm -f -- "$@"
    git add "$manifest"
    git commit -q -m "results (raw): $# file(s) kept in $sha, listed in the manifest, off the tree" \
      -- "$manifest" "$@"
    echo "filed in $sha and listed in $manifest"
    ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
