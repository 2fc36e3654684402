#!/usr/bin/env python3
"""Replicated throughput, latency, cost and failover: 3 Osprey nodes against 3 Kafka nodes.

Started by bench/replicated.sh (which builds osprey in release, fetches Kafka and makes
the venv). Each variant runs as three combined-mode nodes on loopback, started as
bench/cluster.py starts them (Kafka formatted with StorageTool first). Membership and
fencing are each broker's default (broker.heartbeat.interval.ms=2000,
broker.session.timeout.ms=9000 on both: the same numbers).

Variants: `kafka` (Apache Kafka 4.4, no fsync on the write path); `osprey` at its
default durability (every ISR member fsyncs before it counts an acks=all write);
`osprey-nofsync`, whose topics set `flush.messages` to Kafka's default
(Long.MAX_VALUE), so leader and followers count page-cache data as Kafka does.

One repetition per variant, on a fresh cluster:
1. Topics with replication factor 3 and min.insync.replicas=2: `repl` (6 partitions),
   `latency` (1 partition) and `failover` (1 partition).
2. ProducerPerformance, acks=all, idempotent, to `repl`: default batching, and tuned
   (linger.ms=5, batch.size=131072). MiB/s and the tool's p50/p99/p99.9 send latency.
3. librdkafka (confluent-kafka) acks=all produce throughput to `repl`, and its fixed-rate
   end-to-end latency on `latency` (p50/p99/p99.9).
4. Cost over steps 2-3: CPU seconds (utime+stime from /proc/PID/stat, before and after,
   summed over the three broker processes) per GiB the clients produced, and the sum
   of the three processes' peak resident set (VmHWM).
5. Failover: a librdkafka producer (acks=all, idempotent, retry.backoff.ms=20, as
   cluster.py's) writes to `failover` at a fixed rate; the partition's leader is killed
   with SIGKILL (it is placed on a node that is not the active controller, so that the
   kill is a broker's failure alone); the figure is the seconds from the kill to the
   first acknowledgement of a record sent after the kill. The killed node is restarted; the second figure is the
   seconds from its restart until `failover`'s ISR names all three replicas again.

Checks, each a failed repetition when it does not hold: the high watermarks of `repl` add
up to the records the clients had acknowledged (nothing acknowledged is missing, nothing is
doubled); the three replicas of every partition of `repl` (after step 3) and of `failover`
(after the restarted node rejoined) hold the same number of bytes in their segment files.
At the end the nodes are killed (shutdown is not measured here) and their data deleted;
each node's output is kept in WORKDIR/logs/VARIANT-REP/.

Results: OUT/replicated-raw.json and OUT/REPLICATED.md (with --quick, in WORKDIR instead):
medians over the repetitions, ratios Osprey / Kafka, and issue 15's goals against them.
--report-only RAW writes the report again from a replicated-raw.json.

Usage: replicated.py --kafka-lib DIR --osprey-bin PATH --workdir DIR --out DIR
                     [--variants kafka,osprey,osprey-nofsync] [--reps 1] [--quick] [--records N]
                     [--note TEXT] [--report-only RAW]
"""

