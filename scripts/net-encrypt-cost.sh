#!/usr/bin/env bash
# Issue 32 item 3's cost figure: what encrypting the data plane
# (ChaCha20-Poly1305, `net bench --encrypt`) costs at 64 frames, beside the
# MAC-only path, alternating (PAIRS pairs, default 3; the order flips every
# pair), with medians and spread.
#
# Per run, two benches on the same keyed workers (WORKERS of them, default 4,
# `firmtime net worker` on loopback, default priority fifo:70, accepting both):
#   cost: --window 0 --work 0 for DUR (default 5s): master CPU per worker
#         and the round-trip time's median (send → last result fragment; with
#         window 0 the master waits for it, so it is the critical path),
#         whose differences MAC-only → encrypted are the cost, in % of the
#         period, and the late fraction;
#   ramp: --window 1 --work-mode sleep --ramp from 0.5 by 0.05, STEP a step (default
#         3s): the usable fraction (largest step with late fraction ≤ 0.1 %)
#         and the late fraction of the steps below 100 %.
# Then the in-process figure of one datagram sealed and opened
# (`cargo bench -p firmtime-net --bench seal`), which no scheduling noise
# reaches.
#
# Target: cost ≤ 2 % of the period; usable fraction unchanged within its
# spread. Root (the bench's SCHED_FIFO loop, the workers' fifo:70).
# Usage: sudo scripts/net-encrypt-cost.sh        (~5 minutes with the defaults)
#        sudo PAIRS=5 STEP=2s scripts/net-encrypt-cost.sh
set -u
cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-3}
STEP=${STEP:-3s}
DUR=${DUR:-5s}
WORKERS=${WORKERS:-4}
FRAMES=64
TGT=$(realpath -m "${CARGO_TARGET_DIR:-target}")
cargo build --release --locked -p firmtime >/dev/null 2>&1 || { echo "build failed" >&2; exit 1; }
FT=$TGT/release/firmtime
OUT=$(mktemp -d /tmp/ft-encrypt-cost.XXXXXX)
(umask 077; head -c 32 /dev/urandom >"$OUT/key")

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ADDRS=
for i in $(seq 0 $((WORKERS - 1))); do
    port=$((7850 + i))
    "$FT" net worker --listen "127.0.0.1:$port" --key "$OUT/key" 2>"$OUT/worker$i.log" &
    PIDS+=($!)
    ADDRS=${ADDRS:+$ADDRS,}127.0.0.1:$port
done
for i in $(seq 0 $((WORKERS - 1))); do
    for _ in $(seq 50); do
        "$FT" net stats --worker "127.0.0.1:$((7850 + i))" --key "$OUT/key" >/dev/null 2>&1 && break
        sleep 0.1
    done
done

cost() { # name flags… → "CPU_PER_WORKER_% RTT_P50_US LATE_FRACTION_% PERIOD_NS"
    local name=$1
    shift
    "$FT" net bench --workers "$ADDRS" --key "$OUT/key" "$@" --period-frames $FRAMES --rate 48000 \
        --window 0 --work 0 --work-mode none --duration "$DUR" --no-explain \
        --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1
    jq -r 'def r3: . * 1000 | round / 1000;
        "\(.master_cpu_fraction_per_worker * 100 | r3) \(.rtt_p50_ns / 1000 | r3) \(.late_fraction * 100 | r3) \(.period_ns)"' \
        "$OUT/$name.json" 2>/dev/null || echo "failed failed failed failed"
}

ramp() { # name flags… → "USABLE_% LATE_FRACTION_%_BELOW_100"
    local name=$1
    shift
    "$FT" net bench --workers "$ADDRS" --key "$OUT/key" "$@" --period-frames $FRAMES --rate 48000 \
        --window 1 --work 0.5 --work-mode sleep --ramp --ramp-step 0.05 --step-duration "$STEP" \
        --no-explain --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1
    jq -r 'def r3: . * 1000 | round / 1000;
        (if .usable_fraction == null then "0" else (.usable_fraction * 100 | r3 | tostring) end)
        + " " + (([.steps[] | select(.fraction < 0.999) | .late + .missed] | add) * 100
                 / ([.steps[] | select(.fraction < 0.999) | .periods] | add) | r3 | tostring)' \
        "$OUT/$name.json" 2>/dev/null || echo "failed failed"
}

run() { # mode pair → "cpu rtt late usable ramp_late period"; a run that fails (a
    # session setup timing out on a loaded machine) is tried once more, and said so
    local flags=()
    [ "$1" = enc ] && flags=(--encrypt)
    local c r
    c=$(cost "cost-$1$2" "${flags[@]}")
    case $c in failed*) echo "(pair $2 $1: cost run failed, retried: $(tail -n 1 "$OUT/cost-$1$2.txt"))" >&2
        c=$(cost "cost-$1$2" "${flags[@]}") ;; esac
    r=$(ramp "ramp-$1$2" "${flags[@]}")
    case $r in failed*) echo "(pair $2 $1: ramp failed, retried: $(tail -n 1 "$OUT/ramp-$1$2.txt"))" >&2
        r=$(ramp "ramp-$1$2" "${flags[@]}") ;; esac
    echo "$c $r"
}

