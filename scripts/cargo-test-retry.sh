#!/usr/bin/env bash
# Runs `cargo test ARGS` (every test, --no-fail-fast). Any failing test fails
# the run, except a test listed in the quarantine (scripts/quarantine.txt: its
# name, why it is there, what would fix it): such a test is run once more on
# its own (`cargo test ARGS -- --exact NAME`) and, if it passes then, it is
# listed as FLAKY at the end (with the quarantine's reason and fix) and the run goes
# on; if it fails again, the run fails. A failure outside a named test (build,
# a test binary that crashed, a doc-test) is never retried.
#
# FLAKY lines are also appended to $FIRMTIME_SKIP_LOG when it is set, so that
# ./test.sh lists them with the skips and waivers at the end of the run.
#
# Usage: scripts/cargo-test-retry.sh CARGO-TEST-ARGS...   (no `--` part)
# FIRMTIME_QUARANTINE=FILE uses another quarantine list (the self-test does).
# Exit status: 0 when every test passed (quarantined ones on their retry), 1
# when a test failed (twice, if quarantined) or cargo failed outside a test,
# 2 when the quarantine list is missing or malformed.
set -euo pipefail
QUARANTINE=${FIRMTIME_QUARANTINE:-$(dirname "$0")/quarantine.txt}

# The quarantine: `NAME | why | what would fix it`, one test a line; a line
# starting with `#` is a comment. Every field is required: a test is never
# quarantined without a reason and a way out.
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
declare -A why=() fix_of=()
if [ ! -f "$QUARANTINE" ]; then
  echo "== no quarantine list at $QUARANTINE (a file, possibly with comments only)" >&2
  exit 2
fi
{
  lineno=0
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    case "$(trim "$line")" in "" | "#"*) continue ;; esac
    IFS='|' read -r name reason fix extra <<<"$line"
    name=$(trim "$name"); reason=$(trim "${reason:-}"); fix=$(trim "${fix:-}")
    if [ -z "$name" ] || [ -z "$reason" ] || [ -z "$fix" ] || [ -n "${extra:-}" ]; then
      echo "== $QUARANTINE line $lineno: expected 'test name | why it is quarantined | what would fix it', got: $line" >&2
      exit 2
    fi
    why[$name]=$reason
    fix_of[$name]=$fix
  done
} <"$QUARANTINE"

LOG=$(mktemp /tmp/firmtime-tests.XXXXXX)
trap 'rm -f "$LOG" "$LOG.again"' EXIT
if cargo test --no-fail-fast "$@" 2>&1 | tee "$LOG"; then
  exit 0
fi

# The failed tests: the names listed under the last `failures:` heading
# before each `test result: FAILED` line (whatever the output format, -q or
# not). Every failed target must be accounted for by them: a test binary
# that crashed (abort, signal) prints no `test result` line, a build error
# none at all.
names=$(awk '/^failures:$/ { n = 0; next }
  /^test result: FAILED\./ { for (i = 1; i <= n; i++) print buf[i]; n = 0; next }
  /^    [^ ]/ { buf[++n] = substr($0, 5) }' "$LOG")
failed=$(sort -u <<<"$names")
named=$(grep -c . <<<"$names" || true)
counted=$(sed -n 's/^test result: FAILED\..* \([0-9][0-9]*\) failed;.*/\1/p' "$LOG" | awk '{s += $1} END {print s + 0}')
targets=$(grep -cE '^error: (test|doctest) failed, to rerun pass' "$LOG" || true)
results=$(grep -c '^test result: FAILED\.' "$LOG" || true)
if [ -z "$failed" ] || [ "$named" -ne "$counted" ] || [ "$targets" -ne "$results" ]; then
  echo "== cargo test failed outside any single test (build, a crashed test binary, harness): see above"
  echo "   ($named test(s) named FAILED, $counted counted in the test results; $targets target(s) failed, $results with a test result)"
  exit 1
fi

status=0
flaky=()
while read -r name; do
  # A doc-test is named "path - item (line N)": it is not run again.
  case "$name" in *" - "*)
    echo "== FAILED (a doc-test, never retried): $name"
    status=1
    continue ;;
  esac
  if [ -z "${why[$name]+x}" ]; then
    echo "== FAILED (not in the quarantine, $QUARANTINE): $name"
    status=1
    continue
  fi
  echo "== run once more, on its own (quarantined: ${why[$name]}): $name"
  if cargo test "$@" -- --exact "$name" >"$LOG.again" 2>&1 &&
     grep -q '^test result: ok\. [1-9][0-9]* passed' "$LOG.again"; then
    flaky+=("$name")
  else
    echo "== FAILED twice (quarantined, but a retry is allowed only once): $name"
    tail -n 40 "$LOG.again"
    status=1
  fi
  rm -f "$LOG.again"
done <<<"$failed"
if [ ${#flaky[@]} -gt 0 ]; then
  echo "== FLAKY: quarantined tests that failed once (output above) and passed when run again on its own:"
  for name in "${flaky[@]}"; do
    line="FLAKY $name: ${why[$name]} (to fix: ${fix_of[$name]})"
    echo "  $line"
    if [ -n "${FIRMTIME_SKIP_LOG:-}" ]; then
      echo "$line" >>"$FIRMTIME_SKIP_LOG"
    fi
  done
fi
exit $status