import dataclasses
import datetime
import json
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (workloads, process usage, the report's machine and revision)
import cluster  # noqa: E402  (3-node clusters and raw Metadata)

VARIANTS = ("kafka", "osprey", "osprey-nofsync")
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
REPL_PARTITIONS = 6
GIB = 1024 ** 3
bench.BATCHING["linger5"] = ["linger.ms=5", "batch.size=131072"]


@dataclasses.dataclass(frozen=True)
class Sizes:
    producer_performance_records: int
    librdkafka_records: int
    latency_rate_msgs_per_s: int
    latency_seconds: float
    failover_rate_msgs_per_s: int
    failover_steady_s: float  # producing before the kill
    tool_timeout_s: int


SIZES = {
    "quick": Sizes(2_000, 2_000, 100, 1.0, 50, 1.0, 120),
    "full": Sizes(1_000_000, 500_000, 1_000, 10.0, 200, 3.0, 900),
}

FIGURES = [
    ("pp_default_mib_s", "ProducerPerformance acks=all, default batching: MiB/s"),
    ("pp_default_p50_ms", "  its p50 latency, ms"),
    ("pp_default_p99_ms", "  its p99 latency, ms"),
    ("pp_default_p999_ms", "  its p99.9 latency, ms"),
    ("pp_linger5_mib_s", "ProducerPerformance acks=all, linger.ms=5 batch.size=131072: MiB/s"),
    ("pp_linger5_p50_ms", "  its p50 latency, ms"),
    ("pp_linger5_p99_ms", "  its p99 latency, ms"),
    ("pp_linger5_p999_ms", "  its p99.9 latency, ms"),
    ("rdkafka_mib_s", "librdkafka acks=all produce: MiB/s"),
    ("rdkafka_p50_ms", "librdkafka fixed-rate end-to-end latency p50, ms"),
    ("rdkafka_p99_ms", "  p99, ms"),
    ("rdkafka_p999_ms", "  p99.9, ms"),
    ("cpu_s_per_gib", "broker CPU seconds per GiB produced (3 processes)"),
    ("rss_mib", "peak RSS of the 3 brokers, MiB"),
    ("failover_s", "kill -9 of the leader → next acknowledged write, s"),
    ("rejoin_s", "restart of the killed leader → back in the ISR, s"),
]


# Issue 15's goals: (label, the lowest Osprey / Kafka throughput, the highest p99 ratio).
GOALS = {
    "osprey": ("default durability: at least Kafka's throughput, at most its p99", 1.0, 1.0),
    "osprey-nofsync": ("like for like: 1.5x Kafka's throughput, a third of its p99", 1.5, 1 / 3),
}
GOAL_FIGURES = [("pp_default_mib_s", "pp_default_p99_ms"), ("pp_linger5_mib_s", "pp_linger5_p99_ms"),
                ("rdkafka_mib_s", "rdkafka_p99_ms")]


def topic_configs(variant):
    configs = {"min.insync.replicas": str(MIN_INSYNC_REPLICAS)}
    if variant == "osprey-nofsync":
        configs["flush.messages"] = bench.KAFKA_FLUSH_MESSAGES
    return configs


def create_topics(opts, nodes, variant):
    """`repl` and `latency` placed by the controller; `failover` led by a node that is not
    the active controller, so that its kill is a broker's failure, not also the controller's
    (whose election would add to the figure, in Kafka as in Osprey)."""
    controller = cluster.active_controller(opts, nodes[0])
    leader = next(n.node_id for n in nodes if n.node_id != controller)
    admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    new = [NewTopic(name, partitions, REPLICATION_FACTOR, config=topic_configs(variant))
           for name, partitions in (("repl", REPL_PARTITIONS), ("latency", 1))]
    replicas = [leader, *(n.node_id for n in nodes if n.node_id != leader)]
    new.append(NewTopic("failover", 1, replica_assignment=[replicas], config=topic_configs(variant)))
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(60)
    check_topic_configs(nodes, admin, [t.topic for t in new], topic_configs(variant))
    # Ready when an acks=all record is acknowledged on every partition: the ISR is formed.
    # Not on `latency`: its consumer reads from offset 0, and takes the send time from
    # every record's first bytes (its own warm-up record waits for the topic instead).
    for topic in new:
        if topic.topic != "latency":
            cluster.produce_everywhere(nodes[0], topic.topic, topic.num_partitions)


def check_topic_configs(nodes, admin, topics, expected):
    """The brokers describe the topics with the configs they were created with (asked
    again while the broker asked does not know a topic yet)."""
    for topic in topics:
        described = {}

        def describe():
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            try:
                described.update(admin.describe_configs([resource])[resource].result(30))
                return True
            except KafkaException:
                return False

        cluster.wait_for(f"{topic}'s configs described", describe, nodes)
        wrong = {k: described[k].value if k in described else None
                 for k, v in expected.items() if k not in described or described[k].value != v}
        if wrong:
            raise bench.BenchError(f"{topic} was created with {expected}, described with {wrong}")


def high_watermarks(nodes, topic, partitions):
    consumer = Consumer({"bootstrap.servers": ",".join(n.bootstrap for n in nodes), "group.id": "replicated-check"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        consumer.close()


def check_acknowledged(nodes, topic, partitions, acknowledged):
    """Every acknowledged record is below the high watermark, and nothing more is."""
    found = high_watermarks(nodes, topic, partitions)
    if sum(found) != acknowledged:
        raise bench.BenchError(f"{topic}: high watermarks {found} add up to {sum(found)}, "
                               f"but {acknowledged} records were acknowledged")


def segment_bytes(node, topic):
    """{partition: bytes in the partition's segment (.log) files} on this node."""
    sizes = {}
    for directory in node.data.glob(f"{topic}-*"):
        partition = directory.name.rsplit("-", 1)[1]
        if partition.isdigit():
            sizes[int(partition)] = sum(f.stat().st_size for f in directory.glob("*.log"))
    return sizes


def wait_replicas_agree(nodes, topic):
    """Waits until the three replicas of every partition of topic hold the same bytes."""
    last = {}

    def agree():
        last.update({n.node_id: segment_bytes(n, topic) for n in nodes})
        first = last[nodes[0].node_id]
        return bool(first) and all(last[n.node_id] == first for n in nodes)

    try:
        cluster.wait_for(f"the replicas of {topic} agree", agree, nodes)
    except bench.BenchError as e:
        raise bench.BenchError(f"{e}; segment bytes per node {last}") from None


def usage(nodes):
    """(CPU seconds, peak resident bytes) summed over the running broker processes."""
    per_node = [bench.Broker.usage(n) for n in nodes]
    return sum(c for c, _ in per_node), sum(r for _, r in per_node)


def throughput_and_latency(opts, nodes, figures):
    clients = types.SimpleNamespace(bootstrap=",".join(n.bootstrap for n in nodes))
    sizes = opts.sizes
    cpu_before, _ = usage(nodes)
    produced_bytes = 0
    # The readiness records of create_topics, one per partition.
    acknowledged = REPL_PARTITIONS
    for batching in ("default", "linger5"):
        mib_s, (p50, p99, p999) = bench.producer_performance_summary(
            opts, clients, "repl", sizes.producer_performance_records, "all", batching)
        figures.update({f"pp_{batching}_mib_s": mib_s, f"pp_{batching}_p50_ms": p50,
                        f"pp_{batching}_p99_ms": p99, f"pp_{batching}_p999_ms": p999})
        produced_bytes += sizes.producer_performance_records * bench.RECORD_BYTES
        acknowledged += sizes.producer_performance_records
    figures["rdkafka_mib_s"] = bench.librdkafka_produce(clients, "repl", sizes.librdkafka_records, "all")
    produced_bytes += sizes.librdkafka_records * bench.RECORD_BYTES
    acknowledged += sizes.librdkafka_records + 1  # and its warm-up record
    latencies = bench.librdkafka_fixed_rate_latency(clients, "latency", sizes.latency_rate_msgs_per_s,
                                                    sizes.latency_seconds)
    produced_bytes += int(sizes.latency_rate_msgs_per_s * sizes.latency_seconds) * bench.RECORD_BYTES
    figures["rdkafka_p50_ms"], figures["rdkafka_p99_ms"], figures["rdkafka_p999_ms"] = latencies
    cpu_after, rss = usage(nodes)
    figures["cpu_s_per_gib"] = (cpu_after - cpu_before) / (produced_bytes / GIB)
    figures["rss_mib"] = rss / bench.MIB
    check_acknowledged(nodes, "repl", REPL_PARTITIONS, acknowledged)
    wait_replicas_agree(nodes, "repl")


def failover(opts, nodes, voters, figures):
    """Seconds from the SIGKILL of `failover`'s leader to the first acknowledgement of a
    record sent after the kill; then restarts the node, and the seconds until the ISR
    names it again."""
    md = cluster.try_metadata(nodes[0], ["failover"])
    parts = md and md[1].get("failover")
    if not parts or parts[0][1] < 0:
        raise bench.BenchError(f"no leader for failover: {md}")
    dead = next(n for n in nodes if n.node_id == parts[0][1])
    figures["killed_controller"] = int(dead.node_id == cluster.active_controller(opts, nodes[0]))
    producer = Producer({"bootstrap.servers": ",".join(n.bootstrap for n in nodes), "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0, "retry.backoff.ms": 20,
                         "message.timeout.ms": cluster.FIGURE_S * 1000,
                         "topic.metadata.refresh.interval.ms": 100})
    acked_after_kill = []
    errors = []
    killed = None

    def on_delivery(sent, err):
        if err is not None:
            errors.append(err)
        elif killed is not None and sent >= killed:
            acked_after_kill.append(time.monotonic())

    rate = opts.sizes.failover_rate_msgs_per_s
    started = time.monotonic()
    i = 0
    while not acked_after_kill:
        now = time.monotonic()
        if killed is None and now - started >= opts.sizes.failover_steady_s:
            dead.kill9()
            killed = time.monotonic()
        if killed is not None and now - killed > cluster.FIGURE_S:
            raise bench.BenchError(f"no acknowledged write within {cluster.FIGURE_S} s of the kill")
        sent = time.monotonic()
        producer.produce("failover", b"x" * 100, partition=0,
                         on_delivery=lambda err, _m, sent=sent: on_delivery(sent, err))
        i += 1
        # Poll until the next send is due, so that an acknowledgement is seen when it comes.
        while time.monotonic() < started + i / rate:
            producer.poll(0.001)
    figures["failover_s"] = acked_after_kill[0] - killed
    producer.flush(cluster.FIGURE_S)
    if errors:
        raise bench.BenchError(f"failover producer errors: {errors[:3]}")
    dead.start(voters)

    def full_isr():
        md = cluster.try_metadata(nodes[0], ["failover"])
        parts = md and md[1].get("failover")
        return bool(parts) and sorted(parts[0][2]) == sorted(n.node_id for n in nodes)

    figures["rejoin_s"] = cluster.wait_for("the restarted node back in failover's ISR", full_isr, nodes,
                                           cluster.READY_S)
    wait_replicas_agree(nodes, "failover")


def run_variant(opts, variant, rep):
    nodes, voters = cluster.new_cluster(opts, variant, opts.workdir / f"repl-{variant}-{rep}")
    figures = {}
    try:
        cluster.start_cluster(opts, nodes, voters)
        create_topics(opts, nodes, variant)
        throughput_and_latency(opts, nodes, figures)
        failover(opts, nodes, voters, figures)
    finally:
        # Killed, not stopped: the data is deleted, and shutdown is not what this measures
        # (a graceful stop of three nodes one by one takes longer than the quick workloads).
        for n in nodes:
            if n.proc is not None:
                n.kill9()
        keep_logs(nodes, opts.workdir / "logs" / f"{variant}-{rep}")
    shutil.rmtree(nodes[0].root.parent, ignore_errors=True)
    return figures


def keep_logs(nodes, into):
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    for n in nodes:
        log = n.root / "node.log"
        if log.exists():
            shutil.copy(log, into / f"node{n.node_id}.log")


def fmt(value):
    return "n/a" if value is None else bench.fmt(value)


def cell(values):
    return bench.median_cell(values, fmt)


def goal_lines(medians, osprey_variants):
    """Issue 15's goals against the medians, one row per workload and variant."""
    lines = ["", "Issue 15's goals, on the medians (the ProducerPerformance p99s at full speed are mostly "
             "time spent queued in the producer, so the fixed-rate librdkafka row is the latency comparison):", "",
             "| goal | workload | throughput ratio | p99 ratio | met |", "|---|---|---|---|---|"]
    for v in osprey_variants:
        label, min_throughput, max_p99 = GOALS[v]
        for i, (throughput, p99) in enumerate(GOAL_FIGURES):
            ratios = [medians[v].get(k) / medians["kafka"][k] if medians[v].get(k) is not None
                      and medians["kafka"].get(k) else None for k in (throughput, p99)]
            if None in ratios:
                continue
            met = "yes" if ratios[0] >= min_throughput and ratios[1] <= max_p99 else "no"
            goal = f"{v}: {label}" if i == 0 else ""
            workload = throughput.rsplit("_", 2)[0]
            lines.append(f"| {goal} | {workload} | {ratios[0]:.2f}x | {ratios[1]:.2f}x | {met} |")
    return lines


def write_report(run, out):
    """OUT/REPLICATED.md from one run's record (what replicated-raw.json holds)."""
    runs, failures = run["runs"], run["failures"]
    variants = [v for v in VARIANTS if v in runs]
    values = {v: {k: [r[k] for r in runs[v] if k in r] for k, _ in FIGURES} for v in variants}
    medians = {v: {k: statistics.median(x) for k, x in values[v].items() if x} for v in variants}
    osprey_variants = [v for v in variants if v.startswith("osprey")] if "kafka" in variants else []
    lines = ["# Replicated: 3 Osprey nodes against 3 Kafka nodes, RF 3, min.insync.replicas 2, acks=all", "",
             f"Command: `{run['command']}`", "",
             f"Date {run['date']}, revision {run['revision']}; {run['machine']}.", "",
             f"Load (`uptime`) before the run: {run['load_before']}; after it: {run['load_after']}.",
             "", *([run["note"], ""] if run["note"] else []),
             f"Sizes ({run['mode']}): {run['sizes']}; {run['reps']} repetition(s), "
             "medians (range in brackets). Method: the docstring of `bench/replicated.py`.", ""]
    header = "| figure | " + " | ".join(variants) + "".join(f" | {v} / kafka" for v in osprey_variants) + " |"
    lines += [header, "|---" * (1 + len(variants) + len(osprey_variants)) + "|"]
    for key, label in FIGURES:
        cells = [cell(values[v][key]) for v in variants]
        for v in osprey_variants:
            a, b = medians[v].get(key), medians["kafka"].get(key)
            cells.append(f"{a / b:.2f}x" if a is not None and b else "n/a")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios of the medians: for MiB/s higher is better; for every other figure lower is better."]
    lines += goal_lines(medians, osprey_variants)
    lines += ["",
              "- `kafka`: Apache Kafka " + bench.KAFKA_VERSION + ", 3 combined nodes, JVM flags of "
              "kafka-server-start.sh; no fsync on the write path (Kafka's default).",
              "- `osprey`: default durability, fsync on every ISR member before an acks=all write counts.",
              f"- `osprey-nofsync`: topic `flush.messages={bench.KAFKA_FLUSH_MESSAGES}`, like for like with Kafka.",
              "- Fencing: each broker's default, the same on both (broker.heartbeat.interval.ms=2000, "
              "broker.session.timeout.ms=9000); nothing lowered.",
              "- Failover: `failover`'s leader is placed on a node that is not the active controller, so "
              "that the kill fences a broker and leaves the controller quorum's leader alone. Repetitions "
              "in which the killed leader was the active controller after all: "
              + ", ".join(f"{v} {sum(r.get('killed_controller', 0) for r in runs[v])}" for v in variants) + ".",
              "- Three nodes, the clients and the Java tools share one machine (loopback); the figures "
              "are relative, not absolute."]
    for v, failed in failures.items():
        for f in failed:
            lines.append(f"- {v}: failed repetition: {f}")
    (out / "REPLICATED.md").write_text("\n".join(lines) + "\n")


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main():
    p = cluster.arguments(__doc__.split("\n")[0], VARIANTS, reps=1)
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes, kafka and osprey only unless --variants says otherwise: a smoke test")
    p.add_argument("--records", type=int,
                   help="records per ProducerPerformance run (librdkafka's: half), instead of the mode's")
    p.add_argument("--report-only", type=Path, metavar="RAW",
                   help="write OUT/REPLICATED.md again from a replicated-raw.json, running nothing")
    p.set_defaults(variants=None)
    opts = p.parse_args()
    if opts.report_only:
        write_report(json.loads(opts.report_only.read_text()), opts.out)
        print((opts.out / "REPLICATED.md").read_text())
        return
    opts.command = " ".join(["bench/replicated.sh", *map(shlex.quote, cluster.script_args(sys.argv[1:]))])
    opts.mode = "quick" if opts.quick else "full"
    opts.sizes = SIZES[opts.mode]
    if opts.records:
        opts.sizes = dataclasses.replace(opts.sizes, producer_performance_records=opts.records,
                                         librdkafka_records=opts.records // 2)
    given = opts.variants or ("kafka,osprey" if opts.quick else ",".join(VARIANTS))
    variants = cluster.chosen_variants(p, given, VARIANTS)
    run = {"command": opts.command, "revision": bench.git_revision(), "machine": bench.machine_description(),
           "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "load_before": uptime(),
           "note": opts.note, "mode": opts.mode, "sizes": dataclasses.asdict(opts.sizes), "reps": opts.reps}
    opts.out.mkdir(parents=True, exist_ok=True)
    opts.workdir.mkdir(parents=True, exist_ok=True)
    # The backstop's SIGTERM (bench/release.sh) exits through `finally`, which kills the nodes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        runs, failures = cluster.alternate(variants, opts.reps, lambda v, rep: run_variant(opts, v, rep))
    finally:
        bench.kill_all()
    run.update(load_after=uptime(), runs={v: r for v, r in runs.items() if r}, failures=failures)
    out = opts.out if not opts.quick else opts.workdir
    (out / "replicated-raw.json").write_text(json.dumps(run, indent=1))
    write_report(run, out)
    print((out / "REPLICATED.md").read_text())
    if any(failures.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
