#!/usr/bin/env bash
# Runs `cargo test ARGS` (every test, --no-fail-fast). This kind of machine is
# a VM whose steal time can stall a timing test now and then: each test that
# fails is run once more on its own (`cargo test ARGS -- --exact NAME`); the run
# passes only if each passes then. Every such test is listed as FLAKY at the
# end, with its first failure's output above. A failure outside a named test
# (build, harness) is not retried.
#
# Usage: scripts/cargo-test-retry.sh CARGO-TEST-ARGS...   (no `--` part)
set -euo pipefail
LOG=$(mktemp /tmp/firmtime-tests.XXXXXX)
trap 'rm -f "$LOG"' EXIT
if cargo test --no-fail-fast "$@" 2>&1 | tee "$LOG"; then
  exit 0
fi
failed=$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$LOG" | sort -u)
if [ -z "$failed" ]; then
  echo "== cargo test failed outside any single test (build or harness): see above"
  exit 1
fi
echo "== run once more, on its own: each test that failed"
status=0
flaky=()
while read -r name; do
  # A doc-test is named "path - item (line N)": it is not run again.
  case "$name" in *" - "*) echo "  FAILED (a doc-test): $name"; status=1; continue ;; esac
  if cargo test "$@" -- --exact "$name" >"$LOG.again" 2>&1 &&
     grep -q "^test $name \.\.\. ok$" "$LOG.again"; then
    flaky+=("$name")
  else
    echo "  FAILED again: $name"
    tail -n 40 "$LOG.again"
    status=1
  fi
  rm -f "$LOG.again"
done <<<"$failed"
if [ ${#flaky[@]} -gt 0 ]; then
  echo "== FLAKY: failed once (output above) and passed when run again on its own:"
  printf '  %s\n' "${flaky[@]}"
fi
exit $status
