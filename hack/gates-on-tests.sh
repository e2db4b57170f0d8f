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

# gates-on-tests.sh TREE OUT.json PKG...: runs the tests of the given packages of the
# Kubernetes tree with every feature gate the series adds turned on. The tree is left
# untouched: go test -overlay adds to each package one file that sets the gates.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
tree=$1 json=$2
shift 2

gates=$(series_gates kubernetes)
[ -n "$gates" ] || { echo "the series adds no feature gates" >&2; exit 1; }
echo "gates on: $gates"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
overlay=""
dirs=()
i=0
while read -r dir name; do
  i=$((i + 1))
  dirs+=("$dir")
  cat >"$tmp/$i.go" <<GO
package $name

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	_ "k8s.io/kubernetes/pkg/features"
)

func init() {
	if err := utilfeature.DefaultMutableFeatureGate.Set("$gates"); err != nil {
		panic(err)
	}
}
GO
  overlay+="${overlay:+,}\"$dir/zz_series_gates_on_test.go\":\"$tmp/$i.go\""
done < <(cd "$tree" && go list -f '{{.Dir}} {{.Name}}' "$@")
fuzz=$(fuzz_iters_overlay "$tree" "$tmp" "$@")
echo "{\"Replace\":{$overlay${fuzz:+,$fuzz}}}" >"$tmp/overlay.json"

# Left out: the tests that emulate a release older than the gates (a 1.36 alpha
# gate cannot be on at 1.34), found by what they call or the flag they pass; the
# image manager test that asserts two concurrent runtime pulls of one image, where
# with the pull gate the second pod waits for the first
# (docs/kubelet-image-pull-gate.md); the bootstrap policy tests that compare the
# namespaced roles and bindings of the default gates with their golden files
# (FeatureLifecycle adds a Role and its binding in kube-system, which
# TestFeatureUsesReporterRoles checks with the gate on and off); and the
# kubelet's defaulting test, whose expectations are the defaults with every gate at
# its default: with KubeletImagePullGate on, abandonedImagePullPolicy defaults to
# Detach (TestAbandonedImagePullPolicyDefault checks the default with the gate on).
skip=$(printf '%s\n' "${dirs[@]}" | while read -r dir; do
  awk '/^func Test/ { match($0, /Test[A-Za-z0-9_]*/); f = substr($0, RSTART, RLENGTH) }
       /EmulationVersionDuringTest|VersionsDuringTest|--emulated-version|NewEffectiveVersionFromString/ { print f }' "$dir"/*_test.go 2>/dev/null
done | sort -u | paste -sd'|' -)
skip="^(${skip:+$skip|}TestParallelPodPullingTimeRecorderWithErr|TestBootstrapNamespaceRoles|TestBootstrapNamespaceRoleBindings|TestSetDefaultsKubeletConfiguration)\$"
echo "left out: $skip"
gotest "$tree" "$json" -skip "$skip" -overlay "$tmp/overlay.json" -- "$@"
