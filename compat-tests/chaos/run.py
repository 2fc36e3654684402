#!/usr/bin/env python3
"""Fault injection against a cluster of real `osprey` processes (issue 17).

Starts N combined broker+controller nodes (compat-tests/python/cluster.py), drives
workloads with librdkafka (confluent-kafka) while faults drawn from a seed hit the nodes,
records every operation as a history (checker.py's format), heals the cluster, reads
every partition back and runs the checker. The seed is printed, and the same seed draws
the same fault schedule again:

    compat-tests/chaos/run.py run --seed 42            # one run; exit 1 on a violation
    compat-tests/chaos/run.py quick                    # the CI seeds, a few minutes
    compat-tests/chaos/run.py long --rounds 1000       # many runs, a markdown report
    compat-tests/chaos/run.py run --unsafe --seed 1    # relaxed fsync + power loss of every node
    compat-tests/chaos/run.py run --share --seed 7     # with a share group (KIP-932)

Workloads: idempotent acks=all producers (per-key sequence numbers in the values), a
transactional producer committing and aborting, a consumer group committing manually,
a read_uncommitted and a read_committed reader, a probe of the group's committed offsets,
and with `--share` a share group (KIP-932): two members with explicit acknowledgement
(mostly ACCEPT, some RELEASE and REJECT, each poll's acknowledgements committed with
commit_sync, every delivery and each partition's commit result recorded; a member opens a
new consumer every 8-16 s) on a topic of its own fed by an idempotent producer, with a
dead-letter queue (KIP-1191) copying rejected and exhausted records; after the heal a
sentinel per partition, a drain by new members until every record is accepted, rejected,
delivered up to the delivery count limit or in the DLQ, and the whole DLQ read back with
the DLQ writes the brokers gave up on (their logs and /metrics).

Faults: `kill` (SIGKILL, restart after a hold), `pause` (SIGSTOP longer than the broker
session and replica lag timeouts, then SIGCONT), `rolling` (SIGTERM and restart, node by
node), `killall` (SIGKILL of every node at once), and, as root with loop devices,
`powerloss` (every node's data directory is an ext4 file system on a loop device; the
file system is shut down without flushing, EXT4_IOC_SHUTDOWN with NOLOGFLUSH, which
drops what was not fsynced, as a power cut; then SIGKILL, remount, restart).
`fulldisk` (as root: every node's data directory is a file system of its own, a tmpfs
unless `powerloss` made them ext4; one node's is filled to the last byte with a ballast
file for a while, then the ballast is deleted) fills one node's disk.
"""

import argparse
import fcntl
import json
import logging
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

from confluent_kafka import OFFSET_BEGINNING, AcknowledgeType, Consumer, KafkaError, KafkaException, Producer, \
    ShareConsumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, \
    ResourceType  # noqa: E402

import checker  # noqa: E402
from cluster import Cluster, Node, fill_with_ballast, listed_brokers, partition_states  # noqa: E402
from conftest import REPO_ROOT, osprey_bin  # noqa: E402

TOPIC = "chaos"
TXN_TOPIC = "chaos-txn"
GROUP = "chaos-group"
SHARE_TOPIC = "chaos-share"
SHARE_GROUP = "chaos-share-group"
SHARE_STATE_TOPIC = "__share_group_state"
PARTITIONS = 3
QUICK_SEEDS = (1, 2, 3)
FAULTS = ("kill", "pause", "rolling", "killall")
PARTITIONS_KINDS = ("isolate", "split", "bridge")
# How often each fault is drawn (powerloss, fulldisk and the partitions only when asked for).
WEIGHTS = {"kill": 4, "pause": 3, "rolling": 1, "killall": 1, "powerloss": 1, "fulldisk": 2, "isolate": 2, "split": 2,
           "bridge": 2}
# Faster failure detection than Kafka's defaults, as test_replication.py: a broker is
# fenced 3 s after its last heartbeat, a follower leaves the ISR after 2 s of lag. Pauses
# are drawn longer than both.
BROKER_CONFIG = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 2000,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "group.initial.rebalance.delay.ms": 0,
    "unclean.leader.election.enable": "false",
    "unclean.leader.election.interval.ms": 1000,
    "auto.leader.rebalance.enable": "false",
    # Lets the share group lock records for less than Kafka's 15 s minimum (SHARE_GROUP_CONFIG).
    "group.share.min.record.lock.duration.ms": 1000,
}
# The share group's dead-letter queue (KIP-1191): a `dlq.` topic (the broker's
# errors.deadletterqueue.topic.name.prefix) enabled for share groups, with fewer
# partitions than the share topic so that a DLQ record's partition (the source
# partition modulo the DLQ's partition count) is not simply the source's.
SHARE_DLQ_TOPIC = "dlq.chaos-share"
SHARE_DLQ_PARTITIONS = 2
# The share group's configs, set before its first member joins: every record from the
# log start; a lock shorter than a fault, so records held by a member that cannot reach
# their leader come back within the run; a delivery count limit below Kafka's default
# (5), so that some records reach it (RELEASE at 10 % twice, then a RELEASE or a lock
# expiry: a few in a run of ~1,400) and the DLQ's second cause is exercised, written into
# the history for the checker; the DLQ, with the original key and value copied so that
# the checker can compare them with the log.
SHARE_DELIVERY_COUNT_LIMIT = 3
SHARE_GROUP_CONFIG = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": 5000,
                      "share.delivery.count.limit": SHARE_DELIVERY_COUNT_LIMIT,
                      "errors.deadletterqueue.topic.name": SHARE_DLQ_TOPIC,
                      "errors.deadletterqueue.copy.record.enable": "true"}
# How share members acknowledge: RELEASE and REJECT this often, ACCEPT otherwise.
SHARE_RELEASE, SHARE_REJECT = 0.10, 0.03
# A member closes its consumer and opens a new one this often (seconds, drawn).
SHARE_INSTANCE_S = (8.0, 16.0)
# After the heal, fresh members accept until every record of the share topic is
# accounted for and nothing came for SHARE_QUIET_S, or SHARE_DRAIN_S passed.
SHARE_DRAIN_S = 120.0
SHARE_QUIET_S = 3.0
# After the drain, the DLQ is read until it holds every record whose REJECT was confirmed
# (or a failed DLQ write covers it) and its high watermarks stay put, at most this long:
# a write in flight (five attempts, 1 s doubling) ends well within it.
SHARE_DLQ_WAIT_S = 60.0
# What a broker logs when it archives records without their DLQ records (a failed write),
# with the group, the topic, the partition and the offsets.
DLQ_FAILED_LINE = "dead-letter queue write failed"
# Kafka's own fsync setting: acknowledged once in the page cache of every ISR member.
RELAXED_FSYNC = {"log.flush.interval.messages": 9223372036854775807}
PAUSE_S = (4.0, 9.0)
PARTITION_S = (5.0, 12.0)
FULL_DISK_S = (4.0, 10.0)
# What a node logs when it stops because its controller quorum member failed.
QUORUM_STOPPED_LINE = "this node's controller quorum member stopped"
KILL_HOLD_S = (0.5, 5.0)
GAP_S = (1.0, 4.0)
RECOVER_S = 120.0
# A SIGTERM stop may spend up to 30 s finishing in-flight requests (the broker's drain
# bound), then closes its logs: a stop is a problem only past that, with some room.
STOP_S = 45.0
COMMON = {"broker.address.family": "v4", "socket.timeout.ms": 10000, "log_level": 0}
# OSPREY_CHAOS_PRODUCER_DEBUG=eos,msg,protocol: the idempotent producers log librdkafka's
# debug contexts to producers.log in the seed's directory (why an epoch was bumped, what
# each ProduceResponse said). Off by default: it is large.
PRODUCER_DEBUG = os.environ.get("OSPREY_CHAOS_PRODUCER_DEBUG", "")
# OSPREY_CHAOS_SHARE_DEBUG=cgrp,fetch: the share consumers log librdkafka's debug contexts
# to share-consumers.log in the seed's directory (which broker each fetched from, what each
# ShareFetch answered). Off by default: it is large.
SHARE_DEBUG = os.environ.get("OSPREY_CHAOS_SHARE_DEBUG", "")



def binary_for_report() -> str:
    """The osprey binary as a committed report names it: relative to the repository when
    inside it, else by its file name (a report never names this machine's paths)."""
    binary = Path(osprey_bin()).resolve()
    try:
        return str(binary.relative_to(Path(REPO_ROOT).resolve()))
    except ValueError:
        return binary.name

def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ----- the history ----------------------------------------------------------------------


