#!/usr/bin/env python3
"""Osprey against Apache Kafka, side by side, on this machine.

Started by bench/run.sh, which fetches Kafka, builds osprey and makes the venv. Each
repetition runs every broker variant in turn (Kafka, osprey at its default, osprey with
fsync relaxed to Kafka's setting: A B C A B C ...), each on a fresh data directory, and
runs the same workloads against each with Kafka's own tools and with librdkafka. The
report gives the median of each figure per variant and the osprey/Kafka ratios.

Usage: bench.py --mode quick|full --kafka-lib DIR --osprey-bin PATH --workdir DIR --out DIR
       bench.py --from-raw bench/results/raw.json --out bench/results   (redraw the report)
"""

import argparse
import base64
import dataclasses
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

RECORD_BYTES = 1024
MIB = 1024 * 1024
KAFKA_VERSION = "4.4.0"
# Kafka's default: log.flush.interval.messages = Long.MAX_VALUE, i.e. never fsync on the
# write path. Setting it on osprey gives the like-for-like durability of Kafka.
KAFKA_FLUSH_MESSAGES = "9223372036854775807"
# kafka-server-start.sh's heap and kafka-run-class.sh's collector flags.
KAFKA_JVM_FLAGS = ["-Xmx1g", "-Xms1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                   "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                   "-Djava.awt.headless=true"]
# kafka-producer-perf-test.sh gives its tools 512 MiB.
TOOL_JVM_FLAGS = ["-Xmx512m"]


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much each workload does; quick is a smoke test, full gives the figures."""

    reps: int
    # (acks, batching, partitions) for ProducerPerformance.
    produce_matrix: tuple
    produce_records: int
    client_records: int
    e2e_messages: int
    rate_msgs_per_s: int
    rate_seconds: float
    restart_log_bytes: int
    tool_timeout_s: int
    variants: tuple = ("kafka", "osprey", "osprey-nofsync")
    # Broker on CPU 0, every client (this script, Kafka's tools) on CPU 1: on two cores the
    # load generators otherwise compete with the broker for its CPU.
    pinned: bool = False


MODES = {
    "quick": Sizes(reps=1, produce_matrix=(("all", "default", 1),), produce_records=2_000,
                   client_records=2_000, e2e_messages=100, rate_msgs_per_s=200, rate_seconds=0.5,
                   restart_log_bytes=4 * MIB, tool_timeout_s=60,
                   # The relaxed-fsync variant runs the same harness code as the default one;
                   # leaving it out keeps the smoke test within a minute.
                   variants=("kafka", "osprey")),
    "full": Sizes(reps=3,
                  produce_matrix=tuple((acks, batching, partitions)
                                       for acks in ("1", "all")
                                       for batching in ("default", "tuned")
                                       for partitions in (1, 8)),
                  produce_records=200_000, client_records=200_000, e2e_messages=2_000,
                  rate_msgs_per_s=1_000, rate_seconds=10.0, restart_log_bytes=1024 * MIB,
                  tool_timeout_s=600),
    # The restart and cold-log read alone (issue 21's cold reads), Kafka against Osprey.
    "cold": Sizes(reps=3, produce_matrix=(), produce_records=0, client_records=0, e2e_messages=0,
                  rate_msgs_per_s=0, rate_seconds=0.0, restart_log_bytes=1024 * MIB, tool_timeout_s=600,
                  variants=("kafka", "osprey")),
}
# The full run's workloads with the broker and the clients on separate cores.
MODES["pinned"] = dataclasses.replace(MODES["full"], pinned=True)

# Batching "tuned": bigger batches and a longer linger, as throughput guides suggest.
BATCHING = {"default": [], "tuned": ["batch.size=262144", "linger.ms=20"]}

VARIANTS = {
    "kafka": "Apache Kafka 4.4.0 (no fsync on the write path)",
    "osprey": "osprey, default (fsync before every ack)",
    "osprey-nofsync": f"osprey, log.flush.interval.messages={KAFKA_FLUSH_MESSAGES} (like Kafka)",
    # Not in any mode's variants by default: --variants adds it.
    "osprey-journal": "osprey, osprey.log.journal.topics=* (fsync before every ack, one journal fsync for all partitions)",
}
# The report's column heading of each variant, and of its ratio to Kafka.
COLUMNS = {"kafka": "Kafka", "osprey": "osprey (fsync, default)", "osprey-nofsync": "osprey (like Kafka)",
           "osprey-journal": "osprey (journal for every topic)"}
RATIOS = {"osprey": "ratio, default", "osprey-nofsync": "ratio, like for like",
          "osprey-journal": "ratio, journal for every topic"}
# The variants that fsync before acknowledging: the report's fsync section of each, next to
# the disk's own fsync rate measured before each of their brokers starts.
FSYNC_SECTIONS = {"osprey": "osprey at its default durability",
                  "osprey-journal": "osprey with the commit journal for every topic"}


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- brokers

LIVE = []  # every broker process started and not yet reaped, killed on any exit


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One broker process on loopback with its own data directory."""

    def __init__(self, variant, root, args):
        self.variant = variant
        self.root = root
        self.args = args
        self.port = free_port()
        self.data = root / "data"
        self.data.mkdir(parents=True)
        self.proc = None
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.args_pinned = False
        self.fsyncs = {}  # {produce figure: fsync statistics}, osprey only
        self.cpu = {}  # {Java tool figure: {"client cores": ..., "broker cores": ...}}

    def start(self, wait_topic=None):
        """Starts the process; returns (seconds until it accepts connections, seconds
        until it answers Metadata with a leader for every partition of wait_topic)."""
        started = time.monotonic()
        with open(self.root / "broker.log", "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=pin_to(BROKER_CPU) if self.args_pinned else None)
        LIVE.append(self.proc)
        listening_s = self.wait_ready(wait_topic, started)
        return listening_s, time.monotonic() - started

    def wait_ready(self, topic, started):
        """Returns the seconds from started until the port accepted a connection."""
        listening_s = None
        # The port first, so that librdkafka does not log a refused connection every try.
        while time.monotonic() - started < 180 and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                listening_s = time.monotonic() - started
                break
            except OSError:
                time.sleep(0.02)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while time.monotonic() - started < 180:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.variant} exited with {self.proc.returncode}:\n"
                                 + self.log_tail())
            try:
                md = admin.list_topics(topic=topic, timeout=1)
                if topic is None or (topic in md.topics and md.topics[topic].partitions and all(
                        p.leader >= 0 for p in md.topics[topic].partitions.values())):
                    return listening_s
            except KafkaException:
                pass
            time.sleep(0.05)
        raise BenchError(f"{self.variant} not ready after 180 s:\n" + self.log_tail())

    def stop(self):
        """SIGTERM, then SIGKILL if it has not exited within 60 s."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        LIVE.remove(self.proc)
        self.proc = None

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        LIVE.remove(self.proc)
        self.proc = None

    def usage(self):
        """(CPU seconds, peak resident bytes) of the broker process so far."""
        pid = self.proc.pid
        cpu_s = stat_cpu_s(Path(f"/proc/{pid}/stat").read_text())
        hwm = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
        return cpu_s, hwm

    def fsync_counters(self):
        """(fsyncs, seconds spent in them, Produce requests, seconds they spent in the
        broker) so far; None for a broker that does not count them (Kafka, which does not
        fsync on the write path)."""
        return None

    def log_tail(self):
        text = (self.root / "broker.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-20:])


class KafkaBroker(Broker):
    """Apache Kafka in KRaft combined mode (broker and controller in one JVM)."""

    def __init__(self, root, kafka_lib):
        super().__init__("kafka", root, [])
        self.kafka_lib = kafka_lib
        self.controller_port = free_port()
        self.config = root / "server.properties"
        self.config.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
            f"log.dirs={self.data}",
            # A single node: the internal topics cannot have three replicas.
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            # As in Kafka's own config/server.properties, so a new group starts at once.
            "group.initial.rebalance.delay.ms=0",
            "",
        ]))
        classpath = f"{kafka_lib}/*"
        # KRaft needs a formatted log dir: a new cluster id, this node the only voter.
        cluster_id = kafka_cluster_id()
        java("kafka.tools.StorageTool", ["format", "--standalone", "-t", cluster_id,
                                         "-c", str(self.config)], classpath, 120, jvm=[])

    def command(self):
        return ["java", *KAFKA_JVM_FLAGS, "-cp", f"{self.kafka_lib}/*", "kafka.Kafka",
                str(self.config)]


def kafka_cluster_id():
    """A random id as Kafka's Uuid.randomUuid makes it: URL-safe base64 of 16 bytes, never
    starting with '-', which the storage tool's argument parser would take for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class OspreyBroker(Broker):
    def __init__(self, variant, root, bin_path, overrides):
        super().__init__(variant, root, overrides)
        self.bin_path = bin_path
        # On, as by default (on its own port): the fsync counts come from it.
        self.metrics_port = free_port()

    def command(self):
        cmd = [str(self.bin_path),
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
               "--override", f"log.dirs={self.data}",
               "--override", f"metrics.listener=127.0.0.1:{self.metrics_port}"]
        for override in self.args:
            cmd += ["--override", override]
        return cmd

    def fsync_counters(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        values = dict(line.rpartition(" ")[::2] for line in text.splitlines() if not line.startswith("#"))
        # The fsync histogram's count and sum move with every fsync (osprey_fsyncs_total
        # is refreshed every few seconds, less often than a short workload lasts); then the
        # Produce requests and the seconds they spent in the broker (frame read to response
        # written), summed.
        names = ("osprey_fsync_duration_seconds_count", "osprey_fsync_duration_seconds_sum",
                 'osprey_request_duration_seconds_count{api="Produce"}',
                 'osprey_request_duration_seconds_sum{api="Produce"}')
        counters = [float(values.get(name, 0.0)) for name in names]
        # Of that time, the Produce requests' wait for their acknowledgement (the fsync
        # at the default) and their wait behind the connection's earlier responses.
        for stage in ("remote", "response_queue"):
            counters.append(sum(float(value) for series, value in values.items()
                                if series.startswith("osprey_request_stage_seconds_sum{")
                                and 'api="Produce"' in series and f'stage="{stage}"' in series))
        # The CPU seconds of the threads that fsync (the kernel's work in fdatasync).
        counters.append(self.thread_cpu_s("osprey-flusher"))
        return tuple(counters)

    def thread_cpu_s(self, prefix):
        """User + system CPU seconds of the broker's threads whose name starts with `prefix`."""
        total = 0.0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except FileNotFoundError:
                continue  # the thread ended
            if stat[stat.index("(") + 1:stat.rindex(")")].startswith(prefix):
                total += stat_cpu_s(stat)
        return total


def stat_cpu_s(stat):
    """User + system CPU seconds from a /proc stat line (a process's or a thread's)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_broker(variant, root, opts):
    if variant == "kafka":
        broker = KafkaBroker(root, opts.kafka_lib)
    elif variant == "osprey":
        broker = OspreyBroker(variant, root, opts.osprey_bin, [])
    elif variant == "osprey-journal":
        broker = OspreyBroker(variant, root, opts.osprey_bin, ["osprey.log.journal.topics=*"])
    else:
        broker = OspreyBroker(variant, root, opts.osprey_bin,
                              [f"log.flush.interval.messages={KAFKA_FLUSH_MESSAGES}"])
    broker.args_pinned = opts.sizes.pinned
    return broker


# Pinned runs: the broker's CPU, and the clients'.
BROKER_CPU, CLIENT_CPU = 0, 1


def pin_to(cpu):
    """A preexec_fn that binds the child (and its threads) to one CPU."""
    return lambda: os.sched_setaffinity(0, {cpu})


def kill_all():
    for proc in list(LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        LIVE.remove(proc)


# ---------------------------------------------------------------- Kafka's tools

def java(main_class, args, classpath, timeout_s, jvm=TOOL_JVM_FLAGS):
    cmd = ["java", *jvm, "-cp", classpath, main_class, *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{main_class} did not finish within {timeout_s} s") from e
    if done.returncode != 0:
        raise BenchError(f"{main_class} {' '.join(args)} exited {done.returncode}:\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


PERF_SUMMARY = re.compile(
    r"^(\d+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\), ([0-9.]+) ms avg latency, "
    r"([0-9.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th\.$",
    re.M)


def producer_performance(opts, broker, topic, records, acks, batching):
    """MiB/s, as the tool counts MB."""
    return producer_performance_summary(opts, broker, topic, records, acks, batching)[0]


def producer_performance_summary(opts, broker, topic, records, acks, batching):
    """(MiB/s, [p50, p99, p99.9] latency in ms) from the tool's summary line."""
    # Kafka refuses enable.idempotence=true with acks other than all, so idempotence is on
    # exactly where the producer allows it.
    idempotence = "true" if acks == "all" else "false"
    props = [f"bootstrap.servers={broker.bootstrap}", f"acks={acks}",
             f"enable.idempotence={idempotence}", *BATCHING[batching]]
    out = java("org.apache.kafka.tools.ProducerPerformance",
               ["--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_BYTES),
                "--throughput", "-1", "--producer-props", *props],
               f"{opts.kafka_lib}/*", opts.sizes.tool_timeout_s)
    found = PERF_SUMMARY.findall(out)
    if not found or int(found[-1][0]) != records:
        raise BenchError(f"ProducerPerformance summary missing or short:\n{out[-2000:]}")
    summary = found[-1]
    return float(summary[2]), [float(summary[5]), float(summary[7]), float(summary[8])]


def consumer_performance(opts, broker, topic, records):
    out = java("org.apache.kafka.tools.ConsumerPerformance",
               ["--bootstrap-server", broker.bootstrap, "--topic", topic,
                "--num-records", str(records), "--timeout", "60000",
                "--group", f"bench-{topic}-{time.monotonic_ns()}"],
               f"{opts.kafka_lib}/*", opts.sizes.tool_timeout_s)
    # The last line: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
    # nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    rows = [line.split(", ") for line in out.splitlines() if re.match(r"^\d{4}-", line)]
    fields = rows[-1] if rows else []
    if len(fields) < 10 or int(fields[4]) < records:
        raise BenchError(f"ConsumerPerformance read too little:\n{out[-2000:]}")
    # fetch.MB.sec: the group join is left out, so the figure is the fetch path alone.
    return float(fields[8])


E2E_PERCENTILES = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")


def end_to_end_latency(opts, broker, topic, messages):
    out = java("org.apache.kafka.tools.EndToEndLatency",
               ["--bootstrap-server", broker.bootstrap, "--topic", topic,
                "--num-records", str(messages), "--producer-acks", "all",
                "--record-size", str(RECORD_BYTES)],
               f"{opts.kafka_lib}/*", opts.sizes.tool_timeout_s)
    found = E2E_PERCENTILES.search(out)
    if not found:
        raise BenchError(f"EndToEndLatency percentiles missing:\n{out[-2000:]}")
    return [float(v) for v in found.groups()]


# ---------------------------------------------------------------- librdkafka

def create_topic(broker, topic, partitions):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
    futures[topic].result(60)
    broker.wait_ready(topic, time.monotonic())


def librdkafka_produce(broker, topic, records, acks):
    config = {"bootstrap.servers": broker.bootstrap, "acks": acks,
              "enable.idempotence": acks == "all", "queue.buffering.max.messages": 1_000_000}
    producer = Producer(config)
    payload = os.urandom(RECORD_BYTES)
    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    # One record through before the clock starts: librdkafka's idempotent producer first
    # waits for its producer id, and startup is not what this measures.
    producer.produce(topic, payload)
    producer.flush(60)
    started = time.monotonic()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) != 0 or failures:
        raise BenchError(f"librdkafka produce failed: {failures[:3]}")
    return records * RECORD_BYTES / MIB / (time.monotonic() - started)


