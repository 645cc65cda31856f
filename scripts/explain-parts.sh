#!/bin/sh
# Issue 29 item 3: are the parts of each late wake-up's breakdown the size
# of the causes induced on the measured CPU?
#
# Runs the induced-size tests (crates/lab/tests/lab/sizes.rs) RUNS times;
# each writes, per outlier of its cause, the size measured apart from the
# explain engine and the breakdown's part:
#   fifo-burst:   a SCHED_FIFO 90 burst of 3 ms from 300 µs before a
#                 deadline; its own clock vs the `task` part of its pid;
#   veth-flood:   ICMP echo requests over a veth pair from a namespace,
#                 steered to the measured CPU; an independent tracefs
#                 record's interrupt + softirq time vs `irq` + `softirq`;
#   page-faults:  8 MiB faulted in each 1 ms cycle; the thread's own clock
#                 (when it ran in its faulting loop) vs `own_work`;
#   rt-throttled: a SCHED_FIFO 70 hog and a nice-0 spinner; the throttling
#                 window by the spinner's clock vs `rt_throttled`.
# Prints per cause: outliers, how many within ±10 % or ±20 µs (the
# target), the induced and part sizes (median), and the ratio part/induced
# (median, p10, p90). Needs root and tracefs (else the tests skip).
#
# Usage: sudo [KEEP=1] scripts/explain-parts.sh [RUNS]
set -eu
cd "$(dirname "$0")/.."
RUNS=${1:-3}
OUT=$(mktemp -d /tmp/firmtime-explain-parts.XXXXXX)
cleanup() {
    if [ "${KEEP:-0}" = 1 ]; then echo "explain-parts: sizes kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT

cargo test -q -p firmtime-lab --test lab --no-run >&2
i=1
while [ "$i" -le "$RUNS" ]; do
    echo "explain-parts: run $i of $RUNS" >&2
    mkdir -p "$OUT/$i"
    FIRMTIME_PARTS_OUT="$OUT/$i" cargo test -q -p firmtime-lab --test lab sizes:: \
        -- --test-threads=1 >"$OUT/$i.log" 2>&1 ||
        echo "explain-parts: run $i: a test failed (log: $OUT/$i.log; KEEP=1 keeps it)" >&2
    i=$((i + 1))
done

python3 - "$OUT" "$RUNS" <<'EOF'
import json, os, sys, statistics
out, runs = sys.argv[1], int(sys.argv[2])
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
print("| cause | runs | outliers | left out | within ±10 % or ±20 µs | induced (median) | part (median) | part/induced median | p10 | p90 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for cause in ["fifo-burst", "veth-flood", "page-faults", "rt-throttled"]:
    fits, seen = [], 0
    for i in range(1, runs + 1):
        f = os.path.join(out, str(i), cause + ".json")
        if os.path.exists(f):
            seen += 1
            fits += json.load(open(f))
    if not fits:
        print(f"| {cause} | {seen} | not measured | | | | | | | |")
        continue
    kept = [f for f in fits if not f.get("left_out")]
    ok = sum(1 for f in kept
             if abs(f["part_ns"] - f["induced_ns"]) <= max(f["induced_ns"] // 10, 20000))
    r = [f["part_ns"] / f["induced_ns"] for f in kept if f["induced_ns"] > 0]
    us = lambda v: f"{statistics.median(v) / 1000:.0f} µs" if v else "-"
    print(f"| {cause} | {seen} | {len(fits)} | {len(fits) - len(kept)} | {ok} of {len(kept)} "
          f"({100 * ok / max(len(kept), 1):.1f} %) | {us([f['induced_ns'] for f in kept])} | "
          f"{us([f['part_ns'] for f in kept])} | {q(r, 0.5):.3f} | {q(r, 0.1):.3f} | {q(r, 0.9):.3f} |")
EOF
