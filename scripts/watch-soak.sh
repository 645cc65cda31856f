#!/usr/bin/env bash
# Soak figures of `firmtime watch`: runs it for MINUTES (default 5) and
# prints, once per sample, its CPU use (share of one CPU, all threads:
# measuring loops, writer, explaining trace), its RSS and the database's
# size; then the totals: mean CPU %, RSS drift, bytes per interval and per
# day, the Prometheus series count. Stops it with SIGTERM and checks the
# database's integrity.
#
#   scripts/watch-soak.sh [MINUTES] [-- WATCH-FLAGS...]
#   e.g. scripts/watch-soak.sh 30 -- --store-every 1min --cpu 0,1
#
# Needs root (SCHED_FIFO; the explaining trace runs where tracefs is
# usable). Builds the release binary first. Figures, not a test: the VM's
# other load shows in them.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-5}
shift || true
[ "${1:-}" = "--" ] && shift
FLAGS=("$@")
[ ${#FLAGS[@]} -eq 0 ] && FLAGS=(--store-every 10s)

cargo build -p firmtime --release --locked >&2
EXE=${CARGO_TARGET_DIR:-target}/release/firmtime
DIR=$(mktemp -d /tmp/firmtime-soak.XXXXXX)
DB=$DIR/watch.db
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$EXE" watch --db "$DB" --metrics-listen "127.0.0.1:$PORT" "${FLAGS[@]}" 2>"$DIR/watch.log" &
PID=$!
cleanup() { kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
# Interrupted: watch stopped and its directory removed too.
trap 'cleanup; rm -rf "$DIR"' EXIT

HZ=$(getconf CLK_TCK)
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
calc0() { awk "BEGIN { printf \"%.0f\", $1 }"; }
ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$PID/status"; }
# The WAL file is gone once watch has closed the database.
db_bytes() { { du -cb "$DB" "$DB-wal" 2>/dev/null || true; } | awk 'END { print $1 }'; }
rows() { sqlite3 "$DB" 'SELECT COUNT(DISTINCT run_id || "-" || seq) FROM intervals' 2>/dev/null || echo 0; }

sleep 2
STEP=10
END=$(( $(date +%s) + MINUTES * 60 ))
T0=$(date +%s.%N); C0=$(ticks); RSS0=$(rss_kib)
printf '%8s %8s %10s %12s %10s\n' "t (s)" "CPU %" "RSS (KiB)" "DB (bytes)" "intervals"
PT=$T0; PC=$C0; RSSMAX=$RSS0
while [ "$(date +%s)" -lt "$END" ]; do
  sleep "$STEP"
  kill -0 "$PID" 2>/dev/null || { echo "watch ended early:"; cat "$DIR/watch.log"; exit 1; }
  T=$(date +%s.%N); C=$(ticks); R=$(rss_kib)
  [ "$R" -gt "$RSSMAX" ] && RSSMAX=$R
  printf '%8.0f %8.3f %10d %12d %10d\n' "$(calc "$T - $T0")" \
    "$(calc "100 * ($C - $PC) / $HZ / ($T - $PT)")" "$R" "$(db_bytes)" "$(rows)"
  PT=$T; PC=$C
done
T=$(date +%s.%N); C=$(ticks); R=$(rss_kib)
SERIES=$(curl -s "http://127.0.0.1:$PORT/metrics" | grep -vc '^#' || true)
cleanup
trap 'rm -rf "$DIR"' EXIT
N=$(rows)
BYTES=$(db_bytes)
sqlite3 "$DB" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
FILE=$(wc -c < "$DB")
OK=$(sqlite3 "$DB" 'PRAGMA integrity_check;')
INTERVAL_S=$(sqlite3 "$DB" 'SELECT AVG(end_unix_ns - start_unix_ns) / 1e9 FROM intervals WHERE partial = 0')
CPUS=$(sqlite3 "$DB" 'SELECT COUNT(DISTINCT cpu) FROM intervals')
EXPLAINED=$(sqlite3 "$DB" 'SELECT SUM(explained) || " of " || COUNT(*) FROM intervals')
echo
echo "== watch soak: ${MINUTES} min, flags: ${FLAGS[*]}, CPUs watched: $CPUS"
echo "CPU: $(calc "100 * ($C - $C0) / $HZ / ($T - $T0)") % of one CPU on average (all threads, utime + stime)"
echo "RSS: $RSS0 KiB at start, $R KiB at the end, $RSSMAX KiB at most"
echo "database: $N intervals in $FILE bytes after checkpoint ($BYTES with the WAL before it); integrity: $OK"
echo "interval rows explained by the trace: $EXPLAINED"
if [ "$N" -gt 0 ]; then
  # What the intervals themselves take: the database compacted, with and
  # without them (the difference leaves out the schema's fixed pages).
  sqlite3 "$DB" "VACUUM INTO '$DIR/full.db'"
  cp "$DIR/full.db" "$DIR/empty.db"
  sqlite3 "$DIR/empty.db" 'DELETE FROM wakeups; DELETE FROM intervals; VACUUM;'
  FULLB=$(wc -c < "$DIR/full.db"); EMPTYB=$(wc -c < "$DIR/empty.db")
  PER=$(calc0 "($FULLB - $EMPTYB) / $N")
  echo "bytes per interval (all CPUs, compacted, schema's $EMPTYB bytes left out): $PER; at 1-min intervals: $(calc0 "$PER * 1440 / 1024") KiB per day, $(calc0 "$PER * 1440 * 30 / 1048576") MiB for --keep 30d"
fi
echo "Prometheus series served: $SERIES (interval ${INTERVAL_S} s)"
rm -rf "$DIR"
