#!/usr/bin/env bash
# FTAP's raw MIDI loop test against a pty paced like a 31.25 kbaud cable.
#
# Builds the release binary, runs `firmtime midi loop --pty-loopback` RUNS
# times (default 3) with EVENTS events (default 10000), and prints each run's
# mean interval between received events, its ratio to the MIDI wire limit
# (0.96 ms per 3-byte message), and the median ratio.
# Acceptance (issue 4): the median ratio is within 1 % of 1.0, as FTAP
# achieved on hardware. Exit status: 0 within 1 %, 1 outside, 2 a run failed.
#
# The pty's data path runs through a kernel worker at normal priority, so run
# this on a quiet machine: other load delays the loop, not firmtime's threads.
set -euo pipefail

RUNS=${RUNS:-3}
EVENTS=${EVENTS:-10000}
cd "$(dirname "$0")/.."

cargo build --release -q -p firmtime
BIN="${CARGO_TARGET_DIR:-target}"/release/firmtime
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

ratios=()
for i in $(seq 1 "$RUNS"); do
    if ! "$BIN" midi loop --pty-loopback --events "$EVENTS" --json "$TMP/run$i.json" >/dev/null; then
        echo "run $i failed" >&2
        exit 2
    fi
    line=$(python3 - "$TMP/run$i.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
print(f"{v['mean_interval_ns'] / 1e6:.4f} {v['mean_interval_ns'] / v['wire_limit_ns']:.4f} "
      f"{v['max_interval_ns'] / 1e6:.3f} {v['lost']}")
PY
)
    read -r mean ratio max lost <<<"$line"
    printf 'run %d: mean interval %s ms, ratio to 0.96 ms wire limit %s (max %s ms, lost %s)\n' \
        "$i" "$mean" "$ratio" "$max" "$lost"
    ratios+=("$ratio")
done

median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.4f", m}')
echo "median ratio: $median (acceptance: within 1 % of 1.0000)"
awk -v m="$median" 'BEGIN { exit (m >= 0.99 && m <= 1.01) ? 0 : 1 }'
