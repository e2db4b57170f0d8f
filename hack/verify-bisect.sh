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

# Proves the series is bisectable: every prefix (upstream, upstream + group 1, ...)
# compiles the binaries. Slow (one build per group); not part of make test.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
tools
"$SERIES" tree

bisect() {
  local up=$1 moddir=$2; shift 2
  local tree=$OUT/$up work=$OUT/bisect/$up
  local base commits
  base=$(git -C "$tree" rev-list --max-parents=0 HEAD)
  commits=$(git -C "$tree" rev-list --reverse "$base..HEAD")
  rm -rf "$work"; git -C "$tree" worktree prune
  git -C "$tree" worktree add -q --detach "$work" "$base"
  for c in $base $commits; do
    git -C "$work" checkout -q --detach "$c"
    echo "== $up $(git -C "$work" log -1 --format='%h %s')"
    (cd "$work/$moddir" && go build -trimpath -o /dev/null "$@") || { echo "FAIL: $up does not build at $(git -C "$work" log -1 --format='%h %s')"; exit 1; }
  done
  git -C "$tree" worktree remove --force "$work"
}
bisect kubernetes . ./cmd/kubelet ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubectl
bisect autoscaler vertical-pod-autoscaler ./pkg/recommender ./pkg/updater ./pkg/admission-controller
echo "every prefix of the series builds"