def librdkafka_consume(broker, topic, records):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    admin_md = consumer.list_topics(topic, timeout=30)
    consumer.assign([TopicPartition(topic, p, 0) for p in admin_md.topics[topic].partitions])
    seen = 0
    started = None
    deadline = time.monotonic() + 120
    while seen < records and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                started = started or time.monotonic()
                seen += 1
    consumer.close()
    if seen < records:
        raise BenchError(f"librdkafka consumed {seen} of {records}")
    return records * RECORD_BYTES / MIB / (time.monotonic() - started)


def librdkafka_fixed_rate_latency(broker, topic, rate, seconds):
    """End-to-end latency at a fixed rate: the send time travels in the record; a
    consumer thread notes when each record arrives."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{topic}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0})
    # One record through before the clock starts: connections, the producer id and the
    # consumer's first fetch are not what this measures.
    producer.produce(topic, bytes(RECORD_BYTES))
    producer.flush(60)
    warm_deadline = time.monotonic() + 60
    while time.monotonic() < warm_deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            break
    total = int(rate * seconds)
    latencies_ms = []
    stop = threading.Event()

    def consume():
        # One record per poll: consume(n, timeout) would wait for n records or the timeout.
        while len(latencies_ms) < total and not stop.is_set():
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                latencies_ms.append((time.monotonic_ns() - int.from_bytes(msg.value()[:8], "big")) / 1e6)

    reader = threading.Thread(target=consume)
    reader.start()
    padding = os.urandom(RECORD_BYTES - 8)
    started = time.monotonic()
    for i in range(total):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, time.monotonic_ns().to_bytes(8, "big") + padding)
        producer.poll(0)
    producer.flush(60)
    reader.join(60)
    stop.set()
    reader.join()
    consumer.close()
    if len(latencies_ms) < total:
        raise BenchError(f"fixed-rate latency: {len(latencies_ms)} of {total} records arrived")
    latencies_ms.sort()
    return [percentile(latencies_ms, q) for q in (0.50, 0.99, 0.999)]


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


# ---------------------------------------------------------------- one broker session

def evict_page_cache(directory):
    """Drops the cached pages of every file under directory (written back first), so
    the next read comes from the disk without touching the rest of the machine's cache."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run_session(opts, variant, rep, workdir):
    """All workloads against one fresh broker; returns ({figure: value}, {workload: fsync
    statistics}, the disk's own fsync rates measured before the broker started)."""
    figures = {}
    broker = make_broker(variant, workdir / f"{variant}-{rep}", opts)
    disk = disk_fsync_rates(broker.root) if variant in FSYNC_SECTIONS and opts.mode != "cold" else {}
    try:
        broker.start()
        if opts.mode == "cold":
            restart_and_consume_cold(opts, broker, figures)
            return figures, {}, {}, disk
        cpu_at_ready, _ = broker.usage()
        moved_bytes = produce_and_consume(opts, broker, figures)
        moved_bytes += librdkafka_workloads(opts, broker, figures)
        moved_bytes += latency_workloads(opts, broker, figures)
        cpu_now, peak_rss = broker.usage()
        figures["broker CPU s per GiB moved"] = (cpu_now - cpu_at_ready) / (moved_bytes / (1024 * MIB))
        figures["broker peak RSS MiB"] = peak_rss / MIB
        restart_and_consume_cold(opts, broker, figures)
    finally:
        broker.stop()
        kill_all()
        shutil.rmtree(broker.root, ignore_errors=True)
    return figures, broker.fsyncs, broker.cpu, disk


