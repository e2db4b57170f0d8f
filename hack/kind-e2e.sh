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
# (cluster kind-e2e-images). FOCUS defaults to this project's specs and the upstream
# smoke subset of make e2e (hack/e2e-smoke.txt); FOCUS='\[Conformance\]' asks for
# Conformance. Every spec skipped on purpose is in hack/kind-e2e-skip.txt with its
# reason. docs/kind.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ "$(id -u)" != 0 ]; then
  echo "error: the kind cluster runs on the project's own Docker engine (dockerd), which needs root" >&2
  exit 1
fi
tools
hack/kind.sh up
WHAT="test/e2e/e2e.test github.com/onsi/ginkgo/v2/ginkgo" hack/build.sh
"$OUT/tools/cluster" kind-e2e-images

FOCUS=${FOCUS:-$(e2e_focus)}
# hack/kind-e2e-skip.txt: one regular expression a line, then " # " and the reason.
listed=$(sed -e '/^#/d' -e '/^$/d' -e 's/ # .*//' hack/kind-e2e-skip.txt | paste -sd'|')
SKIP='\[Disruptive\]|\[Flaky\]'${listed:+"|$listed"}
if [ "${PARALLEL:-false}" = true ]; then
  export GINKGO_PARALLEL=y
  SKIP="\\[Serial\\]|$SKIP"
fi
TREE=$OUT/kubernetes
report=$OUT/kind-e2e
rm -rf "$report"
mkdir -p "$report"
nodes=$("$OUT/bin/kubectl" --kubeconfig "$OUT/kind/kubeconfig" get nodes --no-headers | wc -l)

export KUBECONFIG=$OUT/kind/kubeconfig
export KUBERNETES_CONFORMANCE_TEST=y
export KUBE_CONTAINER_RUNTIME=remote
export KUBE_CONTAINER_RUNTIME_ENDPOINT=unix:///run/containerd/containerd.sock
export KUBE_CONTAINER_RUNTIME_NAME=containerd
export GINKGO_NO_COLOR=y
set +e
(cd "$TREE" && ./hack/ginkgo-e2e.sh --provider=skeleton "--num-nodes=$((nodes - 1))" \
  "--ginkgo.focus=$FOCUS" "--ginkgo.skip=$SKIP" \
  "--report-dir=$report" --disable-log-dump=true)
rc=$?
set -e
echo "== make kind-e2e: the selected specs"
"$SUMMARY" junit "$report"/junit_01.xml || true
exit $rc
