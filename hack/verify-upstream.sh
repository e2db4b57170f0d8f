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

# make verify-upstream: upstream's own verify scripts on the series, in scratch clones
# of the trees (the trees themselves are never touched), through upstream's own
# runners: hack/make-rules/verify.sh (WHAT=) for Kubernetes, the VPA's
# hack/verify-all.sh (EXCLUDE=) for the VPA. Every script runs that can run without
# the internet (the Go module proxy and Debian's packages are used); those left out
# are in hack/verify-upstream-skip.txt with the reason. Ends with the counts and every
# script's time (docs/testing.md, verify-upstream).
#   hack/verify-upstream.sh [-quick] [kubernetes] [autoscaler]
# -quick: only the scripts upstream's verify.sh runs in its quick mode (QUICK_PATTERNS).
# VERIFY_UPSTREAM_KEEP=1 keeps the scratch clones (_output/verify-upstream) as they are
# when they exist, e.g. to rerun one script: VERIFY_UPSTREAM_KEEP=1 WHAT=gofmt
# hack/verify-upstream.sh kubernetes. VERIFY_UPSTREAM_WORK puts them elsewhere.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

SKIP=$ROOT/hack/verify-upstream-skip.txt
WORK=${VERIFY_UPSTREAM_WORK:-$OUT/verify-upstream}
quick=false
sides=()
for a in "$@"; do
  case $a in
  -quick) quick=true ;;
  kubernetes | autoscaler) sides+=("$a") ;;
  *) echo "usage: hack/verify-upstream.sh [-quick] [kubernetes] [autoscaler]" >&2; exit 2 ;;
  esac
