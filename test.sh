#!/usr/bin/env bash
# Sets up this machine (Debian packages, Rust), builds firmtime and runs every test.
# Tests that need real-time privileges run as root. A test that cannot run here
# (a missing tool, privilege or device) says SKIP; every skip is listed at the
# end of the run. With FIRMTIME_NO_SKIP=1 (CI) only device skips are allowed:
# any other skip fails its test.
#
# This kind of machine is a VM whose steal time can stall a timing test now
# and then: a test that fails is run once more on its own; the run passes only
# if it passes then, and every such test is listed as FLAKY at the end
# (scripts/cargo-test-retry.sh).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-plugins.sh
FIRMTIME_SKIP_LOG=$(mktemp /tmp/firmtime-skips.XXXXXX)
export FIRMTIME_SKIP_LOG
report_skips() {
  if [ -s "$FIRMTIME_SKIP_LOG" ]; then
    echo "== tests that could not run on this machine (SKIP):"
    sort -u "$FIRMTIME_SKIP_LOG" | sed 's/^/  /'
  else
    echo "== no test skipped"
  fi
  rm -f "$FIRMTIME_SKIP_LOG"
}
trap report_skips EXIT
scripts/cargo-test-retry.sh --workspace --locked "$@"
