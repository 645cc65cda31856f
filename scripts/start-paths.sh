#!/usr/bin/env bash
# Tries the three paths of docs/START.md end to end, without hardware: the
# behavioural scientist's (a tapping session on a dummy JACK server with
# jack_midiseq as the keyboard, the trial files, the analysis in firmtime,
# pandas and R), the audio engineer's (a local worker, the proxy in ecasound
# on files and live on a dummy JACK server) and the real-time engineer's
# (`firmtime lab cyclic` beside cyclictest, then `lab all --quick`).
#
# The commands are not copied here: they are the code blocks START.md marks
# with `<!-- try: PATH [KIND] -->` (its source says how they are run), so
# the page and this script cannot drift apart. After each path the script
# checks what it wrote and prints one summary line per path.
#
# Usage: scripts/start-paths.sh [scientist] [engineer] [rt]   (default: all three)
#        QUICK=1       leave out `firmtime lab all --quick` (about 3 minutes)
#        DEBUG=1       use the debug build instead of the release build
#        INSTALL=1     apt-get install what is missing (python3-pandas and
#                      r-base-core included) instead of skipping
#        KEEP=1        keep the scratch directory (printed at the end)
#        scripts/start-paths.sh --emit PATH [KIND]   print the bash script
#                      (sh blocks) or the block (pandas, R) a path runs, with
#                      the substitutions taken from START_JACK_SERVER,
#                      START_ADDR and START_LADSPA_DIR (crates/cli/tests/start.rs
#                      uses this)
# Needs: jackd2 (jackd, jack_wait, jack_lsp, jack_midiseq), jq, python3 and
# iproute2 (ss) for every path; ecasound and cmt for the engineer's;
# rt-tests (cyclictest) for the real-time engineer's; root or an rtprio
# limit (docs/RT-SETUP.md). scripts/setup.sh installs all of these.
# Optional: python3-pandas and r-base-core for the analysis snippets.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DOC=$ROOT/docs/START.md

# The blocks of START.md tagged `try: PATH KIND` (KIND "" = the sh blocks),
# in document order. A tag must be the line right before the opening fence.
blocks() {
  awk -v want_path="$1" -v want_kind="$2" '
    inblock && /^```[ \t]*$/ { inblock = 0; next }
    inblock { print; next }
    pending && /^```/ { inblock = 1; pending = 0; next }
    /^<!-- try: / {
      n = split($0, w, " ")
      pending = (w[3] == want_path && (n >= 5 ? w[4] : "") == want_kind)
      next
    }
    { pending = 0 }
  ' "$DOC"
}

