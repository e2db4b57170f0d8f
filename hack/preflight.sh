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

# Checks what a make target needs before it starts, with a clear error for each gap.
#   hack/preflight.sh go     Go is installed and new enough for go.mod
#   hack/preflight.sh root   the target must run as root
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "error: $*" >&2; exit 1; }

check_go() {
  command -v go >/dev/null 2>&1 ||
    die "Go is not installed or not on PATH. Install Go $(want_go) or newer (https://go.dev/dl/) and run again."
  local have want
  have=$(GOFLAGS= GOTOOLCHAIN=local go env GOVERSION 2>/dev/null) || die "'go env GOVERSION' failed: is Go installed correctly?"
  have=${have#go}; have=${have%%[-a-z ]*}
  want=$(want_go)
  if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" != "$want" ]; then
    die "Go $have is too old: this repository and Kubernetes $(sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' go.mod) need Go $want or newer."
  fi
}

want_go() { sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod; }

for what in "$@"; do
  case "$what" in
    go) check_go ;;
    root) [ "$(id -u)" = 0 ] || die "this target starts containerd and a kubelet and must run as root (try: sudo make $MAKECMDGOALS)" ;;
    *) die "preflight: unknown check $what" ;;
  esac
done
