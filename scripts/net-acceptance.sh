#!/usr/bin/env bash
# firmtime-net acceptance figures (issue 5), in network namespaces on this
# machine. Prints each figure beside its target and Lago's 2004 figure.
# Root required. QUICK=1 shortens every step (figures get noisier).
# Usage: sudo scripts/net-acceptance.sh   (builds the release binary first)
set -u
cd "$(dirname "$0")/.."
cargo build --release -p firmtime >/dev/null 2>&1 || { echo "build failed" >&2; exit 1; }
export FT=$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/firmtime
. scripts/net-ns.sh
OUT=$(mktemp -d /tmp/ft-net-acc.XXXXXX)
NS_LOG=$OUT/workers.log
if [ "${QUICK:-0}" = 1 ]; then STEP=1s; FROM=0.70; DUR=2s; else STEP=3s; FROM=0.50; DUR=5s; fi

ramp() { # name workers frames window mode → prints usable fraction
    local name=$1 n=$2 frames=$3 win=$4 mode=$5
    ns_bench --workers "$(ns_workers "$n")" --period-frames "$frames" --rate 48000 \
        --window "$win" --work "$FROM" --work-mode "$mode" --ramp --ramp-step 0.05 \
        --step-duration "$STEP" --json "$OUT/$name.json" >/dev/null 2>>"$OUT/$name.log"
    jq -r '(.usable_fraction // 0) * 100 | "\(.)"' "$OUT/$name.json" | xargs printf '%.0f'
}
row() { printf '%-52s %8s   %s\n' "$1" "$2" "$3"; }

echo "firmtime-net acceptance ($(uname -r), $(nproc) CPUs; results in $OUT)"
row "figure" "here" "target / Lago 2004"

ns_up 4 || exit 1
row "usable %, 4 workers sleep, window 1, 128 fr (2.67 ms)" "$(ramp w1-128 4 128 1 sleep)" ">= 90 / 96 % at 2.19 ms, 7 machines"
row "usable %, 4 workers sleep, window 1, 64 fr (1.33 ms)" "$(ramp w1-64 4 64 1 sleep)" "(printed)"
FROM_SAVED=$FROM; FROM=0.05
row "usable %, 4 workers sleep, window 0, 128 fr" "$(ramp w0-128 4 128 0 sleep)" "(printed) / 9 % each with 3"
row "usable %, 1 worker sleep, window 0, 128 fr" "$(ramp w0-128-1 1 128 0 sleep)" "(printed) / 73 % one worker"
FROM=$FROM_SAVED
row "usable %, 4 workers sleep, window 2, 128 fr" "$(ramp w2-128 4 128 2 sleep)" "(printed)"
row "usable %, 1 worker spin, window 1, 128 fr" "$(ramp spin-128 1 128 1 spin)" ">= 90 / Lago Fig. 8"

ns_up 8 || exit 1
for n in 1 2 4 8; do
    ns_bench --workers "$(ns_workers $n)" --period-frames 128 --window 1 --work 0.5 \
        --work-mode sleep --duration "$DUR" --json "$OUT/cpu$n.json" >/dev/null 2>>"$OUT/cpu.log"
    row "master CPU %, $n worker(s) (per worker)" \
        "$(jq -r '"\(.master_cpu_fraction*100|.*100|round/100) (\(.master_cpu_fraction_per_worker*100|.*100|round/100))"' "$OUT/cpu$n.json")" \
        "linear growth (Lago)"
done

# Reconnect: kill the worker 2 s in, restart it 2 s later.
ns_up 1 || exit 1
ns_bench --workers "$(ns_workers 1)" --period-frames 128 --work 0.3 --work-mode sleep \
    --duration 8s --json "$OUT/reconnect.json" >/dev/null 2>>"$OUT/reconnect.log" &
B=$!
sleep 2.5; kill -9 "${NS_PIDS[0]}"; wait "${NS_PIDS[0]}" 2>/dev/null
sleep 2; RESTART=$(date +%s%N); ns_start_worker 0
wait $B
RECON=$(jq -r '.workers[0].reconnected_at_realtime_ns[0] // empty' "$OUT/reconnect.json")
if [ -n "$RECON" ]; then
    row "reconnect after worker restart (ms)" "$(( (RECON - RESTART) / 1000000 ))" "<= 1000"
else
    row "reconnect after worker restart (ms)" "never" "<= 1000"
fi
row "  periods / late while away (fallback policy)" "$(jq -r '"\(.periods) / \(.late)"' "$OUT/reconnect.json")" "master kept running"

# Flood: 100,000 malformed datagrams at the worker's port during a stream.
ns_up 1 || exit 1
ns_bench --workers "$(ns_workers 1)" --period-frames 128 --work 0.5 --work-mode sleep \
    --duration 10s --json "$OUT/flood.json" >/dev/null 2>>"$OUT/flood.log" &
B=$!
sleep 1
ip netns exec "$NS_MASTER" python3 - "$(ns_addr 0)" "$NS_PORT" <<'PY'
import socket, sys, time, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dst = (sys.argv[1], int(sys.argv[2]))
for i in range(100000):
    s.sendto(os.urandom(8 + i % 200), dst)
    if i % 100 == 99:
        time.sleep(0.005)
PY
wait $B
S=$(ip netns exec "$NS_MASTER" "$FT" net stats --worker "$(ns_addr 0):$NS_PORT" --json)
row "flood: datagrams dropped by the worker (+ kernel: its namespace, its socket)" "$(echo "$S" | jq -r '"\(.dropped) (+\(.kernel_rcvbuf_errors), \(.socket_drops))"')" "100000"
row "flood: late fraction % of the stream" "$(jq -r '.late_fraction*100' "$OUT/flood.json")" "<= 0.1"
ns_down