def disk_fsync_rates(directory, seconds=2.0, block=16 * 1024):
    """What the disk under `directory` does alone: fdatasyncs per second, each after a
    `block`-byte append, from 1 and from 8 writers (threads, each on its own file, as
    osprey fsyncs each partition's log on its own)."""
    directory.mkdir(parents=True, exist_ok=True)
    rates = {}
    for writers in (1, 8):
        counts = [0] * writers

        def write(i):
            path = directory / f"fsync-probe-{i}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            payload = os.urandom(block)
            deadline = time.monotonic() + seconds
            try:
                while time.monotonic() < deadline:
                    os.write(fd, payload)
                    os.fdatasync(fd)
                    counts[i] += 1
            finally:
                os.close(fd)
                path.unlink()

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rates[f"{writers} writer(s)"] = sum(counts) / seconds
    return rates

def produce_and_consume(opts, broker, figures):
    """Kafka's tools: the produce matrix, then a consume of the last topic, still in the
    page cache. Returns the record bytes moved."""
    sizes = opts.sizes
    moved_mib = sizes.produce_records * RECORD_BYTES / MIB
    for acks, batching, partitions in sizes.produce_matrix:
        topic = f"produce-acks{acks}-{batching}-p{partitions}"
        create_topic(broker, topic, partitions)
        measured_workload(opts, broker, figures,
                        f"produce MiB/s, acks={acks}, {batching} batching, {partitions} partition(s)",
                        moved_mib, lambda: producer_performance(opts, broker, topic, sizes.produce_records,
                                                                acks, batching))
    measured_workload(opts, broker, figures, "consume MiB/s, warm log (ConsumerPerformance)", moved_mib,
                    lambda: consumer_performance(opts, broker, topic, sizes.produce_records))
    return (len(sizes.produce_matrix) + 1) * sizes.produce_records * RECORD_BYTES


