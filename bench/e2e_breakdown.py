#!/usr/bin/env python3
"""Where Kafka's EndToEndLatency spends its time, broker by broker (issue 21).

Started by bench/e2e_breakdown.sh (release build, Kafka and the venv as bench/run.sh,
tcpdump installed if missing). The full run's workload (bench/bench.py: EndToEndLatency,
acks=all, 1 KiB records, one in flight, 1-partition topic) runs against each broker while
tcpdump records loopback's packets to and from the broker's port (headers only). The tool
sends a record, waits for its acknowledgement, polls until the consumer has it, and
sends the next; from the packets, each iteration splits into:

- the broker's part: the time covered by the Produce request until its acknowledgement
  (append, and at osprey's default the fsync) and by the consumer's Fetch, from the
  moment the broker has both it and the record, until the response that carries the
  record (high watermark, wake-up of the waiting fetch, read, send); where the two
  overlap, once;
- the consumer's lateness: how long after the Produce request the consumer's Fetch
  request arrived (the Java consumer sends its next fetch from the poll() that follows
  the acknowledgement, so it is almost always late);
- the client's part: the cycle (one Produce request to the next) less the broker's part.

Each percentile is taken per run over its iterations, then the median over the rounds.
Kafka's broker and osprey (default, and like Kafka: no fsync) alternate on fresh data
directories, as in bench/bench.py, whose broker classes and tool wrappers this reuses.

Results: OUT/E2E-BREAKDOWN.md and OUT/e2e-breakdown.json.

Usage: e2e_breakdown.py --kafka-lib DIR --osprey-bin PATH --workdir DIR --out DIR
                        [--variants kafka,osprey,osprey-nofsync] [--rounds 3]
                        [--messages 5000] [--note TEXT]
"""
import argparse
import datetime
import json
import re
import selectors
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time
import types
from pathlib import Path

import bench

PRODUCE, FETCH = 0, 1
PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p99.9", 0.999))


def segments(pcap, broker_port):
    """[(time, to_broker, client_port, real payload length, first payload bytes)] for the
    TCP segments with a payload; tcpdump's snap length keeps only the first bytes."""
    data = pcap.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    nano = magic in (0xA1B23C4D, 0x4D3CB2A1)
    link = struct.unpack(endian + "I", data[20:24])[0]
    link_header = {1: 14, 113: 16, 276: 20}.get(link, 0)
    out = []
    off = 24
    while off + 16 <= len(data):
        sec, frac, captured, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        if off + 16 + captured > len(data):
            break  # a packet tcpdump is still writing
        ip = data[off + 16 + link_header:off + 16 + captured]
        off += 16 + captured
        if len(ip) < 20 or ip[0] >> 4 != 4:
            continue
        ihl = (ip[0] & 0xF) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:]
        sport, dport = struct.unpack(">HH", tcp[:4])
        data_offset = (tcp[12] >> 4) * 4
        length = total - ihl - data_offset
        if length <= 0:
            continue
        t = sec + frac / (1e9 if nano else 1e6)
        head = tcp[data_offset:data_offset + 8]
        if dport == broker_port:
            out.append((t, True, sport, length, head))
        elif sport == broker_port:
            out.append((t, False, dport, length, head))
    return out


def api_key(head):
    """The request's API key, when a request frame starts the segment (each of these small
    requests is one segment on loopback)."""
    return struct.unpack(">h", head[4:6])[0] if len(head) >= 6 else None


