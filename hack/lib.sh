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

# Shared by the hack/ scripts: paths and the check runner.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/_output
SERIES=$OUT/tools/series
SUMMARY=$OUT/tools/testsummary
TESTOUT=$OUT/test

# The side a kind script works on (docs/kind.md, parity): the fork's tree, or with
# PRISTINE=1 upstream's release with no group of the series applied, built, imaged
# and tested the same way, so that the two results can be compared; or with
# RELEASE=v1.X.Y pristine upstream at a release the pins do not name (series
# release), built and imaged the same way: the release an upgrade lane starts from.
# UPGRADED=v1.X.Y is the lane's cluster of that release after make kind-upgrade took
# it to the fork: the fork's tree and binaries, the release side's cluster.
if [ -n "${UPGRADED:-}" ]; then
  if [ "${PRISTINE:-}" = 1 ] || [ -n "${RELEASE:-}" ]; then
    echo "error: UPGRADED=$UPGRADED with PRISTINE or RELEASE: name one side" >&2
    exit 2
  fi
  SIDE=upgraded
  SIDE_TREE=$OUT/kubernetes
  SIDE_BIN=$OUT/bin
  SIDE_KIND=$OUT/kind/releases/$UPGRADED
  SIDE_FLAGS=(-upgraded "$UPGRADED") # of the cluster tool's kind commands
elif [ -n "${RELEASE:-}" ]; then
  if [ "${PRISTINE:-}" = 1 ]; then
    echo "error: RELEASE=$RELEASE and PRISTINE=1: the pristine side is the pinned release; name one" >&2
    exit 2
  fi
  SIDE=release
  SIDE_TREE=$OUT/releases/$RELEASE/kubernetes
  SIDE_BIN=$OUT/releases/$RELEASE/bin
  SIDE_KIND=$OUT/kind/releases/$RELEASE
  SIDE_FLAGS=(-release "$RELEASE") # of the cluster tool's kind commands
elif [ "${PRISTINE:-}" = 1 ]; then
  SIDE=pristine
  SIDE_TREE=$OUT/pristine/kubernetes
  SIDE_BIN=$OUT/pristine/bin
  SIDE_KIND=$OUT/kind/pristine
  SIDE_FLAGS=(-pristine) # of the cluster tool's kind commands
else
  SIDE=fork
  SIDE_TREE=$OUT/kubernetes
  SIDE_BIN=$OUT/bin
  SIDE_KIND=$OUT/kind
  SIDE_FLAGS=()
fi

# pristine_tree: a worktree of the kubernetes tree at its first commit (upstream's
# release, with what the series tool restores of the module zip and no group applied)
# in _output/pristine/kubernetes; the series' commits are never in it.
pristine_tree() {
  local tree=$OUT/kubernetes base
  base=$(git -C "$tree" rev-list --max-parents=0 HEAD)
  if [ "$(git -C "$SIDE_TREE" rev-parse HEAD 2>/dev/null)" != "$base" ]; then
    rm -rf "$SIDE_TREE"
    git -C "$tree" worktree prune
    mkdir -p "$(dirname "$SIDE_TREE")"
    git -C "$tree" worktree add -q --detach "$SIDE_TREE" "$base"
  fi
}

# release_tree: the tree of RELEASE in _output/releases (series release), kept when
# it is there already.
release_tree() {
  "$SERIES" release -k8s "$RELEASE" -o "$SIDE_TREE"
}

# side_version: the version the side's binaries carry: the series' version string for
# the fork, upstream's release (the first commit's subject, "kubernetes vX.Y.Z") for
# pristine and a release side.
side_version() {
  if [ "$SIDE" != fork ] && [ "$SIDE" != upgraded ]; then
    git -C "$SIDE_TREE" log -1 --format=%s | sed 's/^kubernetes //'
  else
    "$SERIES" version
  fi
}

tools() {
  (cd "$ROOT" && go build -o "$SERIES" ./hack/cmd/series && go build -o "$SUMMARY" ./hack/cmd/testsummary)
}

# series_gates UPSTREAM: the feature gates the series adds to UPSTREAM (kubernetes,
# autoscaler) as NAME=true,... : the one list (series gates, read from the groups'
# patches) that the unit tests' gates-on passes, the clusters and the e2e targets use.
series_gates() {
  "$SERIES" gates "$1" | sed 's/$/=true/' | paste -sd, -
}

# series_specs: this project's own e2e specs, by their features' labels.
series_specs() {
  echo "\\[Feature:($("$SERIES" gates kubernetes | paste -sd'|' -))\\]"
}

