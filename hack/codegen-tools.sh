#!/usr/bin/env bash
# Installs into the kubernetes tree what upstream's code generators expect and the
# module zips cannot give: protoc 23.4 is not installable here, so third_party/protoc
# (where hack/lib/protoc.sh looks) gets this project's protoc-compatible front end
# (hack/cmd/protoc, on bufbuild/protocompile). The folder is git-ignored upstream.
#   hack/codegen-tools.sh [TREE]   (default _output/kubernetes)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
tree=${1:-$OUT/kubernetes}
[ -d "$tree/third_party" ] || { echo "error: no tree at $tree; run 'make tree' first" >&2; exit 1; }
dir=protoc-v23.4-linux-amd64
mkdir -p "$tree/third_party/$dir"
go build -o "$tree/third_party/$dir/protoc" ./hack/cmd/protoc
ln -sfn "$dir" "$tree/third_party/protoc"
