#!/bin/sh
# Frame-pacing acceptance (issue 8, §3): a 60 fps Xine-like player under
# SCHED_FIFO 80 with clock_nanosleep, 2 CPU hogs, 30 s, achieves >= 59.9 fps
# (at most 3 of 1800 frames dropped). On a virtual machine a single stretch
# of stolen time (the hypervisor not running the guest) longer than half a
# frame drops frames under any policy, so the run is repeated and each run's
# steal time printed beside its frame rate.
# Prints each run's target line (the line `lab frames` and the report's
# frame-pacing section end with), then the median over the runs and how many
# met the target; exit 0 when the median meets it.
# Needs root or an rtprio limit (SCHED_FIFO). Builds in release.
# Usage: scripts/lab-frames.sh [DURATION] [RUNS]   (default 30s, 5 runs;
#        shorter than 30 s is reported but not judged)
set -eu
cd "$(dirname "$0")/.."
DURATION=${1:-30s}
RUNS=${2:-5}
cargo build --release -q -p firmtime
json=$(mktemp /tmp/firmtime-lab-frames.XXXXXX.json)
fps=$(mktemp /tmp/firmtime-lab-frames.XXXXXX.txt)
trap 'rm -f "$json" "$fps"' EXIT
i=0
while [ "$i" -lt "$RUNS" ]; do
    i=$((i + 1))
    # `lab frames` exits 1 on a partial run or a sleeper error; the target line says why.
    out=$("${CARGO_TARGET_DIR:-target}"/release/firmtime lab frames --fps 60 --duration "$DURATION" \
        --sleeper clock_nanosleep --policy fifo:80 --load cpu:2 --json "$json") || true
    printf 'run %d/%d: %s\n' "$i" "$RUNS" "$(printf '%s\n' "$out" | grep '^target: ' | sed 's/^target: .*over [0-9]* s: //')"
    jq -r '.result as $r | $r.cells[0].result
        | "\(.achieved_fps // "nan") \(.steal_percent // "nan") \($r.config.duration_ns)"' "$json" >>"$fps"
done
sort -n "$fps" | awk -v runs="$RUNS" -v dur="$DURATION" '
    { f[NR] = $1; if ($1 >= 59.9) met++; steal += $2; if ($3 < 30e9) short = 1 }
    END {
        m = (NR % 2) ? f[(NR + 1) / 2] : (f[NR / 2] + f[NR / 2 + 1]) / 2
        printf "median %.3f fps over %d runs of %s (min %.3f, max %.3f); %d of %d runs >= 59.9 fps; mean steal %.2f %%\n",
            m, NR, dur, f[1], f[NR], met, runs, steal / NR
        if (short) { print "NOT JUDGED: the target is over 30 s or more"; exit 1 }
        if (m >= 59.9) { print "PASS: median >= 59.9 fps" } else { print "FAIL: median < 59.9 fps"; exit 1 }
    }'
