#!/usr/bin/env bash

# Copyright The Kubernetes Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# make test: verify, the unit tests of this project's tools, of every upstream package
# the series touches and of every package it adds (race detector on those), the
# Kubernetes ones again with the series' feature gates on, the integration tests the
# features add (against an etcd of their own), the cluster smoke and the VPA's end-to-end
# test on a two-node local cluster. Ends with
# "N passed, N failed"; a step of hack/test-steps.txt that wrote no results fails it.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
tools || exit 1
rm -rf "$TESTOUT" && mkdir -p "$TESTOUT"
start=$SECONDS

# Transparent huge pages "always" for this run (as root; put back when it ends, also
# when it is killed): the run's time is the compiler's and the race runtime's, which
# fault their memory in page by page, and with THP a cold compile ran a quarter
# faster here (docs/testing.md).
thp_always /sys/kernel/mm/transparent_hugepage/enabled
# Nothing a run changes outlives it: the integration tests' etcd, the background
# jobs (when the run is cut short).
on_exit() {
  local pid
  for pid in $(jobs -p); do
    pkill -TERM -P "$pid" 2>/dev/null
    kill "$pid" 2>/dev/null
  done
  [ -z "${ETCD_PID:-}" ] || stop_etcd
}
trap on_exit EXIT

# Every module the repository's graph selects (both trees' dependencies, nearly all)
# downloads in the background from the start, while the first steps compile; the steps
# that need them later find them in the module cache (go locks it for each module).
# Through a copy of go.mod, since go mod download adds to the go.sum beside it.
cp go.mod "$TESTOUT/download.mod" && cp go.sum "$TESTOUT/download.sum"
go mod download -modfile "$TESTOUT/download.mod" all >"$TESTOUT/mod-download.log" 2>&1 &
download_pid=$!

# The Debian packages of the integration tests and the cluster steps (etcd,
# containerd, ...) install in the background while verify compiles: apt spends its
# time downloading, not on the CPU. As root only, as those steps.
packages_pid=
if [ "$(id -u)" = 0 ] && go build "${TEST_BUILD_FLAGS[@]}" -o "$OUT/tools/cluster" ./hack/cmd/cluster; then
  "$OUT/tools/cluster" packages >"$TESTOUT/packages.log" 2>&1 &
  packages_pid=$!
fi
# wait_packages: the background install is done (a failure shows here; the steps that
# need the packages then try again and say what is missing).
wait_packages() {
  [ -n "$packages_pid" ] || return 0
  wait "$packages_pid" || { echo "installing Debian packages failed:"; tail -n 20 "$TESTOUT/packages.log"; }
  packages_pid=
}

echo "== verify"
CHECKS_JSON=$TESTOUT/verify.json hack/verify.sh

