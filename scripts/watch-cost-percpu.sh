#!/usr/bin/env bash
# What `firmtime watch` costs EACH CPU it watches, beside cyclictest, as
# issue 31 item 1 asks: `watch` (its defaults: --period 10ms, the explaining
# trace on) and `cyclictest -m -p80 -i10000 -t -a -q` alternating, each in a
# cpuacct cgroup of its own, ROUNDS rounds of SECONDS each (the order
# swapped every round). A CPU's share is what the kernel charged the
# cgroup on that CPU (cpuacct.usage_percpu): every thread of the process,
# the measuring loops, the writer, the metrics thread, the explaining
# trace's drainer (threads that come and go included), on the CPU where it
# ran. The first 5 s of each run (start-up: mlockall, the trace's set-up)
# are left out of both.
#
# Prints per round and CPU both shares and their ratio, then per CPU the
# median ratio over the rounds (the figure of the issue: <= 1.2), and where
# watch's threads were allowed to run (their CPU lists).
#
#   sudo scripts/watch-cost-percpu.sh [ROUNDS] [SECONDS] [-- WATCH-FLAGS...]
#   (default 3 rounds of 40 s: ~5 min; CPUS=0,1; LAPTOP=1 or NOIDLE=1, below)
#
# cyclictest without --laptop writes 0 to /dev/cpu_dma_latency while it
# runs: the CPUs then never enter an idle state, and each of its wake-ups
# costs less than one from idle (watch leaves idle states alone). LAPTOP=1
# runs cyclictest --laptop: the same idle states for both. NOIDLE=1 runs
# cyclictest as the issue did and watch with `--dma-latency 0` (what
# cyclictest does for itself): no idle states for either.
#
# Needs root, cgroup v1 cpuacct (/sys/fs/cgroup/cpuacct) and cyclictest
# (Debian: rt-tests). Figures, not a test: run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-40}
shift 2 || shift $# || true
[ "${1:-}" = "--" ] && shift
FLAGS=("$@")
CPUS=${CPUS:-0,1}
WARM=5
CG=/sys/fs/cgroup/cpuacct
[ -w "$CG" ] || { echo "watch-cost-percpu: $CG not writable (cgroup v1 cpuacct; root)" >&2; exit 2; }
command -v cyclictest >/dev/null || { echo "watch-cost-percpu: cyclictest not installed (Debian: rt-tests)" >&2; exit 2; }
cargo build -p firmtime --release --locked >&2
EXE=${CARGO_TARGET_DIR:-target}/release/firmtime
OUT=$(mktemp -d /tmp/firmtime-watch-cost.XXXXXX)
PID=""
cleanup() {
  [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  for g in ft-cost-watch ft-cost-cyclictest; do
    [ -d "$CG/$g" ] && rmdir "$CG/$g" 2>/dev/null
  done
  rm -rf "$OUT"
}
trap cleanup EXIT

# run NAME CMD...: starts CMD in cgroup NAME, records the per-CPU usage from
# second WARM to WARM+SECS into $OUT/NAME.usage (appended, one line a run).
run() {
  local name=$1
  shift
  mkdir -p "$CG/ft-cost-$name"
  sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CG/ft-cost-$name" "$@" >/dev/null 2>"$OUT/$name.log" &
  PID=$!
  sleep "$WARM"
  if [ "$name" = watch ] && [ ! -s "$OUT/affinity" ]; then
    for t in /proc/$PID/task/*; do
      echo "$(cat "$t/comm" 2>/dev/null): $(awk '/Cpus_allowed_list/ {print $2}' "$t/status" 2>/dev/null)"
    done | sort | uniq -c >"$OUT/affinity"
  fi
  local a b
  a=$(cat "$CG/ft-cost-$name/cpuacct.usage_percpu")
  sleep "$SECS"
  b=$(cat "$CG/ft-cost-$name/cpuacct.usage_percpu")
  kill -TERM "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  PID=""
  echo "$a|$b" >>"$OUT/$name.usage"
}

NCPU=$(echo "$CPUS" | tr ',' '\n' | wc -l)
for r in $(seq "$ROUNDS"); do
  order="watch cyclictest"
  [ $((r % 2)) -eq 0 ] && order="cyclictest watch"
  for w in $order; do
    echo "watch-cost-percpu: round $r of $ROUNDS: $w" >&2
    if [ "$w" = watch ]; then
      NOIDLE_FLAGS=()
      [ "${NOIDLE:-0}" = 1 ] && NOIDLE_FLAGS=(--dma-latency 0)
      run watch "$EXE" watch --db "$OUT/watch-$r.db" --cpu "$CPUS" "${NOIDLE_FLAGS[@]}" "${FLAGS[@]}"
    else
      if [ "${LAPTOP:-0}" = 1 ]; then
        run cyclictest cyclictest --laptop -m -p80 -i10000 -t"$NCPU" -a"$CPUS" -q
      else
        run cyclictest cyclictest -m -p80 -i10000 -t"$NCPU" -a"$CPUS" -q
      fi
    fi
  done
done

python3 - "$OUT" "$SECS" "$CPUS" <<'EOF'
import os, statistics, sys
out, secs, cpus = sys.argv[1], int(sys.argv[2]), [int(c) for c in sys.argv[3].split(",")]
def shares(name):
    rows = []
    for line in open(os.path.join(out, f"{name}.usage")):
        a, b = (list(map(int, x.split())) for x in line.strip().split("|"))
        rows.append([100.0 * (b[c] - a[c]) / (secs * 1e9) for c in range(len(a))])
    return rows
w, c = shares("watch"), shares("cyclictest")
print("| round | CPU | watch: share of the CPU | cyclictest | watch / cyclictest |")
print("|---|---|---|---|---|")
ratios = {cpu: [] for cpu in cpus}
for r, (wr, cr) in enumerate(zip(w, c), 1):
    for cpu in cpus:
        q = wr[cpu] / cr[cpu] if cr[cpu] > 0 else float("inf")
        ratios[cpu].append(q)
        print(f"| {r} | {cpu} | {wr[cpu]:.3f} % | {cr[cpu]:.3f} % | {q:.2f} |")
others = sorted({i for row in w for i, v in enumerate(row) if i not in cpus and v > 0})
print()
for cpu in cpus:
    print(f"CPU {cpu}: watch / cyclictest, median of {len(ratios[cpu])} rounds: {statistics.median(ratios[cpu]):.2f} "
          f"(range {min(ratios[cpu]):.2f}–{max(ratios[cpu]):.2f})")
for i in others:
    print(f"CPU {i} (not watched): watch used {statistics.median(row[i] for row in w):.3f} % (median)")
print("\nwatch's threads (name: allowed CPUs):")
print(open(os.path.join(out, "affinity")).read().rstrip())
EOF
