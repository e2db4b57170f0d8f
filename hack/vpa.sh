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

# hack/vpa.sh [build|crds|test [OUT_DIR]]: the patched Vertical Pod Autoscaler.
#
#   build (default)  materializes _output/autoscaler, builds recommender, updater and
#                    admission-controller into _output/vpa/bin and writes the CRD
#                    manifests into _output/vpa/crds (see crds)
#   crds             runs VPA's controller-gen (the version hack/generate-crd-yaml.sh
#                    pins) on the tree's API types into _output/vpa/crds and fails when
#                    the tree's deploy/vpa-v1-crd-gen.yaml differs from it
#   test [OUT_DIR]   the VPA packages the series touches, with every VPA feature gate
#                    the series adds off (the defaults) and then on; go test -json
#                    output in OUT_DIR (default _output/test): autoscaler-gates-off.json
#                    and autoscaler-gates-on.json
#   gates-on [OUT_DIR]  only the second pass (make test runs the first already)
#   e2e [JSON]       build --test-flags, then the end-to-end test of per-node
#                    recommendations on the local cluster with two nodes and metrics-server,
#                    the recommender, admission controller and updater running with the tree's
#                    deploy/ RBAC (make vpa-e2e, root):
#                    hack/internal/cluster/vpa_e2e_test.go; go test -json into JSON if given
#   e2e-build        what e2e builds, without running the test (make test builds it
#                    in the background while other steps run)
#   metrics-server   installs the e2e test's metrics-server into _output/vpa/tools
#   apiserver-test [NODES [RUN]]  the recommender's loop against a real kube-apiserver
#                    (TestNodeScopeWritesOnAPIServer, build tag vpaapiserver, go test -run RUN,
#                    default all of its cases, with NODES nodes, default 1000): starts etcd and
#                    _output/bin/kube-apiserver alone (cluster apiserver-up: 127.0.0.1:26443,
#                    etcd 23811), runs the test, stops them; needs the tree (make vpa) and
#                    make's kube-apiserver, not root
#   scale [NODES [RUNS]]  the recommender, admission controller and updater as processes
#                    against the lone API server with NODES nodes (default 5000) and a pod
#                    per node of each DaemonSet (TestVPAScale, build tag vpascale,
#                    hack/internal/apiserver/vpa_scale_test.go); RUNS: gate and DaemonSets,
#                    default "off/1 on/1 off/3 on/3"; the table goes to _output/vpa-scale.md
#                    (docs/vpa-node-scope.md); builds the VPA's components, kube-apiserver
#                    and kubectl without -race first (the test refuses -race builds), not root
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
TREE=$OUT/autoscaler/vertical-pod-autoscaler
VPAOUT=$OUT/vpa
export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)} GOCACHE=${GOCACHE:-$(go env GOCACHE)}
# metrics-server of the e2e test, built from its Go module (sigs.k8s.io/metrics-server).
METRICS_SERVER_VERSION=v0.9.0

tree() {
  go build -o "$SERIES" ./hack/cmd/series && go build -o "$SUMMARY" ./hack/cmd/testsummary
  "$SERIES" tree autoscaler
}

