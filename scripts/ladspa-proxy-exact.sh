#!/usr/bin/env bash
# Acceptance figure 1 (issue 7): applyplugin with firmtime_proxy fronting a
# cmt/swh plugin on a worker in another network namespace produces the same
# samples as applyplugin with the plugin itself, shifted by the latency the
# proxy reports (window × applyplugin's 2048-frame first block), zeros
# before, to the last sample (the last block is short: issue 28). Needs root,
# applyplugin (ladspa-sdk), cmt and swh-plugins. Prints one line per case.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p firmtime -p firmtime-plugin-proxy >&2
FT=$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/firmtime
TMP=$(mktemp -d)
TAG=ftpx$$
M=${TAG}m W=${TAG}w
WPID=""
cleanup() {
  [ -n "$WPID" ] && kill "$WPID" 2>/dev/null && wait "$WPID" 2>/dev/null
  ip netns del "$M" 2>/dev/null; ip netns del "$W" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
mkdir -p "$TMP/lad"
cp "${CARGO_TARGET_DIR:-target}"/release/libfirmtime_proxy.so "$TMP/lad/firmtime_proxy.so"
head -c 32 /dev/urandom > "$TMP/key"
chmod 600 "$TMP/key"  # a key others can read draws a warning
for n in "$M" "$W"; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip -n "$M" link add eth0 type veth peer name eth0 netns "$W"
ip -n "$M" addr add 10.216.0.1/24 dev eth0; ip -n "$M" link set eth0 up
ip -n "$W" addr add 10.216.0.2/24 dev eth0; ip -n "$W" link set eth0 up
ip netns exec "$W" "$FT" net worker --listen 10.216.0.2:7700 --key "$TMP/key" \
  --plugin-dir /usr/lib/ladspa --priority other 2>"$TMP/worker.log" &
WPID=$!
for _ in $(seq 100); do grep -q '^ready' "$TMP/worker.log" && break; sleep 0.05; done

# 3 s + 123 frames of two sines, 16-bit mono (applyplugin's last block is short).
python3 - "$TMP/in.wav" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(48000)
w.writeframes(b"".join(struct.pack("<h", int(12000 * math.sin(i * 0.05) + 3000 * math.sin(i * 0.31)))
                       for i in range(48000 * 3 + 123)))
w.close()
PY

compare() { # direct proxied shift → "identical N/N" or "DIFFERENT"
  python3 - "$1" "$2" "$3" <<'PY'
import array, sys, wave
a = array.array("h", wave.open(sys.argv[1]).readframes(1 << 30))
b = array.array("h", wave.open(sys.argv[2]).readframes(1 << 30))
s = int(sys.argv[3]); n = len(a) - s
same = sum(1 for i in range(n) if a[i] == b[i + s])
lead = sum(1 for x in b[:s] if x != 0)
ok = same == n and lead == 0 and len(a) == len(b)
print(f"{'identical' if ok else 'DIFFERENT'} {same}/{n} samples, {lead} of the first {s} not 0")
PY
}

printf '%-22s %-6s %-8s %s\n' plugin window latency result
fail=0
for spec in "cmt.so lpf 1000" "cmt.so amp_mono 0.5" "butterworth_1902.so butthigh_iir 800 0.7"; do
  set -- $spec; lib=$1; label=$2; shift 2
  applyplugin "$TMP/in.wav" "$TMP/direct.wav" "/usr/lib/ladspa/$lib" "$label" "$@" >/dev/null
  for window in 0 1 2; do
    cat > "$TMP/proxy.toml" <<TOML
[[remote]]
worker = "10.216.0.2:7700"
key_file = "$TMP/key"
label = "$label"
window = $window
deadline_ms = 5000
TOML
    FIRMTIME_PROXY_CONFIG="$TMP/proxy.toml" FIRMTIME_PROXY_CACHE="$TMP/cache" LADSPA_PATH="$TMP/lad" \
      ip netns exec "$M" applyplugin "$TMP/in.wav" "$TMP/proxied.wav" "$TMP/lad/firmtime_proxy.so" \
      "remote_$label" "$@" >/dev/null
    lat=$((window * 2048))
    r=$(compare "$TMP/direct.wav" "$TMP/proxied.wav" "$lat")
    case "$r" in identical*) ;; *) fail=1 ;; esac
    printf '%-22s %-6s %-8s %s\n' "$label" "$window" "$lat" "$r"
  done
done
exit $fail
