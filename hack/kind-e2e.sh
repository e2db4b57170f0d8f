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

# make kind-e2e: upstream's e2e.test on the fork's kind cluster (make kind-up first, or
# this brings it up), run the way kind's own CI runs it (kind's hack/ci/e2e-k8s.sh,
# run_tests): the tree's hack/ginkgo-e2e.sh with --provider=skeleton and the
# containerd variables, [Serial] skipped when PARALLEL=true. The number of nodes is
# left to e2e.test, which counts the schedulable ones (kind's script passes its
# worker count, the same number). The images the specs use are built here and
# loaded into the nodes under their upstream names (cluster kind-e2e-images); the
# image pull gate's specs pull from a slow registry the nodes reach (cluster
# kind-slow-registry). FOCUS defaults to this project's specs and the upstream smoke
# subset of make e2e (hack/e2e-smoke.txt); SUITE=conformance asks for Conformance in
# two passes, as kind's CI runs it: the parallel one ([Serial] skipped) and the
# serial one ([Serial].*[Conformance]); SUITE=series for the upstream specs of the
# areas the series changes (hack/kind-e2e-series.txt) and the series' own; FOCUS for
# any regular expression (with SUITE=conformance, of the parallel pass; SERIAL_FOCUS
# of the serial one). SKIP defaults to what kind's CI skips: nothing for
# Conformance, [Disruptive] and [Flaky] otherwise; the caller may set it (also to
# ""). Every spec skipped because this machine cannot run it is in
# hack/kind-e2e-skip.txt with its reason, and skipped whatever SKIP says.
# docs/kind.md.
#
# The exit status: a side fails when its suite did not run (no report) or a spec
# failed that hack/kind-e2e-blocked.txt does not list (specs the environment keeps
# from passing on either side, each with its reason).
#
# Parity: the same run on upstream's release with no group applied (PRISTINE=1 in
# lib.sh: its own tree, binaries, node image, e2e.test and kind cluster, which is
# deleted after the run unless it was up before), then testsummary parity compares
# the two reports spec by spec and fails on a regression (pristine passes, the fork
# does not) and on every failed spec the block list does not name, on either side.
# SIDES chooses the sides (default "fork pristine"; SIDES=fork runs only the fork's,
# without the comparison). The side "upgraded" is the upgrade lane's cluster of release
# UPGRADED (v1.36.3) as make kind-upgrade left it, at the fork, with the fork's
# e2e.test: SIDES="fork upgraded" compares it with a fresh fork cluster (issue 38's
# item 3: SUITE=conformance PASSES=parallel HA=1 WORKERS=2, the lane's topology). A cluster kept from an earlier run is created again when
# its nodes are not of the node image being tested or not the topology asked for
# (HA, WORKERS), so that both sides run the same e2e.test against the same shape.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ "$(id -u)" != 0 ]; then
  echo "error: the kind cluster runs on the project's own Docker engine (dockerd), which needs root" >&2
  exit 1
fi
tools
report=$OUT/kind-e2e
blocked=hack/kind-e2e-blocked.txt

# The passes of the suite: each is one ginkgo run, its report in a folder of its own.
case ${SUITE:-project} in
  conformance)
    passes=(parallel serial)
    # PASSES=parallel: the parallel pass alone (the upgraded cluster's comparison).
    if [ -n "${PASSES:-}" ]; then
      read -ra passes <<<"$PASSES"
      for p in "${passes[@]}"; do
        case $p in parallel | serial) ;; *) echo "error: PASSES=$PASSES: a pass is parallel or serial" >&2; exit 2 ;; esac
      done
    fi
    ;;
  project | series) passes=(run) ;;
  *) echo "error: SUITE=$SUITE: a suite is project, conformance or series" >&2; exit 2 ;;
esac

if [ "${1:-}" != --side ]; then
  sides=${SIDES:-fork pristine}
  for side in $sides; do
    case $side in
      fork | pristine | upgraded) rm -rf "${report:?}/$side" ;; # no report of an earlier run is read
      *) echo "error: SIDES=$sides: a side is fork, pristine or upgraded" >&2; exit 2 ;;
    esac
  done
  for side in $sides; do
    PRISTINE=$([ "$side" = pristine ] && echo 1 || true) UPGRADED=$([ "$side" = upgraded ] && echo "${UPGRADED:-v1.36.3}" || true) \
      "$0" --side || true # the reports tell
  done
  echo "== make kind-e2e: $sides, SUITE=${SUITE:-project} (${passes[*]})"
  exec "$SUMMARY" kind-e2e -dir "$report" -sides "$sides" -passes "${passes[*]}" -blocked "$blocked"
fi

