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

# hack/kind.sh up|down: the fork's kind cluster (root; docs/kind.md).
#   up    make kind-image, then a cluster of it from build/kind/cluster.yaml (one
#         control plane, one worker; HA=1: build/kind/cluster-ha.yaml, three control
#         planes behind kind's load balancer, one worker; WORKERS=2: two workers, as
#         kind's CI runs Conformance), its pod network, Ready nodes
#   down  delete the clusters and stop the engine, leaving nothing running, mounted
#         or linked
# PRISTINE=1 up: the same of upstream's release with no group applied, in a cluster of
# its own (kube-carry-pristine) without the series' gates and APIs: the pristine side of
# make kind-e2e's parity run (lib.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ "$(id -u)" != 0 ]; then
  echo "error: the kind cluster runs on the project's own Docker engine (dockerd), which needs root" >&2
  exit 1
fi
case ${1:-} in
  up)
    hack/kind-image.sh
    config=build/kind/cluster.yaml
    [ "${HA:-}" != 1 ] || config=build/kind/cluster-ha.yaml
    workers=()
    [ -z "${WORKERS:-}" ] || workers=(-workers "$WORKERS")
    "$OUT/tools/cluster" kind-up "${SIDE_FLAGS[@]}" "${workers[@]}" "$(cat "$SIDE_KIND/node-image.name")" "$config"
    ;;
  down)
    go build -o "$OUT/tools/cluster" ./hack/cmd/cluster
    "$OUT/tools/cluster" kind-down
    ;;
  *) echo "usage: hack/kind.sh up|down" >&2; exit 2 ;;
esac
