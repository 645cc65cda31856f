#!/usr/bin/env bash
# Network namespaces for firmtime-net benchmarks: a master namespace with a
# bridge, N worker namespaces joined to it by veth pairs, addresses in
# 10.213.0.0/24 (only inside these namespaces), one `firmtime net worker`
# per worker namespace. Source it; call ns_up N; ns_down runs on EXIT.
# Needs root. Names carry the shell's PID, so runs never collide.

FT=${FT:-${CARGO_TARGET_DIR:-$(dirname "$0")/../target}/release/firmtime}
NS_TAG=${NS_TAG:-ft$$}
NS_MASTER="${NS_TAG}m"
NS_PORT=${NS_PORT:-7700}
NS_WORKERS=()
NS_PIDS=()

ns_addr() { echo "10.213.0.$((10 + $1))"; }

ns_down() {
    local p n
    for p in "${NS_PIDS[@]}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    NS_PIDS=()
    for n in "${NS_WORKERS[@]}" "$NS_MASTER"; do
        ip netns del "$n" 2>/dev/null
    done
    NS_WORKERS=()
}

# ns_start_worker I: (re)starts the worker in namespace I; prints nothing.
ns_start_worker() {
    local i=$1 open=()
    # Keyless only on the namespaces' private bridge, which nothing else reaches.
    [ -n "${NS_KEY:-}" ] || open=(--insecure-no-key)
    ip netns exec "${NS_WORKERS[$i]}" "$FT" net worker --listen "0.0.0.0:$NS_PORT" \
        ${NS_KEY:+--key "$NS_KEY"} "${open[@]}" 2>>"${NS_LOG:-/dev/null}" &
    NS_PIDS[$i]=$!
}

ns_wait_worker() {
    local i=$1 t
    for t in $(seq 100); do
        ip netns exec "$NS_MASTER" "$FT" net stats --worker "$(ns_addr "$i"):$NS_PORT" \
            ${NS_KEY:+--key "$NS_KEY"} >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "worker $i did not come up" >&2
    return 1
}

ns_up() {
    local n=$1 i w
    ns_down
    ip netns add "$NS_MASTER"
    ip -n "$NS_MASTER" link set lo up
    ip -n "$NS_MASTER" link add br0 type bridge
    ip -n "$NS_MASTER" addr add 10.213.0.1/24 brd + dev br0
    ip -n "$NS_MASTER" link set br0 up
    for ((i = 0; i < n; i++)); do
        w="${NS_TAG}w$i"
        NS_WORKERS[$i]=$w
        ip netns add "$w"
        ip -n "$w" link set lo up
        ip -n "$NS_MASTER" link add "v$i" type veth peer name eth0 netns "$w"
        ip -n "$NS_MASTER" link set "v$i" master br0 up
        ip -n "$w" addr add "$(ns_addr "$i")/24" brd + dev eth0
        ip -n "$w" link set eth0 up
        ns_start_worker "$i"
    done
    for ((i = 0; i < n; i++)); do ns_wait_worker "$i" || return 1; done
}

# ns_workers N: "A:P,B:P,…" for the first N workers.
ns_workers() {
    local i out=""
    for ((i = 0; i < $1; i++)); do out+="${out:+,}$(ns_addr "$i"):$NS_PORT"; done
    echo "$out"
}

# ns_bench ARGS…: firmtime net bench in the master namespace.
ns_bench() { ip netns exec "$NS_MASTER" "$FT" net bench "$@"; }

trap ns_down EXIT
