# Shared by the hack/ scripts: paths and the check runner.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/_output
SERIES=$OUT/tools/series
SUMMARY=$OUT/tools/testsummary
TESTOUT=$OUT/test

tools() {
  (cd "$ROOT" && go build -o "$SERIES" ./hack/cmd/series && go build -o "$SUMMARY" ./hack/cmd/testsummary)
}

# check NAME CMD...: runs one check, prints its verdict (and its output when it
# fails) and, when CHECKS_JSON is set, records it there as a test event.
FAILED_CHECKS=0
check() {
  local name=$1; shift
  local log status=pass start=$SECONDS
  log=$(mktemp)
  "$@" >"$log" 2>&1 || status=fail
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
