#!/usr/bin/env bash
# Issue 32 item 4's figure: what a `firmtime rack` remote stage costs the
# master's CPU, beside `net bench`'s master at the same settings.
#
# WORKERS workers (default 3, `firmtime net worker` on loopback with a key,
# fifo:70), then RUNS rounds (default 5; the order rotates every round, the
# machine is shared and noisy), each of three runs of DUR (default 6s):
#   rack3: `firmtime rack` on a private `jackd -R -d dummy` (128 frames,
#          48 kHz) with WORKERS trivial remote stages (the worker's copy,
#          `work = { fraction = 0, mode = "none" }`, window 1);
#   rack0: the same rack with one local amp_mono stage instead: the floor
#          of a JACK client's cycle (wake-up, ports) without any remote stage;
#   bench: `net bench` on the same workers, window 1, --work 0 --work-mode
#          none: its `master_cpu_fraction_per_worker` (the loop thread's CPU
#          over wall time, divided by the workers).
# The rack's CPU is read per thread from /proc/PID/task/*/schedstat (ns on
# a CPU) over MEASURE (default 4s) after a WARM (default 1.5s) start: the
# JACK process thread (the busiest), the session link threads
# (`ft-net-link`), the rest; jackd (a separate process) is shown apart.
# Per stage: the process thread's CPU / WORKERS (all of it, the JACK
# wake-up included, like the bench's loop thread), and the marginal cost
# (rack3 − rack0) / WORKERS. Medians with min–max; the ratio to the bench.
# Target: within 2× of net bench's master per worker.
#
# ENCRYPT=1 runs both with the data plane encrypted (`encrypt = true`,
# `--encrypt`). Root (jackd -R, the bench's SCHED_FIFO loop).
# Usage: sudo scripts/rack-cost.sh                (~2 minutes with the defaults)
#        sudo RUNS=7 DUR=8s MEASURE=6 scripts/rack-cost.sh
set -u
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
DUR=${DUR:-6s}
WARM=${WARM:-1.5}
MEASURE=${MEASURE:-4}
WORKERS=${WORKERS:-3}
ENCRYPT=${ENCRYPT:-0}
FRAMES=128
TGT=$(realpath -m "${CARGO_TARGET_DIR:-target}")
cargo build --release --locked -p firmtime >/dev/null 2>&1 || { echo "build failed" >&2; exit 1; }
FT=$TGT/release/firmtime
OUT=$(mktemp -d /tmp/ft-rack-cost.XXXXXX)
(umask 077; head -c 32 /dev/urandom >"$OUT/key")

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ADDRS=
ENC_TOML=
ENC_FLAG=()
if [ "$ENCRYPT" = 1 ]; then
    ENC_TOML=", encrypt = true"
    ENC_FLAG=(--encrypt)
fi
{
    echo "client = \"ft-rack-cost\""
    echo "deadline = 0.9"
} >"$OUT/rack3.toml"
for i in $(seq 0 $((WORKERS - 1))); do
    port=$((7870 + i))
    "$FT" net worker --listen "127.0.0.1:$port" --key "$OUT/key" "${ENC_FLAG[@]}" 2>"$OUT/worker$i.log" &
    PIDS+=($!)
    ADDRS=${ADDRS:+$ADDRS,}127.0.0.1:$port
    {
        echo "[[stage]]"
        echo "name = \"r$((i + 1))\""
        echo "work = { fraction = 0.0, mode = \"none\" }"
        echo "channels = 1"
        echo "remote = { worker = \"127.0.0.1:$port\", key_file = \"$OUT/key\", window = 1$ENC_TOML }"
    } >>"$OUT/rack3.toml"
done
printf 'client = "ft-rack-cost"\n[[stage]]\nname = "g"\nplugin = "amp_mono"\ncontrols = { Gain = 0.5 }\n' \
    >"$OUT/rack0.toml"
for i in $(seq 0 $((WORKERS - 1))); do
    for _ in $(seq 50); do
        "$FT" net stats --worker "127.0.0.1:$((7870 + i))" --key "$OUT/key" >/dev/null 2>&1 && break
        sleep 0.1
    done
done

# ns on a CPU of every thread of PID: "TID COMM NS" lines.
snap() {
    for t in /proc/"$1"/task/*; do
        printf '%s %s %s\n' "${t##*/}" "$(tr ' ' _ <"$t/comm")" "$(cut -d' ' -f1 "$t/schedstat")"
    done 2>/dev/null
}

