#!/usr/bin/env bash
# Sets up this machine (Debian packages, Rust), builds firmtime and runs every test.
# Tests that need real-time privileges run as root. A test that cannot run here
# (a missing tool, privilege or device) says SKIP; every skip is listed at the
# end of the run. With FIRMTIME_NO_SKIP=1 (CI) only device skips are allowed:
# any other skip fails its test.
#
# A test that ran but could not check its claim this time (an xrun, a frame
# gap on this VM) says WAIVED (firmtime_rt::testing::waive); one waived in
# every repetition fails. Every SKIP and WAIVED line is listed at the end.
#
# A failing test fails the run, unless it is in the quarantine
# (scripts/quarantine.txt: the test, why, what would fix it): then it is run
# once more on its own, and listed as FLAKY at the end if it passes then
# (scripts/cargo-test-retry.sh).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-plugins.sh
FIRMTIME_SKIP_LOG=$(mktemp /tmp/firmtime-skips.XXXXXX)
export FIRMTIME_SKIP_LOG
report_skips() {
  local log=$FIRMTIME_SKIP_LOG
  if [ ! -s "$log" ]; then
    echo "== no test skipped, waived or retried"
  fi
  # heading, prefix: one list each, sorted, duplicates once.
  section() {
    if grep -q "^$2 " "$log" 2>/dev/null; then
      echo "== $1"
      grep "^$2 " "$log" | sort -u | sed 's/^/  /'
    fi
  }
  section "tests that could not run on this machine (SKIP):" SKIP
  section "tests that ran but could not check, in some repetitions (WAIVED):" WAIVED
  section "quarantined tests that failed once and passed on their own (FLAKY, scripts/quarantine.txt):" FLAKY
  rm -f "$log"
}
trap report_skips EXIT
scripts/cargo-test-retry.sh --workspace --locked "$@"