def iterations(packets):
    """Per iteration (ms): (the broker's part, its Produce acknowledgement, its Fetch
    answer, the consumer's lateness, the cycle)."""
    keys = {}
    for _, to_broker, port, _, head in packets:
        if to_broker:
            keys.setdefault(port, set()).add(api_key(head))
    producers = [port for port, k in keys.items() if PRODUCE in k]
    fetchers = {port for port, k in keys.items() if FETCH in k}
    if len(producers) != 1 or not fetchers:
        raise bench.BenchError(f"expected one producing connection and a fetching one: {keys}")
    produces = [t for t, to_broker, port, _, head in packets
                if port == producers[0] and to_broker and api_key(head) == PRODUCE]
    acks = [t for t, to_broker, port, _, _ in packets if port == producers[0] and not to_broker]
    # Fetch responses that carry a record (more bytes than one 1 KiB record), each with
    # the last Fetch request sent on its connection before it.
    deliveries, last_fetch = [], {}
    for t, to_broker, port, length, head in packets:
        if port not in fetchers:
            continue
        if to_broker and api_key(head) == FETCH:
            last_fetch[port] = t
        elif not to_broker and length > bench.RECORD_BYTES:
            deliveries.append((t, last_fetch.get(port, 0.0)))
    out, d, a = [], 0, 0
    for sent, following in zip(produces, produces[1:]):
        while d < len(deliveries) and deliveries[d][0] < sent:
            d += 1
        while a < len(acks) and acks[a] < sent:
            a += 1
        if d == len(deliveries) or deliveries[d][0] > following or a == len(acks):
            continue  # not delivered within its cycle (the first, a rebalance): left out
        delivered, fetch_sent = deliveries[d]
        # Two stretches of broker time, which may overlap: the Produce request until its
        # acknowledgement, and the Fetch (once the record is there too) until its answer.
        produce = (sent, acks[a])
        fetch = (max(sent, fetch_sent), delivered)
        overlap = max(0.0, min(produce[1], fetch[1]) - max(produce[0], fetch[0]))
        broker = (produce[1] - produce[0]) + (fetch[1] - fetch[0]) - overlap
        out.append((broker * 1000, (produce[1] - produce[0]) * 1000, (fetch[1] - fetch[0]) * 1000,
                    max(0.0, fetch_sent - sent) * 1000, (following - sent) * 1000))
    return out