class History:
    """Appends events to a JSON-lines file from any thread; times are seconds since start."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "w")
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.next_id = 0

    def _write(self, event: dict):
        event["time"] = round(time.monotonic() - self.t0, 4)
        with self.lock:
            self.file.write(json.dumps(event) + "\n")

    def meta(self, **facts):
        self._write(dict(type="meta", **facts))

    def fault(self, fault: str, **details):
        self._write(dict(type="fault", fault=fault, **details))
        print(f"  [{time.monotonic() - self.t0:7.1f}s] {fault} " + " ".join(f"{k}={v}" for k, v in details.items()),
              flush=True)

    def invoke(self, process: str, f: str, value: dict) -> int:
        with self.lock:
            self.next_id += 1
            op = self.next_id
        self._write(dict(type="invoke", id=op, process=process, f=f, value=value))
        return op

    def complete(self, op: int, kind: str, process: str, f: str, value: dict):
        self._write(dict(type=kind, id=op, process=process, f=f, value=value))

    def close(self):
        with self.lock:
            self.file.close()


# ----- workloads ------------------------------------------------------------------------


class Workload(threading.Thread):
    def __init__(self, name: str, history: History, bootstrap: str):
        super().__init__(name=name, daemon=True)
        self.process = name
        self.history = history
        self.bootstrap = bootstrap
        self.halt = threading.Event()
        self.errors = []

    def stop(self):
        self.halt.set()


def producer_debug_log(history, name: str = "producers") -> logging.Logger:
    """One logger for every producer (or share consumer) of a run, writing next to its history."""
    log = logging.getLogger(f"chaos-{name}-{history.path}")
    if not log.handlers:
        handler = logging.FileHandler(history.path.parent / f"{name}.log")
        handler.setFormatter(logging.Formatter("%(created).3f %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
        log.propagate = False
    return log


def where_stuck(thread: threading.Thread) -> str:
    """The innermost frames of a thread that did not stop: which client
    call it is blocked in (librdkafka's close, a poll, a commit), innermost first, each
    called from the next."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return "its stack is gone"
    frames = traceback.extract_stack(frame)[-3:]
    return "stuck in " + " <- ".join(f"{f.line} ({Path(f.filename).name}:{f.lineno})" for f in reversed(frames))


class IdempotentProducer(Workload):
    """acks=all, enable.idempotence; key `<name>-k<j>` carries `<key>:<n>` with n its
    per-key sequence number, about `rate` messages a second to `topic`."""

    def __init__(self, name, history, bootstrap, keys: int = 6, rate: float = 50.0, topic: str = TOPIC):
        super().__init__(name, history, bootstrap)
        self.keys, self.rate, self.topic = keys, rate, topic
        self.sequence = 0

    def _producer(self):
        fatal = []

        def on_error(err):
            if err.fatal():
                fatal.append(err)

        config = dict(COMMON, **{"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                                 "linger.ms": 5, "message.timeout.ms": 90000, "error_cb": on_error})
        if PRODUCER_DEBUG:
            config.update({"debug": PRODUCER_DEBUG, "log_level": 7, "logger": producer_debug_log(self.history)})
        p = Producer(config)
        return p, fatal

    def run(self):
        p, fatal = self._producer()
        while not self.halt.is_set():
            if fatal:
                self.errors.append(f"fatal producer error, new producer: {fatal[0]}")
                p.flush(5)
                p, fatal = self._producer()
            key = f"{self.process}-k{self.sequence % self.keys}"
            value = f"{key}:{self.sequence // self.keys}"
            op = self.history.invoke(self.process, "send", {"topic": self.topic, "key": key, "value": value})
            try:
                p.produce(self.topic, key=key.encode(), value=value.encode(), on_delivery=self._callback(op))
                self.sequence += 1
            except (BufferError, KafkaException) as e:
                self.history.complete(op, "fail", self.process, "send", {"error": str(e)})
            p.poll(0)
            self.halt.wait(1.0 / self.rate)
        left = p.flush(120)
        if left:
            self.errors.append(f"{left} sends never answered (left indeterminate)")

    def _callback(self, op):
        def on_delivery(err, msg):
            if err is None:
                self.history.complete(op, "ok", self.process, "send",
                                      {"partition": msg.partition(), "offset": msg.offset()})
            else:
                self.history.complete(op, "fail", self.process, "send", {"error": err.str()})

        return on_delivery


class TransactionalProducer(Workload):
    """Transactions of 1-4 records over the partitions of TXN_TOPIC, committed or
    aborted at random; a fatal error makes a new producer with the same
    transactional.id (which fences the old one and aborts what it left open)."""

    def __init__(self, name, history, bootstrap, seed: int):
        super().__init__(name, history, bootstrap)
        self.rng = random.Random(seed)
        self.instance = 0
        self.count = 0

    def _producer(self):
        self.instance += 1
        p = Producer(dict(COMMON, **{"bootstrap.servers": self.bootstrap, "transactional.id": f"{self.process}-id",
                                     "transaction.timeout.ms": 20000, "message.timeout.ms": 20000, "linger.ms": 5}))
        while not self.halt.is_set():
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                self.errors.append(f"init_transactions: {e}")
                time.sleep(1)
        return None

    def run(self):
        p = self._producer()
        while p is not None and not self.halt.is_set():
            if not self._one(p):
                p = self._producer()
            self.halt.wait(0.2)

    def _one(self, p) -> bool:
        """One transaction; False when the producer must be replaced."""
        self.count += 1
        name = f"{self.process}-{self.instance}-{self.count}"
        commit = self.rng.random() < 0.7
        records = []
        op = self.history.invoke(self.process, "txn", {"txn": name})

        def done(kind, outcome, **extra):
            self.history.complete(op, kind, self.process, "txn",
                                  dict(txn=name, outcome=outcome, records=records, **extra))

        try:
            p.begin_transaction()
            for i in range(self.rng.randint(1, 4)):
                key, value = f"tx-k{self.rng.randrange(8)}", f"{name}:{i}"
                p.produce(TXN_TOPIC, key=key.encode(), value=value.encode(), partition=self.rng.randrange(PARTITIONS))
                records.append([TXN_TOPIC, key, value])
        except (KafkaException, BufferError) as e:
            commit = False
            self.errors.append(f"{name}: {e}")
        for attempt in range(3):
            try:
                if commit:
                    p.commit_transaction(30)
                else:
                    p.abort_transaction(30)
                done("ok", "commit" if commit else "abort")
                return True
            except KafkaException as e:
                err = e.args[0]
                if err.retriable() and attempt < 2:
                    continue
                if commit and err.txn_requires_abort():
                    commit = False
                    continue
                # Unknown outcome: a new producer with the same transactional.id finishes
                # or aborts it (all or nothing either way) and fences this one.
                done("info", "commit" if commit else "abort", error=err.str())
                return False
        return False


class GroupMember(Workload):
    """A consumer group member subscribed to TOPIC that commits what it consumed (the
    next offset of each assigned partition) synchronously about every second."""

    def __init__(self, name, history, bootstrap, group: str = GROUP):
        super().__init__(name, history, bootstrap)
        self.group = group
        self.positions = {}

    def run(self):
        c = Consumer(dict(COMMON, **{"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                                     "max.poll.interval.ms": 60000, "fetch.wait.max.ms": 200}))
        c.subscribe([TOPIC], on_revoke=self._revoked, on_lost=self._revoked)
        last_commit = time.monotonic()
        while not self.halt.is_set():
            msgs = c.consume(200, 0.5)
            got = [m for m in msgs if m.error() is None]
            if got:
                op = self.history.invoke(self.process, "poll", {})
                self.history.complete(op, "ok", self.process, "poll", {
                    "group": self.group, "isolation": "read_uncommitted",
                    "records": [[m.topic(), m.partition(), m.offset(), m.key().decode(), m.value().decode()]
                                for m in got]})
                for m in got:
                    self.positions[m.partition()] = m.offset() + 1
            if time.monotonic() - last_commit >= 1.0 and self.positions:
                self._commit(c)
                last_commit = time.monotonic()
        if self.positions:
            self._commit(c)
        c.close()

    def _revoked(self, consumer, partitions):
        for tp in partitions:
            self.positions.pop(tp.partition, None)

    def _commit(self, c):
        offsets = [[TOPIC, p, o] for p, o in sorted(self.positions.items())]
        op = self.history.invoke(self.process, "commit", {"group": self.group, "offsets": offsets})
        try:
            answered = c.commit(offsets=[TopicPartition(TOPIC, p, o) for _, p, o in offsets], asynchronous=False)
            errors = [f"{tp.partition}: {tp.error}" for tp in answered or [] if tp.error]
            if errors:
                self.history.complete(op, "info", self.process, "commit", {"error": "; ".join(errors)})
            else:
                self.history.complete(op, "ok", self.process, "commit", {})
        except KafkaException as e:
            # Refused or timed out: never used as a fact about the committed offset.
            self.history.complete(op, "info", self.process, "commit", {"error": str(e)})


class CommittedProbe(Workload):
    """Reads the group's committed offsets (OffsetFetch) every two seconds."""

    def __init__(self, name, history, bootstrap, group: str = GROUP):
        super().__init__(name, history, bootstrap)
        self.group = group

    def run(self):
        c = Consumer(dict(COMMON, **{"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                     "enable.auto.commit": False}))
        while not self.halt.wait(2.0):
            probe_committed(c, self.history, self.process, self.group)
        c.close()


def probe_committed(c, history, process, group, final=False) -> bool:
    op = history.invoke(process, "committed", {"group": group})
    try:
        found = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    except KafkaException as e:
        history.complete(op, "info", process, "committed", {"group": group, "error": str(e)})
        return False
    if any(tp.error for tp in found):
        history.complete(op, "info", process, "committed", {"group": group, "error": str(found[0].error)})
        return False
    history.complete(op, "ok", process, "committed", {
        "group": group, "final": final, "offsets": [[TOPIC, tp.partition, tp.offset] for tp in found]})
    return True


class Reader(Workload):
    """Reads every partition of `topics` from the beginning by assign, as it goes."""

    def __init__(self, name, history, bootstrap, topics, isolation: str):
        super().__init__(name, history, bootstrap)
        self.topics, self.isolation = topics, isolation

    def run(self):
        c = Consumer(dict(COMMON, **{"bootstrap.servers": self.bootstrap, "group.id": f"{self.process}-assign",
                                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                     "isolation.level": self.isolation, "fetch.wait.max.ms": 200}))
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in self.topics for p in range(PARTITIONS)])
        while not self.halt.is_set():
            got = [m for m in c.consume(500, 0.5) if m.error() is None]
            if got:
                op = self.history.invoke(self.process, "poll", {})
                self.history.complete(op, "ok", self.process, "poll", {
                    "isolation": self.isolation,
                    "records": [[m.topic(), m.partition(), m.offset(), m.key().decode(), m.value().decode()]
                                for m in got]})
        c.close()


class ShareTally:
    """What the share members did to each record of the share topic, as far as the drain
    and the DLQ read need it to know when to stop: the highest delivery count seen,
    whether an ACCEPT or REJECT was sent (confirmed or not), whether a REJECT was
    confirmed, and whether the DLQ holds the record (it was archived), by (partition,
    offset). The checker decides from the history; this mirrors its rule for records
    accounted for."""

    def __init__(self):
        self.lock = threading.Lock()
        self.max_count = {}
        self.done = set()
        self.rejected = set()  # REJECT confirmed: each must reach the DLQ
        self.archived = set()  # named by a DLQ record
        self.last_delivery = time.monotonic()

    def delivered(self, where, count: int):
        with self.lock:
            self.max_count[where] = max(self.max_count.get(where, 0), count or 0)
            self.last_delivery = time.monotonic()

    def acknowledged(self, where, kind: str):
        if kind in ("ACCEPT", "REJECT"):
            with self.lock:
                self.done.add(where)

    def reject_confirmed(self, where):
        with self.lock:
            self.rejected.add(where)

    def in_dlq(self, places):
        with self.lock:
            self.archived.update(places)

    def rejected_confirmed(self) -> set:
        with self.lock:
            return set(self.rejected)

    def unaccounted(self, universe) -> list:
        """A record archived at the limit after acquisitions no member saw (their answers
        lost) shows in the DLQ only."""
        with self.lock:
            return [w for w in universe if w not in self.done and w not in self.archived
                    and self.max_count.get(w, 0) < SHARE_DELIVERY_COUNT_LIMIT]

    def quiet_for(self) -> float:
        with self.lock:
            return time.monotonic() - self.last_delivery


ACK_NAMES = {AcknowledgeType.ACCEPT: "ACCEPT", AcknowledgeType.RELEASE: "RELEASE", AcknowledgeType.REJECT: "REJECT"}


class ShareMember(Workload):
    """A share group member (KIP-932) on SHARE_TOPIC with explicit acknowledgement: each
    record ACCEPT, or RELEASE or REJECT as often as `release` and `reject` say (drawn from
    the seed), each poll's acknowledgements committed with commit_sync and the result of
    each partition recorded. Every `instance_s` (drawn) the consumer is closed, after a
    commit, and a new one opened: whatever an instance is given was acquired after it
    opened, which is what the checker compares deliveries with confirmations by."""

    def __init__(self, name, history, bootstrap, seed: int, tally: ShareTally, release: float = SHARE_RELEASE,
                 reject: float = SHARE_REJECT, instance_s=SHARE_INSTANCE_S):
        super().__init__(name, history, bootstrap)
        self.rng = random.Random(f"{seed}-{name}")
        self.tally, self.release, self.reject, self.instance_s = tally, release, reject, instance_s
        self.instances = 0
        self.committed_last = False  # the last round committed acknowledgements

    def run(self):
        while not self.halt.is_set():
            opened = self._open()
            if opened is None:
                self.halt.wait(1.0)
                continue
            c, instance = opened
            until = time.monotonic() + (self.rng.uniform(*self.instance_s) if self.instance_s else float("inf"))
            try:
                while not self.halt.is_set() and not self._time_to_close(until):
                    if not self._round(c, instance):
                        break
            finally:
                self._close(c, instance)

    def _time_to_close(self, until: float) -> bool:
        """Past `until`, just after a commit: a poll that found nothing leaves a fetch in
        flight, whose records the broker would acquire for nobody (their delivery count
        raised unseen) if the consumer closed then; unless nothing came for SHARE_QUIET_S."""
        now = time.monotonic()
        return now >= until and (self.committed_last or now >= until + SHARE_QUIET_S)

    def _open(self):
        self.instances += 1
        instance = f"{self.process}#{self.instances}"
        op = self.history.invoke(self.process, "share_open", {"group": SHARE_GROUP, "instance": instance})
        try:
            config = dict(COMMON, **{"bootstrap.servers": self.bootstrap, "group.id": SHARE_GROUP,
                                     "share.acknowledgement.mode": "explicit", "max.poll.records": 50})
            if SHARE_DEBUG:
                config.update({"debug": SHARE_DEBUG, "log_level": 7,
                               "logger": producer_debug_log(self.history, "share-consumers")})
            c = ShareConsumer(config)
            c.subscribe([SHARE_TOPIC])
        except KafkaException as e:
            self.history.complete(op, "fail", self.process, "share_open", {"error": str(e)})
            self.errors.append(f"{instance}: {e}")
            return None
        self.history.complete(op, "ok", self.process, "share_open", {"instance": instance})
        return c, instance

    def _close(self, c, instance):
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - a close that failed only ends the instance
            self.errors.append(f"{instance} close: {e}")

    def _decide(self):
        x = self.rng.random()
        if x < self.reject:
            return AcknowledgeType.REJECT
        if x < self.reject + self.release:
            return AcknowledgeType.RELEASE
        return AcknowledgeType.ACCEPT

    def _round(self, c, instance) -> bool:
        """One poll, its acknowledgements and their commit; False when the instance must
        be replaced (it refused to poll)."""
        try:
            batch = list(c.poll(0.5))
        except Exception as e:  # noqa: BLE001 - KafkaException, IllegalStateException: a new instance
            self.errors.append(f"{instance} poll: {e}")
            return False
        got = [m for m in batch if m.error() is None]
        self.committed_last = bool(got)
        if not got:
            return True
        op = self.history.invoke(self.process, "share_poll", {"group": SHARE_GROUP, "instance": instance})
        self.history.complete(op, "ok", self.process, "share_poll", {
            "group": SHARE_GROUP, "instance": instance,
            "records": [[m.topic(), m.partition(), m.offset(), m.key().decode(), m.value().decode(),
                         m.delivery_count()] for m in got]})
        acks = []
        refused = False
        for m in got:
            self.tally.delivered((m.partition(), m.offset()), m.delivery_count())
            kind = self._decide()
            try:
                c.acknowledge(m, kind)
            except Exception as e:  # noqa: BLE001 - the rest unacknowledged: a new instance
                self.errors.append(f"{instance} acknowledge {m.partition()}@{m.offset()}: {e}")
                refused = True
                break
            acks.append([m.topic(), m.partition(), m.offset(), ACK_NAMES[kind], m.delivery_count()])
        if acks:
            self._commit(c, instance, acks)
        return not refused

    def _commit(self, c, instance, acks):
        op = self.history.invoke(self.process, "share_ack", {"group": SHARE_GROUP, "instance": instance,
                                                             "acks": acks})
        for _t, p, o, kind, _count in acks:
            self.tally.acknowledged((p, o), kind)
        try:
            results = c.commit_sync(30)
        except Exception as e:  # noqa: BLE001 - unknown outcome: may or may not have taken effect
            self.history.complete(op, "info", self.process, "share_ack", {"error": str(e)})
            return
        self.history.complete(op, "ok", self.process, "share_ack", {
            "results": [[tp.topic, tp.partition, None if e is None else str(e)] for tp, e in results.items()]})
        confirmed = {tp.partition for tp, e in results.items() if e is None}
        for _t, p, o, kind, _count in acks:
            if kind == "REJECT" and p in confirmed:
                self.tally.reject_confirmed((p, o))


def set_group_configs(bootstrap: str, group: str, configs: dict, timeout: float = 60.0):
    """IncrementalAlterConfigs SET on the GROUP resource, then DescribeConfigs until every
    value is reported (a share partition initialised before would use the old ones)."""
    admin = AdminClient(dict(COMMON, **{"bootstrap.servers": bootstrap}))
    entries = [ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(timeout=60)
    want = {k: str(v) for k, v in configs.items()}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)], request_timeout=30)
        got = {name: e.value for name, e in next(iter(described.values())).result(timeout=60).items()}
        if all(got.get(k) == v for k, v in want.items()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"group {group} configs {want} not applied within {timeout:.0f} s")


# ----- the cluster and its faults -------------------------------------------------------


EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2  # neither the journal nor dirty data are written


class LoopDisks:
    """Each node's data directory on its own ext4 file system in a loop-mounted file, so
    that a power cut can be simulated: EXT4_IOC_SHUTDOWN with NOLOGFLUSH stops the file
    system at once, and what was only in the page cache never reaches the disk."""

    def __init__(self, workdir: Path, nodes, size_mb: int = 768):
        """Moves each node's directory (before its config is written) to `data` inside
        its own mount point, so that ext4's lost+found is not in log.dirs."""
        self.nodes, self.images, self.mounts = nodes, {}, {}
        try:
            self._build(workdir, size_mb)
        except BaseException:
            self.close()
            raise

    def _build(self, workdir: Path, size_mb: int):
        for n in self.nodes:
            image = workdir / f"node-{n.node_id}.ext4"
            subprocess.run(["truncate", "-s", f"{size_mb}M", str(image)], check=True)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
            self.images[n.node_id] = image
            self.mounts[n.node_id] = workdir / f"disk-{n.node_id}"
            self.mounts[n.node_id].mkdir()
            self._mount(n)
            n.dir = self.mounts[n.node_id] / "data"
            n.dir.mkdir()
        os.sync()

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0 and shutil.which("mkfs.ext4") is not None and Path("/dev/loop-control").exists()

    def _mount(self, n):
        subprocess.run(["mount", "-o", "loop", str(self.images[n.node_id]), str(self.mounts[n.node_id])], check=True)

    def cut_power(self, nodes):
        """Shuts every file system down without flushing, then kills the processes and
        mounts the file systems again (the journal replays what was committed)."""
        for n in nodes:
            fd = os.open(self.mounts[n.node_id], os.O_RDONLY)
            try:
                fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
            finally:
                os.close(fd)
        for n in nodes:
            if n.proc is not None:
                n.kill9()
        for n in nodes:
            self._umount(n)
            self._mount(n)

    def _umount(self, n):
        for _ in range(50):
            if subprocess.run(["umount", str(self.mounts[n.node_id])], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"cannot unmount {self.mounts[n.node_id]}")

    def fill(self, n) -> int:
        """Fills node `n`'s file system with a ballast file until it has no byte left;
        returns the ballast's size."""
        return fill_with_ballast(self.mounts[n.node_id] / "ballast")

    def free(self, n):
        (self.mounts[n.node_id] / "ballast").unlink(missing_ok=True)

    def close(self):
        """Copies each node's data next to its log and points the node at the copy (a
        failed run's evidence is its data, and the file systems go), then unmounts."""
        for n in self.nodes:
            mount = self.mounts.get(n.node_id)
            if mount is not None and (mount / "data").is_dir():
                copy = mount.parent / f"node-{n.node_id}-data"
                try:
                    shutil.copytree(mount / "data", copy, dirs_exist_ok=True)
                    n.dir = copy
                except (OSError, shutil.Error) as e:
                    print(f"  could not copy node {n.node_id}'s data out of {mount}: {e}", flush=True)
        for mount in self.mounts.values():
            subprocess.run(["umount", str(mount)], capture_output=True)


class TmpfsDisks(LoopDisks):
    """Each node's data directory on a tmpfs of its own (the `fulldisk` fault fills one;
    a tmpfs has no power to cut)."""

    def _build(self, workdir: Path, size_mb: int):
        for n in self.nodes:
            self.mounts[n.node_id] = workdir / f"disk-{n.node_id}"
            self.mounts[n.node_id].mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(self.mounts[n.node_id])],
                           check=True)
            n.dir = self.mounts[n.node_id] / "data"
            n.dir.mkdir()

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0

    def cut_power(self, nodes):
        raise RuntimeError("powerloss needs LoopDisks")


def ip(*args: str, check: bool = True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class Network:
    """Each node in a network namespace of its own, joined by a bridge the runner makes
    (a /24 of 10.77.x.0 that exists only while it runs; nothing leaves the machine),
    clients in the root namespace on the bridge. A partition is a pair of blackhole
    routes per cut link, one in each namespace, so packets between the two sides are
    dropped silently, as on a lost link, while every node still reaches the clients."""

    def __init__(self, nodes):
        tag = os.getpid() % 10000
        self.subnet = f"10.77.{os.getpid() % 250}"
        self.bridge = f"ospc{tag}br"
        self.namespaces = {}
        self.cuts = []
        self.nodes = nodes
        try:
            self._build(tag)
        except BaseException:
            self.close()
            raise

    def _build(self, tag: int):
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for n in self.nodes:
            ns, host_end, ns_end = f"osprey-chaos-{tag}-{n.node_id}", f"ospc{tag}h{n.node_id}", f"ospc{tag}n{n.node_id}"
            ip("netns", "add", ns)
            self.namespaces[n.node_id] = ns
            ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            ip("link", "set", ns_end, "netns", ns)
            ip("link", "set", host_end, "master", self.bridge)
            ip("link", "set", host_end, "up")
            ip("-n", ns, "addr", "add", f"{self.address(n.node_id)}/24", "dev", ns_end)
            ip("-n", ns, "link", "set", ns_end, "up")
            ip("-n", ns, "link", "set", "lo", "up")
            n.host = self.address(n.node_id)
            n.command_prefix = ["ip", "netns", "exec", ns]

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0 and shutil.which("ip") is not None

    def address(self, node_id: int) -> str:
        return f"{self.subnet}.{node_id}"

    def cut(self, a: int, b: int):
        for src, dst in ((a, b), (b, a)):
            ip("-n", self.namespaces[src], "route", "add", "blackhole", f"{self.address(dst)}/32")
        self.cuts.append((a, b))

    def partition(self, sides):
        """Cuts every link between nodes on different sides (a list of node id lists); a
        node on no side keeps all its links (the bridge of a bridge partition)."""
        for i, side in enumerate(sides):
            for other in sides[i + 1:]:
                for a in side:
                    for b in other:
                        self.cut(a, b)

    def heal(self):
        for a, b in self.cuts:
            for src, dst in ((a, b), (b, a)):
                ip("-n", self.namespaces[src], "route", "del", "blackhole", f"{self.address(dst)}/32", check=False)
        self.cuts = []

    def close(self):
        for node_id, ns in self.namespaces.items():
            ip("link", "del", f"ospc{os.getpid() % 10000}h{node_id}", check=False)
            ip("netns", "del", ns, check=False)
        ip("link", "del", self.bridge, check=False)


def partition_sides(kind: str, rng: random.Random, node_ids):
    """The sides of a partition: `isolate` one node from the rest, `split` a minority
    from the majority, `bridge` two halves that one node in the middle still sees both of."""
    ids = list(node_ids)
    rng.shuffle(ids)
    if kind == "isolate":
        return [ids[:1], ids[1:]]
    if kind == "split":
        minority = max(1, (len(ids) - 1) // 2)
        return [sorted(ids[:minority]), sorted(ids[minority:])]
    middle, rest = ids[0], ids[1:]
    half = len(rest) // 2
    return [sorted(rest[:half]), sorted(rest[half:])]


def draw_schedule(seed: int, rounds: int, faults, node_ids):
    """The fault rounds this seed draws: what, on which node, held how long, after what gap."""
    rng = random.Random(seed)
    kinds = list(faults)
    weights = [WEIGHTS[k] for k in kinds]
    schedule = []
    for _ in range(rounds):
        kind = rng.choices(kinds, weights)[0]
        round_ = {"fault": kind, "gap_s": round(rng.uniform(*GAP_S), 2)}
        if kind in ("kill", "pause", "fulldisk"):
            round_["node"] = rng.choice(node_ids)
        if kind == "pause":
            round_["hold_s"] = round(rng.uniform(*PAUSE_S), 2)
        elif kind == "fulldisk":
            round_["hold_s"] = round(rng.uniform(*FULL_DISK_S), 2)
        elif kind in ("kill", "killall", "powerloss"):
            round_["hold_s"] = round(rng.uniform(*KILL_HOLD_S), 2)
        elif kind in PARTITIONS_KINDS:
            round_["sides"] = partition_sides(kind, rng, node_ids)
            round_["hold_s"] = round(rng.uniform(*PARTITION_S), 2)
        elif kind == "rolling":
            order = list(node_ids)
            rng.shuffle(order)
            round_["order"] = order
        schedule.append(round_)
    return schedule


class Run:
    """One seed: cluster, workloads, fault rounds, heal, final reads, check."""

    def __init__(self, args, seed: int, workdir: Path):
        self.args, self.seed, self.workdir = args, seed, workdir
        self.history = History(workdir / "history.jsonl")
        self.problems = []  # liveness, process and replica findings, outside the history's checks
        self.filled = set()  # nodes whose disk a fulldisk round filled since their last start
        self.final_read_marks = []
        self.share_tally = ShareTally()
        self.share_records = set()  # (partition, offset) of every record the share topic's final read found
        extra = dict(BROKER_CONFIG)
        if args.unsafe:
            extra.update(RELAXED_FSYNC)
        if args.unclean:
            extra["unclean.leader.election.enable"] = "true"
        self.nodes = [Node(workdir, i, "broker,controller") for i in range(1, args.nodes + 1)]
        self.faults = list(args.faults)
        self.disks = self.network = None
        try:
            if "powerloss" in self.faults:
                self.disks = LoopDisks(workdir, self.nodes)
            elif "fulldisk" in self.faults:
                self.disks = TmpfsDisks(workdir, self.nodes, size_mb=512)
            if set(PARTITIONS_KINDS) & set(self.faults):
                self.network = Network(self.nodes)
        except BaseException:
            self.release()
            raise
        self.cluster = Cluster(workdir, self.nodes, extra)
        self.schedule = draw_schedule(seed, args.rounds, self.faults, [n.node_id for n in self.nodes])

    def replay_command(self) -> str:
        a = self.args
        flags = [f"--seed {self.seed}", f"--rounds {a.rounds}", f"--nodes {a.nodes}", f"--faults {','.join(a.faults)}",
                 f"--producers {a.producers}", "--transactions" if a.transactions else "--no-transactions",
                 "--groups" if a.groups else "--no-groups"]
        if a.share:
            flags.append("--share")
        if a.unsafe:
            flags.append("--unsafe")
        if a.unclean:
            flags.append("--unclean")
        return "compat-tests/chaos/run.py run " + " ".join(flags)

    # --- lifecycle

    def execute(self) -> checker.Result:
        print(f"seed {self.seed}: {len(self.schedule)} fault rounds on {len(self.nodes)} nodes, in {self.workdir}")
        print(f"  replay: {self.replay_command()}")
        self.history.meta(seed=self.seed, unclean=self.args.unclean, unsafe=self.args.unsafe,
                          nodes=len(self.nodes), schedule=self.schedule, replay=self.replay_command(),
                          started=now_utc(), binary=str(osprey_bin()))
        if self.args.share:
            self.history.meta(share_topics=[SHARE_TOPIC], share_group=SHARE_GROUP,
                              share_delivery_count_limit=SHARE_DELIVERY_COUNT_LIMIT,
                              share_dlq_topic=SHARE_DLQ_TOPIC, share_dlq_partitions=SHARE_DLQ_PARTITIONS,
                              share_dlq_copy=True)
        try:
            self.cluster.start()
            self.wait_healthy("the cluster forms", topics=())
            self.create_topics()
            self.wait_healthy("the topics are fully replicated")
            workloads = self.start_workloads()
            time.sleep(3)
            for i, round_ in enumerate(self.schedule):
                self.fault_round(i, round_)
            time.sleep(2)
            self.heal()
            self.stop_workloads(workloads)
            self.heal()
            self.wait_healthy("the cluster heals")
            if self.args.share:
                self.produce_share_sentinels()
            self.final_reads()
            if self.args.share:
                self.share_drain()
                self.share_dlq_read()
        finally:
            self.shutdown()
        self.history.close()
        result = checker.check(checker.load(self.history.path))
        for evidence in result.findings.get("duplicated", [])[:5]:
            for line in duplicate_copies(self.nodes, evidence):
                print(f"  copy: {line}")
        # A workload that never got anything done makes its checks vacuous: say so.
        if result.counts["acknowledged"] == 0:
            self.problems.append("no send was acknowledged")
        if self.args.transactions and result.counts["txn_committed"] == 0:
            self.problems.append("the transactional producer committed no transaction")
        if self.args.groups and result.counts["commits"] == 0:
            self.problems.append("the consumer group committed no offset")
        if self.args.share and result.counts["share_accepted"] == 0:
            self.problems.append("the share group accepted no record")
        if self.args.share and result.counts["dlq_records"] == 0:
            self.problems.append("the share group's dead-letter queue holds no record")
        for p in self.problems:
            print(f"  problem: {p}")
        return result

    def shutdown(self):
        for n in self.nodes:
            if n.proc is not None:
                n.resume()
        for failure in self.cluster.stop_all(timeout=STOP_S):
            self.problems.append(f"SIGTERM at the end: {failure.splitlines()[0]}")
        self.cluster.kill_all()
        self.compare_replicas()
        self.release()

    def compare_replicas(self):
        """After the stop, every replica's log below the final high watermark, batch by batch."""
        for op in self.final_read_marks:
            for line in replica_divergence(self.nodes, op["topic"], op["partition"], op["high_watermark"]):
                self.problems.append(f"replicas: {line}")

    def release(self):
        """Unmounts the loop file systems and removes the namespaces and the bridge."""
        if self.disks:
            self.disks.close()
        if self.network:
            self.network.close()

    def create_topics(self):
        admin = AdminClient(dict(COMMON, **{"bootstrap.servers": self.cluster.bootstrap()}))
        rf = min(3, len(self.nodes))
        topics = [NewTopic(t, PARTITIONS, rf, config={"min.insync.replicas": str(min(2, rf))})
                  for t in self.data_topics()]
        if self.args.share:
            topics.append(NewTopic(SHARE_DLQ_TOPIC, SHARE_DLQ_PARTITIONS, rf, config={
                "min.insync.replicas": str(min(2, rf)), "errors.deadletterqueue.group.enable": "true"}))
        for name, future in admin.create_topics(topics, operation_timeout=30).items():
            future.result(timeout=60)

    def data_topics(self):
        """The topics the workloads write, each read whole at the end."""
        return (TOPIC, TXN_TOPIC) + ((SHARE_TOPIC,) if self.args.share else ())

    def healthy_topics(self):
        """The topics whose every partition must have a leader and every replica in sync
        for the cluster to count as recovered: with share groups, the share coordinators'
        `__share_group_state` (naming it in Metadata creates it, as Kafka does) and the
        group's dead-letter queue too."""
        return self.data_topics() + ((SHARE_STATE_TOPIC, SHARE_DLQ_TOPIC) if self.args.share else ())

    def start_workloads(self):
        b = self.cluster.bootstrap()
        h = self.history
        workloads = [IdempotentProducer(f"producer-{i}", h, b) for i in range(self.args.producers)]
        if self.args.share:
            set_group_configs(b, SHARE_GROUP, SHARE_GROUP_CONFIG)
            workloads.append(IdempotentProducer("share-producer", h, b, rate=20.0, topic=SHARE_TOPIC))
            workloads += [ShareMember(f"share-{i}", h, b, self.seed, self.share_tally) for i in range(2)]
        if self.args.transactions:
            workloads.append(TransactionalProducer("txn-0", h, b, self.seed))
        if self.args.groups:
            workloads += [GroupMember(f"member-{i}", h, b) for i in range(2)]
            workloads.append(CommittedProbe("probe", h, b))
        workloads.append(Reader("reader-ru", h, b, [TOPIC, TXN_TOPIC], "read_uncommitted"))
        workloads.append(Reader("reader-rc", h, b, [TXN_TOPIC], "read_committed"))
        for w in workloads:
            w.start()
        return workloads

    def stop_workloads(self, workloads):
        for w in workloads:
            w.stop()
        for w in workloads:
            w.join(timeout=180)
            if w.is_alive():
                self.problems.append(f"{w.process} did not stop within 180 s; {where_stuck(w)}")
            for e in w.errors[:3]:
                print(f"  {w.process}: {e}")
            if len(w.errors) > 3:
                print(f"  {w.process}: ... {len(w.errors)} errors in all")

    # --- faults

    def fault_round(self, i: int, r: dict):
        time.sleep(r["gap_s"])
        self.check_processes()
        kind = r["fault"]
        node = self.cluster.node(r["node"]) if "node" in r else None
        if kind == "kill":
            self.history.fault("kill", node=node.node_id, round=i)
            node.kill9()
            time.sleep(r["hold_s"])
            node.start()
            self.history.fault("restart", node=node.node_id, round=i)
        elif kind == "pause":
            self.history.fault("pause", node=node.node_id, round=i, hold_s=r["hold_s"])
            node.pause()
            time.sleep(r["hold_s"])
            node.resume()
            self.history.fault("resume", node=node.node_id, round=i)
        elif kind == "killall":
            self.history.fault("killall", round=i)
            self.cluster.kill_all()
            time.sleep(r["hold_s"])
            self.cluster.start()
            self.history.fault("restart-all", round=i)
        elif kind == "fulldisk":
            ballast = self.disks.fill(node)
            self.history.fault("fulldisk", node=node.node_id, round=i, hold_s=r["hold_s"], ballast_bytes=ballast)
            self.filled.add(node.node_id)
            time.sleep(r["hold_s"])
            self.disks.free(node)
            self.history.fault("space-back", node=node.node_id, round=i)
            self.check_processes()
        elif kind == "powerloss":
            self.history.fault("powerloss", round=i)
            self.disks.cut_power(self.nodes)
            time.sleep(r["hold_s"])
            self.cluster.start()
            self.history.fault("restart-all", round=i)
        elif kind in PARTITIONS_KINDS:
            self.history.fault(kind, sides=r["sides"], round=i, hold_s=r["hold_s"])
            self.network.partition(r["sides"])
            time.sleep(r["hold_s"])
            self.network.heal()
            self.history.fault("heal", round=i)
        elif kind == "rolling":
            for node_id in r["order"]:
                n = self.cluster.node(node_id)
                self.history.fault("sigterm", node=node_id, round=i)
                try:
                    n.stop(timeout=STOP_S)
                except AssertionError as e:
                    self.problems.append(f"round {i}: {n} after SIGTERM: {str(e).splitlines()[0]}")
                n.start()
                self.history.fault("restart", node=node_id, round=i)
                self.wait_healthy(f"round {i}: {n} back after its SIGTERM restart")
            return
        self.wait_healthy(f"round {i}: the cluster recovers from {kind}")

    def heal(self):
        if self.network:
            self.network.heal()
        for n in self.nodes:
            if n.proc is None:
                n.start()
            else:
                n.resume()

    def check_processes(self):
        """A node that exited by itself is a finding: recorded, then restarted. Except one
        that stopped because its controller quorum member could not write the metadata
        log on a disk a fulldisk round filled: that is what it should do (as Kafka halts),
        and it is started again (the space is back by the time this runs)."""
        for n in self.nodes:
            code = n.exited()
            if code is None:
                continue
            if n.node_id in self.filled and code == 1 and QUORUM_STOPPED_LINE in n.log_tail(100_000):
                self.history.fault("stopped-on-full-disk", node=n.node_id, code=code)
            else:
                self.problems.append(f"{n} exited by itself with code {code}; log: {n.log_path}")
                self.history.fault("crashed", node=n.node_id, code=code)
            self.filled.discard(n.node_id)
            n.proc = None
            n.start()

    def wait_healthy(self, what: str, topics=None, timeout: float = RECOVER_S):
        """Until every node lists every broker and every partition of `topics` has a
        leader and all replicas in sync on every node. A timeout is a finding, not an
        exception: the run goes on and the final reads say what survived."""
        topics = self.healthy_topics() if topics is None else topics
        want = {n.node_id for n in self.nodes}
        rf = min(3, len(self.nodes))
        deadline = time.monotonic() + timeout
        start = time.monotonic()
        lacking = []
        while time.monotonic() < deadline:
            self.check_processes()
            lacking = self.unhealthy(want, topics, rf)
            if not lacking:
                return True
            time.sleep(0.5)
        self.problems.append(f"not within {timeout:.0f} s: {what}; still: {'; '.join(lacking[:5])}")
        self.history.fault("not-recovered", what=what, waited_s=round(time.monotonic() - start, 1), still=lacking)
        return False

    def unhealthy(self, want, topics, rf):
        """What keeps the cluster from being whole, as seen by each node (empty if whole)."""
        lacking = []
        for n in self.nodes:
            listed = listed_brokers(n)
            if listed != want:
                lacking.append(f"node {n.node_id} lists brokers {sorted(listed) if listed else None}")
                continue
            for t in topics:
                states = partition_states(n, t)
                if not states:
                    lacking.append(f"node {n.node_id} does not know {t}")
                    continue
                lacking += [f"node {n.node_id}: {t}-{p} leader {leader} isr {isr}"
                            for p, (leader, _, isr) in sorted(states.items()) if leader < 0 or len(isr) < rf]
        return lacking

    # --- the end

    def final_reads(self):
        b = self.cluster.bootstrap()
        stable = wait_stable_watermarks(b, self.data_topics())
        if not stable:
            self.problems.append("the high watermarks did not settle before the final reads")
        reads = [(t, "read_uncommitted") for t in self.data_topics()] + [(TXN_TOPIC, "read_committed")]
        for topic, isolation in reads:
            for p in range(PARTITIONS):
                mark = final_read(b, self.history, topic, p, isolation, self.problems)
                offsets = mark.pop("offsets") if mark else []
                if mark and isolation == "read_uncommitted":
                    self.final_read_marks.append(mark)
                if topic == SHARE_TOPIC:
                    self.share_records.update((p, o) for o in offsets)
        if self.args.groups:
            c = Consumer(dict(COMMON, **{"bootstrap.servers": b, "group.id": GROUP, "enable.auto.commit": False}))
            for _ in range(10):
                if probe_committed(c, self.history, "final", GROUP, final=True):
                    break
                time.sleep(2)
            else:
                self.problems.append("the group's committed offsets could not be read at the end")
            c.close()

    def produce_share_sentinels(self):
        """After the heal, a last record on each partition of the share topic (acks=all,
        recorded as sends): the drain is not over before it accepted all of them, so every
        partition was fetched past everything produced during the run (a share partition
        hands out its available records from the lowest offset up)."""
        p = Producer(dict(COMMON, **{"bootstrap.servers": self.cluster.bootstrap(), "acks": "all",
                                     "enable.idempotence": True, "message.timeout.ms": 60000}))
        for partition in range(PARTITIONS):
            key = f"sentinel-{partition}"
            value = f"{key}:0"
            op = self.history.invoke("share-sentinel", "send", {"topic": SHARE_TOPIC, "key": key, "value": value})

            def done(err, msg, op=op):
                if err is None:
                    self.history.complete(op, "ok", "share-sentinel", "send",
                                          {"partition": msg.partition(), "offset": msg.offset()})
                else:
                    self.history.complete(op, "fail", "share-sentinel", "send", {"error": err.str()})

            p.produce(SHARE_TOPIC, key=key.encode(), value=value.encode(), partition=partition, on_delivery=done)
        if p.flush(90):
            self.problems.append("the share topic's sentinels were not acknowledged within 90 s")

    def share_drain(self):
        """After the heal, the sentinels and the final reads: two new share members accept
        whatever they are given, until every record the share topic's final read found
        (the sentinels included) is accounted for (accepted or rejected, delivered up to
        the delivery count limit, or in the DLQ, looked at once nothing comes) and nothing
        came for SHARE_QUIET_S, or SHARE_DRAIN_S passed. They open after every earlier acknowledgement returned, so a record whose
        ACCEPT was confirmed and yet is delivered to them is a lost acknowledgement; the
        checker finds it in the history, and what is still unaccounted for at the end."""
        b = self.cluster.bootstrap()
        drain = [ShareMember(f"drain-{i}", self.history, b, self.seed, self.share_tally, release=0.0, reject=0.0,
                             instance_s=None) for i in range(2)]
        started = time.monotonic()
        for w in drain:
            w.start()
        deadline = started + SHARE_DRAIN_S
        while time.monotonic() < deadline:
            quiet = self.share_tally.quiet_for() >= SHARE_QUIET_S
            if quiet and self.share_tally.unaccounted(self.share_records):
                # Nothing comes: what is left may have been archived unseen, into the DLQ.
                read = read_dlq(b)
                if read is not None:
                    self.share_tally.in_dlq(dlq_sources(read[1]))
            if not self.share_tally.unaccounted(self.share_records) and quiet:
                break
            time.sleep(0.5)
        missing = self.share_tally.unaccounted(self.share_records)
        self.history.fault("share-drain", took_s=round(time.monotonic() - started, 1), unaccounted=len(missing))
        self.stop_workloads(drain)

    def share_dlq_read(self):
        """After the drain: the whole dead-letter queue topic, read once it holds every
        record whose REJECT was confirmed (or a failed DLQ write in a broker's log covers
        it) and its high watermarks stayed put for a read, or after SHARE_DLQ_WAIT_S, as
        a `dlq_read`; then the DLQ writes the brokers gave up on, from their logs (which
        outlive restarts) and their /metrics (since their last start), as `dlq_failures`."""
        b = self.cluster.bootstrap()
        started = time.monotonic()
        deadline = started + SHARE_DLQ_WAIT_S
        op = self.history.invoke("dlq-reader", "dlq_read", {"topic": SHARE_DLQ_TOPIC})
        last_marks, read = None, None
        while True:
            fresh = read_dlq(b)
            if fresh is not None:  # else the last whole read stands
                read = fresh
                marks, records = read
                failed, _unparsed = logged_dlq_failures(self.nodes)
                waiting = [(p, o) for p, o in self.share_tally.rejected_confirmed() - dlq_sources(records)
                           if not any(wp == p and first <= o <= last for _g, _t, wp, first, last in failed)]
                if not waiting and marks == last_marks:
                    break
                last_marks = marks
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)
        if read is None:
            self.history.complete(op, "fail", "dlq-reader", "dlq_read", {"error": "the DLQ topic could not be read"})
            self.problems.append(f"the dead-letter queue topic {SHARE_DLQ_TOPIC} could not be read at the end")
        else:
            marks, records = read
            self.history.complete(op, "ok", "dlq-reader", "dlq_read", {
                "topic": SHARE_DLQ_TOPIC, "high_watermarks": marks, "records": records})
        self.history.fault("share-dlq-read", took_s=round(time.monotonic() - started, 1),
                           records=0 if read is None else len(read[1]))
        op = self.history.invoke("dlq-reader", "dlq_failures", {})
        self.history.complete(op, "ok", "dlq-reader", "dlq_failures", failed_dlq_writes(self.nodes))


def read_dlq(bootstrap: str, timeout: float = 30.0):
    """The share group's whole dead-letter queue topic, from each partition's log start to
    its high watermark (read_uncommitted): ({partition: high watermark}, [[partition,
    offset, key, value, [[header, value], ...]], ...]), or None when it cannot be read."""
    c = Consumer(dict(COMMON, **{"bootstrap.servers": bootstrap, "group.id": "chaos-dlq",
                                 "enable.auto.commit": False, "enable.partition.eof": True}))
    try:
        marks, records, positions = {}, [], {}
        for p in range(SHARE_DLQ_PARTITIONS):
            low, high = c.get_watermark_offsets(TopicPartition(SHARE_DLQ_TOPIC, p), timeout=10)
            marks[p], positions[p] = high, low
        c.assign([TopicPartition(SHARE_DLQ_TOPIC, p, positions[p]) for p in marks])
        deadline = time.monotonic() + timeout
        while any(positions[p] < marks[p] for p in marks):
            if time.monotonic() > deadline:
                return None
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    positions[m.partition()] = max(positions[m.partition()], m.offset())
                continue
            records.append([m.partition(), m.offset(), text(m.key()), text(m.value()),
                            [[k, text(v)] for k, v in m.headers() or []]])
            positions[m.partition()] = m.offset() + 1
        return {str(p): h for p, h in marks.items()}, [r for r in records if r[1] < marks[r[0]]]
    except KafkaException:
        return None
    finally:
        c.close()


def text(data):
    return None if data is None else data.decode(errors="replace")


def dlq_sources(records) -> set:
    """(partition, offset) of the share topic's records that DLQ records name."""
    found = set()
    for _p, _o, _k, _v, headers in records:
        h = dict(headers)
        try:
            found.add((int(h.get("__dlq.errors.partition")), int(h.get("__dlq.errors.offset"))))
        except (TypeError, ValueError):
            continue
    return found


def failed_dlq_writes(nodes) -> dict:
    """The DLQ writes the brokers gave up on: from every node's log (which outlives its
    restarts), each failure's [group, topic, partition, first offset, last offset], and
    `unparsed` the failure lines whose fields could not be read; from /metrics, the sum
    of osprey_share_dlq_writes_total{result="failed"} over the running nodes (counted
    since each one's last start, so at most what the logs hold) and how many answered."""
    writes, unparsed = logged_dlq_failures(nodes)
    pages = [node_metrics(n) for n in nodes if n.proc]
    failed = sum(series_value(page, 'osprey_share_dlq_writes_total{result="failed"}') for page in pages)
    return {"writes": writes, "unparsed": unparsed, "metrics_failed": failed,
            "metrics_nodes": sum(1 for page in pages if page)}


def logged_dlq_failures(nodes):
    """([group, topic, partition, first offset, last offset] of each DLQ_FAILED_LINE in the
    nodes' logs, how many such lines could not be read)."""
    writes, unparsed = [], 0
    fields = re.compile(r'group="?([^"\s]+)"? topic=(\S+) partition=(\d+) first_offset=(\d+) last_offset=(\d+)')
    for n in nodes:
        if not n.log_path.is_file():
            continue
        for line in n.log_path.read_text(errors="replace").splitlines():
            if DLQ_FAILED_LINE not in line:
                continue
            found = fields.search(line)
            if found is None:
                unparsed += 1
                continue
            g, t, p, first, last = found.groups()
            writes.append([g, t, int(p), int(first), int(last)])
    return writes, unparsed


def node_metrics(n) -> str:
    """A node's /metrics text, read from inside its network namespace when it has one
    (its metrics listener is on that namespace's loopback); empty when unreachable."""
    url = f"http://127.0.0.1:{n.metrics_port}/metrics"
    read = subprocess.run([*n.command_prefix, sys.executable, "-c",
                           "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                           url], capture_output=True, text=True, timeout=30)
    return read.stdout


def series_value(page: str, series: str) -> float:
    """The value of one series (`name{label="value",...}` as /metrics prints it) on a
    /metrics page, 0 when absent."""
    for line in page.splitlines():
        name, _, value = line.rpartition(" ")
        if name == series:
            return float(value)
    return 0.0


def batch_headers(partition_dir: Path):
    """(base offset, last offset, partition leader epoch, producer id, base sequence, CRC,
    producer epoch) of every record batch (v2) in a partition directory's segments, in
    offset order."""
    batches = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length, epoch = struct.unpack_from(">qii", data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break  # a torn tail: recovery cuts it at the next start
            crc, _attributes, last_delta = struct.unpack_from(">Ihi", data, pos + 17)
            producer_id, producer_epoch, sequence = struct.unpack_from(">qhi", data, pos + 43)
            batches.append((base, base + last_delta, epoch, producer_id, sequence, crc, producer_epoch))
            pos += 12 + length
    return batches


def duplicate_copies(nodes, evidence: str):
    """For a checker's `duplicated` evidence line, the batch holding each copy as the
    first node that has it stored it: who wrote each copy (leader epoch) and as what
    (producer id, producer epoch, sequence). Copies from two producer epochs are the
    client's resend after an epoch bump; from one, a retry the broker failed to recognise."""
    lines = []
    for topic, partition, offset in re.findall(r"(\S+)-(\d+)@(\d+)", evidence):
        partition, offset = int(partition), int(offset)
        for n in nodes:
            d = n.dir / f"{topic}-{partition}"
            found = [b for b in batch_headers(d) if b[0] <= offset <= b[1]] if d.is_dir() else []
            if found:
                b = found[0]
                lines.append(f"{topic}-{partition}@{offset}: batch {b[0]}-{b[1]} leader epoch {b[2]}, producer {b[3]} "
                             f"epoch {b[6]} base sequence {b[4]} (node {n.node_id})")
                break
        else:
            lines.append(f"{topic}-{partition}@{offset}: on no node's disk")
    return lines


def replica_divergence(nodes, topic: str, partition: int, high_watermark: int):
    """Where the replicas of a partition disagree below its high watermark, as evidence
    lines: every replica must hold the same batches there (same offsets, leader epoch and
    CRC). A follower whose log diverges within one leader epoch can neither be truncated
    by epoch nor catch up, and would serve other records if it led."""
    logs = {}
    for n in nodes:
        d = n.dir / f"{topic}-{partition}"
        if d.is_dir():
            logs[n.node_id] = [b for b in batch_headers(d) if b[0] < high_watermark]
    if len(logs) < 2:
        return []
    found = []
    reference_id, reference = max(logs.items(), key=lambda kv: len(kv[1]))
    at = {b[0]: b for b in reference}
    for node_id, batches in logs.items():
        for b in batches:
            other = at.get(b[0])
            if other is not None and other != b:
                found.append(f"{topic}-{partition} offset {b[0]}: node {node_id} holds batch {b[0]}-{b[1]} "
                             f"epoch {b[2]} producer {b[3]} sequence {b[4]}, node {reference_id} holds "
                             f"{other[0]}-{other[1]} epoch {other[2]} producer {other[3]} sequence {other[4]}")
                break
        else:
            short = batches[-1][1] + 1 if batches else 0
            if short < high_watermark and node_id != reference_id:
                found.append(f"{topic}-{partition}: node {node_id} is behind, it holds offsets below {short} "
                             f"only, the high watermark is {high_watermark}")
    return found


def watermarks(bootstrap: str, topics, isolation="read_uncommitted"):
    c = Consumer(dict(COMMON, **{"bootstrap.servers": bootstrap, "group.id": "chaos-watermarks",
                                 "isolation.level": isolation}))
    try:
        return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10)
                for t in topics for p in range(PARTITIONS)}
    except KafkaException:
        return None
    finally:
        c.close()


def wait_stable_watermarks(bootstrap: str, topics, timeout: float = RECOVER_S) -> bool:
    """Until two looks two seconds apart find the same high watermarks, and the last
    stable offsets equal them (no transaction left open)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        marks = watermarks(bootstrap, topics)
        stable = watermarks(bootstrap, topics, "read_committed")
        if marks is not None and marks == last and stable == marks:
            return True
        last = marks
        time.sleep(2)
    return False


def final_read(bootstrap, history, topic, partition, isolation, problems, timeout: float = 90.0):
    """Every record of one partition, from its log start to its high watermark (last
    stable offset read_committed) as they are now, as one `final_read` operation."""
    process = f"final-{isolation}"
    op = history.invoke(process, "final_read", {"topic": topic, "partition": partition, "isolation": isolation})
    c = Consumer(dict(COMMON, **{"bootstrap.servers": bootstrap, "group.id": "chaos-final",
                                 "enable.auto.commit": False, "isolation.level": isolation,
                                 "enable.partition.eof": True}))
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        records = []
        c.assign([TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + timeout
        position = low
        while position < high:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {topic}-{partition} up to {position} of {high}")
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    position = max(position, m.offset())
                continue
            records.append([m.offset(), m.key().decode(), m.value().decode()])
            position = m.offset() + 1
        history.complete(op, "ok", process, "final_read", {
            "topic": topic, "partition": partition, "isolation": isolation, "log_start": low,
            "high_watermark": high, "records": records})
        return {"topic": topic, "partition": partition, "high_watermark": high, "offsets": [r[0] for r in records]}
    except (KafkaException, TimeoutError) as e:
        history.complete(op, "fail", process, "final_read", {"error": str(e)})
        problems.append(f"final read of {topic}-{partition} ({isolation}) failed: {e}")
    finally:
        c.close()


# ----- modes --------------------------------------------------------------------------


def run_seed(args, seed: int, base: Path):
    workdir = base / f"seed-{seed}"
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    run = Run(args, seed, workdir)
    started = time.monotonic()
    try:
        result = run.execute()
    except Exception as e:  # the run could not be carried out: not a verdict on the broker
        print(f"seed {seed}: the run failed: {e!r}")
        traceback.print_exc()
        print(f"  replay: {run.replay_command()}")
        return None, run, time.monotonic() - started
    took = time.monotonic() - started
    print("\n".join("  " + line for line in result.render().splitlines()))
    print(f"  replay: {run.replay_command()}   (history: {run.history.path}; {took:.0f} s)")
    if result.valid and not run.problems and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result, run, took


def run_many(args, seeds, base: Path):
    outcomes = []
    for seed in seeds:
        result, run, took = run_seed(args, seed, base)
        outcomes.append((seed, result, run, took))
    return outcomes


def exit_code(outcomes) -> int:
    if any(result is not None and not result.valid for _, result, _, _ in outcomes):
        return 1
    if any(result is None or run.problems for _, result, run, _ in outcomes):
        return 2
    return 0


def git_commit() -> str:
    """The repository's commit when this runner started, `-dirty` when tracked files
    outside the chaos results had changes then (a report says what it tested; build the
    binary from the same tree)."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!compat-tests/chaos/results")
    return commit + ("-dirty" if changed else "")


def long_config(args) -> dict:
    """What must be the same for runs to be added up in one ledger."""
    config = {"nodes": args.nodes, "rounds": args.rounds, "faults": sorted(args.faults), "producers": args.producers,
              "transactions": args.transactions, "groups": args.groups, "unclean": args.unclean, "unsafe": args.unsafe}
    if args.share:  # absent otherwise: the ledgers kept before share groups were tested still add up
        config["share"] = True
        # The share workload with its dead-letter queue and a delivery count limit of 3:
        # not to be added up with runs of the earlier one (limit 5, no DLQ).
        config["share_dlq"] = True
    return config


def ledger_entry(args, seed: int, result, run, took: float, commit: str) -> dict:
    """One finished run of a long run, as the ledger keeps it (a line of JSON)."""
    return {
        "seed": seed, "config": long_config(args), "finished": now_utc(), "took_s": round(took),
        "binary": binary_for_report(), "commit": commit,
        "faults": [r["fault"] for r in run.schedule],
        "valid": None if result is None else result.valid,
        "counts": {} if result is None else dict(result.counts),
        "findings": {} if result is None else {k: len(v) for k, v in result.findings.items() if v},
        "evidence": {} if result is None else {k: v[:3] for k, v in result.findings.items() if v},
        "problems": list(run.problems), "replay": run.replay_command(),
    }


def read_ledger(path: Path, config: dict) -> list:
    """The runs a ledger holds; refuses one kept with other settings."""
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    other = [e["seed"] for e in entries if e["config"] != config]
    if other:
        raise SystemExit(f"{path} holds runs with other settings (seeds {other[:5]}...): "
                         f"name another --ledger, or run with the same settings")
    return entries


def run_long(args, base: Path):
    """Runs seeds from --first-seed until the ledger holds --rounds-total fault rounds,
    skipping seeds it already holds: a long run stopped part way (a session's end, a
    reboot) goes on where it stopped. Each finished run is appended to the ledger and the
    report is written again, so the report always tells the rounds done so far."""
    config = long_config(args)
    entries = read_ledger(args.ledger, config)
    commit = git_commit()
    done = {e["seed"] for e in entries}
    outcomes = []
    seed = args.first_seed
    while sum(len(e["faults"]) for e in entries) < args.rounds_total:
        if seed not in done:
            result, run, took = run_seed(args, seed, base)
            outcomes.append((seed, result, run, took))
            entry = ledger_entry(args, seed, result, run, took, commit)
            entries.append(entry)
            args.ledger.parent.mkdir(parents=True, exist_ok=True)
            with open(args.ledger, "a") as f:
                f.write(json.dumps(entry) + "\n")
            report(args, entries, args.report)
        seed += 1
    if not outcomes:
        report(args, entries, args.report)
    return outcomes


def report(args, entries, path: Path):
    """The markdown report of a long run, from its ledger's entries."""
    by_fault = {}
    totals = {}
    for e in entries:
        for fault in e["faults"]:
            by_fault[fault] = by_fault.get(fault, 0) + 1
        for k, v in e["counts"].items():
            totals[k] = totals.get(k, 0) + v
        for k, v in e["findings"].items():
            totals[f"found_{k}"] = totals.get(f"found_{k}", 0) + v
    rounds = sum(by_fault.values())
    failed = [e for e in entries if e["valid"] is not True or e["problems"]]
    commits = sorted({e["commit"] for e in entries})
    first = min((e["finished"] for e in entries), default="-")
    last = max((e["finished"] for e in entries), default="-")
    command = (f"compat-tests/chaos/run.py long --rounds-total {args.rounds_total} --rounds {args.rounds} "
               f"--first-seed {args.first_seed} --nodes {args.nodes} --faults {','.join(args.faults)} "
               f"--producers {args.producers}" + ("" if args.transactions else " --no-transactions")
               + ("" if args.groups else " --no-groups") + (" --share" if args.share else "")
               + (" --unclean" if args.unclean else "")
               + (" --unsafe" if args.unsafe else "") + ledger_flags(args))
    lines = [
        "# Chaos runs (issue 17)",
        "",
        f"`{command}`: **{rounds} of {args.rounds_total} fault rounds** so far, in "
        f"{len(entries)} runs of {args.rounds} rounds ({args.nodes} nodes, replication factor "
        f"{min(3, args.nodes)}, min.insync.replicas {min(2, args.nodes)}, unclean leader election "
        f"{'on' if args.unclean else 'off'}, fsync {'relaxed' if args.unsafe else 'default'}, faults "
        f"{','.join(sorted(args.faults))}), finished between {first} and {last}; binary "
        f"`{binary_for_report()}` built from {', '.join(commits) or '-'}. The ledger "
        f"(`{args.ledger.name}`, a line per run) is what this is computed from; the same command goes on "
        f"where it stopped.",
        "",
        "| fault | rounds |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in sorted(by_fault.items())],
        "",
        "| records | count |",
        "|---|---|",
        f"| acknowledged (acks=all, idempotent) | {totals.get('acknowledged', 0)} |",
        f"| lost | {totals.get('found_lost', 0)} |",
        f"| duplicated | {totals.get('found_duplicated', 0)} |",
        f"| divergent | {totals.get('found_divergent', 0)} |",
        f"| reordered | {totals.get('found_reordered', 0)} |",
        f"| transactions committed / aborted / indeterminate | {totals.get('txn_committed', 0)} / "
        f"{totals.get('txn_aborted', 0)} / {totals.get('txn_indeterminate', 0)} |",
        f"| transaction violations (aborted read, lost commit, partial) | {totals.get('found_aborted_read', 0)} / "
        f"{totals.get('found_lost_commit', 0)} / {totals.get('found_partial_txn', 0)} |",
        f"| group commits / backwards / skipped records | {totals.get('commits', 0)} / "
        f"{totals.get('found_commit_backwards', 0)} / {totals.get('found_skipped', 0)} |",
        *share_rows(totals),
        "",
        f"Runs with a violation or a problem: {len(failed)} of {len(entries)}.",
        "",
    ]
    for e in failed:
        verdict = {None: "the run failed", False: "INVALID", True: "valid"}[e["valid"]]
        lines.append(f"- seed {e['seed']} ({e['commit']}): {verdict}; `{e['replay']}`")
        for k, evidence in e["evidence"].items():
            lines.append(f"  - {k}: {e['findings'][k]}")
            lines.extend(f"    - {line}" for line in evidence)
        lines.extend(f"  - problem: {p}" for p in e["problems"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(f"report: {path} ({rounds} of {args.rounds_total} rounds)")


def ledger_flags(args) -> str:
    """`--ledger` and `--report` as a report's command names them, when not the defaults."""
    flags = ""
    for flag, path, default in (("--ledger", args.ledger, "chaos-long.jsonl"), ("--report", args.report, "CHAOS.md")):
        if path.resolve() != (HERE / "results" / default).resolve():
            try:
                shown = path.resolve().relative_to(Path(REPO_ROOT).resolve())
            except ValueError:
                shown = path
            flags += f" {flag} {shown}"
    return flags


def share_rows(totals: dict) -> list:
    """The share group's lines of a report's table, when its runs had one."""
    if not totals.get("share_records"):
        return []
    return [
        f"| share records / accepted / rejected / archived at the delivery count limit / ACCEPT or REJECT "
        f"unconfirmed | {totals['share_records']} / {totals.get('share_accepted', 0)} / "
        f"{totals.get('share_rejected', 0)} / {totals.get('share_archived_at_limit', 0)} / "
        f"{totals.get('share_done_unconfirmed', 0)} |",
        f"| share deliveries / acknowledgements confirmed / unconfirmed | {totals.get('share_deliveries', 0)} / "
        f"{totals.get('share_acks_confirmed', 0)} / {totals.get('share_acks_unconfirmed', 0)} |",
        f"| share violations (confirmed twice, delivered after a confirmed ACCEPT or REJECT, delivery count "
        f"back, unaccounted) | {totals.get('found_share_accepted_twice', 0)} / "
        f"{totals.get('found_share_redelivered', 0)} / {totals.get('found_share_count_backwards', 0)} / "
        f"{totals.get('found_share_unaccounted', 0)} |",
        *dlq_rows(totals),
    ]


def dlq_rows(totals: dict) -> list:
    """The share group's dead-letter queue lines of a report's table, when its runs had one."""
    if "dlq_records" not in totals:
        return []
    return [
        f"| DLQ records / records they name / rejected / delivery count exceeded / without the copied value | "
        f"{totals['dlq_records']} / {totals.get('dlq_sources', 0)} / {totals.get('dlq_rejected', 0)} / "
        f"{totals.get('dlq_exceeded', 0)} / {totals.get('dlq_headers_only', 0)} |",
        f"| REJECT confirmed / in the DLQ / missing after a failed DLQ write; failed DLQ writes logged | "
        f"{totals.get('dlq_rejects_confirmed', 0)} / {totals.get('dlq_rejects_found', 0)} / "
        f"{totals.get('dlq_missing_failed_write', 0)}; {totals.get('dlq_failed_writes', 0)} |",
        f"| DLQ delivery count exceeded for a record whose ACCEPT was confirmed (a lock expiry's DLQ write "
        f"precedes its state write, which a new leader may not have) | {totals.get('dlq_exceeded_accepted', 0)} |",
        f"| DLQ violations (wrong record, rejected record accepted, wrong cause, missing) | "
        f"{totals.get('found_dlq_wrong_record', 0)} / {totals.get('found_dlq_accepted', 0)} / "
        f"{totals.get('found_dlq_wrong_cause', 0)} / {totals.get('found_dlq_missing', 0)} |",
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("run", "quick", "long"),
                        help="run: one seed; quick: the CI seeds; long: many runs and a markdown report")
    parser.add_argument("--seed", type=int, help="run: the seed (default: a random one, printed)")
    parser.add_argument("--rounds", type=int, default=6, help="fault rounds per run (default 6)")
    parser.add_argument("--rounds-total", type=int, default=1000,
                        help="long: fault rounds in all, split into runs of --rounds (default 1000)")
    parser.add_argument("--first-seed", type=int, default=1000, help="long: the first seed (default 1000)")
    parser.add_argument("--nodes", type=int, default=3, help="combined broker+controller nodes (default 3)")
    parser.add_argument("--faults", type=lambda s: s.split(","),
                        help=f"comma-separated, of {','.join(WEIGHTS)} (default {','.join(FAULTS)}, and "
                             f"{','.join(PARTITIONS_KINDS)} as root; powerloss and fulldisk only when named)")
    parser.add_argument("--producers", type=int, default=2, help="idempotent producers (default 2)")
    parser.add_argument("--transactions", action=argparse.BooleanOptionalAction,
                        help="the transactional producer and read_committed checks (default: on)")
    parser.add_argument("--groups", action=argparse.BooleanOptionalAction,
                        help="the consumer group with manual commits (default: on)")
    parser.add_argument("--share", action="store_true",
                        help="a share group (KIP-932): two members acknowledging explicitly on a topic of its "
                             "own fed by an idempotent producer, and a drain after the heal (default: off)")
    parser.add_argument("--keep", action="store_true", help="keep the directories of runs that passed")
    parser.add_argument("--unclean", action="store_true",
                        help="unclean.leader.election.enable=true: losses are counted, not violations")
    parser.add_argument("--unsafe", action="store_true",
                        help="fsync relaxed to Kafka's setting and, unless --faults says otherwise, "
                             "only power cuts of every node at once: loss is possible and should be found")
    parser.add_argument("--workdir", type=Path, help="where runs keep their clusters and histories "
                                                     "(default: a new directory under /tmp)")
    parser.add_argument("--report", type=Path, default=HERE / "results" / "CHAOS.md", help="long: the report")
    parser.add_argument("--ledger", type=Path, default=HERE / "results" / "chaos-long.jsonl",
                        help="long: the finished runs, a line of JSON each; a long run goes on from it")
    args = parser.parse_args(argv)
    if args.faults is None:
        if args.unsafe:
            args.faults = ["powerloss"]
        else:
            args.faults = list(FAULTS) + (list(PARTITIONS_KINDS) if Network.available() else [])
    args.transactions = True if args.transactions is None else args.transactions
    args.groups = True if args.groups is None else args.groups
    unknown = [f for f in args.faults if f not in WEIGHTS]
    if unknown:
        parser.error(f"unknown faults: {unknown}")
    if "powerloss" in args.faults and not LoopDisks.available():
        parser.error("powerloss needs root, mkfs.ext4 and loop devices")
    if "fulldisk" in args.faults and not TmpfsDisks.available():
        parser.error("fulldisk needs root (a tmpfs per node)")
    if set(PARTITIONS_KINDS) & set(args.faults) and not Network.available():
        parser.error("network partitions need root and iproute2 (network namespaces)")
    if not osprey_bin().is_file():
        parser.error(f"{osprey_bin()} does not exist: cargo build -p osprey-server --bin osprey (or set OSPREY_BIN)")
    base = args.workdir or Path(tempfile.mkdtemp(prefix="osprey-chaos-"))
    print(f"osprey chaos: {args.mode}, binary {osprey_bin()}, work in {base}")

    if args.mode == "run":
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
        outcomes = run_many(args, [seed], base)
    elif args.mode == "quick":
        outcomes = run_many(args, QUICK_SEEDS, base)
    else:
        outcomes = run_long(args, base)
    code = exit_code(outcomes)
    if args.workdir is None and not any(base.iterdir()):
        base.rmdir()
    print(f"osprey chaos: {'OK' if code == 0 else 'VIOLATION' if code == 1 else 'PROBLEMS'} "
          f"({len(outcomes)} runs; seeds {', '.join(str(s) for s, *_ in outcomes)})")
    for seed, result, run, _ in outcomes:
        if result is None or not result.valid or run.problems:
            print(f"  replay seed {seed}: {run.replay_command()}")
    return code


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
