#!/usr/bin/env bash
# Tests scripts/cargo-test-retry.sh against a throwaway cargo project (no
# dependencies, built offline in a temporary directory, removed at the end):
#   - every test passes: exit 0, no FLAKY line;
#   - a test that fails once and is not quarantined fails the run;
#   - the same test quarantined passes the run with a FLAKY line (also in
#     $FIRMTIME_SKIP_LOG);
#   - a quarantined test that fails twice fails the run;
#   - a crashed test binary fails the run even when the only named failure
#     is a quarantined flaky one;
#   - a failing doc-test is never retried;
#   - a quarantine line without a reason or a fix is refused (exit 2);
#   - scripts/quarantine.txt parses, and each test it names exists.
# Usage: scripts/test-retry-selftest.sh   (exit 0 when every case holds)
set -euo pipefail
RETRY=$(cd "$(dirname "$0")" && pwd)/cargo-test-retry.sh
TMP=$(mktemp -d /tmp/firmtime-retry-selftest.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export CARGO_TARGET_DIR="$TMP/target"

mkdir -p "$TMP/p/src" "$TMP/p/tests"
cat >"$TMP/p/Cargo.toml" <<'EOF'
[package]
name = "retry-selftest"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]
EOF
cat >"$TMP/p/src/lib.rs" <<'EOF'
/// ```
/// assert!(std::env::var_os("SELFTEST_DOC_FAILS").is_none());
/// ```
pub fn documented() {}
EOF
cat >"$TMP/p/tests/t.rs" <<'EOF'
#[test]
fn passes() {}

/// Fails the first time it runs after `SELFTEST_FLAKY_MARKER` is set.
#[test]
fn flaky() {
    if let Some(m) = std::env::var_os("SELFTEST_FLAKY_MARKER") {
        if std::fs::metadata(&m).is_err() {
            std::fs::write(&m, "").unwrap();
            panic!("flaky: failed the first time");
        }
    }
}

#[test]
fn broken() {
    assert!(std::env::var_os("SELFTEST_BROKEN").is_none(), "broken: fails every time");
}
EOF
cat >"$TMP/p/tests/crash.rs" <<'EOF'
#[test]
fn crashes() {
    if std::env::var_os("SELFTEST_CRASH").is_some() {
        std::process::abort();
    }
}
EOF
printf '# nothing quarantined\n' >"$TMP/none.txt"
printf 'flaky | fails the first time by design | none: a self-test\nbroken | fails every time by design | none: a self-test\n' >"$TMP/q.txt"
printf 'flaky | a reason but no fix\n' >"$TMP/bad.txt"

fails=0
n=0
# case NAME EXPECTED-STATUS QUARANTINE [ENV=VALUE...]: runs the retry script in
# the project; then the caller greps "$TMP/out".
case_() {
  local name=$1 want=$2 q=$3
  shift 3
  n=$((n + 1))
  rm -f "$TMP/marker" "$TMP/skips"
  local got=0
  (cd "$TMP/p" && env FIRMTIME_QUARANTINE="$q" FIRMTIME_SKIP_LOG="$TMP/skips" "$@" \
    "$RETRY" --offline "${FORMAT[@]}" >"$TMP/out" 2>&1) || got=$?
  name="$name (cargo test ${FORMAT[*]:-})"
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: exit $got, expected $want; output:"
    sed 's/^/    /' "$TMP/out"
    fails=$((fails + 1))
    return 1
  fi
}
expect() { # expect CASE PATTERN FILE: FILE has a line matching PATTERN
  if ! grep -q -- "$2" "$3" 2>/dev/null; then
    echo "FAIL $1: no line matching '$2' in $3:"
    sed 's/^/    /' "$3" 2>/dev/null || true
    fails=$((fails + 1))
  fi
}
refute() { # refute CASE PATTERN FILE: FILE has no line matching PATTERN
  if grep -q -- "$2" "$3" 2>/dev/null; then
    echo "FAIL $1: a line matches '$2' in $3"
    fails=$((fails + 1))
  fi
}

# Each case in libtest's pretty and terse (-q) output formats.
for format in pretty -q; do
  FORMAT=()
  [ "$format" = pretty ] || FORMAT=("$format")
  if case_ "all pass" 0 "$TMP/q.txt"; then
    refute "all pass" FLAKY "$TMP/out"
  fi
  if case_ "flaky, not quarantined" 1 "$TMP/none.txt" SELFTEST_FLAKY_MARKER="$TMP/marker"; then
    expect "flaky, not quarantined" "^== FAILED (not in the quarantine.*): flaky$" "$TMP/out"
    refute "flaky, not quarantined" "run once more" "$TMP/out"
  fi
  if case_ "flaky, quarantined" 0 "$TMP/q.txt" SELFTEST_FLAKY_MARKER="$TMP/marker"; then
    expect "flaky, quarantined" "^  FLAKY flaky: fails the first time by design (to fix: none: a self-test)$" "$TMP/out"
    expect "flaky, quarantined" "^FLAKY flaky: fails the first time by design (to fix: none: a self-test)$" "$TMP/skips"
  fi
  if case_ "quarantined, fails twice" 1 "$TMP/q.txt" SELFTEST_BROKEN=1; then
    expect "quarantined, fails twice" "^== FAILED twice .*: broken$" "$TMP/out"
    refute "quarantined, fails twice" FLAKY "$TMP/out"
  fi
  if case_ "flaky and broken" 1 "$TMP/none.txt" SELFTEST_FLAKY_MARKER="$TMP/marker" SELFTEST_BROKEN=1; then
    expect "flaky and broken" ": broken$" "$TMP/out"
    expect "flaky and broken" ": flaky$" "$TMP/out"
  fi
  if case_ "crash beside a quarantined flaky test" 1 "$TMP/q.txt" SELFTEST_FLAKY_MARKER="$TMP/marker" SELFTEST_CRASH=1; then
    expect "crash beside a quarantined flaky test" "^== cargo test failed outside any single test" "$TMP/out"
    refute "crash beside a quarantined flaky test" FLAKY "$TMP/out"
  fi
  if case_ "doc-test" 1 "$TMP/q.txt" SELFTEST_DOC_FAILS=1; then
    expect "doc-test" "^== FAILED (a doc-test, never retried)" "$TMP/out"
  fi
  if case_ "quarantine line without a fix" 2 "$TMP/bad.txt"; then
    expect "quarantine line without a fix" "bad.txt line 1: expected" "$TMP/out"
  fi
done

# The repository's own list parses (a malformed line would exit 2), and each
# test it names still exists (a renamed test leaves no stale entry behind).
FORMAT=(-q)
QUARANTINE_LIST=$(dirname "$RETRY")/quarantine.txt
case_ "scripts/quarantine.txt parses" 0 "$QUARANTINE_LIST" || true
ROOT=$(dirname "$RETRY")/..
while IFS= read -r line; do
  name=${line%%|*}
  name=${name//[[:space:]]/}
  case "$name" in "" | "#"*) continue ;; esac
  n=$((n + 1))
  if ! grep -rqE --include='*.rs' "fn ${name##*::}\(" "$ROOT/crates"; then
    echo "FAIL scripts/quarantine.txt names $name, but no crates/**/*.rs defines fn ${name##*::}"
    fails=$((fails + 1))
  fi
done <"$QUARANTINE_LIST"

if [ "$fails" -gt 0 ]; then
  echo "retry self-test: $fails check(s) failed"
  exit 1
fi
echo "retry self-test: $n cases, every check held"
