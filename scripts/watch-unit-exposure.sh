#!/usr/bin/env bash
# Prints the exposure `systemd-analyze security --offline=true` gives the
# unit `firmtime watch install` writes (issue 31 item 6: target <= 4.0;
# the unit before the hardening scored 9.6 UNSAFE), for the default flags
# and for a watch serving metrics with its database elsewhere (the unit
# then keeps IP sockets and makes that directory writable).
#
#   scripts/watch-unit-exposure.sh            # builds the debug binary
#   FIRMTIME=/usr/local/bin/firmtime scripts/watch-unit-exposure.sh
#   VERBOSE=1 …                               # systemd-analyze's whole table
set -euo pipefail
cd "$(dirname "$0")/.."
command -v systemd-analyze >/dev/null || { echo "needs systemd-analyze (Debian: systemd)" >&2; exit 2; }
if [ -z "${FIRMTIME:-}" ]; then
  cargo build -q -p firmtime
  FIRMTIME=${CARGO_TARGET_DIR:-$PWD/target}/debug/firmtime
fi
TARGET=4.0
dir=$(mktemp -d -t firmtime-unit.XXXXXX)
trap 'rm -rf "$dir"' EXIT
worst=0
printf '%-66s %8s %8s\n' "watch install --print -- FLAGS" exposure target
while IFS='|' read -r name flags; do
  unit=$dir/$name.service
  # shellcheck disable=SC2086  # the flags are words
  "$FIRMTIME" watch install --print --exe /usr/local/bin/firmtime -- $flags >"$unit"
  out=$(systemd-analyze security --offline=true --no-pager "$unit" 2>&1 || true)
  [ "${VERBOSE:-0}" = 1 ] && printf '%s\n' "$out"
  figure=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  [ -n "$figure" ] || { printf '%s\n' "$out" >&2; echo "no exposure figure for $name" >&2; exit 1; }
  printf '%-66s %8s %8s\n' "${flags:-(none)}" "$figure" "<= $TARGET"
  worst=$(awk -v a="$worst" -v b="$figure" 'BEGIN { print (b > a ? b : a) }')
done <<'CASES'
default|
metrics|--cpu 0,1 --db /srv/firmtime/watch.db --metrics-listen 0.0.0.0:9807
CASES
verdict=$(awk -v w="$worst" -v t="$TARGET" 'BEGIN { print (w <= t ? "met" : "NOT met") }')
echo "worst exposure $worst against the target $TARGET (the unit before the hardening: 9.6 UNSAFE): $verdict"
[ "$verdict" = met ]
