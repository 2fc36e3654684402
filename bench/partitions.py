#!/usr/bin/env python3
"""Many partitions: how fast osprey and Kafka 4.4 create them, and what start-up,
shutdown, memory and open files cost with 1,000 to 50,000 of them.

Started by bench/partitions.sh (which builds osprey in release, fetches Kafka and makes
the venv). Each figure comes from a fresh data directory on this machine:

- creation: N partitions in topics of at most 5,000, one CreateTopics each; the time
  until the answers and until every partition's directory exists (Kafka answers once its
  controller committed the topic and creates the logs afterwards; osprey answers once its
  logs are open).
- lifecycle: N partitions in topics of at most 5,000,
  then resident memory and open files, the SIGTERM time, the time until a restarted
  broker answers Metadata with a leader for every partition, and memory after restart.

Usage: partitions.py --kafka-lib DIR --osprey-bin PATH --workdir DIR --out DIR
                     [--creation 1000,10000] [--lifecycle 1000,10000,50000]
                     [--brokers osprey,kafka] [--kafka-lifecycle-max 10000]
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the broker classes and helpers of the main benchmark)

# Kafka refuses more than 10,000 partitions per CreateTopics, and its controller also
# refuses an operation of more than 10,000 records (a 10,000-partition topic is 10,001:
# "Unable to perform excessively large batch operation"), so topics of at most 5,000.
PER_TOPIC = 5_000
TIMEOUT_S = 900


def make(variant, root, opts):
    root.mkdir(parents=True)
    if variant == "kafka":
        return bench.KafkaBroker(root, opts.kafka_lib)
    return bench.OspreyBroker(variant, root, opts.osprey_bin, [])


def dirs_of(broker, topics):
    names = set()
    for entry in os.scandir(broker.data):
        base = entry.name.rsplit("-", 1)[0]
        if base in topics:
            names.add(entry.name)
    return len(names)


def create(broker, topics):
    """Creates `topics` (name -> partitions), one request per topic. Returns (seconds until
    every answer, seconds until every partition directory exists)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    started = time.monotonic()
    for name, n in topics.items():
        futures = admin.create_topics([NewTopic(name, n, 1)], request_timeout=TIMEOUT_S,
                                      operation_timeout=TIMEOUT_S)
        futures[name].result(timeout=TIMEOUT_S)
    answered = time.monotonic() - started
    want = sum(topics.values())
    while dirs_of(broker, topics) < want:
        if time.monotonic() - started > TIMEOUT_S:
            raise bench.BenchError(f"{broker.variant}: {dirs_of(broker, topics)} of {want} directories")
        time.sleep(0.05)
    return answered, time.monotonic() - started


def wait_all_leaders(broker, topics, started):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    while time.monotonic() - started < TIMEOUT_S:
        if broker.proc.poll() is not None:
            raise bench.BenchError(f"{broker.variant} exited:\n{broker.log_tail()}")
        try:
            md = admin.list_topics(timeout=5)
            if all(t in md.topics and len(md.topics[t].partitions) == n
                   and all(p.leader >= 0 for p in md.topics[t].partitions.values())
                   for t, n in topics.items()):
                return time.monotonic() - started
        except KafkaException:
            pass
        time.sleep(0.05)
    raise bench.BenchError(f"{broker.variant}: not every partition has a leader")


def resources(broker):
    pid = broker.proc.pid
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return {"rss_mib": round(rss / 2**20, 1), "open_files": len(os.listdir(f"/proc/{pid}/fd"))}


def sigterm(broker):
    started = time.monotonic()
    broker.proc.send_signal(signal.SIGTERM)
    try:
        code = broker.proc.wait(TIMEOUT_S)
    except subprocess.TimeoutExpired:
        broker.proc.kill()
        code = broker.proc.wait()
    bench.LIVE.remove(broker.proc)
    broker.proc = None
    return time.monotonic() - started, code


