#!/usr/bin/env bash
# What `firmtime watch` costs the CPUs it watches, side by side with
# cyclictest (rt-tests) at the same period, in one go: ROUNDS rounds, each
# running, one after the other, `watch` at each period (PERIODS, in ms,
# default "1ms 10ms 20ms") with the explaining trace off and on, and
# `cyclictest` at each period on the same CPUs. watch's figure is its own
# measurement (the database's watch_cpu_ns: each loop's
# CLOCK_THREAD_CPUTIME_ID plus an equal share of the rest of the process),
# its first and partial intervals left out; cyclictest's is the exact CPU
# time of its threads (schedstat) over the same length. Prints per
# configuration the median and max over the intervals of the share of each
# watched CPU, the CPU per wake-up, and the ratio to cyclictest at that
# period (the cost any periodic wake-up has on this machine). The budget of
# issue 22 is 0.5 % of a CPU.
#
#   sudo scripts/watch-cost.sh [ROUNDS] [SECONDS]     (default 2 rounds of 40 s: ~12 min)
#
# Needs root (SCHED_FIFO; the trace needs tracefs) and cyclictest
# (Debian: rt-tests). Figures, not a test: run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
SECS=${2:-40}
CPUS=${CPUS:-0,1}
PERIODS=${PERIODS:-1ms 10ms 20ms}
NCPU=$(echo "$CPUS" | tr ',' '\n' | wc -l)
cargo build -p firmtime --release --locked >&2
EXE=${CARGO_TARGET_DIR:-target}/release/firmtime
command -v cyclictest >/dev/null || { echo "watch-cost: cyclictest not installed (Debian: rt-tests)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "watch-cost: sqlite3 not installed" >&2; exit 2; }
OUT=$(mktemp -d /tmp/firmtime-watch-cost.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

cyc() { # period_us round
  cyclictest --laptop -q -m -p80 -t"$NCPU" -a"$CPUS" -i"$1" -D"$((SECS + 5))" >/dev/null 2>&1 &
  local pid=$!
  sleep 3
  local a b
  a=$(cat /proc/$pid/task/*/schedstat 2>/dev/null | awk '{s+=$1} END{print s}')
  sleep "$SECS"
  b=$(cat /proc/$pid/task/*/schedstat 2>/dev/null | awk '{s+=$1} END{print s}')
  wait $pid || true
  # share of each CPU, %, and wake-ups per CPU in the window
  echo "$(( b - a )) $SECS $1" >> "$OUT/cyclictest-$1.txt"
}

for r in $(seq "$ROUNDS"); do
  for p in $PERIODS; do
    for e in off on; do
      echo "watch-cost: round $r: watch --period $p --explain $e" >&2
      "$EXE" watch --db "$OUT/watch-$p-$e-$r.db" --period "$p" --store-every 10s \
        --duration "${SECS}s" --cpu "$CPUS" --explain "$e" 2>/dev/null ||
        echo "watch-cost: watch --period $p --explain $e failed (kept going)" >&2
    done
  done
  for p in $PERIODS; do
    us=$(( ${p%ms} * 1000 ))
    echo "watch-cost: round $r: cyclictest -i $us" >&2
    cyc "$us" "$r"
  done
done

python3 - "$OUT" "$NCPU" $PERIODS <<'EOF'
import glob, os, sqlite3, statistics, sys
out, ncpu, periods = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ref = {}
pairs = [(p, int(p[:-2]) * 1000) for p in periods]
for _, us in pairs:
    shares = []
    for line in open(os.path.join(out, f"cyclictest-{us}.txt")):
        ns, secs, _ = line.split()
        shares.append(100 * int(ns) / (int(secs) * 1e9) / ncpu)
    ref[us] = shares
print("| configuration | share of each watched CPU: median (max) over intervals | CPU per wake-up (median) | cyclictest at the same period: share per CPU | watch / cyclictest |")
print("|---|---|---|---|---|")
for p, us in pairs:
    for e in ("off", "on"):
        shares, per = [], []
        for f in sorted(glob.glob(os.path.join(out, f"watch-{p}-{e}-*.db"))):
            db = sqlite3.connect(f)
            rows = db.execute(
                "SELECT seq, watch_cpu_ns, end_unix_ns - start_unix_ns, count FROM intervals "
                "WHERE partial = 0 AND seq > 0 AND watch_cpu_ns IS NOT NULL").fetchall()
            for _, cpu_ns, wall, count in rows:
                shares.append(100 * cpu_ns / wall)
                per.append(cpu_ns / max(count, 1) / 1000)
        if not shares:
            print(f"| --period {p} --explain {e} | no intervals | | | |")
            continue
        m, c = statistics.median(shares), statistics.median(ref[us])
        print(f"| --period {p} --explain {e} | {m:.3f} % ({max(shares):.3f} %) | {statistics.median(per):.1f} µs "
              f"| {c:.3f} % | {m / c:.2f} |")
print(f"\n({len(ref[pairs[0][1]])} cyclictest runs per period; budget 0.5 % of each watched CPU)")
EOF
