#!/usr/bin/env bash
# Starts the unit `firmtime watch install` writes under a systemd of its
# own, on a machine whose PID 1 is not systemd (a container, this project's
# development VM), and checks what docs/WATCH.md ("The service", "Tried
# here") says of it: it starts with the hardening (FIFO priority, memory
# locked, the explaining trace), a `kill -9` is followed by ExecStopPost=
# (`watch clean-trace` removes the killed run's tracefs instances) and a
# restart 10 s later, `systemctl stop` stores the last interval and ends
# the run `stopped`.
#
# systemd runs as PID 1 of new PID, mount, UTS, network and cgroup
# namespaces, with private /run, /tmp and /var/tmp and /etc/systemd/system
# bound to a directory holding only this unit, started with
# --unit=firmtime-watch.service; a test-only drop-in adds
# DefaultDependencies=no (nothing of sysinit.target runs on the shared
# machine: no tmpfiles, no udev, no sysctl) and logs to a file (no
# journald). Needs root. At the end it kills that systemd, removes the
# cgroups and the /var/lib/firmtime it created, and its scratch directory.
#
#   scripts/watch-unit-systemd.sh          # builds the debug binary
#   FIRMTIME=target/release/firmtime scripts/watch-unit-systemd.sh
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "watch-unit-systemd: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root"; exit 2; }
[ -x /lib/systemd/systemd ] || { say "needs systemd (/lib/systemd/systemd)"; exit 2; }
if [ "$(ps -p 1 -o comm=)" = systemd ]; then
  say "PID 1 is systemd here: install the unit (watch install) and use systemctl instead"
  exit 2
fi
if [ -z "${FIRMTIME:-}" ]; then
  cargo build -q -p firmtime
  FIRMTIME=${CARGO_TARGET_DIR:-$PWD/target}/debug/firmtime
fi

# Not under /tmp (the namespace gets a private one), nor a home (ProtectHome=).
W=$(mktemp -d /var/lib/firmtime-unit-test.XXXXXX)
CGROUPS=()
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
  for d in init.scope system.slice; do [ -d "$h$d" ] || CGROUPS+=("$h$d"); done
done
STATE_MADE=0
[ -e /var/lib/firmtime ] || STATE_MADE=1
SYSTEMD=""
cleanup() {
  [ -z "$SYSTEMD" ] || { kill -9 "$SYSTEMD" 2>/dev/null || true; }
  [ -z "${UNSHARE:-}" ] || wait "$UNSHARE" 2>/dev/null || true
  local c
  for c in "${CGROUPS[@]}"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  [ "$STATE_MADE" = 0 ] || rmdir /var/lib/firmtime 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

mkdir -p "$W/etc" "$W/db"
cp "$FIRMTIME" "$W/firmtime"
"$W/firmtime" watch install --unit "$W/etc/firmtime-watch.service" -- \
  --db "$W/db/watch.db" --cpu 0 --store-every 2s --explain on >/dev/null
mkdir "$W/etc/firmtime-watch.service.d"
cat >"$W/etc/firmtime-watch.service.d/test.conf" <<EOF
# Test only: start nothing else (no sysinit.target), log to a file (no journald here).
[Unit]
DefaultDependencies=no
[Service]
StandardOutput=append:$W/watch.log
StandardError=inherit
EOF
cat >"$W/boot.sh" <<EOF
set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /var/tmp
mount --bind $W/etc /etc/systemd/system
mount -t proc proc /proc
exec env -i container=firmtime-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  /lib/systemd/systemd --system --unit=firmtime-watch.service --log-target=console --show-status=no
EOF
unshare --pid --fork --mount --uts --net --cgroup bash "$W/boot.sh" >"$W/systemd.log" 2>&1 </dev/null &
UNSHARE=$!
for _ in $(seq 100); do
  SYSTEMD=$(ps -o pid= --ppid "$UNSHARE" | tr -d ' ' | head -n 1)
  [ -n "$SYSTEMD" ] && break
  sleep 0.1
done
[ -n "$SYSTEMD" ] || { say "systemd did not start"; cat "$W/systemd.log" >&2; exit 1; }
ctl() { nsenter -t "$SYSTEMD" -m -p -u -n systemctl "$@"; }
# Waits up to $2 s for $1 in watch's log.
logged() {
  local _
  for _ in $(seq $(($2 * 10))); do grep -qF "$1" "$W/watch.log" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

FAILED=0
check() { # WHAT CONDITION...
  local what=$1
  shift
  if "$@"; then echo "  ok      $what"; else echo "  FAILED  $what"; FAILED=1; fi
}
echo "the unit watch install wrote, under systemd $(/lib/systemd/systemd --version | sed -n '1s/systemd \([0-9]*\).*/\1/p') as PID 1 of its own namespaces:"
check "started: FIFO and locked memory" logged "fifo:80 priority 80, memory locked true" 30
check "started: the explaining trace runs" logged "the explaining trace runs" 5
check "an interval stored" logged "watch: interval 1 " 15
main=$(ps -o pid=,comm= --ppid "$SYSTEMD" | awk '$2 == "firmtime" { print $1 }' | head -n 1)
inside=$(ctl show -p MainPID --value firmtime-watch.service)
instances() { find /sys/kernel/tracing/instances -maxdepth 1 -name "firmtime-$inside-*" | sort; }
before=$(instances)
check "its tracefs instances exist (firmtime-$inside-…)" test -n "$before"
kill -9 "$main"
check "after kill -9: ExecStopPost= watch clean-trace removed them" logged "watch clean-trace: removed" 10
sleep 1
check "after kill -9: none of them left" test -z "$(instances)"
n=0
for _ in $(seq 300); do
  n=$(grep -c "storing into" "$W/watch.log" || true)
  [ "$n" -ge 2 ] && break
  sleep 0.1
done
check "restarted within 30 s (RestartSec=10)" test "$n" -ge 2
logged "watch: interval 0 " 15 || true
ctl stop firmtime-watch.service
check "systemctl stop: stopped by SIGTERM, the interval stored" logged "watch: stopped by SIGTERM;" 10
ends=$(python3 -c "import sqlite3, sys; print(' '.join(str(r[0]) for r in sqlite3.connect(sys.argv[1]).execute('select end_reason from runs order by id')))" "$W/db/watch.db")
check "runs: the killed one without an end, the stopped one 'stopped' ($ends)" test "$ends" = "None stopped"
echo "watch's log:"
sed 's/^/  | /' "$W/watch.log" | grep -v "over budget" | cut -c1-160
exit $FAILED
