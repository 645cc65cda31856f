#!/bin/sh
# Issue 29, "done when": a 60 s `firmtime watch` on one CPU under the
# RR-50 + CFS + ping-pong load loses no event of its explaining trace, or
# marks every affected cause unknown ("unknown (trace lost N events)"),
# never a guess.
#
# On CPU $CPU (default 1), for the whole run:
#   - an RR 50 hog: 5 ms busy, 5 ms asleep (below watch's FIFO 80);
#   - a CFS busy loop (nice 0);
#   - a ping-pong: two processes bouncing a byte over pipes (a context
#     switch each way: the event rate that overran the trace before).
# Then reads the database: per interval, wake-ups, misses, events the
# kernel lost, rows explained; per stored wake-up, its cause, and whether
# the trace lost events in its span (then its cause must be unknown).
# Exits 1 when a wake-up whose span lost events has a named cause.
#
# Usage: sudo scripts/watch-explain-loss.sh [SECONDS] [CPU]
set -eu
cd "$(dirname "$0")/.."
SECS=${1:-60}
CPU=${2:-1}
BIN=${CARGO_TARGET_DIR:-target}/release/firmtime
[ -x "$BIN" ] || cargo build --release --locked -p firmtime >&2
OUT=$(mktemp -d /tmp/firmtime-watch-loss.XXXXXX)
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    rm -rf "$OUT"
}
trap cleanup EXIT
# Killed (a timeout, Ctrl-C): exit, so that the cleanup above runs.
trap 'exit 1' INT TERM

chrt -r 50 taskset -c "$CPU" python3 -c '
import time
while True:
    t = time.monotonic()
    while time.monotonic() - t < 0.005:
        pass
    time.sleep(0.005)
' &
PIDS="$PIDS $!"
taskset -c "$CPU" sh -c 'while :; do :; done' &
PIDS="$PIDS $!"
taskset -c "$CPU" python3 -c '
import os
a_r, a_w = os.pipe()
b_r, b_w = os.pipe()
if os.fork() == 0:
    # Only the parent holds the other ends: its death ends this loop.
    os.close(a_w)
    os.close(b_r)
    while os.read(a_r, 1):
        os.write(b_w, b"x")
    os._exit(0)
os.close(a_r)
os.close(b_w)
while True:
    os.write(a_w, b"x")
    os.read(b_r, 1)
' &
PIDS="$PIDS $!"

"$BIN" watch --db "$OUT/watch.db" --cpu "$CPU" --store-every 10s \
    --duration "${SECS}s" --explain on >"$OUT/watch.log" 2>&1 || {
    cat "$OUT/watch.log" >&2
    exit 1
}
for p in $PIDS; do kill "$p" 2>/dev/null || true; done

python3 - "$OUT/watch.db" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print("| interval | wake-ups | missed | trace lost events | stored wake-ups | explained |")
print("|---|---|---|---|---|---|")
lost_total = 0
for seq, count, missed, lost, rows, expl in db.execute(
        "SELECT seq, count, missed, trace_lost_events, explained_rows, explained FROM intervals ORDER BY seq"):
    lost_total += lost or 0
    print(f"| {seq} | {count} | {missed} | {lost if lost is not None else 'no trace'} | {rows} | {expl} |")
bad = 0
unknown = 0
named = 0
for cat, name, lost in db.execute("SELECT category, name, lost_events FROM wakeups"):
    if lost is not None and lost > 0:
        unknown += 1
        if cat != "unknown":
            bad += 1
    elif cat not in (None, "unknown"):
        named += 1
total = db.execute("SELECT COUNT(*) FROM wakeups").fetchone()[0]
print()
print(f"events lost by the kernel: {lost_total}")
print(f"stored wake-ups: {total}; with a named cause: {named}; unknown because the trace lost events in their span: {unknown}; named despite a loss: {bad}")
if lost_total == 0:
    print("no event lost")
print("target met" if bad == 0 else "TARGET MISSED: a cause named over lost events")
sys.exit(0 if bad == 0 else 1)
EOF
