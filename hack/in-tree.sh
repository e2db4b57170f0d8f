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

# Runs an upstream script or command inside the kubernetes tree the way upstream's
# CI container would: the host's Go (FORCE_HOST_GO), the shared module and build
# caches, this project's protoc front end on PATH (hack/codegen-tools.sh), and the
# modules of the code generators fetched first (upstream's scripts run with
# GOPROXY=off, expecting a vendor/ the module zips do not have).
#   hack/in-tree.sh hack/update-codegen.sh conversions
# TREE names another checkout of the tree (default _output/kubernetes).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
[ $# -gt 0 ] || { echo "usage: hack/in-tree.sh COMMAND [ARGS...]" >&2; exit 2; }
tree=${TREE:-$OUT/kubernetes}
hack/codegen-tools.sh "$tree"
export FORCE_HOST_GO=y
export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)} GOCACHE=${GOCACHE:-$(go env GOCACHE)}
export PATH=$tree/third_party/protoc:$PATH
# The .proto files upstream's generators import from vendor/ (gogo.proto), laid out as
# vendor/ would hold them, for the protoc front end (KUBE_CARRY_PROTO_PATH).
protos=$OUT/tools/proto-vendor
# (-mod=readonly: from the module cache also in a clone with vendor/, where go list
# names no directory; make verify-upstream vendors its clone.)
gogo=$(cd "$tree" && go list -mod=readonly -m -f '{{.Dir}}' github.com/gogo/protobuf)
mkdir -p "$protos/github.com/gogo"
ln -sfn "$gogo" "$protos/github.com/gogo/protobuf"
export KUBE_CARRY_PROTO_PATH=$protos
(cd "$tree" && go list -e -deps ./staging/src/k8s.io/code-generator/cmd/... ./cmd/genfeaturegates ./test/compatibility_lifecycle >/dev/null)
cd "$tree"
exec "$@"