stats() { # "median (min–max)" of the numbers given
    python3 - "$@" <<'PY'
import statistics, sys
v = [float(a) for a in sys.argv[1:] if a not in ("failed", "")]
print(f"{statistics.median(v):.3f} ({min(v):.3f}–{max(v):.3f})" if v else "n/a")
PY
}

echo "net bench with and without --encrypt ($(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg), loopback; results in $OUT)"
echo "$WORKERS workers, $FRAMES frames at 48 kHz (1.333 ms); cost runs window 0, --work 0, $DUR; ramps window 1, sleep from 0.5 by 0.05, $STEP a step"
row() { printf '%-6s %-5s %-22s %-22s %-22s %-22s %-22s\n' "$@"; }
row pair mode "CPU/worker %" "RTT p50 µs" "late % (cost run)" "usable % (ramp)" "late % (ramp <100 %)"
declare -A V
V[period]=1333333
for p in $(seq "$PAIRS"); do
    if [ $((p % 2)) -eq 1 ]; then order="mac enc"; else order="enc mac"; fi
    for m in $order; do
        read -r cpu rtt late period usable rlate <<<"$(run "$m" "$p")"
        V[$m,cpu]+="$cpu " V[$m,rtt]+="$rtt " V[$m,late]+="$late " V[$m,usable]+="$usable " V[$m,rlate]+="$rlate "
        [ "$period" != failed ] && V[period]=$period
        row "$p" "$m" "$cpu" "$rtt" "$late" "$usable" "$rlate"
    done
done
echo "medians (min–max) over $PAIRS pairs:"
for m in mac enc; do
    # shellcheck disable=SC2086
    row median "$m" "$(stats ${V[$m,cpu]})" "$(stats ${V[$m,rtt]})" "$(stats ${V[$m,late]})" \
        "$(stats ${V[$m,usable]})" "$(stats ${V[$m,rlate]})"
done
python3 - "${V[period]}" "${V[mac,cpu]}" "${V[enc,cpu]}" "${V[mac,rtt]}" "${V[enc,rtt]}" \
    "${V[mac,usable]}" "${V[enc,usable]}" <<'PY'
import statistics, sys
period_us = float(sys.argv[1]) / 1000
# One value per pair, in pair order; None where that run failed.
f = lambda s: [None if x == "failed" else float(x) for x in s.split()]
mc, ec, mr, er, mu, eu = (f(a) for a in sys.argv[2:8])
ok = lambda v: [x for x in v if x is not None]
# Per pair: the encrypted run minus its MAC-only partner (pairs where both ran).
dcpu = [e - m for m, e in zip(mc, ec) if m is not None and e is not None]
drtt = [(e - m) / period_us * 100 for m, e in zip(mr, er) if m is not None and e is not None]
if not (dcpu and drtt):
    print("cost: n/a (no pair where both runs ran; see the results directory)"); sys.exit()
mc, ec, mr, er, mu, eu = (ok(v) for v in (mc, ec, mr, er, mu, eu))
med = statistics.median
print(f"cost of encryption, % of the period (median of {len(drtt)} pair differences, min–max):")
print(f"  master CPU per worker  {med(dcpu):+.3f} ({min(dcpu):+.3f}…{max(dcpu):+.3f})   "
      f"ratio enc/mac {med(ec) / med(mc):.2f}")
print(f"  round trip p50         {med(drtt):+.3f} ({min(drtt):+.3f}…{max(drtt):+.3f})   "
      f"ratio enc/mac {med(er) / med(mr):.3f}")
worst = max(med(dcpu), med(drtt))
print(f"  target ≤ 2 %: {'met' if worst <= 2 else 'NOT met'} (larger median {worst:+.3f} %)")
if mu and eu:
    spread = max(mu) - min(mu)
    d = med(eu) - med(mu)
    within = abs(d) <= max(spread, 5) + 1e-6
    print(f"usable fraction: MAC-only {med(mu):.1f} %, encrypted {med(eu):.1f} % (difference {d:+.1f} points; "
          f"MAC-only spread {spread:.1f}): {'within' if within else 'OUTSIDE'} its spread "
          f"(or one 5 % ramp step)")
PY
echo "in-process, one datagram (cargo bench -p firmtime-net --bench seal):"
cargo bench --locked -p firmtime-net --bench seal 2>/dev/null | sed -n '/^one /,$p' | sed 's/^/  /'
