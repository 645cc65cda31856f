#!/usr/bin/env bash
# Acceptance figure 2 (issue 7): ecasound on JACK (dummy backend, started
# here) runs firmtime_proxy in real time for DURATION seconds (default 60),
# fronting cmt's lpf on a local `firmtime net worker`. Prints the xruns
# JACK reported with the proxy beside the idle baseline: the same ecasound
# chain without the proxy, measured first. Needs ecasound, jackd2,
# libjack-jackd2-dev and gcc (the xrun counter is 30 lines of C built here).
# Env: DURATION=60 PERIOD=256 RATE=48000 WINDOW=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
DURATION=${DURATION:-60} PERIOD=${PERIOD:-256} RATE=${RATE:-48000} WINDOW=${WINDOW:-1}
cargo build --release --locked -p firmtime -p firmtime-plugin-proxy >&2
FT=$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/firmtime
TMP=$(mktemp -d)
export JACK_DEFAULT_SERVER=ftpx$$ JACK_NO_AUDIO_RESERVATION=1
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

cat > "$TMP/xruns.c" <<'C'
#include <jack/jack.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static volatile int xruns;
static int on_xrun(void *arg) { (void)arg; xruns++; return 0; }
int main(int argc, char **argv) {
  jack_client_t *c = jack_client_open("xruncount", JackNoStartServer, NULL);
  if (!c) { fprintf(stderr, "xruncount: no JACK server\n"); return 1; }
  jack_set_xrun_callback(c, on_xrun, NULL);
  jack_activate(c);
  sleep(atoi(argv[1]));
  printf("%d\n", xruns);
  jack_client_close(c);
  return 0;
}
C
gcc -O2 -o "$TMP/xruns" "$TMP/xruns.c" -ljack

mkdir -p "$TMP/lad"
cp "${CARGO_TARGET_DIR:-target}"/release/libfirmtime_proxy.so "$TMP/lad/firmtime_proxy.so"
head -c 32 /dev/urandom > "$TMP/key"
chmod 600 "$TMP/key"  # a key others can read draws a warning
PORT=$((20000 + $$ % 20000))
"$FT" net worker --listen "127.0.0.1:$PORT" --key "$TMP/key" --plugin-dir /usr/lib/ladspa \
  --priority fifo:70 2>"$TMP/worker.log" &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^ready' "$TMP/worker.log" && break; sleep 0.05; done
cat > "$TMP/proxy.toml" <<TOML
[[remote]]
worker = "127.0.0.1:$PORT"
key_file = "$TMP/key"
label = "lpf"
window = $WINDOW
TOML
export FIRMTIME_PROXY_CONFIG="$TMP/proxy.toml" FIRMTIME_PROXY_CACHE="$TMP/cache" LADSPA_PATH="$TMP/lad"

jackd -n "$JACK_DEFAULT_SERVER" -R -P 70 -d dummy -r "$RATE" -p "$PERIOD" >"$TMP/jackd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do jack_lsp >/dev/null 2>&1 && break; sleep 0.05; done

run() { # label, ecasound chain args… → xrun count during DURATION s
  local name=$1; shift
  ecasound -q -B:rt -f:f32_le,1,"$RATE" -i:tone,sine,440,0 "$@" -o:jack,system \
    >"$TMP/eca-$name.log" 2>&1 &
  local eca=$!
  sleep 1 # let ecasound connect before counting
  "$TMP/xruns" "$DURATION" >"$TMP/xr-$name"
  # Periods the worker processed for the live session (proves the audio went remote).
  "$FT" net stats --worker "127.0.0.1:$PORT" --key "$TMP/key" --json 2>/dev/null |
    sed -n 's/.*"periods": \([0-9]*\).*/\1/p' >"$TMP/periods-$name" || true
  kill "$eca" 2>/dev/null; wait "$eca" 2>/dev/null || true
  cat "$TMP/xr-$name"
}

idle=$(run idle)
proxy=$(run proxy -el:remote_lpf,1000)
grep -h firmtime_proxy "$TMP"/eca-*.log >&2 || true
sessions=$(grep -c "session from" "$TMP/worker.log" || true)
echo "ecasound + JACK dummy, ${PERIOD} frames @ ${RATE} Hz, ${DURATION} s each, proxy window ${WINDOW}"
echo "idle baseline (same chain, no proxy): ${idle} xruns"
echo "with firmtime_proxy (remote lpf):     ${proxy} xruns"
echo "worker: ${sessions} session(s) opened, $(cat "$TMP/periods-proxy") periods processed remotely" \
  "(${DURATION} s + 1 s at ${PERIOD} frames ≈ $(( (DURATION + 1) * RATE / PERIOD )))"
[ "$proxy" -le "$idle" ] && echo "verdict: no xruns beyond the idle baseline" && exit 0
echo "verdict: $((proxy - idle)) xruns beyond the idle baseline"
exit 1