# ns on a CPU of all threads of PID together.
total() {
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

# rack NAME → "PROCESS_THREAD_% LINKS_% OTHER_% JACKD_% CYCLES LATE XRUNS" (percent of one CPU)
rack() {
    local name=$1
    "$FT" rack "$OUT/$name.toml" --jack-dummy --period-frames $FRAMES --rate 48000 \
        --duration "$DUR" --status-every 0s --ladspa-path /usr/lib/ladspa \
        --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 </dev/null &
    local pid=$!
    sleep "$WARM"
    local jd
    jd=$(pgrep -P "$pid" jackd | head -n 1)
    local a b ja jb t0 t1
    a=$(snap "$pid")
    ja=$(total "$jd")
    t0=$(date +%s%N)
    sleep "$MEASURE"
    b=$(snap "$pid")
    jb=$(total "$jd")
    t1=$(date +%s%N)
    wait "$pid"
    python3 - "$((t1 - t0))" "$((jb - ja))" "$OUT/$name.json" <<PY
import json, sys
wall, jackd = int(sys.argv[1]), int(sys.argv[2])
a = {l.split()[0]: (l.split()[1], int(l.split()[2])) for l in """$a""".splitlines() if l.strip()}
b = {l.split()[0]: (l.split()[1], int(l.split()[2])) for l in """$b""".splitlines() if l.strip()}
d = {t: (b[t][0], b[t][1] - a.get(t, (None, b[t][1]))[1]) for t in b}
links = sum(v for n, v in d.values() if n == "ft-net-link")
rest = sorted((v for n, v in d.values() if n != "ft-net-link"), reverse=True)
proc = rest[0] if rest else 0
other = sum(rest[1:])
try:
    j = json.load(open(sys.argv[3]))
    st = j["stats"]
    cycles, late, xruns = st["cycles"], sum(s["late"] for s in st["stages"]), j["xruns"]
except Exception:
    cycles = late = xruns = "failed"
p = lambda v: f"{v / wall * 100:.3f}"
print(p(proc), p(links), p(other), p(jackd), cycles, late, xruns)
PY
}

bench() { # → "CPU_PER_WORKER_% LATE_FRACTION_%"
    "$FT" net bench --workers "$ADDRS" --key "$OUT/key" "${ENC_FLAG[@]}" --period-frames $FRAMES \
        --rate 48000 --window 1 --work 0 --work-mode none --duration "$DUR" --no-explain \
        --json "$OUT/bench.json" >"$OUT/bench.txt" 2>&1
    jq -r '"\(.master_cpu_fraction_per_worker * 100 * 1000 | round / 1000) \(.late_fraction * 100 * 1000 | round / 1000)"' \
        "$OUT/bench.json" 2>/dev/null || echo "failed failed"
}

stats() { # "median (min–max)" of the numbers given
    python3 - "$@" <<'PY'
import statistics, sys
v = [float(a) for a in sys.argv[1:] if a not in ("failed", "")]
print(f"{statistics.median(v):.3f} ({min(v):.3f}–{max(v):.3f})" if v else "n/a")
PY
}

echo "rack vs net bench, master CPU ($(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg), loopback, encrypt $ENCRYPT; results in $OUT)"
echo "$WORKERS remote stages / workers, $FRAMES frames at 48 kHz (2.667 ms), window 1, work 0; $RUNS rounds of $DUR, measured over ${MEASURE}s; % of one CPU"
row() { printf '%-5s %-6s %-14s %-10s %-10s %-10s %-14s %s\n' "$@"; }
row round run "process thr %" "links %" "other %" "jackd %" "bench/worker %" "cycles late xruns (bench: late %)"
declare -A V
for r in $(seq "$RUNS"); do
    case $((r % 3)) in
        1) order="rack3 rack0 bench" ;;
        2) order="rack0 bench rack3" ;;
        0) order="bench rack3 rack0" ;;
    esac
    for m in $order; do
        if [ "$m" = bench ]; then
            read -r cpu late <<<"$(bench)"
            V[bench]+="$cpu "
            row "$r" bench - - - - "$cpu" "late $late %"
        else
            read -r proc links other jackd cycles late xruns <<<"$(rack "$m")"
            V[$m,proc]+="$proc " V[$m,links]+="$links " V[$m,other]+="$other " V[$m,jackd]+="$jackd "
            row "$r" "$m" "$proc" "$links" "$other" "$jackd" - "$cycles $late $xruns"
        fi
    done
done
echo "medians (min–max) over $RUNS rounds:"
for m in rack3 rack0; do
    # shellcheck disable=SC2086
    row median "$m" "$(stats ${V[$m,proc]})" "$(stats ${V[$m,links]})" "$(stats ${V[$m,other]})" \
        "$(stats ${V[$m,jackd]})" -
done
# shellcheck disable=SC2086
row median bench - - - - "$(stats ${V[bench]})"
python3 - "$WORKERS" "${V[rack3,proc]}" "${V[rack0,proc]}" "${V[rack3,links]}" "${V[bench]}" <<'PY'
import statistics, sys
n = int(sys.argv[1])
f = lambda s: [float(x) for x in s.split() if x != "failed"]
r3, r0, links, b = (f(a) for a in sys.argv[2:6])
if not (r3 and r0 and b):
    print("per stage: n/a (a run failed; see the results directory)"); sys.exit()
med = statistics.median
per = med(r3) / n
marg = (med(r3) - med(r0)) / n
bw = med(b)
print(f"rack, per remote stage: {per:.3f} % of a CPU (process thread / {n}), "
      f"{marg:.3f} % marginal ((rack3 − rack0) / {n}), links {med(links) / n:.3f} % per stage")
print(f"net bench master, per worker: {bw:.3f} %")
print(f"ratio rack/bench: {per / bw:.2f} (all of the process thread), {marg / bw:.2f} (marginal); "
      f"target ≤ 2: {'met' if per / bw <= 2 else 'NOT met'}")
PY