crds() {
  local version cg=$VPAOUT/tools/controller-gen work
  version=$(sed -n 's/^CONTROLLER_GEN_VERSION=//p' "$TREE/hack/generate-crd-yaml.sh")
  if [ ! -x "$cg" ] || [ "$("$cg" --version)" != "Version: $version" ]; then
    echo "installing controller-gen $version"
    (cd "$(mktemp -d)" && GOBIN=$VPAOUT/tools go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$version")
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"; trap - RETURN' RETURN
  # As hack/generate-crd-yaml.sh: controller-gen always fails on the int map keys.
  (cd "$TREE" && "$cg" crd:allowDangerousTypes=true paths="./pkg/apis/..." output:crd:dir="$work") >"$work/errors.log" 2>&1 || :
  if grep -v -e 'map keys must be strings, not int' -e 'not all generators ran successfully' -e 'usage' "$work/errors.log"; then
    echo "controller-gen failed"
    return 1
  fi
  mkdir -p "$VPAOUT/crds"
  cat "$work/autoscaling.k8s.io_verticalpodautoscalercheckpoints.yaml" \
    "$work/autoscaling.k8s.io_verticalpodautoscalers.yaml" \
    "$work/autoscaling.k8s.io_verticalpodautoscalercheckpointslices.yaml" \
    "$work/autoscaling.k8s.io_verticalpodautoscalerslices.yaml" >"$VPAOUT/crds/vpa-v1-crd-gen.yaml"
  if ! diff -u "$TREE/deploy/vpa-v1-crd-gen.yaml" "$VPAOUT/crds/vpa-v1-crd-gen.yaml"; then
    echo "deploy/vpa-v1-crd-gen.yaml is stale: run hack/generate-crd-yaml.sh in $TREE"
    return 1
  fi
  echo "CRD manifests in $VPAOUT/crds: $(cd "$VPAOUT/crds" && echo *)"
}

# build [--test-flags]: as the components' Makefiles (CGO_ENABLED=0, -s), with the
# commit in the version; --test-flags (the end-to-end test) builds with make test's
# go test flags instead (TEST_BUILD_FLAGS, cgo), so that the build cache the unit tests
# filled serves it, and the end-to-end test runs under the race detector.
build() {
  local commit env=(CGO_ENABLED=0) ldflags=-s flags=()
  commit=$(git -C "$TREE" rev-parse HEAD)
  [ -z "$(git -C "$TREE" status --porcelain)" ] || commit+=-dirty
  if [ "${1:-}" = --test-flags ]; then
    env=() ldflags= flags=("${TEST_BUILD_FLAGS[@]}")
  fi
  mkdir -p "$VPAOUT/bin"
  for c in recommender updater admission-controller; do
    (cd "$TREE" && env "${env[@]}" go build "${flags[@]}" -ldflags "$ldflags -X k8s.io/autoscaler/vertical-pod-autoscaler/common.gitCommit=$commit" \
      -o "$VPAOUT/bin/$c" "./pkg/$c")
  done
  echo "binaries in $VPAOUT/bin: $(cd "$VPAOUT/bin" && echo *) (tree commit $commit)"
}

# metrics_server installs metrics-server METRICS_SERVER_VERSION into _output/vpa/tools.
metrics_server() {
  local ms=$VPAOUT/tools/metrics-server
  if [ ! -x "$ms" ] || [ "$(go version -m "$ms" | awk '$1 == "mod" { print $3 }')" != "$METRICS_SERVER_VERSION" ]; then
    echo "installing metrics-server $METRICS_SERVER_VERSION"
    (cd "$(mktemp -d)" && GOBIN=$VPAOUT/tools go install "sigs.k8s.io/metrics-server/cmd/metrics-server@$METRICS_SERVER_VERSION")
  fi
}

# e2e [JSON]: the per-node recommendations of one DaemonSet on the two nodes of the
# local cluster (it brings the cluster up with two nodes if needed, and down again);
# with JSON, go test -json output goes there (make test).
e2e() {
  local run=(go test "${TEST_BUILD_FLAGS[@]}" -tags vpae2e -count=1 -timeout 30m -run '^TestVPANodeScope$' ./hack/internal/cluster)
  go build "${TEST_BUILD_FLAGS[@]}" -o "$OUT/tools/cluster" ./hack/cmd/cluster
  if [ -n "${1:-}" ]; then
    gojson "$1" "${run[@]}" -json
  else
    "${run[@]}" -v
  fi
}

# e2e_build: what the end-to-end test runs.
e2e_build() { tree && build --test-flags && crds && metrics_server; }

# apiserver_test NODES RUN: TestNodeScopeWritesOnAPIServer on a lone API server.
# scale NODES RUNS: TestVPAScale on release builds of the VPA's components and
# kube-apiserver (make test leaves -race builds at the same paths; the test refuses
# them).
scale() {
  build && WHAT="cmd/kube-apiserver cmd/kubectl" hack/build.sh || return 1
  VPA_SCALE_NODES=${1:-5000} VPA_SCALE_RUNS=${2:-off/1 on/1 off/3 on/3} VPA_SCALE_REPORT=$OUT/vpa-scale.md \
    go test -tags vpascale -timeout 4h -count 1 -run '^TestVPAScale$' -v ./hack/internal/apiserver
}

apiserver_test() {
  local nodes=${1:-1000} pattern=${2:-TestNodeScopeWritesOnAPIServer}
  [ -d "$TREE" ] || { echo "no VPA tree in $TREE: run 'make vpa' first" >&2; return 1; }
  go build -o "$OUT/tools/cluster" ./hack/cmd/cluster
  trap '"$OUT/tools/cluster" apiserver-down' EXIT
  "$OUT/tools/cluster" apiserver-up
  (cd "$TREE" && VPA_APISERVER_KUBECONFIG=$OUT/apiserver/admin.kubeconfig VPA_APISERVER_NODES=$nodes \
    nice -n 5 go test -p 1 -tags vpaapiserver -timeout 3h -count 1 -run "$pattern" -v ./pkg/recommender/routines/)
}

# gates: the VPA feature gates the series adds, as NAME=true,...
gates() { series_gates autoscaler; }

gates_off() {
  local dest=${1:-$TESTOUT} pkgs
  mkdir -p "$dest"
  pkgs=$("$SERIES" touched autoscaler)
  echo "== unit tests: autoscaler, gates at their defaults ($(wc -w <<<"$pkgs") packages)"
  gotest "$TREE" "$dest/autoscaler-gates-off.json" -- $pkgs
  "$SUMMARY" "$dest/autoscaler-gates-off.json" | tail -n 1
}

gates_on() {
  local dest=${1:-$TESTOUT} pkgs g tmp overlay="" i=0 dir name path skip
  mkdir -p "$dest"
  pkgs=$("$SERIES" touched autoscaler)
  g=$(gates)
  [ -n "$g" ] || return 0
  echo "== unit tests: autoscaler with $g"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"; trap - RETURN' RETURN
  # One added file per package sets the gates (the tree stays untouched).
  while read -r dir name path; do
    i=$((i + 1))
    if [ "$path" = k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features ]; then
      printf 'package features\n\nfunc init() {\n\tif err := MutableFeatureGate.Set("%s"); err != nil {\n\t\tpanic(err)\n\t}\n}\n' "$g" >"$tmp/$i.go"
    else
      printf 'package %s\n\nimport "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"\n\nfunc init() {\n\tif err := features.MutableFeatureGate.Set("%s"); err != nil {\n\t\tpanic(err)\n\t}\n}\n' "$name" "$g" >"$tmp/$i.go"
    fi
    overlay+="${overlay:+,}\"$dir/zz_series_gates_on_test.go\":\"$tmp/$i.go\""
    # Left out: the tests that emulate a VPA release older than the gates.
    awk '/^func Test/ { match($0, /Test[A-Za-z0-9_]*/); f = substr($0, RSTART, RLENGTH) }
         /EmulationVersion/ { print f }' "$dir"/*_test.go 2>/dev/null >>"$tmp/skip" || :
  done < <(cd "$TREE" && go list -f '{{.Dir}} {{.Name}} {{.ImportPath}}' $pkgs)
  echo "{\"Replace\":{$overlay}}" >"$tmp/overlay.json"
  skip=$(sort -u "$tmp/skip" | paste -sd'|' -)
  [ -z "$skip" ] || echo "left out (they emulate an older VPA release): $skip"
  gotest "$TREE" "$dest/autoscaler-gates-on.json" ${skip:+-skip "^($skip)\$"} -overlay "$tmp/overlay.json" -- $pkgs
  "$SUMMARY" "$dest/autoscaler-gates-on.json" | tail -n 1
}

case ${1:-build} in
  build) tree && build && crds ;;
  crds) tree && crds ;;
  test) tree && gates_off "${2:-}" && gates_on "${2:-}" ;;
  gates-on) tree && gates_on "${2:-}" ;;
  e2e) e2e_build && e2e "${2:-}" ;;
  e2e-build) e2e_build ;;
  metrics-server) metrics_server ;;
  apiserver-test) apiserver_test "${2:-}" "${3:-}" ;;
  scale) tree && scale "${2:-}" "${3:-}" ;;
  *) echo "usage: hack/vpa.sh [build|crds|test [OUT_DIR]|gates-on [OUT_DIR]|e2e [JSON]|e2e-build|metrics-server|apiserver-test [NODES [RUN]]|scale [NODES [RUNS]]]" >&2; exit 2 ;;
esac
