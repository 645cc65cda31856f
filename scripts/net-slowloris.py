#!/usr/bin/env python3
"""Slow unauthenticated peers against `firmtime net worker` (issue 20 §1).

Starts a keyed worker on loopback under `ulimit -n 1024` (systemd's
default), then holds PEERS (1,000) connections that each send one byte of a
greeting every 2 s: the client is written from docs/NET.md, not from the
crate. Prints the worker's file descriptors, threads and RSS before, while
and after they are held, and how long a master with the right key takes to
connect (`net stats`) and to run a 2 s `net bench` meanwhile. Two attackers:
one that holds its connections (closed ones stay closed) and one that
reconnects every connection the worker drops.

Usage: scripts/net-slowloris.py            (builds the release binary)
       FT=path/to/firmtime scripts/net-slowloris.py
       OLD_FT=path/to/older/firmtime ...   (the same figures for another binary)
       PEERS=1000 GRACE=10s ...
"""

import json
import os
import re
import resource
import select
import socket
import subprocess
import sys
import threading
import time

PEERS = int(os.environ.get("PEERS", "1000"))
GRACE = os.environ.get("GRACE", "10s")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def binary():
    if os.environ.get("FT"):
        return os.environ["FT"]
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "firmtime"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "firmtime")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def limit_fds():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


class Worker:
    def __init__(self, ft, key, extra):
        self.addr = f"127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [ft, "net", "worker", "--listen", self.addr, "--key", key,
             "--priority", "other", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=limit_fds)
        self.log = []
        for line in self.proc.stderr:
            self.log.append(line)
            if line.startswith("ready"):
                break
        else:
            raise SystemExit("the worker did not start:\n" + "".join(self.log))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def figures(self):
        pid = self.proc.pid
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        status = open(f"/proc/{pid}/status").read().splitlines()
        field = {l.split(":")[0]: l.split(":")[1].strip() for l in status if ":" in l}
        return fds, int(field["Threads"]), int(field["VmRSS"].split()[0]) / 1024

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Attacker:
    """PEERS connections, each sending one greeting byte every 2 s."""

    GREETING = b"firmtime-net-ctl 2 " + b"ab" * 32 + b"\n"

    def __init__(self, addr, reconnect):
        host, port = addr.rsplit(":", 1)
        self.target = (host, int(port))
        self.reconnect = reconnect
        self.socks = [self._open() for _ in range(PEERS)]
        self.sent = [0] * PEERS
        self.reopened = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(self.target)
        except BlockingIOError:
            pass
        return s

    def open_count(self):
        return sum(1 for s in self.socks if s is not None)

    def _run(self):
        while not self.stopping.is_set():
            for i, s in enumerate(self.socks):
                if s is None:
                    if not self.reconnect:
                        continue
                    s = self.socks[i] = self._open()
                    self.sent[i] = 0
                    self.reopened += 1
                r, _, _ = select.select([s], [], [], 0)
                closed = False
                if r:
                    try:
                        closed = s.recv(4096) == b""
                    except OSError:
                        closed = True
                if not closed:
                    try:
                        b = self.GREETING[self.sent[i] % len(self.GREETING):][:1]
                        s.send(b)
                        self.sent[i] += 1
                    except BlockingIOError:
                        pass
                    except OSError:
                        closed = True
                if closed:
                    s.close()
                    self.socks[i] = None
            self.stopping.wait(2.0)

    def stop(self):
        self.stopping.set()
        self.thread.join()
        for s in self.socks:
            if s is not None:
                s.close()


def master(ft, addr, key):
    """(seconds to connect and query stats or None, bench summary)"""
    t0 = time.monotonic()
    st = subprocess.run([ft, "net", "stats", "--worker", addr, "--key", key],
                        capture_output=True, text=True, timeout=60)
    stats_s = time.monotonic() - t0 if st.returncode == 0 else None
    t0 = time.monotonic()
    b = subprocess.run([ft, "net", "bench", "--workers", addr, "--key", key,
                        "--duration", "2s", "--period-frames", "128", "--window", "1",
                        "--work-mode", "none", "--priority", "other", "--no-explain",
                        "--json", "-"], capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t0
    try:
        j = json.loads(b.stdout)
        bench = f"ran in {wall:.2f} s: {j['periods']} periods, late {j['late_fraction'] * 100:.2f} %"
    except (ValueError, KeyError):
        err = (b.stderr.strip().splitlines() or ["?"])[-1]
        bench = f"FAILED after {wall:.2f} s (exit {b.returncode}): {err[:110]}"
    return stats_s, bench


def row(what, f):
    print(f"  {what:<44} fds {f[0]:>5}  threads {f[1]:>5}  RSS {f[2]:7.1f} MiB")


def run(ft, label, extra):
    key = f"/tmp/ft-slowloris-{os.getpid()}.key"
    with open(key, "wb") as k:
        k.write(os.urandom(32))
    print(f"{label}: {ft}")
    for reconnect in (False, True):
        w = Worker(ft, key, extra)
        kind = "reconnecting" if reconnect else "holding"
        print(f" attacker {kind} {PEERS} slow connections (1 byte / 2 s each), worker at ulimit -n 1024")
        row("before", w.figures())
        a = Attacker(w.addr, reconnect)
        time.sleep(3)
        row(f"while held ({a.open_count()} open on the attacker's side)", w.figures())
        stats_s, bench = master(ft, w.addr, key)
        print("  master `net stats` (connect, authenticate, query): "
              + (f"{stats_s * 1e3:.0f} ms" if stats_s is not None else "FAILED"))
        print(f"  master `net bench --duration 2s` meanwhile: {bench}")
        row(f"after the master ({a.open_count()} open, {a.reopened} reopened)", w.figures())
        a.stop()
        time.sleep(2)
        row("2 s after the attacker closed everything", w.figures())
        sums = [0, 0, 0]
        for line in w.log:
            m = re.match(r"dropped unauthenticated connections: (\d+) at .*?, (\d+) early .*?, "
                         r"(\d+) not the protocol", line)
            if m:
                sums = [a + int(b) for a, b in zip(sums, m.groups())]
        if any(sums):
            print(f"  worker log: dropped {sums[0]} at the deadline, {sums[1]} early, "
                  f"{sums[2]} not the protocol")
        w.stop()
    os.unlink(key)


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < PEERS + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, PEERS + 1024), hard))
    print(f"net-slowloris: {PEERS} peers, kernel {os.uname().release}, {os.cpu_count()} CPUs")
    run(binary(), "this tree", ["--login-grace", GRACE])
    if os.environ.get("OLD_FT"):
        run(os.environ["OLD_FT"], "OLD_FT", [])


if __name__ == "__main__":
    sys.exit(main())
