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

# Builds the patched Kubernetes binaries with upstream's own `make WHAT=...` in the
# materialized tree and collects them in _output/bin (PRISTINE=1: upstream's release
# with no group applied, into _output/pristine/bin; RELEASE=v1.X.Y: that release,
# into _output/releases/v1.X.Y/bin; lib.sh).
#
# hack/build.sh --test-flags (make test's cluster smoke) builds the same code with
# make test's go test flags (TEST_BUILD_FLAGS in lib.sh) instead of upstream's release flags (-trimpath and
# the selinux,notest,grpcnotrace tags), so that the build cache the tests filled
# serves it rather than another compile of the whole graph, and the cluster runs
# under the race detector; the version is stamped by upstream's own
# kube::version::ldflags.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
TREE=$SIDE_TREE
case $SIDE in
  pristine) pristine_tree ;;
  release) tools && release_tree ;;
esac
WHAT=${WHAT:-cmd/kubelet cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubectl cmd/kubectl-balloon}

# Share the module and build caches with every other go command here (upstream would
# keep its own under the tree's _output/), so that tests and builds reuse each other's work.
export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)} GOCACHE=${GOCACHE:-$(go env GOCACHE)}
# Upstream builds with GOPROXY=off because its git tree vendors every module; the
# module zips carry no vendor/, so fetch what the targets need first.
pkgs=()
for w in $WHAT; do
  case "$w" in
    *.test) pkgs+=("./$(dirname "$w")") ;;
    cmd/* | test/* | pkg/* | staging/*) pkgs+=("./$w") ;;
    *) pkgs+=("$w") ;;
  esac
done
(cd "$TREE" && go list -e -deps -test "${pkgs[@]}" >/dev/null)

version=$(side_version)
state=clean
[[ $version == *.dirty ]] && state=dirty
mkdir -p "$SIDE_BIN"
# The build date upstream stamps into every binary (kube::version::ldflags) is the
# tree commit's, unless the caller sets one: the same tree then builds the same
# binaries, and the kind node image of an unchanged tree is not built again.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$TREE" log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
if [ "${1:-}" = --test-flags ]; then
  echo "building $WHAT at $version with make test's go test flags (${TEST_BUILD_FLAGS[*]})"
  ldflags=$(cd "$TREE" && KUBE_GIT_VERSION="$version" KUBE_GIT_TREE_STATE="$state" bash -c 'source hack/lib/init.sh && kube::version::ldflags')
  (cd "$TREE" && go build "${TEST_BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$SIDE_BIN/" "${pkgs[@]}")
else
  echo "building $WHAT at $version"
  # FORCE_HOST_GO: build with the Go on PATH instead of fetching the toolchain .go-version names.
  make -C "$TREE" WHAT="$WHAT" FORCE_HOST_GO=y KUBE_GIT_VERSION="$version" KUBE_GIT_TREE_STATE="$state"
  for pkg in $WHAT; do
    bin=$(basename "$pkg")
    cp -f "$TREE/_output/local/bin/linux/amd64/$bin" "$SIDE_BIN/$bin"
  done
fi
echo "$version" >"$SIDE_BIN/VERSION"
echo "binaries in ${SIDE_BIN#"$ROOT"/}: $(cd "$SIDE_BIN" && echo *)"