# What runs before a path's sh blocks: strict mode, background jobs killed
# at the end, and the waits for programs started in the background.
PREAMBLE=$(cat <<'SH'
set -euo pipefail
# Last started, first stopped: a JACK client goes before its server, so the
# server can clean up after it.
trap 'for p in $(jobs -p | tac); do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; sleep 0.2; done' EXIT
__wait_tcp() { # HOST:PORT: until something listens there (10 s)
  local i
  for i in $(seq 100); do
    [ -n "$(ss -Hltn "sport = :${1##*:}" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  echo "start-paths: nothing listens on $1 after 10 s" >&2
  return 1
}
__wait_jack_port() { # CLIENT:PORT: until the JACK port exists (10 s)
  local i
  for i in $(seq 100); do
    jack_lsp 2>/dev/null | grep -qxF "$1" && return 0
    sleep 0.1
  done
  echo "start-paths: JACK port $1 missing after 10 s" >&2
  return 1
}
SH
)

# The bash script of PATH's sh blocks: the three substitutions, and a wait
# after each line that starts a program in the background.
emit_sh() {
  local line code eof="" worker_re='net worker .*--listen ([^ ]+)' seq_re='^jack_midiseq ([^ ]+)'
  local listen_re='(--metrics-listen |--web\.listen-address=)([^ ]+)'
  local heredoc_re="<<-?'?([A-Za-z_]+)"
  printf '%s\n# --- docs/START.md, try: %s\n' "$PREAMBLE" "$1"
  blocks "$1" "" |
    sed -e "s/firmtime-try/${START_JACK_SERVER:-firmtime-try}/g" \
      -e "s/127\.0\.0\.1:7700/${START_ADDR:-127.0.0.1:7700}/g" \
      -e "s/127\.0\.0\.1:9090/${START_PROM_ADDR:-127.0.0.1:9090}/g" \
      -e "s#/usr/local/lib/ladspa#${START_LADSPA_DIR:-/usr/local/lib/ladspa}#g" |
    while IFS= read -r line; do
      printf '%s\n' "$line"
      if [ -n "$eof" ]; then
        [ "$line" = "$eof" ] && eof=""
        continue
      fi
      if [[ $line =~ $heredoc_re ]]; then
        eof=${BASH_REMATCH[1]}
        continue
      fi
      code=${line%%#*}
      code=${code%"${code##*[![:space:]]}"}
      if [[ $code == *'&' && $code != *'&&' ]]; then
        if [[ $code =~ $worker_re ]]; then
          echo "__wait_tcp ${BASH_REMATCH[1]}"
        elif [[ $code =~ $listen_re ]]; then
          echo "__wait_tcp ${BASH_REMATCH[2]}"
        elif [[ $code =~ $seq_re ]]; then
          echo "__wait_jack_port ${BASH_REMATCH[1]}:out"
        else
          echo "sleep 1"
        fi
      fi
    done
}

if [ "${1:-}" = --emit ]; then
  [ $# -ge 2 ] || { echo "usage: $0 --emit PATH [KIND]" >&2; exit 2; }
  if [ -z "${3:-}" ]; then emit_sh "$2"; else blocks "$2" "$3"; fi
  exit 0
fi

PATHS=("$@")
[ ${#PATHS[@]} -gt 0 ] || PATHS=(scientist engineer rt fleet)
for p in "${PATHS[@]}"; do
  case $p in scientist | engineer | rt | fleet) ;; *) echo "unknown path '$p': scientist, engineer, rt or fleet" >&2; exit 2 ;; esac
done

say() { echo "start-paths: $*" >&2; }
SUMMARY=()
FAILED=0
result() { SUMMARY+=("$(printf '%-10s %s' "$1" "$2")"); }

# Debian package of each program a path needs.
declare -A PACKAGE=(
  [jackd]=jackd2 [jack_wait]=jackd2 [jack_lsp]=jackd2 [jack_midiseq]=jackd2 [jq]=jq
  [python3]=python3 [ss]=iproute2 [ecasound]=ecasound [sox]=sox [cyclictest]=rt-tests
  [prometheus]=prometheus [promtool]=prometheus [curl]=curl [systemd-analyze]=systemd
)
# Prints the packages missing for programs "$@" (installs them with INSTALL=1).
missing_packages() {
  local prog missing=()
  for prog in "$@"; do
    command -v "$prog" >/dev/null || missing+=("${PACKAGE[$prog]}")
  done
  if [ ${#missing[@]} -gt 0 ] && [ "${INSTALL:-0}" = 1 ]; then
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || true
    missing=()
    for prog in "$@"; do command -v "$prog" >/dev/null || missing+=("${PACKAGE[$prog]}"); done
  fi
  [ ${#missing[@]} -eq 0 ] || printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' '
}

command -v python3 >/dev/null || { say "needs python3 (apt-get install python3)"; exit 2; }
export PATH="$HOME/.cargo/bin:$PATH"
PROFILE=release
[ "${DEBUG:-0}" = 1 ] && PROFILE=debug
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
say "building firmtime and firmtime_proxy.so ($PROFILE)"
if [ "$PROFILE" = release ]; then
  cargo build --release --locked -q -p firmtime -p firmtime-plugin-proxy
else
  cargo build --locked -q -p firmtime -p firmtime-plugin-proxy
fi
BIN=$TARGET/$PROFILE
export PATH="$BIN:$PATH"

SCRATCH=$(mktemp -d -t firmtime-start.XXXXXX)
cleanup() { if [ "${KEEP:-0}" = 1 ] || [ "$FAILED" = 1 ]; then say "kept $SCRATCH"; else rm -rf "$SCRATCH"; fi; }
trap cleanup EXIT
mkdir -p "$SCRATCH/ladspa"
cp "$BIN/libfirmtime_proxy.so" "$SCRATCH/ladspa/firmtime_proxy.so"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

PRIVILEGED=$(firmtime doctor --json - | python3 -c '
import json, sys
c = {x["id"]: x["status"] for x in json.load(sys.stdin)["checks"]}
print("yes" if c.get("rtprio_limit") == "pass" else "no")')

# Runs PATH's sh blocks in a fresh directory $SCRATCH/PATH; 0 on success.
run_path() {
  local dir=$SCRATCH/$1
  mkdir -p "$dir"
  ln -s "$ROOT/examples" "$dir/examples"
  ln -s "$ROOT/contrib" "$dir/contrib"
  START_JACK_SERVER=firmtime-try-$$-$1 START_ADDR=127.0.0.1:$(free_port) \
    START_PROM_ADDR=127.0.0.1:$(free_port) START_LADSPA_DIR=$SCRATCH/ladspa emit_sh "$1" >"$dir/run.sh"
  say "$1: running docs/START.md's blocks (log: $dir/run.log)"
  if (cd "$dir" && FIRMTIME_PROXY_CACHE=$dir/proxy-cache JACK_NO_AUDIO_RESERVATION=1 \
    bash run.sh >run.log 2>&1); then
    return 0
  fi
  if grep -qs "Too many servers already active" "$dir/jackd.log"; then
    return 2 # other jobs run as many JACK servers as JACK allows
  fi
  say "$1: failed; the end of its log:"
  tail -n 30 "$dir/run.log" >&2
  return 1
}
JACK_FULL="skipped: jackd: too many JACK servers already active on this machine (other jobs'); try again later"

# Checks the scientist's trial with Python's csv module; prints a summary.
check_trial() {
  python3 - "$1" "$ROOT/docs/TAP.md" <<'PY'
import csv, json, sys
d, tap_md = sys.argv[1], open(sys.argv[2]).read()
documented = "kind,index,intended_us,actual_us,channel,note,velocity,on"
assert documented in tap_md, "TAP.md no longer documents the CSV header " + documented
with open(d + "/data/TRY-s01-t001.csv", newline="") as f:
    rows = list(csv.reader(f))
assert ",".join(rows[0]) == documented, f"header {rows[0]}"
ev = [dict(zip(rows[0], r)) for r in rows[1:]]
assert all(len(r) == len(rows[0]) for r in rows), "ragged rows"
taps = [e for e in ev if e["kind"] == "input" and e["on"] == "1"]
beats = [e for e in ev if e["kind"] == "metronome" and e["on"] == "1"]
assert len(taps) == 42, f"{len(taps)} taps, the experiment ends at 42"
assert len(beats) == 12, f"{len(beats)} beats, the metronome stops after 12"
assert [e["index"] for e in ev if e["kind"] == "end"] == ["0"], "ended by its end condition"
side = json.load(open(d + "/data/TRY-s01-t001.json"))
sc = side["self_checks"]
assert side["events"] == len(ev) and side["incomplete"] is False
assert sc["input_overruns"] == 0 and sc["events_dropped"] == 0, sc
summary = list(csv.DictReader(open(d + "/analysis/summary.csv")))
phases = {r["phase"]: int(r["taps"]) for r in summary}
# A tapper in the second half of each beat interval counts as early for the
# next beat: its first beat is missing and its 12th tap is continuation.
assert phases in ({"synchronization": 12, "continuation": 30},
                  {"synchronization": 11, "continuation": 31}), phases
print(f"CSV ok ({len(ev)} rows: {len(taps)} taps, {len(beats)} beats); "
      f"xruns {sc['xruns']}, late outputs {sc['late_outputs']}, loop max {sc['output_interval_max_us']} us")
PY
}

# Sets PANDAS_PY to a python3 that has pandas (Debian's python3-pandas is
# for /usr/bin/python3, which may not be the first python3 on PATH).
pandas_python() {
  for PANDAS_PY in python3 /usr/bin/python3; do
    "$PANDAS_PY" -c 'import pandas' 2>/dev/null && return 0
  done
  return 1
}

# Runs the pandas or R block on the dry run's trial; prints its output.
run_snippet() { # KIND DIR
  local kind=$1 dir=$2 out
  blocks scientist "$kind" >"$dir/snippet.$kind"
  if [ "$kind" = pandas ]; then
    out=$(cd "$dir" && "$PANDAS_PY" "snippet.$kind" 2>&1) || { echo "FAILED: $out"; return 1; }
  else
    out=$(cd "$dir" && Rscript "snippet.$kind" 2>&1) || { echo "FAILED: $out"; return 1; }
  fi
  grep -q '^42 taps' <<<"$out" || { echo "FAILED: $out"; return 1; }
  echo "$out" | tr '\n' ';' | sed 's/;$//; s/;/; /g'
}

scientist() {
  local need dir=$SCRATCH/scientist line
  need=$(missing_packages jackd jack_wait jack_lsp jack_midiseq jq python3 ss sox ecasound)
  [ -z "$need" ] || { result scientist "skipped: install $need"; return; }
  [ "$PRIVILEGED" = yes ] || { result scientist "skipped: tap run needs real-time privileges (root or rtprio: docs/RT-SETUP.md)"; return; }
  local rc=0
  run_path scientist || rc=$?
  [ $rc -ne 2 ] || { result scientist "$JACK_FULL"; return; }
  [ $rc -eq 0 ] || { result scientist "FAILED (tapping session)"; FAILED=1; return; }
  line=$(check_trial "$dir") || { result scientist "FAILED: $line"; FAILED=1; return; }
  result scientist "ok: $line"
  if pandas_python || { [ "${INSTALL:-0}" = 1 ] && apt-get install -y -qq python3-pandas >&2 && pandas_python; }; then
    line=$(run_snippet pandas "$dir") || FAILED=1
    result "  pandas" "$line"
  else
    result "  pandas" "skipped: install python3-pandas (apt-get install python3-pandas, or INSTALL=1)"
  fi
  if command -v Rscript >/dev/null || { [ "${INSTALL:-0}" = 1 ] && apt-get install -y -qq --no-install-recommends r-base-core >&2; }; then
    line=$(run_snippet R "$dir") || FAILED=1
    result "  R" "$line"
  else
    result "  R" "skipped: install r-base-core (apt-get install r-base-core, or INSTALL=1)"
  fi
}

engineer() {
  local need dir=$SCRATCH/engineer line
  need=$(missing_packages jackd jack_wait ecasound python3 ss)
  [ -z "$need" ] || { result engineer "skipped: install $need"; return; }
  [ -e /usr/lib/ladspa/cmt.so ] || { result engineer "skipped: install cmt (the lpf plugin)"; return; }
  local rc=0
  run_path engineer || rc=$?
  [ $rc -ne 2 ] || { result engineer "$JACK_FULL"; return; }
  [ $rc -eq 0 ] || { result engineer "FAILED (remote plugin)"; FAILED=1; return; }
  line=$(python3 - "$dir" <<'PY'
import array, json, re, sys, wave
d = sys.argv[1]
def samples(name):
    w = wave.open(f"{d}/{name}")
    return array.array("h", w.readframes(w.getnframes()))
x, y, local = samples("in.wav"), samples("out.wav"), samples("local.wav")
block = 1024  # ecasound's block on files; window = 1 delays by one block
assert len(y) == len(x) == len(local), (len(x), len(y), len(local))
assert y[:block] == x[:block], "the first block is the dry input"
assert y[block:] == local[:-block], "out.wav is local.wav one block later"
log = open(f"{d}/worker.log").read()
sessions = len(re.findall(r"^session from .*blocks$", log, re.M))
assert sessions >= 2, log
stats = json.loads(re.search(r"\{[^{}]*\"datagrams\".*?\n\}", open(f"{d}/run.log").read(), re.S).group(0))
assert stats["sessions"] == 1 and stats["periods"] > 0, stats
print(f"ecasound on files: out.wav = local lpf one block later, bit-exact ({len(y)} samples); "
      f"live on JACK: {stats['periods']} periods processed remotely while ecasound played, drops {stats['drops'] or 0}; {sessions} sessions")
PY
) || { result engineer "FAILED: $line"; FAILED=1; return; }
  result engineer "ok: $line"
}

rt() {
  local need dir=$SCRATCH/rt line
  need=$(missing_packages cyclictest python3 ss)
  [ -z "$need" ] || { result rt "skipped: install $need"; return; }
  [ "$PRIVILEGED" = yes ] || { result rt "skipped: SCHED_FIFO needs root or rtprio (docs/RT-SETUP.md)"; return; }
  [ "$(nproc)" -ge 2 ] || { result rt "skipped: START.md pins to CPU 1; this machine has one CPU"; return; }
  local rc=0
  run_path rt || rc=$?
  [ $rc -ne 2 ] || { result rt "$JACK_FULL"; return; }
  [ $rc -eq 0 ] || { result rt "FAILED (lab cyclic beside cyclictest)"; FAILED=1; return; }
  line=$(python3 - "$dir" <<'PY'
import json, math, sys
d = sys.argv[1]
def pcts(path):
    t = json.load(open(path))["thread"]["0"]
    hist = sorted((int(k), v) for k, v in t["histogram"].items())
    n, out = t["cycles"], []
    for p in (0.5, 0.99):
        rank, seen = max(1, math.ceil(p * n - 1e-9)), 0
        for us, c in hist:
            seen += c
            if seen >= rank:
                out.append(us)
                break
        else:
            out.append(">999")  # beyond the 1000 buckets of -h 1000
    return n, out
ft = json.load(open(f"{d}/ft.json"))
t = ft["result"]["threads"][0]
assert ft["kind"] == "lab-cyclic" and t["status"] == "measured", ft["kind"]
assert t["ticks"] + t["missed"] == 5000, (t["ticks"], t["missed"])
fn, (f50, f99) = pcts(f"{d}/ft.rt.json")
cn, (c50, c99) = pcts(f"{d}/ct.rt.json")
assert open(f"{d}/ft.hist").read().startswith("# Histogram") and "# Max Latencies" in open(f"{d}/ct.hist").read()
print(f"lab cyclic {fn} wake-ups p50 {f50} us p99 {f99} us, {t['missed']} missed; "
      f"cyclictest {cn} p50 {c50} us p99 {c99} us")
PY
) || { result rt "FAILED: $line"; FAILED=1; return; }
  result rt "ok: $line"
  if [ "${QUICK:-0}" = 1 ]; then
    result "  lab all" "left out (QUICK=1)"
    return
  fi
  say "rt: firmtime lab all --quick (under 3 minutes)"
  line=""
  if (cd "$dir" && bash -c "set -e; $(blocks rt slow)" >lab-all.log 2>&1) && [ -f "$dir/report/report.md" ]; then
    line=$(grep -m1 -E '^(Yes|Not reliably)' "$dir/lab-all.log" || true)
  fi
  if [ -n "$line" ] && grep -q '^## Verdict' "$dir/report/report.md" 2>/dev/null; then
    result "  lab all" "ok: ${line:0:160}"
  else
    tail -n 20 "$dir/lab-all.log" >&2
    result "  lab all" "FAILED (see above)"
    FAILED=1
  fi
}

fleet() {
  local need dir=$SCRATCH/fleet line
  need=$(missing_packages prometheus promtool curl jq systemd-analyze python3 ss)
  [ -z "$need" ] || { result fleet "skipped: install $need"; return; }
  [ "$PRIVILEGED" = yes ] || { result fleet "skipped: watch needs real-time privileges (root or rtprio: docs/RT-SETUP.md)"; return; }
  local rc=0
  run_path fleet || rc=$?
  [ $rc -eq 0 ] || { result fleet "FAILED (watch, the unit, Prometheus)"; FAILED=1; return; }
  line=$(python3 - "$dir" "$ROOT" <<'PY'
import json, re, sys
d, root = sys.argv[1], sys.argv[2]
log = open(f"{d}/run.log").read()
rep = json.load(open(f"{d}/watch-report/report.json"))
# 8 s of 10 ms wake-ups on CPU 0, in 2 s intervals: every deadline is a wake-up or a miss.
assert rep["count"] + rep["missed"] == 800, (rep["count"], rep["missed"])
assert re.search(r"^(fine|NOT fine): .*8s of the last 1h watched on CPU 0$", log, re.M), "watch check's line"
unit = open(f"{d}/firmtime-watch.service").read()
assert "\nExecStart=/usr/local/bin/firmtime watch --db /var/lib/firmtime/watch.db --metrics-listen 0.0.0.0:9807\n" in unit, unit
m = re.search(r"Overall exposure level for firmtime-watch\.service: ([0-9.]+)", log)
assert m and float(m.group(1)) <= 4.0, "exposure"
w = json.load(open(f"{d}/wakeups.json"))["data"]["result"]
assert len(w) == 1 and w[0]["metric"]["job"] == "firmtime-watch" and float(w[0]["value"][1]) > 0, w
rules = open(f"{root}/contrib/prometheus/firmtime-watch.rules.yml").read()
alerts = re.findall(r"^\s*- alert: (\S+)", rules, re.M)
listed = re.findall(r"^(Firmtime\w+): (\w+)$", log, re.M)
assert sorted(a for a, _ in listed) == sorted(alerts), (listed, alerts)
title = json.load(open(f"{root}/contrib/grafana/firmtime-watch.json"))["title"]
assert f"\n{title}\n" in log, title
print(f"watch {rep['count']} wake-ups, {rep['missed']} missed; unit exposure {m.group(1)}; "
      f"Prometheus scraped {w[0]['value'][1]} wake-ups; alerts loaded: {', '.join(a for a, _ in listed)}")
PY
) || { result fleet "FAILED: $line"; FAILED=1; return; }
  result fleet "ok: $line"
}

for p in "${PATHS[@]}"; do "$p"; done
echo "docs/START.md paths, tried without hardware ($(uname -r), $(nproc) CPUs, $PROFILE build):"
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED
