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

# Static checks of the repository and the series: formatting, vet, pins, overlay
# claims, that the series applies, and that its export round-trips.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
tools || exit 1

gofmt_hack() { out=$(gofmt -l hack); [ -z "$out" ] || { echo "not gofmt-ed (run gofmt -w):"; echo "$out"; return 1; }; }
vet_tree() {
  local up=$1 dir=$2 pkgs
  pkgs=$("$SERIES" touched "$up") || return 1
  [ -z "$pkgs" ] && { echo "the series changes no Go package of $up"; return 0; }
  (cd "$dir" && go vet "${TEST_BUILD_FLAGS[@]}" $pkgs)
}

# The license header of every file of this repository, by upstream's own checker
# (hack/boilerplate in the tree): the files the series adds in-tree are checked with
# the tree by upstream's verify, this checks the project's own (hack/, build/, ...).
boilerplate() {
  local bp=$OUT/kubernetes/hack/boilerplate out
  out=$(git ls-files -z | xargs -0 python3 "$bp/boilerplate.py" --rootdir "$ROOT" --boilerplate-dir "$bp") || return 1
  [ -z "$out" ] || { echo "without upstream's license header (hack/boilerplate/boilerplate.*.txt):"; echo "$out"; return 1; }
}

check gofmt-hack gofmt_hack
# go vet compiles what it checks and its dependencies, with the tests' flags so that
# they reuse those compiles. One run with the cluster tests' tags: vet's results for
# the dependencies depend on the tags, so a second run would redo them.
check vet-hack go vet "${TEST_BUILD_FLAGS[@]}" -tags smoke,vpae2e,vpascale ./hack/...
check go-mod-tidy go mod tidy -diff
check series-check "$SERIES" check
check series-applies "$SERIES" tree
# Protobuf numbers, aggregator priorities, feature gates, API groups and metrics the
# series takes and its pinned upstream takes too (docs/development.md).
check series-collisions "$SERIES" collisions
check boilerplate boilerplate
check vet-kubernetes vet_tree kubernetes "$OUT/kubernetes"
check vet-autoscaler vet_tree autoscaler "$OUT/autoscaler/vertical-pod-autoscaler"
check export-roundtrip "$SERIES" roundtrip
check vpa-crds hack/vpa.sh crds

# The protobuf code the series carries (the API types' generated.pb.go and the gRPC
# bindings) is what upstream's generators make of it (run in a scratch clone, so the
# tree itself is never touched). The clone's path is fixed: the generators' builds and
# package loads are cached by path, so a fixed one lets the next run reuse them.
# It is not run again while its inputs are those it last passed with (inputs_key).
verify_protobuf() {
  local work=$OUT/verify-protobuf status key
  key=$(inputs_key hack/verify.sh hack/in-tree.sh hack/codegen-tools.sh hack/lib.sh go.mod go.sum $(git ls-files hack/cmd/protoc))
  if passed_before codegen-protobuf "$key"; then
    echo "the inputs are those it last passed with (key ${key:0:12}): not run again"
    return 0
  fi
  rm -rf "$work" && mkdir -p "$work" &&
    git clone -q --shared "$OUT/kubernetes" "$work/kubernetes" &&
    TREE=$work/kubernetes hack/in-tree.sh hack/update-codegen.sh protobuf protobindings >"$work/log" 2>&1 ||
    { tail -n 20 "$work/log"; rm -rf "$work"; return 1; }
  status=$(git -C "$work/kubernetes" status --porcelain)
  rm -rf "$work"
  [ -z "$status" ] || { echo "generated protobuf code differs from its .proto files (run hack/in-tree.sh hack/update-codegen.sh protobuf protobindings, then make save):"; echo "$status"; return 1; }
  passed_with codegen-protobuf "$key"
}
check codegen-protobuf verify_protobuf
[ "$FAILED_CHECKS" = 0 ]
