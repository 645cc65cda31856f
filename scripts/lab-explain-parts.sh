#!/bin/sh
# Issue 29, item 2: is every late wake-up's lateness split into parts that
# add up to it, and are the induced parts the size they were made?
#
# Runs `lab cyclic --explain` (SCHED_FIFO 80, pinned to CPU $CPU, DURATION)
# RUNS times under three conditions:
#   hog:      a SCHED_FIFO 90 thread on the same CPU spinning 3 ms every
#             25 ms (python3), so late wake-ups wait for the rest of a burst;
#   throttle: a SCHED_FIFO 70 thread taking the whole CPU and a nice-0
#             spinner beside it, so the kernel's RT throttling (the fair
#             server: 50 ms of each second) stalls the measured thread;
#   stress:   `--load stress`.
# Prints per run and condition: outliers, how many have parts that add up
# to their lateness exactly and within 10 %, the time per kind over all
# outliers, and for the induced conditions the size of the induced part in
# the outliers it dominates (median and max; the hog's burst is 3 ms, the
# throttling's reserve 50 ms).
#
# Usage: sudo [CPU=1] [KEEP=1] scripts/lab-explain-parts.sh [RUNS] [DURATION]
set -eu
cd "$(dirname "$0")/.."
RUNS=${1:-2}
DURATION=${2:-3s}
CPU=${CPU:-1}
BIN=${CARGO_TARGET_DIR:-target}/release/firmtime
[ -x "$BIN" ] || cargo build --release --locked -p firmtime >&2
OUT=$(mktemp -d /tmp/firmtime-explain-parts.XXXXXX)
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    if [ "${KEEP:-0}" = 1 ]; then echo "lab-explain-parts: reports kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT

# spin SECONDS POLICY PRIO BURST_MS PAUSE_MS: a python3 spinner pinned to
# $CPU that stops by itself (never a hog left behind).
spin() {
    python3 - "$CPU" "$@" <<'EOF' &
import os, sys, time
cpu, secs, policy, prio, burst, pause = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
os.sched_setaffinity(0, {cpu})
if policy == "fifo":
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
end = time.monotonic() + secs
while time.monotonic() < end:
    until = time.monotonic() + burst / 1000 if burst > 0 else end
    while time.monotonic() < until:
        pass
    if pause > 0:
        time.sleep(pause / 1000)
EOF
    PIDS="$PIDS $!"
}

secs=$(echo "$DURATION" | sed 's/s$//')
run() { # condition file
    case $1 in
    hog)
        spin $((secs + 3)) fifo 90 3 22
        sleep 0.5
        "$BIN" lab cyclic --explain --policy fifo:80 --cpu "$CPU" --duration "$DURATION" \
            --json "$2" >/dev/null 2>&1 || true
        ;;
    throttle)
        spin $((secs + 3)) fifo 70 0 0
        spin $((secs + 3)) other 0 0 0
        sleep 0.5
        "$BIN" lab cyclic --explain --policy fifo:80 --cpu "$CPU" --duration "$DURATION" \
            --json "$2" >/dev/null 2>&1 || true
        ;;
    stress)
        "$BIN" lab cyclic --explain --policy fifo:80 --cpu "$CPU" --load stress \
            --duration "$DURATION" --json "$2" >/dev/null 2>&1 || true
        ;;
    esac
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    PIDS=""
    wait 2>/dev/null || true
}

i=1
while [ "$i" -le "$RUNS" ]; do
    for c in hog throttle stress; do
        echo "lab-explain-parts: run $i of $RUNS, $c" >&2
        run "$c" "$OUT/$c-$i.json"
    done
    i=$((i + 1))
done

python3 - "$OUT" "$RUNS" <<'EOF'
import json, os, sys, statistics
out, runs = sys.argv[1], int(sys.argv[2])
induced = {"hog": ("task", "python3", 3.0), "throttle": ("rt_throttled", None, 50.0)}
print("| run | condition | outliers | parts add up exactly | within 10 % | time per kind (ms, all outliers) | induced part where it dominates: n, median, max (made) |")
print("|---|---|---|---|---|---|---|")
for i in range(1, runs + 1):
    for c in ["hog", "throttle", "stress"]:
        f = os.path.join(out, f"{c}-{i}.json")
        try:
            e = json.load(open(f))["result"]["explain"]
        except Exception as ex:
            print(f"| {i} | {c} | not measured ({ex}) | | | | |")
            continue
        os_ = e["outliers"]
        exact = within = 0
        kinds = {}
        sizes = []
        for o in os_:
            b = o["cause"].get("breakdown", [])
            s = sum(p["ns"] for p in b)
            lat = max(o["latency_ns"], 0)
            exact += s == lat
            within += lat == 0 or abs(s - lat) <= 0.1 * lat
            for p in b:
                kinds[p["kind"]] = kinds.get(p["kind"], 0) + p["ns"]
            if c in induced and b:
                kind, comm, _ = induced[c]
                mine = sum(p["ns"] for p in b if p["kind"] == kind and (comm is None or p["name"] == comm))
                if mine * 2 > lat:
                    sizes.append(mine / 1e6)
        top = ", ".join(f"{k} {v / 1e6:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:5])
        ind = ""
        if c in induced:
            made = induced[c][2]
            ind = (f"{len(sizes)}, {statistics.median(sizes):.2f} ms, {max(sizes):.2f} ms ({made:g} ms)"
                   if sizes else f"0 ({made:g} ms)")
        print(f"| {i} | {c} | {len(os_)} | {exact} | {within} | {top} | {ind} |")
EOF