done
[ ${#sides[@]} -gt 0 ] || sides=(kubernetes autoscaler)
mkdir -p "$WORK"
RESULTS=$WORK/results.txt # upstream script result seconds
: >"$RESULTS"

# skipped UPSTREAM SCRIPT: the reason the skip list gives, if it lists the script.
skipped() {
  awk -v u="$1" -v s="$2" '$1 == u && $2 == s { $1 = ""; $2 = ""; sub(/^ +/, ""); print; found = 1 } END { exit !found }' "$SKIP"
}

# debian PACKAGE COMMAND: installs Debian's PACKAGE when COMMAND is not on PATH (as
# root, as make test installs etcd-server).
debian() {
  command -v "$2" >/dev/null && return 0
  [ "$(id -u)" = 0 ] || { echo "error: $2 is not on PATH: install Debian's $1 (or run as root)" >&2; return 1; }
  echo "installing Debian's $1 (for $2)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1"; } >"$WORK/apt-$1.log" 2>&1 ||
    { tail -n 20 "$WORK/apt-$1.log"; return 1; }
}

# clone UPSTREAM: a scratch clone of the tree's committed series at $WORK/UPSTREAM
# (a fixed path: the go build and test caches are keyed by it).
clone() {
  local dir=$WORK/$1
  if [ "${VERIFY_UPSTREAM_KEEP:-}" = 1 ] && [ -d "$dir/.git" ]; then
    echo "reusing the scratch clone $dir"
    return 0
  fi
  [ -d "$OUT/$1/.git" ] || { echo "error: no tree at $OUT/$1; run 'make tree' first" >&2; return 1; }
  rm -rf "$dir"
  git clone -q --shared "$OUT/$1" "$dir"
  git -C "$dir" config user.name verify-upstream
  git -C "$dir" config user.email verify-upstream@localhost
}

# etcd_for TREE: puts an etcd at least as new as the one upstream's scripts ask for
# (hack/lib/etcd.sh; Debian's is 3.4) on PATH, built from the go.etcd.io/etcd/server/v3
# module at that version (the Go module proxy; upstream downloads a release from
# GitHub), in a module of its own so that etcd's own requirements select its
# dependencies.
etcd_for() {
  local tree=$1 want have bin
  # shellcheck disable=SC2016 # the line of etcd.sh, literally
  want=$(sed -n 's/^ETCD_VERSION=${ETCD_VERSION:-\(.*\)}$/\1/p' "$tree/hack/lib/etcd.sh")
  have=$(etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p')
  ETCD_BUILT=$want
  [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n 1)" = "$want" ] && return 0
  bin=$OUT/tools/etcd-$want
  if [ ! -x "$bin/etcd" ]; then
    echo "building etcd $want from go.etcd.io/etcd/server/v3 (Debian's is ${have:-not installed})"
    rm -rf "$bin" && mkdir -p "$bin/src"
    (cd "$bin/src" && export GOWORK=off GOFLAGS=-mod=mod && go mod init etcd >/dev/null 2>&1 &&
      go get "go.etcd.io/etcd/server/v3@v$want" >/dev/null 2>&1 && go build -o "$bin/etcd" go.etcd.io/etcd/server/v3) ||
      { echo "error: cannot build etcd $want from go.etcd.io/etcd/server/v3@v$want" >&2; return 1; }
  fi
  export PATH=$bin:$PATH
}

# installed_tools DIR: PKG@VERSION of each `go install PKG@VERSION` in DIR's verify
# scripts, the version written out or in a variable the script sets
# (`TOOL_VERSION=v1.4.0` ... `go install "sigs.k8s.io/mdtoc@${TOOL_VERSION}"`).
installed_tools() {
  local f m v name
  for f in $(grep -rlE 'go install' "$1" --include='verify-*.sh'); do
    for m in $(grep -oE 'go install "?[a-z0-9.-]+\.[a-z]+/[^ "@]+@[^ "]+' "$f" | sed 's/^go install "\?//'); do
      v=${m#*@}
      if [[ $v == \$* ]]; then
        name=${v#\$} name=${name#\{} name=${name%\}}
        v=$(sed -n "s/^ *${name}=\"\?\(v[0-9][^\" ]*\)\"\?.*/\1/p" "$f" | head -n 1)
      fi
      [[ $v == v[0-9]* ]] && echo "${m%%@*}@$v"
    done
  done | sort -u
}

# offline_tools DIR: the tools upstream's scripts install with `go install PKG@VERSION`
# load the module's version list to look for a deprecation, which the Go module proxy
# here refuses for some of them (403). Each such tool is fetched first, and two file
# proxies go in front of the real one: $WORK/goproxy serves, for a module whose list
# the cache does not hold (the proxy refused it), the list of the versions the cache
# holds; the module cache serves the rest.
offline_tools() {
  local dir=$1 m mod cache lists=$WORK/goproxy
  cache=$(go env GOMODCACHE)/cache/download
  [[ ${GOPROXY:-} == "file://$lists,"* ]] || export GOPROXY="file://$lists,file://$cache,$(go env GOPROXY)"
  for m in $(installed_tools "$dir"); do
    (cd "$WORK" && GOWORK=off GOFLAGS=-mod=mod go mod download "${m%%@*}@${m#*@}" 2>/dev/null) ||
      (cd "$WORK" && GOWORK=off go mod download "$(dirname "${m%%@*}")@${m#*@}" 2>/dev/null) || true
    mod=${m%%@*}
    while [ "$mod" != . ] && [ ! -d "$cache/$mod/@v" ]; do mod=$(dirname "$mod"); done
    if [ "$mod" != . ] && [ ! -s "$cache/$mod/@v/list" ]; then
      mkdir -p "$lists/$mod/@v"
      ls "$cache/$mod/@v" | sed -n 's/\.info$//p' >"$lists/$mod/@v/list"
    fi
  done
}

# vendor_tree TREE: upstream's scripts expect upstream's git checkout, which the
# module zips are not: a vendor/ directory (they build with GOPROXY=off;
# verify-vendor and verify-vendor-licenses compare it) and the staging modules'
# go.mod files in their git form (k8s.io/* at v0.0.0 with replace directives to
# ../<module>; the zips carry the publishing bot's form, v0.36.3 without them).
# hack/update-vendor.sh makes both in the clone, which commits the result; the diff it
# made to go.mod and go.sum files the series changes is logged for review
# ($WORK/vendor-series.diff), since verify-vendor then checks only that a second run
# changes nothing.
vendor_tree() {
  local tree=$1 series
  echo "populating vendor/ and the git form of go.mod in the scratch clone (hack/update-vendor.sh)"
  TREE=$tree hack/in-tree.sh hack/update-vendor.sh >"$WORK/update-vendor.log" 2>&1 ||
    { tail -n 30 "$WORK/update-vendor.log"; return 1; }
  series=$(cd "$tree" && git diff --name-only "$(git rev-list --max-parents=0 HEAD)" HEAD -- '*go.mod' '*go.sum' '*go.work' '*go.work.sum')
  (cd "$tree" && { [ -z "$series" ] || git diff HEAD -- $series; } >"$WORK/vendor-series.diff" &&
    git add -A . && git commit -q -m "upstream's git form: vendor/, staging go.mod (verify-upstream)")
  [ -z "$series" ] || echo "the series changes $(wc -w <<<"$series") go.mod/go.sum files; hack/update-vendor.sh's diff to them: $WORK/vendor-series.diff"
}

# protoc_links TREE: third_party/protoc -> protoc-vX-linux-amd64 -> $WORK/protoc, the
# project's protoc front end, committed in the clone.
protoc_links() {
  local tree=$1 dir
  hack/codegen-tools.sh "$tree"
  dir=$(readlink "$tree/third_party/protoc")
  mkdir -p "$WORK/protoc"
  cp "$tree/third_party/$dir/protoc" "$WORK/protoc/protoc"
  rm -rf "${tree:?}/third_party/$dir"
  ln -sfn "$WORK/protoc" "$tree/third_party/$dir"
  (cd "$tree" && git add -f third_party/protoc "third_party/$dir" &&
    git commit -q -m "third_party/protoc: the project's protoc front end (verify-upstream)")
}

# names_in DIR PATTERN: the verify scripts of DIR's hack/ matching PATTERN.
names_in() { (cd "$1/hack" && ls $2 2>/dev/null) || true; }

# upstream_list TREE BLOCK: the patterns of an array of upstream's verify.sh
# (EXCLUDED_PATTERNS, QUICK_PATTERNS), read from the script itself.
upstream_list() {
  sed -n "/^$2+\?=(/,/^ *)/p" "$1/hack/make-rules/verify.sh" | sed -n 's/^ *"\([^"]*\)".*/\1/p'
}

# subprojects TREE: hack/update-codegen.sh (codegen::subprojects) generates in each
# directory of a list, among them staging/src/k8s.io/code-generator/examples, a module
# nested in code-generator's that its zip leaves out and the Go module proxy does not
# serve (it is only in upstream's git). The clone's copy of the script leaves out the
# directories the tree does not hold, committed (verify-codegen regenerates in a git
# worktree of HEAD). What is generated there comes from the examples' own types by
# code-generator's generators, neither of which the series touches. Idempotent, also
# with VERIFY_UPSTREAM_KEEP=1.
subprojects() {
  local tree=$1 f=hack/update-codegen.sh
  (cd "$tree" && awk '
    /^ *local subs=\($/ { in_subs = 1; print; next }
    in_subs && /^ *\)$/ { in_subs = 0 }
    in_subs && /^ *staging\// { d = $1; if (system("test -d " d) != 0) { print "left out: " d > "/dev/stderr"; next } }
    { print }' "$f" >"$WORK/update-codegen.sh" &&
    if ! cmp -s "$f" "$WORK/update-codegen.sh"; then
      cat "$WORK/update-codegen.sh" >"$f" &&
        git commit -q -m "update-codegen: without subprojects the tree does not hold (verify-upstream)" "$f"
    fi)
}

kubernetes() {
  local tree=$WORK/kubernetes s name what=() reason pat excluded quickset log=$WORK/kubernetes.log
  clone kubernetes
  [ -f "$tree/hack/tools/golangci-lint/go.mod" ] ||
    { echo "error: the tree's hack/tools predates upstream's tool modules: run 'make tree'" >&2; return 1; }
  debian shellcheck shellcheck
  debian jq jq
  etcd_for "$tree"
  offline_tools "$tree/hack"
  if ! [ "${VERIFY_UPSTREAM_KEEP:-}" = 1 ] || ! [ -f "$tree/vendor/modules.txt" ]; then
    vendor_tree "$tree"
    # The scripts that compare generated code (kube::verify::generated) regenerate it
    # in a git worktree of HEAD, where the git-ignored third_party/protoc that
    # hack/codegen-tools.sh puts in the clone is missing (and hack/lib/protoc.sh would
    # download protoc from GitHub): the clone commits it as two symbolic links, to the
    # front end in $WORK/protoc (a binary in git would fail verify-file-sizes).
    protoc_links "$tree"
    # hack/lib/etcd.sh's kube::etcd::install (verify-openapi-spec) looks for
    # third_party/etcd -> etcd-vX-linux-*, and downloads a release from GitHub when it
    # is not there: links to the etcd etcd_for built, committed the same way.
    (cd "$tree/third_party" && d=etcd-v$ETCD_BUILT-linux-amd64 && ln -sfn "$(dirname "$(command -v etcd)")" "$d" && ln -sfn "$d" etcd &&
      git add -f etcd "$d" && git commit -q -m "third_party/etcd: etcd $ETCD_BUILT (verify-upstream)")
    # verify-imports checks every root of staging/publishing/import-restrictions.yaml;
    # the one of k8s.io/sample-cli-plugin, which the tree does not hold (not published
    # at this version), is dropped from the clone's copy.
    (cd "$tree" && awk '
      /^- baseImportPath: / { p = $3; gsub(/"/, "", p); sub(/\/$/, "", p); drop = (p ~ /^\.\/staging\// && system("test -d " p) != 0) }
      !drop' staging/publishing/import-restrictions.yaml >"$WORK/import-restrictions.yaml" &&
      cp "$WORK/import-restrictions.yaml" staging/publishing/import-restrictions.yaml &&
      git commit -q -m "import-restrictions: without modules the tree does not hold (verify-upstream)" staging/publishing/import-restrictions.yaml || true)
  fi
  subprojects "$tree"
  excluded=$(upstream_list "$tree" EXCLUDED_PATTERNS)
  quickset=$(upstream_list "$tree" QUICK_PATTERNS)
  for s in $(names_in "$tree" 'verify-*.sh') $(names_in "$tree" 'verify-*.py'); do
    for pat in $excluded; do
      # shellcheck disable=SC2053 # a glob of upstream's list
      [[ $s == $pat ]] && continue 2
    done
    if reason=$(skipped kubernetes "$s"); then
      echo "skipped: $s: $reason"
      continue
    fi
    if $quick && ! grep -qxF "$s" <<<"$quickset"; then continue; fi
    name=${s#verify-}
    what+=("${name%.*}")
  done
  # The staging modules' own hack/verify-*.sh (verify.sh runs them after the root's,
  # each consuming one mention of its name in WHAT).
  if ! $quick; then
    for s in $(cd "$tree" && ls staging/src/k8s.io/*/hack/verify-*.sh 2>/dev/null); do
      if reason=$(skipped kubernetes "$s"); then echo "skipped: $s: $reason"; continue; fi
      name=$(basename "$s" .sh)
      what+=("${name#verify-}")
    done
  fi
  [ -n "${WHAT:-}" ] && read -r -a what <<<"$WHAT"
  echo "== kubernetes: ${#what[@]} scripts through hack/make-rules/verify.sh (log: $log)"
  local rc
  set +e
  TREE=$tree WHAT="${what[*]}" KUBE_JUNIT_REPORT_DIR=$WORK/junit \
    hack/in-tree.sh hack/make-rules/verify.sh 2>&1 | tee "$log" |
    sed -u 's/\x1b\[[0-9;]*m//g' | grep --line-buffered -E '^(SUCCESS|FAILED) +[^ ]+\.(sh|py)'
  rc=${PIPESTATUS[0]}
  set -e
  # A script's result line names it alone (verify-codegen.sh for the root's and each
  # staging module's): the working directory sh2ju printed before it names the module,
  # and the result its path, as the skip list does. A script that could not start its
  # etcd (hack/lib/etcd.sh: port 2379 taken, by a local cluster say) can still exit 0
  # (verify-openapi-spec.sh did): it failed.
  sed 's/\x1b\[[0-9;]*m//g' "$log" | awk -v tree="$tree" '
    $1 == "+++" && $2 == "working" && $3 == "dir:" { dir = $4; sub("^" tree "/?", "", dir) }
    /unable to start etcd/ { noetcd = 1 }
    ($1 == "SUCCESS" || $1 == "FAILED") && $2 ~ /\.(sh|py)$/ {
      name = (dir == "" ? "" : dir "/hack/") $2
      if (noetcd && $1 == "SUCCESS") { $1 = "FAILED"; print "FAILED   " name ": it could not start etcd (is port 2379 taken?)" > "/dev/stderr" }
      sub(/s$/, "", $3); print "kubernetes", name, ($1 == "SUCCESS" ? "pass" : "fail"), $3; dir = ""; noetcd = 0 }' >>"$RESULTS"
  # The runner failing without a failed script (it could not start one) is a failure too.
  if [ "$rc" != 0 ] && ! grep -q '^kubernetes [^ ]* fail ' "$RESULTS"; then
    echo "FAILED   hack/make-rules/verify.sh exited $rc without a failed script (log: $log)"
    echo "kubernetes hack/make-rules/verify.sh fail 0" >>"$RESULTS"
  fi
}

autoscaler() {
  local tree=$WORK/autoscaler s exclude=() reason log=$WORK/autoscaler.log
  clone autoscaler
  # The VPA's verify-all.sh sources the autoscaler repository's hack/kube-env.sh (its
  # colours), which the VPA's module zip does not carry.
  if [ ! -f "$tree/hack/kube-env.sh" ]; then
    mkdir -p "$tree/hack"
    printf '%s\n' '# The colours of the autoscaler repository'"'"'s hack/kube-env.sh (verify-upstream).' \
      'color_red="\033[0;31m" color_green="\033[0;32m" color_yellow="\033[0;33m" color_norm="\033[0m"' >"$tree/hack/kube-env.sh"
  fi
  # Its code generators take their license header from the repository's
  # hack/boilerplate, which the zip lacks too: the header of the VPA's generated code.
  if [ ! -f "$tree/hack/boilerplate/boilerplate.generatego.txt" ]; then
    mkdir -p "$tree/hack/boilerplate"
    sed -n '1,/^\*\/$/p' "$tree/vertical-pod-autoscaler/pkg/client/clientset/versioned/clientset.go" >"$tree/hack/boilerplate/boilerplate.generatego.txt"
  fi
  offline_tools "$tree/vertical-pod-autoscaler/hack"
  # generate-flags.sh's awk program uses interval expressions (-{1,2}), which
  # Debian's default awk, mawk 1.3.4, does not know: GNU awk, as awk for this run.
  debian gawk gawk
  mkdir -p "$WORK/bin" && ln -sfn "$(command -v gawk)" "$WORK/bin/awk"
  for s in $(names_in "$tree/vertical-pod-autoscaler" 'verify-*.sh'); do
    [ "$s" = verify-all.sh ] && continue
    if reason=$(skipped autoscaler "$s"); then
      echo "skipped: $s: $reason"
      exclude+=("$s")
    fi
  done
  echo "== autoscaler: vertical-pod-autoscaler/hack/verify-all.sh -v (log: $log)"
  # verify-go.sh checks two modules, the VPA's and its nested test/, which the zip
  # does not carry (hack/verify-upstream-skip.txt): its check of the first, alone,
  # before verify-all.sh, whose verify-codegen.sh runs go mod tidy.
  if skipped autoscaler verify-go.sh >/dev/null; then
    local t=$SECONDS status=pass
    (cd "$tree/vertical-pod-autoscaler" && go mod tidy -diff) >"$WORK/autoscaler-go-mod.log" 2>&1 || status=fail
    echo "autoscaler verify-go.sh:go.mod $status $((SECONDS - t))" | tee -a "$RESULTS" | awk '{ printf "%s %s\t%ss\n", ($3 == "pass" ? "SUCCESS" : "FAILED "), $2, $4 }'
  fi
  # verify-vpa-flags.sh builds the three components to read their --help: alone, with
  # the -race flag of every other compile of this project's (TEST_BUILD_FLAGS), its
  # builds link what vet and the tests compiled (their flags do not depend on it)
  # instead of compiling the VPA's dependency graph a second time (176 s cold).
  if ! skipped autoscaler verify-vpa-flags.sh >/dev/null; then
    local t=$SECONDS status=pass
    (cd "$tree/vertical-pod-autoscaler" && PATH=$WORK/bin:$PATH GOFLAGS="${TEST_BUILD_FLAGS[*]}" bash hack/verify-vpa-flags.sh) >"$WORK/autoscaler-vpa-flags.log" 2>&1 || status=fail
    [ "$status" = pass ] || tail -n 20 "$WORK/autoscaler-vpa-flags.log"
    echo "autoscaler verify-vpa-flags.sh $status $((SECONDS - t))" | tee -a "$RESULTS" | awk '{ printf "%s %s\t%ss\n", ($3 == "pass" ? "SUCCESS" : "FAILED "), $2, $4 }'
    exclude+=(verify-vpa-flags.sh)
  fi
  # verify-all.sh prints no times: each line is stamped as it arrives.
  (cd "$tree/vertical-pod-autoscaler" && PATH=$WORK/bin:$PATH EXCLUDE="${exclude[*]}" bash hack/verify-all.sh -v 2>&1) |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s)" "$line"; done >"$log" || true
  sed 's/\x1b\[[0-9;]*m//g' "$log" | awk '
    $2 == "Verifying" && $3 ~ /\.sh$/ { n = split($3, p, "/"); name = p[n]; start = $1 }
    ($2 == "SUCCESS" || $2 == "FAILED") && name != "" { print "autoscaler", name, ($2 == "SUCCESS" ? "pass" : "fail"), $1 - start; name = "" }' |
    tee -a "$RESULTS" | awk '{ printf "%s %s\t%ss\n", ($3 == "pass" ? "SUCCESS" : "FAILED "), $2, $4 }'
}

start=$SECONDS
for side in "${sides[@]}"; do "$side"; done
echo "== verify-upstream ($((SECONDS - start))s)"
awk '{ printf "%-5s %-11s %-66s %6ss\n", $3, $1, $2, $4 }' "$RESULTS"
awk '{ n[$3]++; t += $4 } END { printf "%d passed, %d failed (%d s in the scripts)\n", n["pass"], n["fail"], t }' "$RESULTS"
! grep -q ' fail ' "$RESULTS"
