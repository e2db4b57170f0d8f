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

# make e2e: upstream's e2e.test and ginkgo, built from the tree, run against the local
# cluster with the image registries pointed at the local one. It runs every test this
# project adds (labelled [Feature:...] / [FeatureGate:...] with this project's
# features) and the upstream smoke subset listed in hack/e2e-smoke.txt.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
tools

hack/build.sh
WHAT="test/e2e/e2e.test github.com/onsi/ginkgo/v2/ginkgo" hack/build.sh
go build -o "$OUT/tools/cluster" ./hack/cmd/cluster
"$OUT/tools/cluster" up
"$OUT/tools/cluster" e2e-images

# This project's own e2e tests and the smoke subset (lib.sh e2e_focus).
focus="${E2E_FOCUS:-$(e2e_focus)}"
report=$OUT/e2e
mkdir -p "$report"
export KUBE_TEST_REPO_LIST=$OUT/cluster/etc/image-repos.yaml
# The image pull gate tests pull through the cluster's slow registry (docs/kubelet-image-pull-gate.md).
export KUBE_TEST_SLOW_REGISTRY=127.0.0.1:5001
set +e
"$OUT/bin/ginkgo" --no-color --silence-skips --timeout=60m \
  --focus="$focus" --skip='\[Disruptive\]|\[Flaky\]' \
  --junit-report=junit.xml --output-dir="$report" \
  "$OUT/bin/e2e.test" -- \
  --kubeconfig="$OUT/cluster/admin.kubeconfig" --provider=local \
  --kubectl-path="$OUT/bin/kubectl" --report-dir="$report" --repo-root="$OUT/kubernetes" \
  --e2e-verify-service-account=true --node-os-distro=debian \
  ${E2E_ARGS:-}
rc=$?
set -e
echo "== make e2e: the selected specs"
"$SUMMARY" junit "$report/junit.xml" || true
exit $rc
