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

# make kind-upgrade: the upgrade lane (issue 38; docs/kind.md): an HA kind cluster
# (three control planes, two workers) created at pristine FROM (v1.36.3), with
# workloads that must survive, upgraded to the fork the way kinder does, each step
# checked (hack/internal/upgradelane). The lane's cluster (kube-carry-v1-36-3) is
# created afresh each run and kept after it; make kind-down deletes it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ "$(id -u)" != 0 ]; then
  echo "error: the kind cluster runs on the project's own Docker engine (dockerd), which needs root" >&2
  exit 1
fi
from=${FROM:-v1.36.3}
tools
hack/kind-image.sh # the fork's node image and its release tarball
RELEASE=$from hack/kind-image.sh
go build -o "$OUT/tools/cluster" ./hack/cmd/cluster
"$OUT/tools/cluster" kind-delete -release "$from" # the lane starts at the release
RELEASE=$from HA=1 WORKERS=2 hack/kind.sh up
"$OUT/tools/cluster" kind-upgrade-lane -release "$from" "$OUT/kind/kubernetes-server-linux-amd64.tar.gz" "$OUT/kubernetes"
