#!/usr/bin/env bash
# make test: verify, the unit tests of this project's tools, of every upstream package
# the series touches and of every package it adds (race detector on those), and the
# integration tests the features add. Ends with "N passed, N failed".
set -uo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
tools || exit 1
rm -rf "$TESTOUT" && mkdir -p "$TESTOUT"
start=$SECONDS

echo "== verify"
CHECKS_JSON=$TESTOUT/verify.json hack/verify.sh

echo "== unit tests: this project's tools (race)"
go test -race -count=1 -json ./hack/... >"$TESTOUT/hack.json" 2>&1
"$SUMMARY" "$TESTOUT/hack.json" | tail -n 1

# unit_tests UPSTREAM MODULE_DIR: the series' packages in one tree.
unit_tests() {
  local up=$1 dir=$2 own all rest=()
  own=$("$SERIES" touched -own "$up") && all=$("$SERIES" touched "$up") || { echo "no tree for $up"; return 1; }
  for p in $all; do grep -qxF "$p" <<<"$own" || rest+=("$p"); done
  echo "== unit tests: $up ($(wc -w <<<"$own") packages of ours with -race, ${#rest[@]} patched upstream packages)"
  if [ -n "$own" ]; then
    (cd "$dir" && go test -race -count=1 -json $own) >"$TESTOUT/$up-own.json" 2>&1
    "$SUMMARY" "$TESTOUT/$up-own.json" | tail -n 1
  fi
  if [ ${#rest[@]} -gt 0 ]; then
    (cd "$dir" && go test -count=1 -json "${rest[@]}") >"$TESTOUT/$up-upstream.json" 2>&1
    "$SUMMARY" "$TESTOUT/$up-upstream.json" | tail -n 1
  fi
}
# benchmarks UPSTREAM MODULE_DIR: the benchmarks this project adds, run once each, so
# that they keep working (their numbers are measured with longer runs, see docs/).
benchmarks() {
  local up=$1 dir=$2 files pkgs=() f
  files=$(cat patches/"$up"/*/files 2>/dev/null | grep '_test\.go$' || true)
  for f in $files; do
    grep -q '^func Benchmark' "$f" && pkgs+=("./$(dirname "${f#vertical-pod-autoscaler/}")")
  done
  [ ${#pkgs[@]} -gt 0 ] || return 0
  CHECKS_JSON=$TESTOUT/$up-benchmarks.json CHECKS_PKG=benchmarks \
    check "$up-benchmarks-run-once" bash -c "cd '$dir' && go test -run '^\$' -bench . -benchtime 1x ${pkgs[*]}"
}

unit_tests kubernetes "$OUT/kubernetes"
benchmarks kubernetes "$OUT/kubernetes"
unit_tests autoscaler "$OUT/autoscaler/vertical-pod-autoscaler"
benchmarks autoscaler "$OUT/autoscaler/vertical-pod-autoscaler"

echo "== local cluster smoke (build, up, one pod from the local registry, down)"
if CHECKS_JSON=$TESTOUT/build.json CHECKS_PKG=build check build-binaries hack/build.sh &&
  go build -o "$OUT/tools/cluster" ./hack/cmd/cluster; then
  go test -tags smoke -count=1 -json -timeout 20m -run TestSmoke ./hack/internal/cluster >"$TESTOUT/smoke.json" 2>&1
  "$SUMMARY" "$TESTOUT/smoke.json" | tail -n 1
fi

echo "== summary ($((SECONDS - start))s)"
"$SUMMARY" "$TESTOUT"/*.json
