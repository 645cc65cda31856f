#!/usr/bin/env bash
# Prints the figures of issue 20 items 2 and 5 (docs/NET.md, "A worker no
# one can wedge"): SIGTERM-to-exit time of a `firmtime net worker` in each
# state, how long after its budget an overrunning plugin run is cut off, and
# what another session got meanwhile. Runs the tests that measure them
# RUNS times (default 5) and prints every line they measured.
#
#   scripts/net-worker-containment.sh        # ~1 minute after the build
#   RUNS=10 scripts/net-worker-containment.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
for i in $(seq "$runs"); do
    cargo test -q -p firmtime --locked --test net_worker_stop -- --nocapture --test-threads 1 2>/dev/null \
        | grep -o 'SIGTERM to exit.*' || true
    cargo test -q -p firmtime-net --locked --test net hostile:: -- --nocapture --test-threads 1 2>/dev/null \
        | grep -oE '(overrun cut off|during a 4 s hold).*' || true
done | sort | awk '
    { print }
    /^SIGTERM to exit/ { split($0, a, ": "); v = a[length(a)] + 0; s = a[1]; if (!(s in max) || v > max[s]) max[s] = v }
    END { for (s in max) printf "worst of %s: %.1f ms (target < 1000 ms)\n", s, max[s] }'
