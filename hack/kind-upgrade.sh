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

# make kind-upgrade: the upgrade lane (issue 38; docs/upgrade.md): an HA kind
# cluster (three control planes, two workers) created at pristine FROM (v1.36.3),
# with workloads that must survive, upgraded to the fork the way kinder does with
# the series' gates and API of build/kind/cluster-ha.yaml, the features rolled
# back and on again, the binaries rolled back to pristine upstream at the pinned
# release and forward to the fork again, each step checked
# (hack/internal/upgradelane). The lane's cluster (kube-carry-v1-36-3) is
# created afresh each run and kept after it; make kind-down deletes it.
# LANE_LEAVE_ON=GATE breaks step c on purpose (GATE, one of the series' gates,
# left on): its checks must fail the run, which stops after that step.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ "$(id -u)" != 0 ]; then
  echo "error: the kind cluster runs on the project's own Docker engine (dockerd), which needs root" >&2
  exit 1
fi
from=${FROM:-v1.36.3}
tools
# A broken step that names no gate step c turns off is refused before anything
# is built or the cluster replaced (the lane refuses it too, when run directly).
if [ -n "${LANE_LEAVE_ON:-}" ] && { [ "$LANE_LEAVE_ON" = FeatureLifecycle ] || ! "$SERIES" gates kubernetes | grep -qx "$LANE_LEAVE_ON"; }; then
  echo "error: LANE_LEAVE_ON=$LANE_LEAVE_ON: step c turns off $("$SERIES" gates kubernetes | grep -vx FeatureLifecycle | paste -sd' ' -); name one of them" >&2
  exit 2
fi
"$SERIES" tree autoscaler # the VPA whose components step b runs in the cluster
hack/kind-image.sh # the fork's node image and its release tarball
WHAT=cmd/kubectl-balloon hack/build.sh # step b runs kubectl balloon set-size as a user does
PRISTINE=1 hack/kind-image.sh # pristine's release tarball, the rollback's
RELEASE=$from hack/kind-image.sh
go build -o "$OUT/tools/cluster" ./hack/cmd/cluster
"$OUT/tools/cluster" kind-delete -release "$from" # the lane starts at the release
RELEASE=$from HA=1 WORKERS=2 hack/kind.sh up
"$OUT/tools/cluster" kind-upgrade-lane -release "$from" \
  "$OUT/kind/kubernetes-server-linux-amd64.tar.gz" "$OUT/kubernetes" "$OUT/bin" \
  "$OUT/kind/pristine/kubernetes-server-linux-amd64.tar.gz" "$OUT/pristine/kubernetes" \
  "$OUT/autoscaler/vertical-pod-autoscaler" \
  build/kind/cluster-ha.yaml
