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

# make node-e2e: upstream's node e2e suite (test/e2e_node) with its CRI proxy, run
# on this machine against the patched kubelet with KubeletImagePullGate on, as
# hack/make-rules/test-e2e-node.sh REMOTE=false would run it (ginkgo, then the suite's
# own apiserver and kubelet), without rebuilding and without systemd or sudo:
# the cluster tool stands in for sudo, systemd-run and systemctl from a folder
# first on PATH. docs/kubelet-image-pull-gate-node-e2e.md says what runs and why.
#
#   FOCUS, SKIP, LABEL_FILTER  ginkgo's, to run other specs (defaults below)
#   NODE_E2E_ARGS              more flags for e2e_node.test
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
tools

WHAT="cmd/kubelet test/e2e_node/e2e_node.test github.com/onsi/ginkgo/v2/ginkgo" hack/build.sh
go build -o "$OUT/tools/cluster" ./hack/cmd/cluster
cluster=$OUT/tools/cluster
dir=$OUT/node-e2e

# The defaults: upstream's image pull specs that drive pulls through the CRI proxy,
# its conformance specs of pulls from a new, invalid and private registry (agnhost's
# fake registry on port 5000), and this project's pull gate specs. The image volume
# specs need containerd 2.1 (Debian's is 1.6).
label_filter=${LABEL_FILTER-'Feature: containsAny CriProxy || NodeConformance'}
focus=${FOCUS-'(?i)pull image|image pull|Container Runtime blackbox test when running a container with a new image'}
skip=${SKIP-'\[Flaky\]|\[FeatureGate:ImageVolumeWithDigest\]|\[FeatureGate:CRIListStreaming\]'}

# Before the clean-up is armed: it must not touch what another run or the local cluster uses.
"$cluster" node-e2e-preflight
cleanup() {
  local rc=$?
  "$cluster" node-e2e-down || rc=1
  exit $rc
}
trap cleanup EXIT
"$cluster" node-e2e-up

# The per-run folder: the shims first on PATH, and the suite's working folder (it
# writes its kubeconfig, kubelet config and static pod folder next to the binary
# and looks for the kubelet there).
run=$dir/run-$(date +%Y%m%dT%H%M%S)
report=$dir/artifacts
rm -rf "$dir"/run-* "$report"
mkdir -p "$run/shims" "$report"
for shim in sudo systemd-run systemctl; do
  ln -s "$cluster" "$run/shims/$shim"
done
ln -s "$OUT/bin/e2e_node.test" "$OUT/bin/kubelet" "$run/"
export PATH=$run/shims:$PATH
export KUBE_CARRY_SHIM_UNITS=$dir/units
# The env var, not only the flag: the suite computes image names at package init.
export KUBE_TEST_REPO_LIST=$dir/etc/image-repos.yaml
export KUBE_TEST_SLOW_REGISTRY=127.0.0.1:5003

set +e
"$OUT/bin/ginkgo" --nodes=1 --timeout=90m --no-color --silence-skips -v \
  --label-filter="$label_filter" --focus="$focus" --skip="$skip" \
  --junit-report=junit.xml --output-dir="$report" \
  "$run/e2e_node.test" -- \
  --v=4 --report-dir="$report" --node-name="$(hostname)" \
  --container-runtime-endpoint="unix://$dir/run/containerd.sock" \
  --container-runtime-process-name=containerd --container-runtime-pid-file= \
  --cri-proxy-enabled=true --prepull-images=false \
  --feature-gates=KubeletImagePullGate=true \
  --kubelet-config-file="$dir/etc/kubelet-config.yaml" \
  --dns-domain=cluster.local --kubelet-flags=--cluster-domain=cluster.local \
  ${NODE_E2E_ARGS:-}
rc=$?
set -e
echo "== make node-e2e: the selected specs (kubelet log: ${report#"$ROOT"/}/kubelet.log)"
"$SUMMARY" junit "$report/junit.xml" || true
exit $rc
