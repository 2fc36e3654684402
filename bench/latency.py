#!/usr/bin/env python3
"""Produce latency on one partition while the broker does heavy disk work elsewhere.

Started by bench/latency.sh (which builds osprey in release and makes the venv). One
osprey at its default on a fresh data directory; a probe producer (librdkafka, acks=all,
idempotent, one record in flight, 100-byte records) sends to topic `probe`, 1 partition,
and times each record from produce() to its delivery report. Two phases:

- quiet: the probe alone;
- loaded: the probe while one process produces 1 KiB records as fast as it can (acks=1)
  to topic `roll` (segment.bytes 1 MiB, the smallest allowed: a segment roll every MiB;
  retention.bytes 512 MiB, checked every second, so that a fast disk does not fill up:
  one machine took 600 MiB/s and filled 38 GiB in a minute),
  and another keeps rewriting the keys of topic `compact` (cleanup.policy compact,
  min.cleanable.dirty.ratio 0.01, prefilled with --compact-mib MiB whose keys mostly
  differ, so each cleaning round rewrites most of the log; log.cleaner.backoff.ms 1000).

Last, the consume throughput of a warm log (librdkafka, as bench/run.sh measures it):
--consume-records 1 KiB records written to topic `consume` (1 partition), then read from
the start three times; the median and the range are reported.

The figures of a run go to OUT/latency-LABEL.json; LATENCY.md is redrawn from every
latency-*.json in OUT, one column per label (e.g. before and after a change).

Usage: latency.py --osprey-bin PATH --workdir DIR --out DIR --label NAME
                  [--quiet-s 15] [--loaded-s 60] [--compact-mib 256] [--consume-records 200000]
                  [--note TEXT] [--revision REV]
"""

import argparse
import datetime
import json
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the broker classes and helpers of the main benchmark)

PROBE_BYTES = 100
LOAD_BYTES = 1024
SEGMENT_BYTES = 1024 * 1024  # Kafka's smallest segment.bytes
COMPACT_KEYS = 200_000  # distinct keys of the compacted topic: ~200 MiB live at 1 KiB
ROLL_RETENTION_BYTES = 512 * 1024 * 1024
OVERRIDES = ["log.cleaner.backoff.ms=1000", "log.retention.check.interval.ms=1000"]


def create_topics(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [
        NewTopic("probe", 1, 1),
        NewTopic("roll", 1, 1, config={"segment.bytes": str(SEGMENT_BYTES),
                                       "retention.bytes": str(ROLL_RETENTION_BYTES)}),
        NewTopic("compact", 1, 1, config={"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
                                          "min.cleanable.dirty.ratio": "0.01"}),
    ]
    for name, future in admin.create_topics(topics, operation_timeout=30).items():
        future.result(60)
        broker.wait_ready(name, time.monotonic())


def fill_compacted(bootstrap, mib, first_key):
    """Writes `mib` MiB of 1 KiB records to `compact`, keys cycling from first_key."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(LOAD_BYTES)
    for i in range(mib * 1024):
        key = str((first_key + i) % COMPACT_KEYS).encode()
        while True:
            try:
                producer.produce("compact", value, key)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)


def load_roll(bootstrap, stop):
    """Produces to `roll` as fast as librdkafka takes records until `stop` is set."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 100_000})
    value = os.urandom(LOAD_BYTES)
    while not stop.is_set():
        try:
            producer.produce("roll", value)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)


def load_compact(bootstrap, stop):
    """Keeps rewriting the keys of `compact` (so the cleaner always has a dirty section)
    until `stop` is set."""
    first_key = 0
    while not stop.is_set():
        fill_compacted(bootstrap, 8, first_key)
        first_key += 8 * 1024


def probe(bootstrap, seconds):
    """Latencies in ms of one-in-flight acks=all records sent for `seconds`."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "max.in.flight.requests.per.connection": 1, "linger.ms": 0})
    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    # One record through before the clock starts: the producer id and the connection.
    producer.produce("probe", bytes(PROBE_BYTES))
    producer.flush(60)
    payload = os.urandom(PROBE_BYTES)
    latencies_ms = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic_ns()
        producer.produce("probe", payload, on_delivery=on_delivery)
        producer.flush(60)
        latencies_ms.append((time.monotonic_ns() - started) / 1e6)
    if failures:
        raise bench.BenchError(f"probe: {len(failures)} failed deliveries: {failures[:3]}")
    latencies_ms.sort()
    return {"records": len(latencies_ms), "p50_ms": bench.percentile(latencies_ms, 0.50),
            "p99_ms": bench.percentile(latencies_ms, 0.99), "p999_ms": bench.percentile(latencies_ms, 0.999),
            "max_ms": latencies_ms[-1]}


def consume_throughput(broker, records):
    """MiB/s of three librdkafka reads of a freshly written, warm 1-partition log."""
    bench.create_topic(broker, "consume", 1)
    bench.librdkafka_produce(broker, "consume", records, "1")
    return [bench.librdkafka_consume(broker, "consume", records) for _ in range(3)]


def dir_stats(broker, topic):
    """(segment files, bytes) under the topic's partition-0 directory."""
    path = broker.data / f"{topic}-0"
    sizes = []
    for p in path.glob("*.log"):
        try:
            sizes.append(p.stat().st_size)
        except FileNotFoundError:
            pass  # removed by retention or compaction since it was listed
    return len(sizes), sum(sizes)


def newest_segment_base(broker, topic):
    """The base offset of the topic's partition-0 newest segment (its name)."""
    return max((int(p.stem) for p in (broker.data / f"{topic}-0").glob("*.log")), default=0)