def measured_workload(opts, broker, figures, figure, moved_mib, workload):
    """Records `figure` (MiB/s) from `workload`; in a pinned run also the MiB it moved per
    second of broker CPU: the throughput the broker would reach at 100% of its one core.
    For osprey, the fsyncs the workload cost, in broker.fsyncs; for Kafka's tools, the
    cores the tool's JVM and the broker used meanwhile, in broker.cpu."""
    cpu_before, fsyncs_before = broker.usage()[0], broker.fsync_counters()
    client_before, began = children_cpu_s(), time.monotonic()
    figures[figure] = workload()
    cpu_s = broker.usage()[0] - cpu_before
    wall_s = time.monotonic() - began
    if figure.startswith(("produce", "consume")):  # a Java tool, a child of this process
        broker.cpu[figure] = {"client cores": (children_cpu_s() - client_before) / wall_s,
                              "broker cores": cpu_s / wall_s}
    if opts.sizes.pinned and cpu_s > 0:
        figures[f"{figure} at 100% of one broker core"] = moved_mib / cpu_s
    if fsyncs_before is not None and figure.startswith("produce"):
        count, spent_s, requests, in_broker_s, remote_s, behind_s, flusher_cpu_s = (
            after - before for after, before in zip(broker.fsync_counters(), fsyncs_before))
        seconds = moved_mib / figures[figure]
        per_request = (lambda s: s * 1000 / requests) if requests else (lambda s: None)
        broker.fsyncs[figure] = {"fsyncs per second": count / seconds,
                                 "KiB per fsync": moved_mib * 1024 / count if count else None,
                                 "mean fsync ms": spent_s * 1000 / count if count else None,
                                 "flusher CPU us per fsync": flusher_cpu_s * 1e6 / count if count else None,
                                 "Produce ms in the broker": per_request(in_broker_s),
                                 "of which acknowledgement wait": per_request(remote_s),
                                 "of which behind earlier responses": per_request(behind_s),
                                 # Little's law: how many of the producer's requests the
                                 # broker held on average (ProducerPerformance's producer
                                 # keeps up to 5 in flight).
                                 "Produce requests in the broker": in_broker_s / seconds}


