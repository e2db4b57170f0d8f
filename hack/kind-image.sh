#!/usr/bin/env bash
# make kind-image: a kind node image of the patched tree. Needs a Docker engine;
# without one it stops at once. make kind-tarball does every step before Docker.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

tarball_only=${1:-}
if [ "$tarball_only" != --tarball-only ] && ! out=$(docker info 2>&1); then
  echo "error: no Docker engine answers ('docker info': $(tail -n1 <<<"$out"))." >&2
  echo "kind builds node images with Docker. On a machine with a Docker engine, run 'make kind-image';" >&2
  echo "here, 'make kind-tarball' builds the release tarball kind reads (kind build node-image --type file)." >&2
  exit 1
fi
WHAT="cmd/kubeadm cmd/kubelet cmd/kubectl cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kube-proxy" hack/build.sh
tarball=$OUT/kind/kubernetes-server-linux-amd64.tar.gz
go run ./hack/cmd/images release-tarball "$tarball"
[ "$tarball_only" = --tarball-only ] && exit 0

version=$(cat "$OUT/bin/VERSION")
image=kube-carry/node:${version//+/_}
go tool kind build node-image --type file "$tarball" --image "$image"
echo "built $image; start a cluster with:"
echo "  go tool kind create cluster --config build/kind/cluster.yaml --image $image"