# One side: its cluster, its e2e.test, its reports in _output/kind-e2e/SIDE/PASS.
out=$report/$SIDE
rm -rf "$out"
mkdir -p "$out"
name=kube-carry${PRISTINE:+-pristine}
[ "$SIDE" != upgraded ] || name=kube-carry-${UPGRADED//./-}
existed=false
if DOCKER_HOST=unix://$OUT/kind/docker.sock go tool kind get clusters 2>/dev/null | grep -qx "$name"; then
  existed=true
fi
if [ "$SIDE" = upgraded ]; then
  # The lane's cluster as make kind-upgrade left it: never created here.
  if [ "$existed" = false ]; then
    echo "error: no cluster $name: make kind-upgrade leaves it, upgraded to the fork" >&2
    exit 1
  fi
else
  hack/kind.sh up
fi
WHAT="test/e2e/e2e.test github.com/onsi/ginkgo/v2/ginkgo" hack/build.sh
# The version the side's binaries and e2e.test were built at: the tree may change
# while the suite runs.
version=$(cat "$SIDE_BIN/VERSION")
"$OUT/tools/cluster" kind-e2e-images "${SIDE_FLAGS[@]}"

# The image pull gate's specs pull from a slow registry on the kind network's
# gateway (cluster kind-slow-registry), served for the run's length.
"$OUT/tools/cluster" kind-slow-registry "${SIDE_FLAGS[@]}" >"$out/slow-registry.log" 2>&1 &
registry_pid=$!
trap 'kill $registry_pid 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  grep -q KUBE_TEST_SLOW_REGISTRY= "$out/slow-registry.log" && break
  if ! kill -0 $registry_pid 2>/dev/null; then
    echo "error: the slow registry for the image pull gate's specs did not start:" >&2
    cat "$out/slow-registry.log" >&2
    exit 1
  fi
  sleep 0.5
done
export KUBE_TEST_SLOW_REGISTRY
KUBE_TEST_SLOW_REGISTRY=$(sed -n 's/.*KUBE_TEST_SLOW_REGISTRY=//p' "$out/slow-registry.log")
if [ -z "$KUBE_TEST_SLOW_REGISTRY" ]; then
  echo "error: the slow registry did not say where it serves within 60 s ($out/slow-registry.log)" >&2
  exit 1
fi

# hack/kind-e2e-skip.txt: one regular expression a line, then " # " and the reason.
listed=$(sed -e '/^#/d' -e '/^$/d' -e 's/ # .*//' hack/kind-e2e-skip.txt | paste -sd'|')
case ${SUITE:-project} in
  conformance) default_skip= ;;
  *) default_skip='\[Disruptive\]|\[Flaky\]' ;;
esac
[ "${SKIP+set}" = set ] || SKIP=$default_skip
SKIP=${SKIP:+$SKIP|}$listed

export KUBECONFIG=$SIDE_KIND/kubeconfig
export KUBERNETES_CONFORMANCE_TEST=y
export KUBE_CONTAINER_RUNTIME=remote
export KUBE_CONTAINER_RUNTIME_ENDPOINT=unix:///run/containerd/containerd.sock
export KUBE_CONTAINER_RUNTIME_NAME=containerd
export GINKGO_NO_COLOR=y

# run_pass PASS FOCUS SKIP PARALLEL: one ginkgo run into $out/PASS.
run_pass() {
  local pass=$1 focus=$2 skip=$3 parallel=$4 rc=0
  mkdir -p "$out/$pass"
  if [ "$parallel" = true ]; then
    skip="\\[Serial\\]${skip:+|$skip}"
  fi
  echo "== make kind-e2e: the $pass pass on $SIDE ($version)"
  # ginkgo-e2e.sh takes GINKGO_PARALLEL_NODES over GINKGO_PARALLEL=n: a serial
  # pass must not inherit the parallel pass's nodes.
  local nodes=
  [ "$parallel" = true ] && nodes=${GINKGO_PARALLEL_NODES:-}
  (cd "$SIDE_TREE" && GINKGO_PARALLEL_NODES=$nodes GINKGO_PARALLEL=$([ "$parallel" = true ] && echo y || echo n) ./hack/ginkgo-e2e.sh --provider=skeleton \
    "--ginkgo.focus=$focus" "--ginkgo.skip=$skip" \
    "--report-dir=$out/$pass" --disable-log-dump=true) || rc=$?
  "$SUMMARY" junit -blocked "$ROOT/hack/kind-e2e-blocked.txt" "$out/$pass"/junit_01.xml || true
  return $rc
}

rc=0
case ${SUITE:-project} in
  conformance)
    # As kind's CI: the parallel pass skips [Serial], the serial pass runs only
    # those. The tags' order in spec names differs between releases (1.37:
    # "... [Conformance] [Serial]").
    run_pass parallel "${FOCUS:-\\[Conformance\\]}" "$SKIP" true || rc=$?
    run_pass serial "${SERIAL_FOCUS:-\\[Serial\\].*\\[Conformance\\]|\\[Conformance\\].*\\[Serial\\]}" "$SKIP" false || rc=$?
    ;;
  project) run_pass run "${FOCUS:-$(e2e_focus)}" "$SKIP" "${PARALLEL:-false}" || rc=$? ;;
  series)
    focus=$(sed -e '/^#/d' -e '/^$/d' -e 's/ # .*//' hack/kind-e2e-series.txt | paste -sd'|')
    run_pass run "${FOCUS:-$focus|$(series_specs)}" "$SKIP" "${PARALLEL:-false}" || rc=$?
    ;;
esac
if [ "$SIDE" = pristine ] && [ "$existed" = false ]; then
  "$OUT/tools/cluster" kind-delete "${SIDE_FLAGS[@]}"
fi
exit $rc
