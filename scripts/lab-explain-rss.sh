#!/bin/sh
# Resident memory of explaining sessions started one per interval, as
# `watch` starts them, with mlockall: each session's drainer storage
# allocated fresh vs reused from a pool (issue 29 item 5; target for
# `watch` at defaults: RSS <= 40 MB, flat). Needs root (tracefs).
#   scripts/lab-explain-rss.sh [INTERVALS] [MS]
set -eu
N=${1:-30}
MS=${2:-200}
cd "$(dirname "$0")/.."
cargo build -q --release -p firmtime-trace --example explain_rss
EXE=target/release/examples/explain_rss
FRESH=$("$EXE" fresh "$N" "$MS")
POOLED=$("$EXE" pooled "$N" "$MS")
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
printf '%-8s %10s %10s %10s %10s\n' mode first_MB max_MB last_MB cpu_ms
for line in "$FRESH" "$POOLED"; do
    printf '%-8s %10s %10s %10s %10s\n' "$(echo "$line" | cut -d' ' -f1)" \
        "$(field "$line" rss_first_mb)" "$(field "$line" rss_max_mb)" \
        "$(field "$line" rss_last_mb)" "$(field "$line" cpu_ms)"
done
awk -v f="$(field "$FRESH" rss_last_mb)" -v p="$(field "$POOLED" rss_last_mb)" \
    -v fc="$(field "$FRESH" cpu_ms)" -v pc="$(field "$POOLED" cpu_ms)" \
    'BEGIN { printf "pooled/fresh: last RSS %.2f, CPU time %.2f (%d intervals of %s ms; watch target RSS <= 40 MB)\n", p / f, (fc > 0 ? pc / fc : 0), '"$N"', '"$MS"' }'
