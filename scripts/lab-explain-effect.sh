#!/bin/sh
# Issue 19, item 2: does the explaining trace change the latency it
# explains? Alternating `lab cyclic` runs with and without `--explain` (the
# order swapped every pair: with/without, without/with, …), under the
# stress load, for SCHED_FIFO 80 and SCHED_OTHER, in one go. Prints, per
# policy and per arm, the median over the runs of p50, p99, p99.9, max and
# missed deadlines, with the run-to-run spread (min–max over the runs) of
# each; the with/without ratio of the medians; and, from the runs with
# --explain, the share of outliers whose cause is one of firmtime's own
# threads (ft-explain-drain, firmtime-*).
#
# Targets: its own threads are the cause of < 1 % of outliers, and no
# percentile moves by more than the run-to-run spread of the runs without it.
#
# Usage: sudo scripts/lab-explain-effect.sh [PAIRS] [DURATION]
#        (POLICIES="other" to measure one policy only)
#        (default 5 pairs of 5s per policy: about 4 minutes)
set -eu
cd "$(dirname "$0")/.."
PAIRS=${1:-5}
DUR=${2:-5s}
BIN=${CARGO_TARGET_DIR:-target}/release/firmtime
[ -x "$BIN" ] || cargo build --release --locked -p firmtime >&2
OUT=$(mktemp -d /tmp/firmtime-explain-effect.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

run() { # policy arm index
    if [ "$2" = with ]; then e=--explain; else e=--no-explain; fi
    "$BIN" lab cyclic --policy "$1" --load stress --duration "$DUR" $e \
        --json "$OUT/$(echo "$1" | tr ':' '-')-$2-$3.json" >/dev/null 2>&1 ||
        echo "lab-explain-effect: run $1 $2 $3 failed (kept going)" >&2
}

for policy in ${POLICIES:-fifo:80 other}; do
    i=0
    while [ "$i" -lt "$PAIRS" ]; do
        if [ $((i % 2)) -eq 0 ]; then run "$policy" with "$i"; run "$policy" without "$i"
        else run "$policy" without "$i"; run "$policy" with "$i"; fi
        i=$((i + 1))
        echo "lab-explain-effect: $policy pair $i of $PAIRS" >&2
    done
done

python3 - "$OUT" <<'EOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
def load(policy, arm):
    rows = []
    for f in sorted(glob.glob(os.path.join(out, f"{policy}-{arm}-*.json"))):
        r = json.load(open(f))["result"]
        rows.append(r)
    return rows
keys = [("p50_ns", "p50"), ("p99_ns", "p99"), ("p99_9_ns", "p99.9"), ("max_ns", "max"), ("missed", "missed")]
print("| policy | figure | without: median (min–max) | with --explain: median (min–max) | with/without | shift vs spread without | median outside the range without |")
print("|---|---|---|---|---|---|---|")
own_total = own_named = 0
for policy in ["fifo-80", "other"]:
    w, wo = load(policy, "with"), load(policy, "without")
    if not w or not wo:
        print(f"| {policy} | no runs | | | | |")
        continue
    for k, name in keys:
        a = [r["combined"][k] or 0 for r in wo]
        b = [r["combined"][k] or 0 for r in w]
        ma, mb = statistics.median(a), statistics.median(b)
        unit = (lambda v: f"{v:,.0f}") if k == "missed" else (lambda v: f"{v/1000:,.1f} µs")
        outside = "no"
        if mb > max(a):
            outside = "yes, higher"
        elif mb < min(a):
            outside = "yes, lower"
        ratio = f"{mb/ma:.2f}" if ma else "—"
        shift, spread = mb - ma, max(a) - min(a)
        verdict = "within" if abs(shift) <= spread else ("beyond, lower" if shift < 0 else "beyond")
        sign = "+" if shift >= 0 else "−"
        print(f"| {policy} | {name} | {unit(ma)} ({unit(min(a))}–{unit(max(a))}) | {unit(mb)} ({unit(min(b))}–{unit(max(b))}) | {ratio} | {sign}{unit(abs(shift))} vs {unit(spread)}: {verdict} | {outside} |")
    n = own = 0
    names = {}
    for r in w:
        for o in (r.get("explain") or {}).get("outliers", []):
            n += 1
            name = o["cause"]["name"]
            if o["cause"]["category"] == "task" and (name.startswith("ft-") or name.startswith("firmtime")):
                own += 1
                names[name] = names.get(name, 0) + 1
    own_total += own; own_named += n
    print(f"\n{policy}: firmtime's own threads caused {own} of {n} explained outliers ({100*own/max(n,1):.1f} %; target < 1 %)"
          + (": " + ", ".join(f"{k} ×{v}" for k, v in sorted(names.items())) if names else "") + "\n")
EOF
