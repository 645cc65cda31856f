#!/bin/sh
# Issue 29, item 1: does the explaining trace lose events under load, and
# when it does, does every affected cause say so instead of guessing?
#
# Runs the measurement RUNS times per arm, the two arms alternating (order
# swapped each run): "before" records as before issue 29
# (FIRMTIME_EXPLAIN_UNFILTERED=1: every CPU, the fixed 4 MiB buffer), "after"
# as now (only the measured CPUs, the buffer sized from the event rate
# measured at the start). Prints per run, arm and condition: events the
# kernel lost, events dropped for want of room, deadline misses with a
# cause, the 10 worst with a cause, outliers left unknown because their
# span lost events, the buffer and the measured rate; then per arm the
# totals. Both arms locate what the kernel lost and refuse a cause for a
# wake-up whose span lost events, and both note at least a quarter of the
# run's wake-ups: the arms differ in what is recorded and the buffer only.
#
# MODE=cyclic (default): `lab cyclic --explain --load stress --duration
#   DURATION` for SCHED_FIFO 80 and SCHED_OTHER (~15 s a run and arm).
# MODE=all: `lab all --quick` (its four cyclic conditions; ~100 s a run and arm).
#
# Usage: sudo [MODE=all] [KEEP=1] scripts/lab-explain-loss.sh [RUNS] [DURATION]
set -eu
cd "$(dirname "$0")/.."
RUNS=${1:-3}
DURATION=${2:-5s}
MODE=${MODE:-cyclic}
BIN=${CARGO_TARGET_DIR:-target}/release/firmtime
[ -x "$BIN" ] || cargo build --release --locked -p firmtime >&2
OUT=$(mktemp -d /tmp/firmtime-explain-loss.XXXXXX)
# KEEP=1 keeps the reports (their path on stderr).
trap 'if [ "${KEEP:-0}" = 1 ]; then echo "lab-explain-loss: reports kept in $OUT" >&2; else rm -rf "$OUT"; fi' EXIT

one() { # arm run
    arm=$1
    run=$2
    if [ "$arm" = before ]; then unf=1; else unf=0; fi
    dir="$OUT/$arm-$run"
    mkdir -p "$dir"
    if [ "$MODE" = all ]; then
        FIRMTIME_EXPLAIN_UNFILTERED=$unf "$BIN" lab all --quick --out "$dir/all" \
            >"$dir/log" 2>&1 || true
    else
        for p in fifo:80 other; do
            slug=$(echo "$p" | tr -d ':0-9')
            FIRMTIME_EXPLAIN_UNFILTERED=$unf "$BIN" lab cyclic --explain --load stress \
                --duration "$DURATION" --policy "$p" --json "$dir/cyclic-$slug-stress.json" \
                >>"$dir/log" 2>&1 || true
        done
    fi
}

i=1
while [ "$i" -le "$RUNS" ]; do
    echo "lab-explain-loss: run $i of $RUNS ($MODE)" >&2
    if [ $((i % 2)) = 1 ]; then
        one before "$i"
        one after "$i"
    else
        one after "$i"
        one before "$i"
    fi
    i=$((i + 1))
done

python3 - "$OUT" "$RUNS" "$MODE" <<'EOF'
import json, os, sys, glob
out, runs, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"| run | arm | condition | kernel lost | dropped | misses with a cause | 10 worst with a cause | unknown (trace lost) | buffer per CPU | rate (busiest CPU) |")
print("|---|---|---|---|---|---|---|---|---|---|")
tot = {}
for i in range(1, runs + 1):
    for arm in ["before", "after"]:
        d = os.path.join(out, f"{arm}-{i}")
        files = sorted(f for f in (glob.glob(os.path.join(d, "all", "cyclic-*.json")) if mode == "all"
                                   else glob.glob(os.path.join(d, "cyclic-*.json")))
                       if ".rt-tests" not in f)
        if not files:
            print(f"| {i} | {arm} | not measured | | | | | | | |")
            continue
        for f in files:
            slug = os.path.basename(f)[len("cyclic-"):-len(".json")]
            doc = json.load(open(f))
            e = doc.get("result", doc).get("explain")
            if not e:
                print(f"| {i} | {arm} | {slug} | not explained | | | | | | |")
                continue
            cap = e.get("capture", {})
            rate = cap.get("rate_bytes_per_s", 0)
            t = tot.setdefault(arm, [0, 0, 0, 0, 0, 0, 0, 0, 0])
            vals = [1, 1 if e["lost"] > 0 else 0, e["lost"], e["dropped"], e["missed_explained"], e["missed"],
                    e["worst_explained"], e["worst"], e.get("unknown_lost", 0)]
            tot[arm] = [a + b for a, b in zip(t, vals)]
            print(f"| {i} | {arm} | {slug} | {e['lost']:,} | {e['dropped']:,} | {e['missed_explained']} of {e['missed']} | "
                  f"{e['worst_explained']} of {e['worst']} | {e.get('unknown_lost', 0)} | "
                  f"{cap.get('buffer_kb', 4096):,} KiB | {rate / 1e6:.1f} MB/s |")
print()
print("| arm | conditions | with events lost | events lost | dropped | misses with a cause | 10 worst with a cause | unknown (trace lost) |")
print("|---|---|---|---|---|---|---|---|")
for arm in ["before", "after"]:
    if arm not in tot:
        continue
    n, nl, lost, dr, me, m, we, w, ul = tot[arm]
    pm = 100.0 if m == 0 else 100.0 * me / m
    pw = 100.0 if w == 0 else 100.0 * we / w
    print(f"| {arm} | {n} | {nl} | {lost:,} | {dr:,} | {me} of {m} ({pm:.1f} %) | {we} of {w} ({pw:.1f} %) | {ul} |")
EOF
