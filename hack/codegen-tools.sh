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
