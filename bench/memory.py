#!/usr/bin/env python3
"""Memory a client can make the broker hold, and whether it comes back (issue 12, item 3).

Starts an osprey binary on free ports with a scratch data directory and runs the
workloads a stress test used, sampling the broker's RSS (VmRSS) before, at the peak
(every 50 ms while the load runs) and 30 s after the load ends:

- frames:  30 connections each declare a 64 MiB request and send 8 MiB of it, then stall;
- fetches: one connection pipelines 30 Fetch requests (30 MiB each) and reads nothing;
- wide:    a Fetch v4 over 3,000 partitions asking for at most 1 MiB in total.

Usage: bench/memory.py --bin target/release/osprey [--after-s 30] [--out FILE.md]
Prints a markdown table (and writes it to --out).
"""

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "compat-tests" / "python"))
import kafkawire as kw  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sampler:
    """The peak RSS while a workload runs."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, rss_mib(self.pid))


def create_topic(port, name, partitions):
    """CreateTopics through Metadata auto-creation is not enough for 3,000 partitions:
    use the admin client from the compat venv if present, else a raw CreateTopics v2."""
    body = struct.pack(">i", 1) + kw.string16(name) + struct.pack(">ih", partitions, 1)
    body += struct.pack(">i", 0) + struct.pack(">i", 0)  # no assignments, no configs
    body += struct.pack(">ib", 60000, 0)  # timeout, validate_only
    with kw.Conn("127.0.0.1", port, timeout=120) as c:
        c.roundtrip(kw.request(19, 2, 1, body))


def fill(port, topic, partition, mib):
    """Appends `mib` batches of 900 KiB to one partition (acks=1)."""
    value = os.urandom(900 << 10)  # under message.max.bytes (1 MiB)
    batch = kw.record_batch([(None, value)])
    with kw.Conn("127.0.0.1", port, timeout=60) as c:
        for i in range(mib):
            c.send(kw.produce_v3(i, topic, partition, batch, acks=1))
        for _ in range(mib):
            c.recv_frame()


def frames(port):
    conns = []
    for _ in range(30):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        conns.append(s)
    chunk = b"\0" * (1 << 20)
    for s in conns:
        s.setblocking(True)
        s.settimeout(0.5)
        s.sendall(struct.pack(">i", 64 << 20))
    # 8 MiB each, as far as the broker reads them (a paused connection fills the socket
    # buffers and then blocks the sender; give up on that connection then).
    for s in conns:
        try:
            for _ in range(8):
                s.sendall(chunk)
        except (socket.timeout, BlockingIOError):
            pass
    time.sleep(2)
    return conns


def fetches(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(1)
    for i in range(30):
        s.sendall(kw.fetch_v4(i, "mem-fill", 0, 0, max_bytes=30 << 20, max_wait_ms=0))
    time.sleep(3)
    return [s]


def wide(port):
    body = struct.pack(">iiiib", -1, 0, 1, 1 << 20, 0)
    body += struct.pack(">i", 1) + kw.string16("mem-wide")
    body += struct.pack(">i", 3000)
    for p in range(3000):
        body += struct.pack(">iqi", p, 0, 1 << 20)
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(60)
    s.sendall(kw.request(1, 4, 7, body))
    head = b""
    while len(head) < 4:
        head += s.recv(4 - len(head))
    size = left = struct.unpack(">i", head)[0]
    while left:
        left -= len(s.recv(min(left, 1 << 20)))
    return [s], size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--after-s", type=float, default=30)
    ap.add_argument("--out")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="osprey-memory-"))
    port, metrics = free_port(), free_port()
    log = open(work / "broker.log", "w")
    broker = subprocess.Popen(
        [args.bin, "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override",
         f"log.dirs={work / 'data'}", "--override", f"metrics.listener=127.0.0.1:{metrics}"],
        stdout=log, stderr=subprocess.STDOUT)
    rows = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with kw.Conn("127.0.0.1", port, timeout=2) as c:
                    c.roundtrip(kw.api_versions_v0(1))
                break
            except OSError:
                assert time.monotonic() < deadline, "broker did not start"
                time.sleep(0.1)
        create_topic(port, "mem-fill", 1)
        create_topic(port, "mem-wide", 3000)
        fill(port, "mem-fill", 0, 40)
        for p in range(0, 3000, 20):
            fill(port, "mem-wide", p, 1)
        for name, workload in [("frames", frames), ("fetches", fetches), ("wide", wide)]:
            time.sleep(1)
            before = rss_mib(broker.pid)
            note = ""
            with Sampler(broker.pid) as sampler:
                out = workload(port)
                if name == "wide":
                    out, size = out
                    note = f"response {size / (1 << 20):.2f} MiB"
            for s in out:
                s.close()
            time.sleep(args.after_s)
            rows.append((name, before, sampler.peak, rss_mib(broker.pid), note))
    finally:
        broker.terminate()
        try:
            broker.wait(timeout=120)
        except subprocess.TimeoutExpired:
            print("broker did not stop within 120 s of SIGTERM; killed", file=sys.stderr)
            broker.kill()
            broker.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    table = ["| workload | RSS before MiB | peak MiB | %gs after MiB | note |" % args.after_s, "|---|---|---|---|---|"]
    table += [f"| {n} | {b:.0f} | {p:.0f} | {a:.0f} | {note} |" for n, b, p, a, note in rows]
    text = "\n".join(table) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
