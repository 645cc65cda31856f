#!/bin/sh
# Issue 29 item 2: what `lab cyclic --kernel-stacks` costs. The stacktrace
# trigger unwinds the stack of the task a measured thread preempts, on that
# thread's wake-up path, so its cost shows where the thread preempts a
# task at (nearly) every wake-up: CPU-bound tasks on the measured CPUs
# (`--load cpu:N`, N = the CPUs). Alternating `lab cyclic --explain` runs
# without and with `--kernel-stacks` (the order swapped every pair), for
# SCHED_FIFO 80, with that load and without any. Prints, per load and arm,
# the median over the runs of p50, p99, p99.9 and max with the run-to-run
# spread (min–max), the with/without ratio of the medians, and from the
# runs with stacks how many were recorded and attached to outliers. The
# unwind happens between the switch to the thread and its return to user
# space, so the most direct figure is the outliers' `remainder` part
# "the thread's switch-in to its clock read": its median over the
# outliers of each arm, and over those whose preempted task got a stack.
#
# Target: none set by the issue (it is opt-in); the figure says what a
# user pays for turning it on.
#
# Usage: sudo scripts/lab-kernel-stacks-cost.sh [PAIRS] [DURATION]
#        (FIRMTIME_BIN=path: that binary instead of target/release/firmtime)
#        (default 4 pairs of 5 s per load: about 3 minutes;
#         LOADS=busy for the loaded runs only)
set -eu
cd "$(dirname "$0")/.."
PAIRS=${1:-4}
DUR=${2:-5s}
BIN=${FIRMTIME_BIN:-${CARGO_TARGET_DIR:-target}/release/firmtime}
[ -x "$BIN" ] || cargo build --release --locked -p firmtime >&2
"$BIN" lab cyclic --help | grep -q -- --kernel-stacks || cargo build --release --locked -p firmtime >&2
OUT=$(mktemp -d /tmp/firmtime-kernel-stacks-cost.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
NCPU=$(nproc)

run() { # load arm index
    if [ "$2" = with ]; then k=--kernel-stacks; else k=; fi
    if [ "$1" = busy ]; then l="--load cpu:$NCPU"; else l=; fi
    "$BIN" lab cyclic --policy fifo:80 --duration "$DUR" --explain $k $l \
        --json "$OUT/$1-$2-$3.json" >/dev/null 2>&1 ||
        echo "lab-kernel-stacks-cost: run $1 $2 $3 failed (kept going)" >&2
}

for load in ${LOADS:-busy idle}; do
    i=0
    while [ "$i" -lt "$PAIRS" ]; do
        if [ $((i % 2)) -eq 0 ]; then run "$load" with "$i"; run "$load" without "$i"
        else run "$load" without "$i"; run "$load" with "$i"; fi
        i=$((i + 1))
        echo "lab-kernel-stacks-cost: $load pair $i of $PAIRS" >&2
    done
done

python3 - "$OUT" "$NCPU" <<'PY'
import glob, json, os, statistics, sys
out, ncpu = sys.argv[1], sys.argv[2]
def load(l, arm):
    return [json.load(open(f))["result"]
            for f in sorted(glob.glob(os.path.join(out, f"{l}-{arm}-*.json")))]
keys = [("p50_ns", "p50"), ("p99_ns", "p99"), ("p99_9_ns", "p99.9"), ("max_ns", "max")]
print("| load | figure | --explain: median (min–max) | --explain --kernel-stacks: median (min–max) | with/without | shift vs spread without |")
print("|---|---|---|---|---|---|")
us = lambda v: f"{v/1000:,.1f} µs"
for l, name in [("busy", f"cpu:{ncpu}"), ("idle", "none")]:
    w, wo = load(l, "with"), load(l, "without")
    if not w or not wo:
        print(f"| {name} | no runs | | | | |")
        continue
    for k, fig in keys:
        a = [r["combined"][k] or 0 for r in wo]
        b = [r["combined"][k] or 0 for r in w]
        ma, mb = statistics.median(a), statistics.median(b)
        shift, spread = mb - ma, max(a) - min(a)
        verdict = "within" if abs(shift) <= spread else ("beyond, lower" if shift < 0 else "beyond")
        sign = "+" if shift >= 0 else "−"
        ratio = f"{mb/ma:.2f}" if ma else "—"
        print(f"| {name} | {fig} | {us(ma)} ({us(min(a))}–{us(max(a))}) | {us(mb)} ({us(min(b))}–{us(max(b))}) | {ratio} | {sign}{us(abs(shift))} vs {us(spread)}: {verdict} |")
    def switch_in(runs, stacked_only):
        v = []
        for r in runs:
            for o in (r.get("explain") or {}).get("outliers", []):
                parts = o["cause"].get("breakdown", [])
                if stacked_only and not any(p.get("kernel_stack") for p in parts):
                    continue
                v += [p["ns"] for p in parts if p["kind"] == "remainder"
                      and p["name"] == "the thread's switch-in to its clock read"]
        return v
    a, b, bs = switch_in(wo, False), switch_in(w, False), switch_in(w, True)
    med = lambda v: us(statistics.median(v)) if v else "—"
    print(f"| {name} | switch-in → clock read (outliers' remainder) | {med(a)} (n={len(a)}) | {med(b)} (n={len(b)}); where a stack was taken {med(bs)} (n={len(bs)}) | | |")
    rec = att = 0
    notes = set()
    for r in w:
        k = ((r.get("explain") or {}).get("capture") or {}).get("kernel_stacks") or {}
        rec += k.get("recorded", 0)
        att += k.get("attached", 0)
        if k.get("unavailable"):
            notes.add(k["unavailable"])
        if not k.get("trigger_removed", False):
            notes.add("trigger NOT removed")
    print(f"\n{name}: {rec} stacks recorded, {att} attached to outliers over {len(w)} runs with --kernel-stacks"
          + (f"; {'; '.join(sorted(notes))}" if notes else "") + "\n")
PY
