#!/usr/bin/env python3
"""Failover figures of a 3-node cluster, Apache Kafka and Osprey side by side.

Started by bench/cluster.sh (which builds osprey in release, fetches Kafka and makes the
venv). Each variant runs as three combined-mode nodes (process.roles=broker,controller) on
loopback, configured with the keys of issue 14 (node.id, controller.quorum.voters,
listeners with a CONTROLLER listener, ...). Kafka's directories are formatted with
kafka-storage's StorageTool first; Osprey's are not (it needs no format step).

Variants: `kafka` creates its topics with replication factor 3 (`spread`) and 2 (the
failover topics); `osprey` with 1, because an Osprey cluster serves replication factor 1
only until partition replication (issue 15); `kafka-rf1` is Kafka with Osprey's replication
factors, the like-for-like comparison.

One repetition, on a fresh cluster:
1. **create → served**: CreateTopics `spread` (6 partitions, replication factor 3); the
   seconds until every broker's own Metadata answer lists all six partitions with a live
   leader, and until one acks=all record has been acknowledged on every partition (with
   replication factor 1 that is the leader's own write).
2. **controller failover**: the active controller (from DescribeQuorum, read with Kafka's
   kafka-metadata-quorum tool) is killed with SIGKILL; the seconds from the kill to the
   first CreateTopics that succeeds, sent to the survivors and retried at once on failure.
   The killed node is then restarted and the cluster waits for it to be listed again.
3. **fence**: a node that is not the active controller is killed with SIGKILL; the seconds
   until the survivors' Metadata stops listing it, and until no partition of `spread`
   names it as leader.

Metadata is read with raw Metadata v1 requests sent to one chosen broker, so that each
broker is asked about itself (librdkafka would ask whichever broker it likes).

Results: OUT/cluster-VARIANT.json per variant, and CLUSTER.md drawn from every
cluster-*.json in OUT (medians and ranges; the ratios are Osprey / each Kafka variant,
lower is better). A repetition's directory is deleted once it succeeded, to bound disk use.

Usage: cluster.py --variants kafka,kafka-rf1,osprey --kafka-lib DIR --osprey-bin PATH
                  --workdir DIR --out DIR [--reps 3] [--note TEXT]
"""

import argparse
import concurrent.futures
import datetime
import json
import re
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (process helpers, the JVM flags and the Kafka cluster id)

SPREAD_PARTITIONS = 6
READY_S = 180  # a node that has not joined by then is a failed run
FIGURE_S = 120  # a figure that has not happened by then is a failed run
ATTEMPT_EVERY_S = 0.1  # a new CreateTopics attempt this often after the controller's kill
VARIANTS = ("kafka", "kafka-rf1", "osprey", "osprey-rf1")
FIGURES = [
    ("create_metadata_s", "CreateTopics → every broker's Metadata lists all partitions with a leader"),
    ("create_produce_s", "CreateTopics → an acks=all record acknowledged on every partition"),
    ("failover_create_s", "kill -9 of the active controller → next successful CreateTopics"),
    ("fence_unlisted_s", "kill -9 of a broker → survivors' Metadata no longer lists it"),
    ("fence_leaders_s", "kill -9 of a broker → no partition names it as leader"),
]


def replication_factors(variant):
    """(of `spread`, of the failover topics): 3 and 2 as a cluster would be run; 1 and 1
    for the `-rf1` variants (the figures from before partition replication)."""
    return (1, 1) if variant.endswith("-rf1") else (3, 2)


def is_kafka(variant):
    return variant.startswith("kafka")