def split(n):
    return {f"t{i}": min(PER_TOPIC, n - i * PER_TOPIC) for i in range((n + PER_TOPIC - 1) // PER_TOPIC)}


def creation(variant, n, opts):
    broker = make(variant, opts.workdir / f"create-{variant}-{n}", opts)
    try:
        broker.start()
        answered, on_disk = create(broker, split(n))
        return {"broker": variant, "partitions": n, "answered_s": round(answered, 2),
                "on_disk_s": round(on_disk, 2), "partitions_per_s": round(n / on_disk)}
    finally:
        broker.stop()
        shutil.rmtree(broker.root, ignore_errors=True)


def lifecycle(variant, n, opts):
    broker = make(variant, opts.workdir / f"life-{variant}-{n}", opts)
    topics = split(n)
    row = {"broker": variant, "partitions": n}
    try:
        broker.start()
        row["create_s"] = round(create(broker, topics)[1], 2)
        wait_all_leaders(broker, topics, time.monotonic())
        row.update({f"{k}_running": v for k, v in resources(broker).items()})
        row["shutdown_s"], row["shutdown_exit"] = sigterm(broker)
        row["shutdown_s"] = round(row["shutdown_s"], 2)
        started = time.monotonic()
        with open(broker.root / "broker.log", "ab") as log:
            broker.proc = subprocess.Popen(broker.command(), stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
        bench.LIVE.append(broker.proc)
        row["startup_s"] = round(wait_all_leaders(broker, topics, started), 2)
        row.update({f"{k}_restarted": v for k, v in resources(broker).items()})
        second, code = sigterm(broker)
        row["second_shutdown_s"], row["second_shutdown_exit"] = round(second, 2), code
        return row
    except bench.BenchError as e:
        row["error"] = str(e)[:300]
        return row
    finally:
        broker.stop()
        shutil.rmtree(broker.root, ignore_errors=True)


NOTES = [
    "Exit codes: Kafka run as `kafka.Kafka` exits 143 on SIGTERM (the JVM's signal exit) after"
    " its orderly shutdown. Osprey exits 0 once every log is closed, and 1 when its 30 s bound"
    " for closing logs ran out: the logs left open are recovered at the next start, which loses"
    " nothing acknowledged. Closing an osprey log writes only what changed since it was opened"
    " (indexes, producer snapshot, high watermark; under fsync-before-ack the data is durable"
    " already), so a partition with no writes, as every one here, costs one directory fsync for"
    " its clean-shutdown marker; logs close on `num.recovery.threads.per.data.dir` (8) threads.",
    "Open files: osprey keeps at most `osprey.log.max.open.files` (4096) segment and index"
    " files open, closing the least recently used; Kafka keeps every segment open.",
    "Kafka's lifecycle stops at `--kafka-lifecycle-max` (10,000): at 30 to 50 partitions/s"
    " here its creation of 50,000 alone would take about 20 minutes, and with a file open"
    " per partition it would pass this machine's `ulimit -n` of 20000.",
]


def report(rows, opts, out):
    out.mkdir(parents=True, exist_ok=True)
    (out / "partitions.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# Many partitions: osprey and Kafka 4.4 on this machine",
        "",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `bench/partitions.sh`"
        f" ({bench.git_revision()}); {bench.machine_description()}; `ulimit -n` {opts.nofile}.",
        "Every row is one fresh broker and data directory; replication factor 1.",
        "",
        "## Creating partitions (topics of at most 5,000, one CreateTopics each)",
        "",
        "| broker | partitions | answered (s) | all directories on disk (s) | partitions/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows["creation"]:
        lines.append(f"| {r['broker']} | {r['partitions']:,} | {r.get('answered_s', '-')} | "
                     f"{r.get('on_disk_s', '-')} | {r.get('partitions_per_s', r.get('error', '-'))} |")
    lines += [
        "",
        "## Start-up, shutdown, memory and open files",
        "",
        "Topics of at most 5,000 partitions. Start-up: from exec until Metadata shows a leader"
        " for every partition. Shutdown: SIGTERM until exit (exit code in brackets).",
        "",
        "| broker | partitions | RSS (MiB) | open files | SIGTERM (s) | start-up (s) | RSS after restart"
        " (MiB) | open files after restart | second SIGTERM (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows["lifecycle"]:
        if "error" in r:
            lines.append(f"| {r['broker']} | {r['partitions']:,} | failed: {r['error']} |||||||")
            continue
        lines.append(
            f"| {r['broker']} | {r['partitions']:,} | {r['rss_mib_running']} | {r['open_files_running']} | "
            f"{r['shutdown_s']} ({r['shutdown_exit']}) | {r['startup_s']} | {r['rss_mib_restarted']} | "
            f"{r['open_files_restarted']} | {r['second_shutdown_s']} ({r['second_shutdown_exit']}) |")
    for note in NOTES:
        lines += ["", note]
    (out / "PARTITIONS.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kafka-lib", required=True)
    p.add_argument("--osprey-bin", required=True, type=Path)
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--creation", default="1000,10000")
    p.add_argument("--lifecycle", default="1000,10000,50000")
    p.add_argument("--brokers", default="osprey,kafka")
    p.add_argument("--kafka-lifecycle-max", type=int, default=10_000,
                   help="Kafka creates about 30 partitions/s here: 50,000 would take half an hour")
    p.add_argument("--report-only", type=Path, help="redraw the report from a partitions.json")
    opts = p.parse_args()
    opts.nofile = subprocess.run(["sh", "-c", "ulimit -n"], capture_output=True, text=True).stdout.strip()
    opts.workdir.mkdir(parents=True, exist_ok=True)
    counts = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    brokers = opts.brokers.split(",")
    if opts.report_only:
        report(json.loads(opts.report_only.read_text()), opts, opts.out)
        return
    rows = {"creation": [], "lifecycle": []}
    try:
        for n in counts(opts.creation):
            for variant in brokers:
                rows["creation"].append(creation(variant, n, opts))
                print(rows["creation"][-1], flush=True)
                (opts.workdir / "partitions.json").write_text(json.dumps(rows, indent=1))
        for n in counts(opts.lifecycle):
            for variant in brokers:
                if variant == "kafka" and n > opts.kafka_lifecycle_max:
                    continue
                rows["lifecycle"].append(lifecycle(variant, n, opts))
                print(rows["lifecycle"][-1], flush=True)
                (opts.workdir / "partitions.json").write_text(json.dumps(rows, indent=1))
    finally:
        bench.kill_all()
    report(rows, opts, opts.out)


if __name__ == "__main__":
    main()