def start_capture(pcap, port, timeout_s=30):
    """tcpdump on loopback for `port`, returned once it says it is capturing (a capture
    that starts late misses the first cycles)."""
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "128", "-U", "-w", str(pcap),
                             "--time-stamp-precision=nano", f"tcp port {port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said = ""
    with selectors.DefaultSelector() as selector:
        selector.register(dump.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while "listening on" not in said:
            left = deadline - time.monotonic()
            line = dump.stderr.readline() if left > 0 and selector.select(left) else None
            if not line:
                dump.kill()
                dump.wait()
                raise bench.BenchError(f"tcpdump did not start capturing within {timeout_s} s: {said[-500:]}")
            said += line
    return dump


def wait_for_capture(pcap, port, timeout_s=30):
    """Sends an ApiVersions request on a connection of its own and returns once the capture
    holds it. tcpdump reads the kernel's buffer behind the traffic, and what it has not read
    when it is stopped is lost without counting as dropped: stopped right after the
    workload, a capture beside a busy debug broker lost its last fifth of cycles."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        # size, api key 18 (ApiVersions), version 0, correlation id, null client id
        conn.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))
        sentinel = conn.getsockname()[1]
        conn.recv(4096)
    deadline = time.monotonic() + timeout_s
    while not any(to_broker and client == sentinel for _, to_broker, client, _, _ in segments(pcap, port)):
        if time.monotonic() > deadline:
            raise bench.BenchError(f"tcpdump had not captured the workload's end after {timeout_s} s")
        time.sleep(0.05)


def stop_capture(dump):
    """Stops tcpdump; a capture that lost packets would split cycles wrongly, so it fails."""
    dump.terminate()
    _, said = dump.communicate(timeout=30)
    dropped = re.search(r"(\d+) packets? dropped by kernel", said)
    if dropped and int(dropped.group(1)) > 0:
        raise bench.BenchError(f"tcpdump lost {dropped.group(1)} packets; run again on a quieter machine")


def one_run(opts, variant, rnd):
    root = opts.workdir / f"{variant}-{rnd}"
    shutil.rmtree(root, ignore_errors=True)
    bench_opts = types.SimpleNamespace(kafka_lib=opts.kafka_lib, osprey_bin=opts.osprey_bin,
                                       sizes=bench.MODES["full"], mode="full")
    broker = bench.make_broker(variant, root / "broker", bench_opts)
    pcap = root / "loopback.pcap"
    dump = None
    try:
        broker.start()
        bench.create_topic(broker, "e2e", 1)
        dump = start_capture(pcap, broker.port)
        tool = bench.end_to_end_latency(bench_opts, broker, "e2e", opts.messages)
        wait_for_capture(pcap, broker.port)
        stop_capture(dump)
        found = iterations(segments(pcap, broker.port))
    finally:
        if dump is not None and dump.poll() is None:
            dump.kill()
            dump.wait()
        broker.stop()
        bench.kill_all()
        shutil.rmtree(root, ignore_errors=True)
    if len(found) < opts.messages * 0.9:
        raise bench.BenchError(f"{variant}: only {len(found)} of {opts.messages} iterations seen")
    broker_part, produce, fetch, late, cycle = zip(*found)
    client = [c - b for b, c in zip(broker_part, cycle)]
    run = {"variant": variant, "round": rnd, "iterations": len(found),
           "tool": dict(zip(("p50", "p99", "p99.9"), tool)),
           "fetch late share": sum(1 for v in late if v > 0) / len(late)}
    for name, values in (("broker", broker_part), ("produce", produce), ("fetch", fetch),
                         ("fetch late by", late), ("cycle", cycle), ("client", client)):
        ordered = sorted(values)
        run[name] = {p: bench.percentile(ordered, q) for p, q in PERCENTILES}
    print(f"{variant} round {rnd}: tool {run['tool']}, broker {run['broker']}, client {run['client']}",
          flush=True)
    return run


def report(opts, runs, started_at):
    variants = [v for v in opts.variants if any(r["variant"] == v for r in runs)]

    def median(variant, field, p):
        values = [r[field][p] if isinstance(r[field], dict) else r[field] for r in runs if r["variant"] == variant]
        return statistics.median(values)

    label = {**bench.COLUMNS, "kafka": "Kafka 4.4"}
    lines = [
        "# EndToEndLatency, broken down: the broker's part and the client's",
        "",
        f"- Date: {started_at:%Y-%m-%d %H:%M} UTC; osprey {opts.revision} ({bench.build_of(opts.osprey_bin)} build)",
        f"- Machine: {bench.machine_description()}",
        *([f"- Note: {opts.note}"] if opts.note else []),
        f"- {opts.rounds} round(s) of {opts.messages} records per broker, brokers alternated, fresh data"
        " directories; each cell is the median over the rounds of that run's percentile (ms).",
        "- Method (`bench/e2e_breakdown.py`): Kafka's EndToEndLatency (acks=all, 1 KiB records, one in"
        " flight) with tcpdump on loopback. **Cycle**: one Produce request to the next. **Broker's"
        " part**: the time covered by the Produce request until its acknowledgement and by the"
        " consumer's Fetch (from when the broker has both it and the record) until the response"
        " carrying the record, overlaps counted once. **Client's part**: the cycle less the"
        " broker's part (the tool, the client library, the kernel's scheduling of both on the"
        " machine's cores).",
        "",
        "| figure | " + " | ".join(label.get(v, v) for v in variants) + " |",
        "|---|" + "---|" * len(variants),
    ]
    rows = [("EndToEndLatency's own figure (whole ms)", "tool"), ("cycle", "cycle"),
            ("broker's part", "broker"), ("of which Produce request to its acknowledgement", "produce"),
            ("of which Fetch (with the record there) to its answer", "fetch"),
            ("client's part", "client"), ("consumer's Fetch request after the Produce request, by", "fetch late by")]
    for title, field in rows:
        for p, _ in PERCENTILES:
            cells = [f"{median(v, field, p):.3g}" for v in variants]
            lines.append(f"| {title}, {p} | " + " | ".join(cells) + " |")
    cells = [f"{median(v, 'fetch late share', None) * 100:.0f}%" for v in variants]
    lines.append("| iterations whose Fetch request came after the record | " + " | ".join(cells) + " |")
    if "kafka" in variants:
        lines += ["", "Ratios of the broker's part, osprey / Kafka:", ""]
        for v in variants:
            if v == "kafka":
                continue
            ratios = ", ".join(f"{p} {median(v, 'broker', p) / median('kafka', 'broker', p):.2f}"
                               for p, _ in PERCENTILES)
            lines.append(f"- {label.get(v, v)}: {ratios}")
    (opts.out / "E2E-BREAKDOWN.md").write_text("\n".join(lines) + "\n")
    (opts.out / "e2e-breakdown.json").write_text(json.dumps(
        {"started_at": started_at.isoformat(), "revision": opts.revision, "note": opts.note,
         "runs": runs}, indent=1) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kafka-lib", type=Path, required=True)
    parser.add_argument("--osprey-bin", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variants", default="kafka,osprey,osprey-nofsync")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--note", default="")
    opts = parser.parse_args()
    opts.variants = opts.variants.split(",")
    opts.workdir.mkdir(parents=True, exist_ok=True)
    opts.out.mkdir(parents=True, exist_ok=True)
    started_at = datetime.datetime.now(datetime.timezone.utc)
    # Taken before the run: the report's own files, written at its end, would count as changes.
    opts.revision = bench.git_revision()
    runs = []
    try:
        for rnd in range(opts.rounds):
            for variant in opts.variants:
                runs.append(one_run(opts, variant, rnd))
    finally:
        bench.kill_all()
    report(opts, runs, started_at)
    print(f"e2e breakdown: {len(runs)} runs; report in {opts.out / 'E2E-BREAKDOWN.md'}")


if __name__ == "__main__":
    sys.exit(main())