# The default focus of make e2e and make kind-e2e: this project's own e2e specs and
# the upstream smoke subset of hack/e2e-smoke.txt.
e2e_focus() {
  local smoke
  smoke=$(grep -v '^#' "$ROOT/hack/e2e-smoke.txt" | grep -v '^$' | paste -sd'|')
  echo "$(series_specs)|$smoke"
}

# The build flags of every compile make test does, in the trees and in hack/: go vet,
# the tests and the test builds share their compiles only while these are the same
# (docs/testing.md). -race as upstream's make test (KUBE_RACE).
TEST_BUILD_FLAGS=(-race)

# gotest DIR OUT.json FLAGS... -- PKGS...: go test -json of PKGS in the tree at DIR
# into OUT.json, then the flake rule (docs/testing.md): every failed upstream test is rerun once
# on its own with the same flags and environment (testsummary rerun). go test's own
# vet is off: verify runs go vet with every analyzer over the same packages. A package
# whose test binary and inputs did not change since it last passed is not run again
# (go test's cache, as upstream's make test); steps with state outside go's view
# (etcd, a cluster) pass -count=1.
gotest() {
  local dir=$1 out=$2 flags=("${TEST_BUILD_FLAGS[@]}" -json -vet=off)
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  (cd "$dir" && gojson "$out" go test "${flags[@]}" "$@") || : # the summary tells
  "$SUMMARY" rerun -C "$dir" "$out" -- go test "${flags[@]}"
}

# gojson OUT.json CMD...: runs CMD, a go test -json, into OUT.json and its exit
# status into OUT.exit, which the summary reads: a go command that failed before
# printing any event (a bad flag, overlay or module) fails the step.
gojson() {
  local out=$1 status=0
  shift
  "$@" >"$out" 2>&1 || status=$?
  echo "$status" >"${out%.json}.exit"
  return "$status"
}

# fuzz_iters_overlay TREE TMPDIR PKGS...: prints go test -overlay entries that give
# the fuzz tests built on apimachinery's roundtrip package the 20 iterations they run
# without -race. Under -race roundtrip lowers its default to 5 (fuzz_race.go), which
# leaves pkg/api/testing's TestVersionedValidationByFuzzing (iterations / 10) with
# none; its -fuzz-iters is a pflag that no test binary parses, so an init sets it.
fuzz_iters_overlay() {
  local tree=$1 tmp=$2 rt=k8s.io/apimachinery/pkg/api/apitesting/roundtrip sep="" i=0
  shift 2
  (cd "$tree" && go list -f "{{.Dir}} {{.Name}} {{range .TestImports}}{{if eq . \"$rt\"}}in{{end}}{{end}}{{range .XTestImports}}{{if eq . \"$rt\"}}x{{end}}{{end}}" "$@") |
    while read -r dir name where; do
      case $where in
      in*) ;;
      x) name=${name}_test ;;
      *) continue ;;
      esac
      i=$((i + 1))
      printf 'package %s\n\nimport "%s"\n\nfunc init() { *roundtrip.FuzzIters = 20 }\n' "$name" "$rt" >"$tmp/fuzz-iters-$i.go"
      printf '%s"%s/zz_series_fuzz_iters_test.go":"%s"' "$sep" "$dir" "$tmp/fuzz-iters-$i.go"
      sep=,
    done
}

# thp_always FILE: transparent huge pages "always" in FILE (the kernel's setting,
# /sys/kernel/mm/transparent_hugepage/enabled) for as long as this shell lives, and
# the old value back once it is gone, however it ends (kill -9 included): a watcher
# in a session of its own, which the run's process group and its traps do not
# reach, waits for the shell. Nothing happens where FILE is not writable or already
# says always.
thp_always() {
  local file=$1 was
  { [ -w "$file" ] && ! grep -q '\[always\]' "$file"; } || return 0
  was=$(sed 's/.*\[\(.*\)\].*/\1/' "$file")
  echo always 2>/dev/null >"$file" || return 0
  echo "transparent huge pages: always for this run (was $was)"
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; echo "$2" >"$3"' thp-restore "$$" "$was" "$file" \
    </dev/null >/dev/null 2>&1 &
  local watcher=$!
  disown
  # Until it has left this process group, killing the group would take it along.
  # (Its session is the sixth field of /proc/PID/stat; its name, bash, has no spaces.)
  while kill -0 "$watcher" 2>/dev/null && [ "$(awk '{ print $6 }' "/proc/$watcher/stat" 2>/dev/null)" != "$watcher" ]; do
    sleep 0.1
  done
}

# inputs_key FILE...: the key of what a check of the trees reads: both trees'
# commits (the scratch clones the checks run in hold nothing else of the trees), the
# contents of FILE... (the scripts that run the check) and the Go version.
inputs_key() {
  {
    git -C "$OUT/kubernetes" rev-parse HEAD
    git -C "$OUT/autoscaler" rev-parse HEAD
    cat "$@"
    go version
  } 2>&1 | sha256sum | cut -d' ' -f1
}

