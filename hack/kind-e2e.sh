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
# containerd variables, [Serial] skipped when PARALLEL=true. The images the specs
# use are built here and loaded into the nodes under their upstream names
# (cluster kind-e2e-images); the image pull gate's specs pull from a slow registry
# the nodes reach (cluster kind-slow-registry). FOCUS defaults to this project's specs and the upstream
# smoke subset of make e2e (hack/e2e-smoke.txt); SUITE=conformance asks for
# Conformance, SUITE=series for the upstream specs of the areas the series changes
# (hack/kind-e2e-series.txt), FOCUS for any regular expression. Every spec skipped on purpose is in hack/kind-e2e-skip.txt with its
# reason. docs/kind.md.
#
# Parity: the same run on upstream's release with no group applied (PRISTINE=1 in
# lib.sh: its own tree, binaries, node image, e2e.test and kind cluster, which is
# deleted after the run unless it was up before), then testsummary parity compares
# the two reports spec by spec and fails when the fork fails a spec that pristine
# passes. SIDES chooses the sides (default "fork pristine"; SIDES=fork runs only the
# fork's, without the comparison).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ "$(id -u)" != 0 ]; then
  echo "error: the kind cluster runs on the project's own Docker engine (dockerd), which needs root" >&2
  exit 1
fi
tools
report=$OUT/kind-e2e

if [ "${1:-}" != --side ]; then
  sides=${SIDES:-fork pristine}
  rc=0
  for side in $sides; do
    case $side in
      fork) PRISTINE= "$0" --side || rc=$? ;;
      pristine) PRISTINE=1 "$0" --side || rc=$? ;;
      *) echo "error: SIDES=$sides: a side is fork or pristine" >&2; exit 2 ;;
    esac
  done
  if [ -f "$report/fork/junit_01.xml" ] && [ -f "$report/pristine/junit_01.xml" ] && [[ $sides == *fork* && $sides == *pristine* ]]; then
    echo "== make kind-e2e: pristine upstream and the fork, spec by spec"
    "$SUMMARY" parity "$report/pristine/junit_01.xml" "$report/fork/junit_01.xml"
    exit $?
  fi
  exit $rc
fi

# One side: its cluster, its e2e.test, its report in _output/kind-e2e/SIDE.
name=kube-carry${PRISTINE:+-pristine}
existed=false
if DOCKER_HOST=unix://$OUT/kind/docker.sock go tool kind get clusters 2>/dev/null | grep -qx "$name"; then
  existed=true
fi
hack/kind.sh up
WHAT="test/e2e/e2e.test github.com/onsi/ginkgo/v2/ginkgo" hack/build.sh
# The version the side's binaries and e2e.test were built at: the tree may change
# while the suite runs.
version=$(cat "$SIDE_BIN/VERSION")
"$OUT/tools/cluster" kind-e2e-images "${SIDE_FLAGS[@]}"

out=$report/$SIDE
rm -rf "$out"
mkdir -p "$out"
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

# SUITE names a focus: project (this project's specs and the smoke subset),
# conformance, or series (hack/kind-e2e-series.txt); FOCUS overrides it.
case ${SUITE:-project} in
  project) suite_focus=$(e2e_focus) ;;
  conformance) suite_focus='\[Conformance\]' ;;
  series) suite_focus=$(sed -e '/^#/d' -e '/^$/d' -e 's/ # .*//' hack/kind-e2e-series.txt | paste -sd'|') ;;
  *) echo "error: SUITE=$SUITE: a suite is project, conformance or series" >&2; exit 2 ;;
esac
FOCUS=${FOCUS:-$suite_focus}
# hack/kind-e2e-skip.txt: one regular expression a line, then " # " and the reason.
listed=$(sed -e '/^#/d' -e '/^$/d' -e 's/ # .*//' hack/kind-e2e-skip.txt | paste -sd'|')
SKIP='\[Disruptive\]|\[Flaky\]'${listed:+"|$listed"}
if [ "${PARALLEL:-false}" = true ]; then
  export GINKGO_PARALLEL=y
  SKIP="\\[Serial\\]|$SKIP"
fi
export KUBECONFIG=$SIDE_KIND/kubeconfig
nodes=$("$SIDE_BIN/kubectl" get nodes --no-headers | wc -l)

export KUBERNETES_CONFORMANCE_TEST=y
export KUBE_CONTAINER_RUNTIME=remote
export KUBE_CONTAINER_RUNTIME_ENDPOINT=unix:///run/containerd/containerd.sock
export KUBE_CONTAINER_RUNTIME_NAME=containerd
export GINKGO_NO_COLOR=y
set +e
(cd "$SIDE_TREE" && ./hack/ginkgo-e2e.sh --provider=skeleton "--num-nodes=$((nodes - 1))" \
  "--ginkgo.focus=$FOCUS" "--ginkgo.skip=$SKIP" \
  "--report-dir=$out" --disable-log-dump=true)
rc=$?
set -e
if [ "$SIDE" = pristine ] && [ "$existed" = false ]; then
  "$OUT/tools/cluster" kind-delete "${SIDE_FLAGS[@]}"
fi
echo "== make kind-e2e: the selected specs on $SIDE ($version)"
"$SUMMARY" junit "$out"/junit_01.xml || true
exit $rc
