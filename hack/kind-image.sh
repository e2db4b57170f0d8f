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

# make kind-image: the fork's kind node image, built offline with kind's own
# `kind build node-image` on the project's Docker engine (root; docs/kind.md). It
# prints the image's name and writes it to _output/kind/node-image.name.
# make kind-tarball (--tarball-only): only the release tarball it is built from, no
# engine needed. PRISTINE=1: the same of upstream's release, no group applied (lib.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

tarball_only=${1:-}
if [ "$tarball_only" != --tarball-only ] && [ "$(id -u)" != 0 ]; then
  echo "error: make kind-image runs the project's own Docker engine (dockerd), which needs root" >&2
  exit 1
fi
if [ "$tarball_only" != --tarball-only ]; then
  # The engine's packages include the kube-proxy tools the tarball's image carries.
  go build -o "$OUT/tools/cluster" ./hack/cmd/cluster
  go build -o "$OUT/tools/runc-dropcaps" ./hack/cmd/runc-dropcaps
  "$OUT/tools/cluster" engine-up
fi
WHAT="cmd/kubeadm cmd/kubelet cmd/kubectl cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kube-proxy" hack/build.sh
mkdir -p "$SIDE_KIND"
tarball=$SIDE_KIND/kubernetes-server-linux-amd64.tar.gz
go run ./hack/cmd/images release-tarball "$tarball" "$SIDE_BIN"
[ "$tarball_only" = --tarball-only ] && exit 0

version=$(cat "$SIDE_BIN/VERSION")
image=kube-carry/node:${version//+/_}
# The image of this tarball is built once: its digest is recorded beside the name.
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
if [ "$(cat "$SIDE_KIND/node-image.sha256" 2>/dev/null)" = "$sum" ] &&
  DOCKER_HOST=unix://$OUT/kind/docker.sock docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image is up to date"
else
  rm -f "$SIDE_KIND/node-image.sha256"
  "$OUT/tools/cluster" kind-image "${SIDE_FLAGS[@]}" "$tarball" "$image"
  echo "$sum" >"$SIDE_KIND/node-image.sha256"
fi
echo "$image" >"$SIDE_KIND/node-image.name"
echo "built $image; on the engine (export DOCKER_HOST=unix://$OUT/kind/docker.sock):"
echo "  go tool kind create cluster --config build/kind/cluster.yaml --image $image"