def children_cpu_s():
    """User + system CPU seconds of this process's children that have ended (the tools)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def librdkafka_workloads(opts, broker, figures):
    records = opts.sizes.client_records
    moved_mib = records * RECORD_BYTES / MIB
    for acks in ("1", "all"):
        topic = f"client-acks{acks}"
        create_topic(broker, topic, 8)
        label = "acks=all, idempotent" if acks == "all" else "acks=1"
        measured_workload(opts, broker, figures, f"librdkafka produce MiB/s, {label}, 8 partitions", moved_mib,
                        lambda: librdkafka_produce(broker, topic, records, acks))
    measured_workload(opts, broker, figures, "librdkafka consume MiB/s, warm log", moved_mib,
                    lambda: librdkafka_consume(broker, topic, records))
    return 3 * records * RECORD_BYTES


def latency_workloads(opts, broker, figures):
    sizes = opts.sizes
    create_topic(broker, "e2e", 1)
    serial = end_to_end_latency(opts, broker, "e2e", sizes.e2e_messages)
    create_topic(broker, "rate", 1)
    at_rate = librdkafka_fixed_rate_latency(broker, "rate", sizes.rate_msgs_per_s, sizes.rate_seconds)
    names = ("p50", "p99", "p99.9")
    for name, value in zip(names, serial):
        figures[f"latency ms {name}, EndToEndLatency (one in flight, acks=all)"] = value
    for name, value in zip(names, at_rate):
        figures[f"latency ms {name}, librdkafka at {sizes.rate_msgs_per_s} msg/s (acks=all)"] = value
    # Each record is written once and read once.
    return 2 * (sizes.e2e_messages + int(sizes.rate_msgs_per_s * sizes.rate_seconds)) * RECORD_BYTES


def restart_and_consume_cold(opts, broker, figures):
    """Writes the restart log, kill -9, restarts with the log out of the page cache, then
    reads it all back from the disk."""
    restart_bytes = opts.sizes.restart_log_bytes
    records = restart_bytes // RECORD_BYTES
    create_topic(broker, "restart", 1)
    producer_performance(opts, broker, "restart", records, "1", "tuned")
    broker.kill9()
    evict_page_cache(broker.data)
    listening_s, ready_s = broker.start(wait_topic="restart")
    log_mib = restart_bytes // MIB
    figures[f"restart s after kill -9, {log_mib} MiB log: until it accepts connections"] = listening_s
    figures[f"restart s after kill -9, {log_mib} MiB log: until the topic has a leader"] = ready_s
    # Recovery may have read the log back in; the consume below must start cold.
    evict_page_cache(broker.data)
    figures["consume MiB/s, cold log (ConsumerPerformance)"] = \
        consumer_performance(opts, broker, "restart", records)


# ---------------------------------------------------------------- report

def lower_is_better(figure):
    return figure.startswith(("latency", "broker", "restart"))


def machine_description():
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    java_version = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return (f"{os.cpu_count()} CPUs ({cpu}), {mem_kib / MIB:.0f} GiB RAM, "
            f"Linux {platform.release()}, {java_version}")


def build_of(osprey_bin):
    """The cargo profile an osprey binary was built with, from its path (target/<profile>/)."""
    return "debug" if "debug" in Path(osprey_bin).parts else "release"


def git_revision():
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def fmt(value):
    if value is None:
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def median_cell(values, show=fmt):
    """The median of `values`, and their range when there is more than one, for a report."""
    if not values:
        return "n/a"
    if len(values) == 1:
        return show(values[0])
    return f"{show(statistics.median(values))} ({show(min(values))}-{show(max(values))})"


def write_report(opts, runs, started_at, out):
    """README.md (the table), raw.json (every run) and the charts, in out."""
    figures = list(dict.fromkeys(f for run in runs for f in run["figures"]))
    # The columns: Kafka, then the variants that ran, in VARIANTS' order.
    variants = ["kafka", *(v for v in VARIANTS if v != "kafka" and any(r["variant"] == v for r in runs))]
    medians, spreads = {}, {}
    for figure in figures:
        for variant in VARIANTS:
            values = [run["figures"][figure] for run in runs
                      if run["variant"] == variant and figure in run["figures"]]
            medians[(figure, variant)] = statistics.median(values) if values else None
            spreads[(figure, variant)] = (min(values), max(values)) if len(values) > 1 else None

    def cell(figure, variant):
        median, spread = medians[(figure, variant)], spreads[(figure, variant)]
        return fmt(median) + (f" ({fmt(spread[0])}-{fmt(spread[1])})" if spread else "")

    def ratio(figure, variant):
        k, o = medians[(figure, "kafka")], medians[(figure, variant)]
        if not k or o is None:
            return "n/a"
        # Two decimals, or two significant digits below 0.1, so that 0.0018 is not 0.00.
        return f"{o / k:.2f}" if o / k >= 0.1 else f"{o / k:.2g}"

    lines = [
        f"# osprey against Apache Kafka {KAFKA_VERSION}: {opts.mode} run",
        "",
        f"- Date: {started_at:%Y-%m-%d %H:%M} UTC; osprey {opts.revision} ({opts.profile} build)",
        f"- Machine: {opts.machine}",
        f"- Note: {opts.note}" if opts.note else "- Note: none",
        *([f"- Pinned: the broker on CPU {BROKER_CPU}, every client on CPU {CLIENT_CPU}; each "
           "'at 100% of one broker core' figure is the MiB the workload moved per second of "
           "broker CPU (user + system) it took."] if opts.sizes.pinned else []),
        f"- {opts.sizes.reps} repetition(s), brokers alternated "
        f"({' '.join(list(opts.sizes.variants) * min(opts.sizes.reps, 2))} ...), each on a fresh data "
        "directory on loopback; every figure is the median over the repetitions.",
        "- Records are 1 KiB of random bytes, no compression. MiB/s counts record values. "
        "ProducerPerformance runs with idempotence on for acks=all and off for acks=1 "
        "(the Java producer refuses idempotence with acks=1). Tuned batching: "
        "batch.size=262144, linger.ms=20. ConsumerPerformance figures leave out the group "
        "join (its fetch.MB.sec); librdkafka figures are timed after one warm-up record.",
        "- Latency: EndToEndLatency sends one record, waits for it to be consumed, then sends "
        "the next, and prints whole milliseconds (0 is under 1 ms); the librdkafka figure "
        "sends at a fixed rate with the send time in the record and a consumer alongside.",
        "- CPU: the broker's user + system seconds from ready to the end of the throughput "
        "and latency workloads, over the record bytes written plus read (a fresh JVM's JIT "
        "compilation counts in Kafka's). Memory: peak resident set (VmHWM); Kafka runs "
        "with -Xmx1g -Xms1g as kafka-server-start.sh does.",
        "- Restart: a 1-partition topic written with acks=1, the broker killed with SIGKILL, "
        "its files dropped from the page cache, then the time from exec until the port "
        "accepts a connection and until Metadata shows a leader for that topic. The cold "
        "consume reads that log after its pages were dropped again.",
        "- Durability: Kafka's default never fsyncs on the write path; osprey's default "
        "fsyncs before every acknowledgement. **The like-for-like comparison is the "
        "`osprey (like Kafka)` column**, started with "
        f"`--override log.flush.interval.messages={KAFKA_FLUSH_MESSAGES}` (Kafka's own default).",
        *(["- `osprey (journal for every topic)`: osprey's default durability with "
           "`--override osprey.log.journal.topics=*`: a leader append is durable once the data "
           "directory's commit journal is fsynced, one fsync for the appends of every partition."]
          if "osprey-journal" in variants else []),
        "- Each cell: the median, then (lowest-highest) over the repetitions. "
        "Ratio is osprey / Kafka of the medians: above 1 is better for throughput, worse for latency, "
        "CPU, memory and restart time.",
        "",
        "| figure | " + " | ".join(COLUMNS[v] for v in variants) + " | "
        + " | ".join(RATIOS[v] for v in variants[1:]) + " |",
        "|---|" + "---|" * (2 * len(variants) - 1),
    ]
    for figure in figures:
        better = "lower is better" if lower_is_better(figure) else "higher is better"
        lines.append(f"| {figure} ({better}) | " + " | ".join(cell(figure, v) for v in variants) + " | "
                     + " | ".join(ratio(figure, v) for v in variants[1:]) + " |")
    for variant, title in FSYNC_SECTIONS.items():
        lines += fsync_section(runs, variant, title)
    lines += cpu_section(runs)
    lines += ["", "![throughput](throughput.png)", "", "![latency](latency.png)", "",
              "Raw figures of every run: `raw.json`.", ""]
    (out / "README.md").write_text("\n".join(lines))
    meta = {"mode": opts.mode, "started_at": started_at.isoformat(), "profile": opts.profile,
            "revision": opts.revision, "machine": opts.machine, "note": opts.note}
    (out / "raw.json").write_text(json.dumps({**meta, "runs": runs}, indent=1))
    charts(figures, medians, out)
    return medians


def fsync_section(runs, variant, title):
    """What the fsyncs of `variant` (an osprey that fsyncs before acknowledging) cost in
    each produce workload, next to what the disk does alone, measured before each of
    those brokers started."""
    runs = [run for run in runs if run.get("fsyncs") and run["variant"] == variant]
    if not runs:
        return []
    lines = ["", f"## fsyncs of {title}", "",
             "Per produce workload, medians over the repetitions (from the broker's "
             "`osprey_fsync_duration_seconds` histogram)."]
    disk = {}
    for run in runs:
        for writers, rate in run.get("disk fsyncs per second", {}).items():
            disk.setdefault(writers, []).append(rate)
    if disk:  # measured for every fsyncing variant since 2026-12-07; not in older raw files
        lines[-1] += " The disk alone, measured before each broker started: " + "; ".join(
            f"{median_cell(rates)} fdatasyncs/s of 16 KiB appends from {writers}"
            for writers, rates in disk.items()) + "."
    lines[-1] += (" Also per workload, from `osprey_request_duration_seconds{api=\"Produce\"}`: a Produce"
                  " request's mean time in the broker (frame read to response written) and how many"
                  " requests the broker held on average (that time summed over the workload's"
                  " duration, Little's law; the producer keeps up to 5 in flight): what the producer"
                  " was waiting on the broker for. Of a request's time, its wait for the acknowledgement"
                  " (the fsync; `osprey_request_stage_seconds` stage `remote`) and its wait behind the"
                  " connection's earlier responses, which go out in order (stage `response_queue`)."
                  " Flusher CPU: the user + system CPU of the threads that fsync, per fsync (the"
                  " kernel's work in fdatasync).")
    lines += ["", "| workload | fsyncs/s | KiB per fsync | mean fsync ms | flusher CPU µs per fsync "
              "| Produce ms in the broker | of which acknowledgement wait | of which behind earlier "
              "responses | Produce requests in the broker |", "|---|---|---|---|---|---|---|---|---|"]
    for workload in dict.fromkeys(w for run in runs for w in run["fsyncs"]):
        def column(name):
            values = [run["fsyncs"][workload][name] for run in runs
                      if run["fsyncs"].get(workload, {}).get(name) is not None]
            return median_cell(values)
        lines.append(f"| {workload} | {column('fsyncs per second')} | {column('KiB per fsync')} "
                     f"| {column('mean fsync ms')} | {column('flusher CPU us per fsync')} "
                     f"| {column('Produce ms in the broker')} | {column('of which acknowledgement wait')} "
                     f"| {column('of which behind earlier responses')} "
                     f"| {column('Produce requests in the broker')} |")
    return lines


def cpu_section(runs):
    """The cores Kafka's tool (its JVM) and the broker used during each Java-tool
    workload: on two shared cores, what left the other one."""
    runs = [run for run in runs if run.get("cpu")]
    if not runs:
        return []
    variants = list(dict.fromkeys(run["variant"] for run in runs))
    lines = ["", "## The cores each side used", "",
             "Per workload of Kafka's tools, medians over the repetitions: the CPU the tool's JVM "
             "(client) and the broker took while it ran, over its wall time, as client / broker "
             "cores. Two cores in all; what neither used was idle or other processes'.", "",
             "| workload | " + " | ".join(COLUMNS.get(v, v) for v in variants) + " |",
             "|---|" + "---|" * len(variants)]
    for workload in dict.fromkeys(w for run in runs for w in run["cpu"]):
        cells = []
        for variant in variants:
            of = [run["cpu"][workload] for run in runs if run["variant"] == variant and workload in run["cpu"]]
            if not of:
                cells.append("n/a")
                continue
            client = statistics.median(c["client cores"] for c in of)
            broker = statistics.median(c["broker cores"] for c in of)
            cells.append(f"{client:.2f} / {broker:.2f}")
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    return lines


def charts(figures, medians, out):
    """throughput.png and latency.png: one bar per variant for each figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v in VARIANTS if any(medians[(f, v)] is not None for f in figures)]

    def bars(selected, prefix, ylabel, title, path):
        if not selected:  # the cold mode has no latency figures
            return
        fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(selected) + 2), 5.5))
        width = 0.8 / len(variants)
        for i, variant in enumerate(variants):
            values = [medians[(f, variant)] or 0 for f in selected]
            drawn = ax.bar([x + i * width for x in range(len(selected))], values, width,
                           label=VARIANTS[variant])
            ax.bar_label(drawn, labels=[fmt(v) for v in values], fontsize=6, rotation=90, padding=2)
        ax.set_xticks([x + width * (len(variants) - 1) / 2 for x in range(len(selected))])
        ax.set_xticklabels([wrap(f.removeprefix(prefix)) for f in selected], fontsize=7,
                           rotation=30, ha="right")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        # Log scale: consume figures are orders of magnitude above produce figures.
        ax.set_yscale("log")
        ax.margins(y=0.25)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    throughput = [f for f in figures if "MiB/s" in f]
    bars(throughput, "", "MiB/s (median, log scale)",
         "Throughput, 1 KiB records (higher is better)", out / "throughput.png")
    latency = [f for f in figures if f.startswith("latency")]
    bars(latency, "latency ms ", "ms (median, log scale)", "End-to-end latency (lower is better)",
         out / "latency.png")


