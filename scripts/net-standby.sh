#!/usr/bin/env bash
# Hot standby figures (issue 32 item 2), in network namespaces: a primary
# and a standby `firmtime net worker` in two worker namespaces, `net bench
# --standby` in the master namespace at 128 frames / 48 kHz (2.67 ms),
# window 1, SCHED_FIFO 80. Each repetition runs the bench three times:
# without a standby (the master's CPU for comparison), with the standby
# untouched (the control) and with the standby and the primary SIGKILLed
# mid-run (then restarted for the next repetition). Prints per repetition and a
# summary, each beside its target:
#   substituted  blocks the late policy filled in the kill run (target <= 1 per kill)
#   xruns        loop deadlines the master missed (target 0), and those whose
#                late wake-up came within 0.5 s of the kill (the control
#                runs without a kill show this VM's own rate)
#   mismatched   delivered blocks not bit-exact with their input, i.e. with
#                what the run without the kill delivers (target 0)
#   from_standby results the standby delivered; takeover = kill -> switch (ms)
# Root required. REPS (10), DUR (4s), KILL_AFTER (seconds, 2) change the run.
# Usage: sudo scripts/net-standby.sh     (builds the release binary first)
set -u
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "net-standby.sh needs root (network namespaces)" >&2; exit 1; }
cargo build --release -p firmtime >/dev/null 2>&1 || { echo "build failed" >&2; exit 1; }
export FT=$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/firmtime
. scripts/net-ns.sh
OUT=$(mktemp -d /tmp/ft-net-standby.XXXXXX)
NS_LOG=$OUT/workers.log
REPS=${REPS:-10}
DUR=${DUR:-4s}
KILL_AFTER=${KILL_AFTER:-2}

ns_up 2 || exit 1
PRIMARY="$(ns_addr 0):$NS_PORT"
STANDBY="$(ns_addr 1):$NS_PORT"

bench() { # json [extra args] → runs the bench with the standby (blocking)
    local json=$1
    shift
    ns_bench --workers "$PRIMARY" "$@" --period-frames 128 --rate 48000 \
        --window 1 --work 0 --work-mode sleep --duration "$DUR" --no-explain \
        --json "$json" >/dev/null 2>>"$OUT/bench.log"
}
field() { jq -r "$2" "$1"; }

echo "hot standby: $(uname -r), $(nproc) CPUs, 128 frames @ 48 kHz, window 1, $REPS repetitions of $DUR; results in $OUT"
printf '%-4s | %-30s | %-69s | %s\n' "rep" "no kill: late xruns mismatched" \
    "SIGKILL: substituted xruns (near kill) mismatched from_standby takeover" "at target"
printf '%-4s | %-30s | %-69s | %s\n' "" "" "          (<= 1)      (0)   (0)        (0)" ""
ok=0
ok_near=0
SUBS=(); XRUNS=(); NEAR=(); CTRL_XRUNS=(); LAT=(); CPU_PLAIN=(); CPU_SB=()
for ((r = 1; r <= REPS; r++)); do
    bench "$OUT/plain$r.json"
    bench "$OUT/control$r.json" --standby "$STANDBY"
    C="$OUT/control$r.json"
    K="$OUT/kill$r.json"
    bench "$K" --standby "$STANDBY" &
    B=$!
    sleep "$KILL_AFTER"
    KILL_NS=$(date +%s%N)
    kill -9 "${NS_PIDS[0]}"
    wait "${NS_PIDS[0]}" 2>/dev/null
    wait $B
    if [ ! -s "$K" ]; then
        printf '%-4s | bench failed, see %s\n' "$r" "$OUT/bench.log"
        ns_start_worker 0; ns_wait_worker 0 || exit 1
        continue
    fi
    sub=$(field "$K" '.workers[0].late')
    xr=$(field "$K" '.missed')
    near=$(jq -r --argjson k "$KILL_NS" '[.missed_at_realtime_ns[] | select(. > $k - 500000000 and . < $k + 500000000)] | length' "$K")
    mism=$(field "$K" '.mismatched')
    from=$(field "$K" '.from_standby')
    tk=$(field "$K" '.takeovers')
    at=$(field "$K" '.workers[0].takeover_at_realtime_ns[0] // empty')
    lat=never
    [ -n "$at" ] && lat=$(awk -v a="$at" -v k="$KILL_NS" 'BEGIN { printf "%.1f", (a - k) / 1e6 }')
    good=no
    if [ "$sub" -le 1 ] && [ "$mism" -eq 0 ] && [ "$tk" -ge 1 ]; then
        [ "$xr" -eq 0 ] && { good=yes; ok=$((ok + 1)); }
        [ "$near" -eq 0 ] && ok_near=$((ok_near + 1))
    fi
    CPU_PLAIN+=("$(field "$OUT/plain$r.json" '.master_cpu_fraction * 10000 | round / 100')")
    CPU_SB+=("$(field "$C" '.master_cpu_fraction * 10000 | round / 100')")
    NEAR+=("$near"); CTRL_XRUNS+=("$(field "$C" '.missed')")
    SUBS+=("$sub"); XRUNS+=("$xr"); [ "$lat" != never ] && LAT+=("$lat")
    printf '%-4s | %4s %5s %10s %8s | %11s %5s %6s %14s %12s %8s ms | %s\n' "$r" \
        "$(field "$C" '.workers[0].late')" "$(field "$C" '.missed')" "$(field "$C" '.mismatched')" "" \
        "$sub" "$xr" "($near)" "$mism" "$from" "$lat" "$good (takeovers $tk)"
    # The primary back for the next repetition.
    ns_start_worker 0
    ns_wait_worker 0 || exit 1
done
stats() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit } printf "median %s, max %s", v[int((NR + 1) / 2)], v[NR] }'; }
echo
echo "summary: $ok of $REPS kills at target (<= 1 block substituted, 0 xruns in the run, 0 mismatched, a takeover);"
echo "         $ok_near of $REPS counting only xruns within 0.5 s of the kill"
echo "  blocks substituted per kill: $(stats "${SUBS[@]}")   (target <= 1; without a standby every block until the worker is back: ~58 ms after its restart)"
echo "  master xruns per kill run:   $(stats "${XRUNS[@]}")   (target 0); within 0.5 s of the kill: $(stats "${NEAR[@]}")"
echo "  master xruns per run without a kill: $(stats "${CTRL_XRUNS[@]}")   (this VM's own rate)"
echo "  kill -> takeover, ms:        $(stats "${LAT[@]}")   (one period is 2.67 ms)"
echo "  master CPU %, no standby:    $(stats "${CPU_PLAIN[@]}")"
echo "  master CPU %, with standby:  $(stats "${CPU_SB[@]}")   (the runs without a kill; same workers, alternating)"
ns_down