# passed_with NAME KEY records that check NAME passed with inputs KEY;
# passed_before NAME KEY tells whether it did: a warm run need not run it again.
passed_with() { mkdir -p "$OUT/passed" && echo "$2" >"$OUT/passed/$1"; }
passed_before() { [ "$(cat "$OUT/passed/$1" 2>/dev/null)" = "$2" ]; }

# servers_inputs_key: the inputs of the cluster tests, which go test's cache
# never reuses (-count=1: what they run is outside its view): each tree's
# content, its commit and any file edited or added since (through a copy of
# its index, which rehashes only what changed), this repository's hack/,
# build/ and go.mod/go.sum (the harness, the images, their dependencies), the
# Debian packages installed (etcd, containerd, runc) and Go.
servers_inputs_key() {
  local f tree index
  f=$(mktemp)
  index=$(mktemp)
  {
    for tree in "$OUT/kubernetes" "$OUT/autoscaler"; do
      cp "$(git -C "$tree" rev-parse --absolute-git-dir)/index" "$index" &&
        GIT_INDEX_FILE=$index git -C "$tree" add -A && GIT_INDEX_FILE=$index git -C "$tree" write-tree
    done
    { find hack build -type f -print0 && printf '%s\0' go.mod go.sum; } | LC_ALL=C sort -z | xargs -0 sha256sum
    dpkg-query -W -f '${Package} ${Version}\n' 2>/dev/null
  } >"$f" 2>&1
  inputs_key "$f"
  rm -f "$f" "$index"
}

# reuse_pass NAME KEY OUT.json: outside CI (CI unset or empty), a step of make
# test that passed with the same inputs (KEY) is not run again: the results of
# that run are written to OUT.json, after a line that says so and when they were
# written; go test's cache does the same for the tests without servers. Fails
# when there is no such pass.
reuse_pass() {
  local name=$1 key=$2 out=$3 kept=$OUT/passed/$1.json
  [ -z "${CI:-}" ] && [ -s "$kept" ] && passed_before "$name" "$key" || return 1
  {
    printf '{"Action":"output","Package":"%s","Output":"not run again: its inputs (key %s) are those of its pass of %s, whose results follow\\n"}\n' \
      "$name" "${key:0:12}" "$(date -u -r "$kept" +%FT%TZ)"
    cat "$kept"
  } >"$out"
  echo 0 >"${out%.json}.exit"
}

# keep_pass NAME KEY OUT.json: keeps a step's results for reuse_pass when they
# passed (go test's exit status, where it wrote one, and the summary agree) and
# no test skipped itself (a cluster test skips when not root or when a cluster
# is up, which the key does not cover); forget_pass NAME... forgets them.
forget_pass() {
  local name
  for name in "$@"; do rm -f "$OUT/passed/$name" "$OUT/passed/$name.json"; done
}
keep_pass() {
  local name=$1 key=$2 out=$3
  forget_pass "$name"
  [ ! -e "${out%.json}.exit" ] || [ "$(cat "${out%.json}.exit")" = 0 ] || return 0
  ! grep -q '"Action":"skip"' "$out" || return 0
  "$SUMMARY" "$out" >/dev/null 2>&1 || return 0
  mkdir -p "$OUT/passed" && cp -p "$out" "$OUT/passed/$name.json" && passed_with "$name" "$key"
}

# check NAME CMD...: runs one check, prints its verdict (and its output when it
# fails) and, when CHECKS_JSON is set, records it there as a test event.
FAILED_CHECKS=0
check() {
  local name=$1; shift
  local log status=pass start=$SECONDS
  log=$(mktemp)
  # A failure says its exit status and the free space, which a check that
  # failed without output (killed, or a full disk) otherwise leaves unsaid.
  "$@" >"$log" 2>&1 || {
    local code=$?
    status=fail
    echo "(exit status $code; free: $(df -Ph "$ROOT" "${TMPDIR:-/tmp}" | awk 'NR > 1 { printf "%s on %s  ", $4, $6 }'))" >>"$log"
  }
  printf '[%s] %s (%ds)\n' "$status" "$name" $((SECONDS - start))
  if [ "$status" = fail ]; then
    FAILED_CHECKS=$((FAILED_CHECKS + 1))
    tail -n 60 "$log" | sed 's/^/    /'
  fi
  if [ -n "${CHECKS_JSON:-}" ]; then
    "$SUMMARY" record "${CHECKS_PKG:-verify}" "$name" "$status" <"$log" >>"$CHECKS_JSON"
  fi
  rm -f "$log"
  [ "$status" = pass ]
}