# The cluster lane: the local cluster smoke, the Feature API's processes test and
# the VPA's end-to-end test spend most of their time waiting for their servers
# (both cores were about half idle through them), so they run in a lane of their
# own beside the CPU-bound steps, from the end of verify on: the cluster binaries
# and the VPA's then reuse its -race compiles. The lane's builds run niced, the
# servers not. Its output is printed when the run waits for it, before the summary.
# The smoke and the VPA test use the local cluster's ports, the processes test
# 16443-16445 and an etcd on 23791/23792 (it runs beside the VPA's test); no other
# step uses them (the integration tests' etcd listens on 23790, 23800, ...).
cluster_lane() {
  local processes_pid= key step
  # The packages (containerd, runc, the CNI plugins, etcd) the clusters run on.
  while [ -n "$packages_pid" ] && kill -0 "$packages_pid" 2>/dev/null; do sleep 2; done
  key=$(servers_inputs_key)
  # The binaries and the three tests that run them are reused together or run
  # together: the VPA's test runs the local cluster of those binaries too.
  if reuse_pass build "$key" "$TESTOUT/build.json" && reuse_pass smoke "$key" "$TESTOUT/smoke.json" &&
    reuse_pass featureapi-processes "$key" "$TESTOUT/featureapi-processes.json" &&
    reuse_pass vpa-e2e "$key" "$TESTOUT/vpa-e2e.json"; then
    for step in smoke vpa-e2e featureapi-processes; do
      echo "== $step: not run again, its inputs are those of its last pass (key ${key:0:12})"
      "$SUMMARY" "$TESTOUT/$step.json" | tail -n 1
    done
    return 0
  fi
  rm -f "$TESTOUT"/{build,smoke,featureapi-processes,vpa-e2e}.{json,exit}
  forget_pass build smoke featureapi-processes vpa-e2e
  echo "== local cluster smoke (build, up, one pod from the local registry, a balloon across kubelet restarts, down)"
  if CHECKS_JSON=$TESTOUT/build.json CHECKS_PKG=build check build-binaries nice -n 10 hack/build.sh --test-flags &&
    go build "${TEST_BUILD_FLAGS[@]}" -o "$OUT/tools/cluster" ./hack/cmd/cluster; then
    keep_pass build "$key" "$TESTOUT/build.json"
    gojson "$TESTOUT/smoke.json" go test "${TEST_BUILD_FLAGS[@]}" -tags smoke -count=1 -json -vet=off -timeout 20m -run '^TestSmoke$' ./hack/internal/cluster
    keep_pass smoke "$key" "$TESTOUT/smoke.json"
    "$SUMMARY" "$TESTOUT/smoke.json" | tail -n 1
    # Three kube-apiservers of the same build, on an etcd and ports of their own
    # (not the local cluster's, nor the integration tests' etcd): beside the VPA's
    # test, both being mostly waits. Its waits bound each step; the timeout
    # bounds the whole beside a cold run's compiles (CI of 2026-11-29: the
    # servers took 2m24s to start, 10 s alone).
    gojson "$TESTOUT/featureapi-processes.json" go test "${TEST_BUILD_FLAGS[@]}" -tags smoke -count=1 -json -vet=off -timeout 30m -run '^TestFeatureAPIProcesses$' ./hack/internal/cluster &
    processes_pid=$!
  fi
  echo "== VPA per-node recommendations end to end (two nodes, metrics-server, the patched recommender)"
  # What the test runs: metrics-server (a module graph of its own) and the VPA's
  # -race binaries; a failed build fails the step with its log.
  if ! nice -n 10 hack/vpa.sh e2e-build >"$TESTOUT/e2e-build.log" 2>&1; then
    tail -n 20 "$TESTOUT/e2e-build.log"
    "$SUMMARY" record vpa-e2e build fail <"$TESTOUT/e2e-build.log" >"$TESTOUT/vpa-e2e.json"
  else
    hack/vpa.sh e2e "$TESTOUT/vpa-e2e.json" >"$TESTOUT/vpa-e2e.log" 2>&1
    keep_pass vpa-e2e "$key" "$TESTOUT/vpa-e2e.json"
  fi
  "$SUMMARY" "$TESTOUT/vpa-e2e.json" | tail -n 1
  if [ -n "$processes_pid" ]; then
    wait "$processes_pid" || true # its result is in its file, which the summary reads
    keep_pass featureapi-processes "$key" "$TESTOUT/featureapi-processes.json"
    echo "== Feature API: three kube-apiserver processes (disagreement, rolling restart, SIGTERM, kill -9, mixed versions)"
    "$SUMMARY" "$TESTOUT/featureapi-processes.json" | tail -n 1
  fi
}
cluster_lane >"$TESTOUT/cluster-lane.log" 2>&1 &
lane_pid=$!

echo "== upstream's quick verify scripts (hack/verify-upstream.sh -quick; the rest: make verify-upstream)"
# Each script is a check of its own in the summary; a run that records none failed
# before it could start one. A set that passed is not run again while its inputs are
# the same (the trees' commits, the scripts that run it, Go): upstream's scripts
# read nothing else.
quick_key=$(inputs_key hack/verify-upstream.sh hack/verify-upstream-skip.txt hack/lib.sh hack/codegen-tools.sh)
if [ -s "$OUT/verify-upstream/results.txt" ] && passed_before verify-upstream-quick "$quick_key"; then
  echo "the inputs are those of the set that passed last (key ${quick_key:0:12}): not run again"
else
  rm -f "$OUT/verify-upstream/results.txt" "$OUT/passed/verify-upstream-quick"
  hack/verify-upstream.sh -quick kubernetes autoscaler >"$TESTOUT/verify-upstream.log" 2>&1 &&
    passed_with verify-upstream-quick "$quick_key"