def wrap(text, width=28):
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join(lines + [line])


# ---------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, default="quick")
    parser.add_argument("--kafka-lib", type=Path)
    parser.add_argument("--osprey-bin", type=Path)
    parser.add_argument("--profile", default="release")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--reps", type=int, help="override the mode's repetitions")
    parser.add_argument("--variants", help="override the mode's brokers, comma-separated, kafka first: "
                        + ", ".join(VARIANTS))
    parser.add_argument("--note", default="", help="a line for the report, e.g. what else ran")
    parser.add_argument("--from-raw", type=Path,
                        help="run nothing: rewrite the report and charts from this raw.json")
    opts = parser.parse_args()
    opts.sizes = MODES[opts.mode]
    if opts.reps:
        opts.sizes = dataclasses.replace(opts.sizes, reps=opts.reps)
    if opts.variants:
        variants = tuple(opts.variants.split(","))
        if variants[0] != "kafka" or not set(variants) <= set(VARIANTS):
            parser.error(f"--variants: kafka first, then any of {', '.join(VARIANTS)}")
        opts.sizes = dataclasses.replace(opts.sizes, variants=variants)
    if opts.from_raw:
        return report_from_raw(opts)
    if not (opts.kafka_lib and opts.osprey_bin and opts.workdir):
        parser.error("--kafka-lib, --osprey-bin and --workdir are needed to run")
    if opts.sizes.pinned:
        if not {BROKER_CPU, CLIENT_CPU} <= os.sched_getaffinity(0):
            parser.error(f"a pinned run needs CPUs {BROKER_CPU} and {CLIENT_CPU}")
        # Every client is this process or its child, and inherits the client CPU.
        os.sched_setaffinity(0, {CLIENT_CPU})
    opts.revision, opts.machine = git_revision(), machine_description()
    # SIGTERM from a timeout or a CI stop takes the finally below, which kills the brokers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    started_at = datetime.datetime.now(datetime.timezone.utc)
    opts.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="osprey-bench-", dir=opts.workdir))
    runs, failures = [], []
    try:
        for rep in range(opts.sizes.reps):
            for variant in opts.sizes.variants:
                began = time.monotonic()
                try:
                    figures, fsyncs, cpu, disk = run_session(opts, variant, rep, workdir)
                except BenchError as e:
                    failures.append(f"{variant} rep {rep}: {e}")
                    print(f"bench: {variant} rep {rep} FAILED: {e}", file=sys.stderr, flush=True)
                    continue
                runs.append({"variant": variant, "rep": rep, "figures": figures,
                             "fsyncs": fsyncs, "cpu": cpu, "disk fsyncs per second": disk})
                print(f"bench: {variant} rep {rep + 1}/{opts.sizes.reps} done in "
                      f"{time.monotonic() - began:.0f} s", flush=True)
    finally:
        kill_all()
        shutil.rmtree(workdir, ignore_errors=True)

    return finish(opts, runs, started_at, len(failures))


def report_from_raw(opts):
    raw = json.loads(opts.from_raw.read_text())
    opts.mode = raw["mode"]
    opts.sizes = dataclasses.replace(MODES[opts.mode], reps=max(r["rep"] for r in raw["runs"]) + 1,
                                     variants=tuple(dict.fromkeys(r["variant"] for r in raw["runs"])))
    opts.revision, opts.machine = raw["revision"], raw["machine"]
    opts.profile, opts.note = raw["profile"], raw["note"]
    return finish(opts, raw["runs"], datetime.datetime.fromisoformat(raw["started_at"]), 0)


def finish(opts, runs, started_at, failures):
    opts.out.mkdir(parents=True, exist_ok=True)
    medians = write_report(opts, runs, started_at, opts.out)
    print((opts.out / "README.md").read_text())
    # Each (figure, variant) median is a check: it exists and is a positive number (a
    # latency may be 0: EndToEndLatency reports whole milliseconds).
    checks = [v is not None and (v > 0 or (v == 0 and figure.startswith("latency")))
              for (figure, variant), v in medians.items() if variant in opts.sizes.variants]
    failed = checks.count(False) + failures
    print(f"bench: {checks.count(True)} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