def cleaned_rounds(broker):
    """How many compaction passes that cleaned segments the broker logged so far."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", (broker.root / "broker.log").read_text(errors="replace"))
    return sum(1 for line in text.splitlines() if " compacted topic=compact " in line)


def run(opts):
    root = opts.workdir / opts.label
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    broker = bench.OspreyBroker("osprey", root, opts.osprey_bin, OVERRIDES)
    broker.start()
    try:
        create_topics(broker)
        fill_compacted(broker.bootstrap, opts.compact_mib, 0)
        quiet = probe(broker.bootstrap, opts.quiet_s)
        roll_before = dir_stats(broker, "roll")
        roll_base_before = newest_segment_base(broker, "roll")
        compact_before = dir_stats(broker, "compact")
        cleaned_before = cleaned_rounds(broker)
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        loaders = [ctx.Process(target=load_roll, args=(broker.bootstrap, stop)),
                   ctx.Process(target=load_compact, args=(broker.bootstrap, stop))]
        for p in loaders:
            p.start()
        try:
            time.sleep(2)  # the loaders connected and running
            loaded = probe(broker.bootstrap, opts.loaded_s)
        finally:
            stop.set()
            for p in loaders:
                p.join(120)
        roll_after = dir_stats(broker, "roll")
        roll_base_after = newest_segment_base(broker, "roll")
        compact_after = dir_stats(broker, "compact")
        cleaned = cleaned_rounds(broker) - cleaned_before
        consume = consume_throughput(broker, opts.consume_records)
        cpu_s, _ = broker.usage()
    finally:
        broker.stop()
    return {
        "label": opts.label, "note": opts.note, "command": " ".join(["bench/latency.py", *sys.argv[1:]]), "revision": opts.revision or bench.git_revision(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "quiet_s": opts.quiet_s, "loaded_s": opts.loaded_s, "compact_mib": opts.compact_mib,
        "quiet": quiet, "loaded": loaded,
        # Retention removes old segments: what was written is read off the offsets.
        "roll_written_mib": round((roll_base_after - roll_base_before) * LOAD_BYTES / 2**20, 1),
        "roll_segments": roll_after[0] - roll_before[0],
        "roll_mib": round(roll_after[1] / 2**20, 1),
        "compact_mib_before": round(compact_before[1] / 2**20, 1),
        "compact_mib_after": round(compact_after[1] / 2**20, 1),
        "compaction_passes": cleaned,
        "consume_mib_s": consume,
        "broker_cpu_s": cpu_s,
    }


def write_report(out):
    runs = sorted((json.loads(p.read_text()) for p in out.glob("latency-*.json")), key=lambda r: r["date"])
    lines = ["# Produce latency while another topic rolls segments and the cleaner compacts", "",
             "Written by `bench/latency.sh` (bench/latency.py: what each phase does). Probe: librdkafka,",
             "acks=all, idempotent, one record in flight, 100-byte records, one partition; every",
             "figure in ms from produce() to the delivery report. Loaded: meanwhile one process",
             "produces 1 KiB records with acks=1 as fast as it can to a topic with segment.bytes",
             "1 MiB, another rewrites the keys of a compacted topic prefilled with the MiB below.", ""]
    lines.append("| figure | " + " | ".join(r["label"] for r in runs) + " |")
    lines.append("|---|" + "---|" * len(runs))

    def row(name, get):
        lines.append(f"| {name} | " + " | ".join(bench.fmt(get(r)) for r in runs) + " |")

    for phase in ("quiet", "loaded"):
        for key, name in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"), ("max_ms", "max")):
            row(f"{phase}: {name} ms", lambda r, p=phase, k=key: r[p][k])
        row(f"{phase}: records probed", lambda r, p=phase: r[p]["records"])
    row("loaded: `roll` segment files, end minus start (net of retention from queue-before on)", lambda r: r["roll_segments"])
    row("loaded: MiB produced to `roll` (to its newest segment)", lambda r: r.get("roll_written_mib"))
    row("loaded: `compact` MiB before", lambda r: r["compact_mib_before"])
    row("loaded: `compact` MiB after", lambda r: r["compact_mib_after"])
    row("loaded: compaction passes of `compact`", lambda r: r["compaction_passes"])
    row("consume MiB/s, warm log, librdkafka (median of 3)", lambda r: statistics.median(r["consume_mib_s"]))
    row("consume MiB/s, lowest of 3", lambda r: min(r["consume_mib_s"]))
    row("consume MiB/s, highest of 3", lambda r: max(r["consume_mib_s"]))
    row("broker CPU s, whole run", lambda r: r["broker_cpu_s"])
    lines.append("")
    for r in runs:
        lines.append(f"- {r['label']}: osprey {r['revision']}, {r['date']}, quiet {r['quiet_s']} s, "
                     f"loaded {r['loaded_s']} s, compacted topic prefilled with {r['compact_mib']} MiB. "
                     f"{r['note']} Command: `{r.get('command', 'bench/latency.sh --label ' + r['label'])}`")
    (out / "LATENCY.md").write_text("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--osprey-bin", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--quiet-s", type=float, default=15)
    parser.add_argument("--loaded-s", type=float, default=60)
    parser.add_argument("--compact-mib", type=int, default=256)
    parser.add_argument("--consume-records", type=int, default=200_000)
    parser.add_argument("--note", default="")
    parser.add_argument("--revision", default="", help="what --osprey-bin was built from, when not this checkout")
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    try:
        figures = run(opts)
    finally:
        bench.kill_all()
    (opts.out / f"latency-{opts.label}.json").write_text(json.dumps(figures, indent=1) + "\n")
    write_report(opts.out)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