class Node:
    """One combined broker+controller process with its own directory and ports."""

    def __init__(self, variant, root, node_id, opts):
        self.variant = variant
        self.node_id = node_id
        self.root = root / f"node{node_id}"
        self.data = self.root / "data"
        self.data.mkdir(parents=True)
        self.port = bench.free_port()
        self.controller_port = bench.free_port()
        self.opts = opts
        self.proc = None

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def keys(self, voters):
        return {
            "node.id": str(self.node_id),
            "process.roles": "broker,controller",
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data),
        }

    def command(self, voters):
        keys = self.keys(voters)
        if is_kafka(self.variant):
            config = self.root / "server.properties"
            keys["group.initial.rebalance.delay.ms"] = "0"
            config.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
            return ["java", *bench.KAFKA_JVM_FLAGS, "-cp", f"{self.opts.kafka_lib}/*", "kafka.Kafka", str(config)]
        cmd = [str(self.opts.osprey_bin), "--override", "metrics.listener="]
        for k, v in keys.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def format(self, voters, cluster_id):
        """Kafka only: kafka-storage format with the static voter set."""
        self.command(voters)  # writes server.properties
        bench.java("kafka.tools.StorageTool", ["format", "-t", cluster_id, "-c", str(self.root / "server.properties")],
                   f"{self.opts.kafka_lib}/*", 120, jvm=[])

    def start(self, voters):
        with open(self.root / "node.log", "ab") as log:
            self.proc = subprocess.Popen(self.command(voters), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        bench.LIVE.append(self.proc)

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        bench.LIVE.remove(self.proc)
        self.proc = None

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        bench.LIVE.remove(self.proc)
        self.proc = None

    def check_alive(self):
        if self.proc is not None and self.proc.poll() is not None:
            tail = "\n".join((self.root / "node.log").read_text(errors="replace").splitlines()[-30:])
            raise bench.BenchError(f"{self.variant} node {self.node_id} exited with {self.proc.returncode}:\n{tail}")


def metadata(node, topics, timeout_s=2.0):
    """A raw Metadata v1 request to this node only: (brokers {id: port}, {topic: [(partition,
    leader, isr)]} or None for a topic the node answers with an error)."""
    body = struct.pack(">i", len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    client = b"osprey-cluster-bench"
    header = struct.pack(">hhih", 3, 1, 7, len(client)) + client
    frame = header + body
    with socket.create_connection(("127.0.0.1", node.port), timeout=timeout_s) as s:
        s.settimeout(timeout_s)
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        buf = recv_exact(s, size)
    r = Reader(buf)
    r.i32()  # correlation id
    brokers = {}
    for _ in range(r.i32()):
        broker_id = r.i32()
        r.string()
        port = r.i32()
        r.string()  # rack
        brokers[broker_id] = port
    r.i32()  # controller id
    result = {}
    for _ in range(r.i32()):
        error = r.i16()
        name = r.string()
        r.i8()  # is_internal
        parts = []
        for _ in range(r.i32()):
            r.i16()
            index = r.i32()
            leader = r.i32()
            for _ in range(r.i32()):  # replicas
                r.i32()
            isr = [r.i32() for _ in range(r.i32())]
            parts.append((index, leader, isr))
        result[name] = None if error else parts
    return brokers, result


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise OSError("connection closed")
        out += chunk
    return out


class Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt):
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def i8(self):
        return self.take(">b")

    def i16(self):
        return self.take(">h")

    def i32(self):
        return self.take(">i")

    def string(self):
        n = self.i16()
        if n < 0:
            return None
        s = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return s


def try_metadata(node, topics):
    try:
        return metadata(node, topics)
    except (OSError, struct.error):
        return None


def wait_for(what, check, nodes, limit_s=FIGURE_S):
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        for n in nodes:
            n.check_alive()
        if check():
            return time.monotonic() - started
        time.sleep(0.02)
    raise bench.BenchError(f"{what}: not within {limit_s} s")


def active_controller(opts, node):
    """The quorum leader's id, from kafka-metadata-quorum describe --status."""
    out = bench.java("org.apache.kafka.tools.MetadataQuorumCommand",
                     ["--bootstrap-server", node.bootstrap, "describe", "--status"],
                     f"{opts.kafka_lib}/*", 60)
    m = re.search(r"^LeaderId:\s+(\d+)", out, re.M)
    if not m:
        raise bench.BenchError(f"no LeaderId in kafka-metadata-quorum output:\n{out}")
    return int(m.group(1))


def all_listed(nodes, expect_ids):
    for n in nodes:
        md = try_metadata(n, [])
        if md is None or set(md[0]) != set(expect_ids):
            return False
    return True


def create_topic(node, name, partitions, rf, timeout_s=5.0):
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    future = admin.create_topics([NewTopic(name, partitions, rf)], request_timeout=timeout_s,
                                 operation_timeout=timeout_s)[name]
    future.result(timeout=timeout_s + 5)


def first_create_after(node, killed, rf):
    """(seconds from `killed` to the first CreateTopics that succeeded, attempts). A new
    attempt starts every ATTEMPT_EVERY_S whatever the earlier ones are doing, so a request
    stuck on the dead controller does not hide a later one that would have succeeded."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    pending = []
    attempt = 0
    while time.monotonic() - killed < FIGURE_S:
        attempt += 1
        name = f"after-failover-{attempt}"
        pending.append(admin.create_topics([NewTopic(name, 1, rf)], request_timeout=FIGURE_S,
                                           operation_timeout=FIGURE_S)[name])
        deadline = time.monotonic() + ATTEMPT_EVERY_S
        while time.monotonic() < deadline:
            for future in pending:
                if future.done() and future.exception() is None:
                    return time.monotonic() - killed, attempt
            time.sleep(0.005)
    raise bench.BenchError(f"no CreateTopics succeeded within {FIGURE_S} s of the kill")


def produce_everywhere(node, topic, partitions):
    """True once one acks=all record is acknowledged on every partition."""
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": FIGURE_S * 1000, "retry.backoff.ms": 20,
                         "topic.metadata.refresh.interval.ms": 100})
    errors = []
    for p in range(partitions):
        producer.produce(topic, b"x", partition=p,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
    left = producer.flush(FIGURE_S)
    if left or errors:
        raise bench.BenchError(f"produce to {topic}: {left} undelivered, errors {errors[:3]}")


def new_cluster(opts, variant, root):
    """Three nodes of the variant under root, not started: (nodes, voters)."""
    shutil.rmtree(root, ignore_errors=True)
    nodes = [Node(variant, root, i, opts) for i in (1, 2, 3)]
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    return nodes, voters


def start_cluster(opts, nodes, voters):
    """Formats (Kafka) and starts the nodes; returns once every node lists all three."""
    if is_kafka(nodes[0].variant):
        cluster_id = bench.kafka_cluster_id()
        # At once: each format is a JVM start of several seconds.
        with concurrent.futures.ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(lambda n: n.format(voters, cluster_id), nodes))
    for n in nodes:
        n.start(voters)
    ids = [n.node_id for n in nodes]
    wait_for("every node lists three brokers", lambda: all_listed(nodes, ids), nodes, READY_S)


def run_rep(opts, variant, rep, workdir):
    root = workdir / f"{variant}-{rep}"
    nodes, voters = new_cluster(opts, variant, root)
    ids = [n.node_id for n in nodes]
    figures = {}
    spread_rf, failover_rf = replication_factors(variant)
    try:
        start_cluster(opts, nodes, voters)

        # 1. create -> served
        started = time.monotonic()
        create_topic(nodes[0], "spread", SPREAD_PARTITIONS, spread_rf, timeout_s=30)

        def every_broker_serves():
            for n in nodes:
                md = try_metadata(n, ["spread"])
                parts = md and md[1].get("spread")
                if not parts or len(parts) != SPREAD_PARTITIONS or any(leader < 0 for _, leader, _ in parts):
                    return False
            return True

        wait_for("spread in every broker's metadata", every_broker_serves, nodes)
        figures["create_metadata_s"] = time.monotonic() - started
        produce_everywhere(nodes[0], "spread", SPREAD_PARTITIONS)
        figures["create_produce_s"] = time.monotonic() - started

        # 2. controller failover
        leader_id = active_controller(opts, nodes[0])
        dead = next(n for n in nodes if n.node_id == leader_id)
        survivors = [n for n in nodes if n is not dead]
        dead.kill9()
        killed = time.monotonic()
        figures["failover_create_s"], attempt = first_create_after(survivors[0], killed, failover_rf)
        figures["failover_attempts"] = attempt
        dead.start(voters)
        wait_for("the killed controller is listed again", lambda: all_listed(nodes, ids), nodes, READY_S)

        # 3. fence a broker that is not the active controller
        leader_id = active_controller(opts, nodes[0])
        victim = next(n for n in nodes if n.node_id != leader_id)
        survivors = [n for n in nodes if n is not victim]
        victim.kill9()
        killed = time.monotonic()
        wait_for("the killed broker unlisted", lambda: all_listed(survivors, [i for i in ids if i != victim.node_id]),
                 survivors)
        figures["fence_unlisted_s"] = time.monotonic() - killed

        def no_dead_leader():
            md = try_metadata(survivors[0], ["spread"])
            parts = md and md[1].get("spread")
            return bool(parts) and all(leader != victim.node_id for _, leader, _ in parts)

        wait_for("no partition led by the killed broker", no_dead_leader, survivors)
        figures["fence_leaders_s"] = time.monotonic() - killed
    finally:
        for n in nodes:
            n.stop()
    shutil.rmtree(root, ignore_errors=True)
    return figures


def write_report(out):
    runs = {}
    for path in sorted(out.glob("cluster-*.json")):
        data = json.loads(path.read_text())
        runs[data["variant"]] = data
    variants = [v for v in VARIANTS if v in runs]
    baselines = [v for v in variants if is_kafka(v)] if "osprey" in runs else []
    commands = sorted({runs[v].get("command", "bench/cluster.sh") for v in variants})
    lines = ["# Cluster failover: Osprey and Apache Kafka, 3 combined nodes on one machine", "",
             "Drawn by `bench/cluster.sh` from every `cluster-*.json` here. Medians over the "
             "repetitions, range in brackets; seconds; lower is better. Method: the docstring of "
             "`bench/cluster.py`.", "",
             "Command: " + ", ".join(f"`{c}`" for c in commands), ""]
    lines.append("| figure | " + " | ".join(variants) + "".join(f" | osprey / {b}" for b in baselines) + " |")
    lines.append("|---" * (len(variants) + 1 + len(baselines)) + "|")
    for key, label in FIGURES:
        cells, medians = [], {}
        for v in variants:
            values = [r[key] for r in runs[v]["reps"] if key in r]
            if values:
                medians[v] = statistics.median(values)
                cells.append(f"{medians[v]:.2f} [{min(values):.2f}-{max(values):.2f}]")
            else:
                cells.append("n/a")
        for b in baselines:
            cells.append(f"{medians['osprey'] / medians[b]:.2f}x" if "osprey" in medians and medians.get(b) else "n/a")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for v in variants:
        r = runs[v]
        spread_rf, failover_rf = replication_factors(v)
        lines.append(f"- **{v}**: replication factor {spread_rf} (`spread`) and {failover_rf} (failover topics); "
                     f"{len(r['reps'])} repetitions, {r['date']}, revision {r['revision']}; "
                     f"{r['machine']}. {r.get('note') or ''}".rstrip())
        for failure in r.get("failures", []):
            lines.append(f"  - failed repetition: {failure}")
    lines += ["", "Caveats:",
              "- `kafka` and `osprey` run as a cluster would be run: replication factor 3 for "
              "`spread`, 2 for the failover topics; acks=all waits for every in-sync replica "
              "(on Osprey, fsynced on each). The `-rf1` variants use one replica.",
              "- Three nodes and the clients share one machine (loopback); few repetitions. The "
              "fence figures are dominated by `broker.session.timeout.ms` (9000, both)."]
    (out / "CLUSTER.md").write_text("\n".join(lines) + "\n")


def script_args(argv, paths=("--kafka-lib", "--osprey-bin", "--workdir", "--out")):
    """What the shell script was given, for the report: argv without the paths the script
    adds itself (as `--flag value` or `--flag=value`)."""
    given = []
    args = iter(argv)
    for a in args:
        if a in paths:
            next(args, None)
        elif a.split("=", 1)[0] not in paths:
            given.append(a)
    return given


def arguments(description, variants, reps):
    """The options every multi-node benchmark takes (the shell script passes the paths)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--variants", default=",".join(variants))
    p.add_argument("--kafka-lib", type=Path, required=True)
    p.add_argument("--osprey-bin", type=Path, required=True)
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reps", type=int, default=reps)
    p.add_argument("--note", default="")
    return p


def chosen_variants(p, given, known):
    """The comma-separated variants, each one of known (else the parser's error)."""
    variants = given.split(",")
    unknown = set(variants) - set(known)
    if unknown:
        p.error(f"unknown variants {sorted(unknown)}: choose from {', '.join(known)}")
    return variants


def alternate(variants, reps, run_one):
    """run_one(variant, rep) for each repetition, the variants alternating within each so
    that a load change on the machine falls on all of them alike: ({variant: [figures]},
    {variant: [the first line of each failed repetition's error]})."""
    runs = {v: [] for v in variants}
    failures = {v: [] for v in variants}
    for rep in range(reps):
        for variant in variants:
            try:
                figures = run_one(variant, rep)
                print(f"{variant} rep {rep}: {json.dumps(figures)}", flush=True)
                runs[variant].append(figures)
            except bench.BenchError as e:
                print(f"{variant} rep {rep} failed: {e}", flush=True)
                failures[variant].append(str(e).splitlines()[0])
    return runs, failures


def main():
    p = arguments(__doc__.split("\n")[0], VARIANTS, reps=3)
    opts = p.parse_args()
    opts.argv = script_args(sys.argv[1:])
    variants = chosen_variants(p, opts.variants, VARIANTS)
    opts.out.mkdir(parents=True, exist_ok=True)
    opts.workdir.mkdir(parents=True, exist_ok=True)
    # The backstop's SIGTERM (bench/release.sh) exits through `finally`, which kills the nodes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        reps, failures = alternate(variants, opts.reps, lambda v, rep: run_rep(opts, v, rep, opts.workdir))
        for variant in variants:
            (opts.out / f"cluster-{variant}.json").write_text(json.dumps({
                "variant": variant, "reps": reps[variant], "failures": failures[variant],
                "date": datetime.date.today().isoformat(), "revision": bench.git_revision(),
                "machine": bench.machine_description(), "note": opts.note,
                "command": " ".join(["bench/cluster.sh", *map(shlex.quote, opts.argv)])}, indent=1))
        write_report(opts.out)
    finally:
        bench.kill_all()
    print((opts.out / "CLUSTER.md").read_text())


if __name__ == "__main__":
    main()