fi
if [ -s "$OUT/verify-upstream/results.txt" ]; then
  while read -r up script status _; do
    # A failure's output is the script's part of its runner's log.
    awk -v s="$script" 'index($0, s) { p = 1 } p' "$OUT/verify-upstream/$up.log" 2>/dev/null | head -n 200 |
      "$SUMMARY" record verify-upstream "$up/$script" "$status" >>"$TESTOUT/verify-upstream.json"
  done <"$OUT/verify-upstream/results.txt"
else
  "$SUMMARY" record verify-upstream run fail <"$TESTOUT/verify-upstream.log" >"$TESTOUT/verify-upstream.json"
fi
"$SUMMARY" "$TESTOUT/verify-upstream.json" | tail -n 1

echo "== unit tests: this project's tools (race)"
# Never rerun (the flake rule is for upstream tests); vetted by verify. The images'
# tests read busybox and Debian's package lists, which the package step provides.
wait_packages
gojson "$TESTOUT/hack.json" go test "${TEST_BUILD_FLAGS[@]}" -json -vet=off ./hack/...
"$SUMMARY" "$TESTOUT/hack.json" | tail -n 1

# unit_tests UPSTREAM MODULE_DIR: the series' packages in one tree, but those under
# test/integration/, which need etcd (see integration_tests), and test/e2e_node, whose
# test binary is the node e2e suite (make node-e2e; upstream's make test leaves it out too).
unit_tests() {
  local up=$1 dir=$2 pkgs tmp overlay flags=()
  pkgs=$("$SERIES" touched "$up" | grep -v -e '^\./test/integration/' -e '^\./test/e2e_node$') || { echo "no tree for $up"; return 1; }
  echo "== unit tests: $up ($(wc -w <<<"$pkgs") packages, ${TEST_BUILD_FLAGS[*]})"
  tmp=$(mktemp -d)
  overlay=$(fuzz_iters_overlay "$dir" "$tmp" $pkgs)
  if [ -n "$overlay" ]; then
    echo "{\"Replace\":{$overlay}}" >"$tmp/overlay.json"
    flags=(-overlay "$tmp/overlay.json")
  fi
  gotest "$dir" "$TESTOUT/$up-unit.json" "${flags[@]}" -- $pkgs
  rm -rf "$tmp"
  "$SUMMARY" "$TESTOUT/$up-unit.json" | tail -n 1
}
# benchmarks UPSTREAM MODULE_DIR: the benchmarks this project adds, run once each
# with -short (their smallest sizes), so that they keep working (their numbers are
# measured with longer runs, see docs/).
benchmarks() {
  local up=$1 dir=$2 files pkgs=() f
  files=$(cat patches/"$up"/*/files 2>/dev/null | grep '_test\.go$' || true)
  for f in $files; do
    grep -q '^func Benchmark' "$f" && pkgs+=("./$(dirname "${f#vertical-pod-autoscaler/}")")
  done
  [ ${#pkgs[@]} -gt 0 ] || return 0
  CHECKS_JSON=$TESTOUT/$up-benchmarks.json CHECKS_PKG=benchmarks \
    check "$up-benchmarks-run-once" bash -c "cd '$dir' && go test ${TEST_BUILD_FLAGS[*]} -vet=off -short -run '^\$' -bench . -benchtime 1x ${pkgs[*]}"
}
# gates_on_tests: the Kubernetes packages of the series once more, with every
# feature gate the series adds turned on (the unit tests run them at their defaults).
gates_on_tests() {
  local pkgs
  pkgs=$("$SERIES" touched kubernetes | grep -E '^\./(pkg|plugin|cmd)/' | grep -vxF ./pkg/features) || return 0
  echo "== unit tests: kubernetes with the series' feature gates on ($(wc -w <<<"$pkgs") packages)"
  hack/gates-on-tests.sh "$OUT/kubernetes" "$TESTOUT/kubernetes-gates-on.json" $pkgs
  "$SUMMARY" "$TESTOUT/kubernetes-gates-on.json" | tail -n 1
}
# start_etcd: an etcd of its own for the integration tests, on a free port of
# 127.0.0.1 (test/integration/framework would start one on a Unix socket, which
# Debian's etcd 3.4 cannot listen on); installs Debian's etcd-server when etcd is
# not on PATH. Sets ETCD_PID and ETCD_URL.
start_etcd() {
  local port
  if ! command -v etcd >/dev/null; then
    echo "etcd is not on PATH: installing Debian's etcd-server"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server; } >"$TESTOUT/etcd-install.log" 2>&1 ||
      ! command -v etcd >/dev/null; then
      tail -n 20 "$TESTOUT/etcd-install.log"
      echo "cannot install etcd-server with apt-get (log: $TESTOUT/etcd-install.log); the integration tests need etcd on PATH"
      return 1
    fi
  fi
  for port in $(seq 23790 10 23990); do
    (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # in use
    rm -rf "$TESTOUT/etcd-data"
    etcd --data-dir "$TESTOUT/etcd-data" --listen-peer-urls http://127.0.0.1:0 \
      --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
      >"$TESTOUT/etcd.log" 2>&1 &
    ETCD_PID=$! ETCD_URL=http://127.0.0.1:$port
    for _ in $(seq 100); do
      kill -0 "$ETCD_PID" 2>/dev/null || break
      (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
      sleep 0.1
    done
    stop_etcd
    # Another process took the port since the check: try the next one.
    grep -q "address already in use" "$TESTOUT/etcd.log" || break
  done
  tail -n 20 "$TESTOUT/etcd.log"
  echo "cannot start etcd ($(etcd --version | head -n 1)) on 127.0.0.1 (log: $TESTOUT/etcd.log)"
  return 1
}
stop_etcd() {
  kill "$ETCD_PID" 2>/dev/null && wait "$ETCD_PID" 2>/dev/null
  ETCD_PID=
  rm -rf "$TESTOUT/etcd-data"
}
# integration_tests UPSTREAM MODULE_DIR: the series' packages under test/integration/,
# against one etcd (KUBE_INTEGRATION_ETCD_URL).
integration_tests() {
  local up=$1 dir=$2 pkgs status out=$TESTOUT/$1-integration.json
  pkgs=$("$SERIES" touched "$up" | grep '^\./test/integration/') || { echo "no integration test packages in $up"; return 0; }
  echo "== integration tests (etcd): $up ($(wc -w <<<"$pkgs") packages)"
  start_etcd >"$TESTOUT/etcd-start.log" 2>&1
  status=$?
  cat "$TESTOUT/etcd-start.log"
  if [ "$status" != 0 ]; then
    "$SUMMARY" record "$up-integration" etcd fail <"$TESTOUT/etcd-start.log" >"$out"
    "$SUMMARY" "$out" | tail -n 1
    return 1
  fi
  KUBE_INTEGRATION_ETCD_URL=$ETCD_URL gotest "$dir" "$out" -timeout 20m -- $pkgs
  stop_etcd
  "$SUMMARY" "$out" | tail -n 1
}

unit_tests kubernetes "$OUT/kubernetes"
gates_on_tests
benchmarks kubernetes "$OUT/kubernetes"
unit_tests autoscaler "$OUT/autoscaler/vertical-pod-autoscaler"
hack/vpa.sh gates-on "$TESTOUT"
benchmarks autoscaler "$OUT/autoscaler/vertical-pod-autoscaler"
wait_packages
# The integration tests start kube-apiservers in their process whose leadership
# and transitions run on second-long periods: they run after the cluster lane,
# whose own servers (the processes test's three kube-apiservers, the VPA's
# cluster) starved them into timeouts on a slow machine (CI of 2026-11-29). The
# wait can cost a cold run the rest of the lane (cold13's VPA test ended 6 minutes
# into its integration tests, docs/testing.md); on a warm one they are mostly cached.
wait "$lane_pid"
integration_tests kubernetes "$OUT/kubernetes"

cat "$TESTOUT/cluster-lane.log"

wait "$download_pid" || { echo "go mod download all failed (the steps downloaded what they needed):"; tail -n 5 "$TESTOUT/mod-download.log"; }
echo "== summary ($((SECONDS - start))s)"
# Every step of hack/test-steps.txt must have written its results.
"$SUMMARY" -steps hack/test-steps.txt -dir "$TESTOUT"
