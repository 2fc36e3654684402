"""Consumer groups (the classic protocol) with librdkafka: what the reliability guidance
promises a consumer that commits only after processing. A member that dies hands its
partitions to another that resumes exactly from the last commit; committing in the
revoke callback hands over without processing anything twice; a partition has one owner
at a time while members come and go; a static member that restarts gets its partitions
back without a rebalance; offsets and groups survive a broker restart and a kill -9;
and the AdminClient lists, describes, alters and deletes groups and their offsets.

Run as a script (`python test_groups.py worker '<json>'`), this file is the consumer
process that test_killed_member_hands_over_and_successor_resumes_from_last_commit kills.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import pytest

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

import clients

# The broker's group.min.session.timeout.ms: a dead member is noticed this long after
# its last heartbeat.
SESSION_TIMEOUT_MS = 6000


def group_config(group: str, **config):
    """A subscribing consumer that commits by hand, only after processing."""
    conf = {
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 500,
    }
    conf.update(config)
    return conf


def group_consumer(broker, group: str, **config) -> Consumer:
    return clients.consumer(broker, **group_config(group, **config))


def produce_ids(broker, topic: str, ids, partitions: int):
    """Produces the decimal `ids` round-robin over `partitions`; {(partition, offset): id}."""
    p = clients.producer(broker, acks="all")
    reports = clients.produce_all(p, topic, [{"value": str(i).encode(), "partition": i % partitions} for i in ids])
    assert [r.error for r in reports] == [None] * len(reports)
    return {(r.partition, r.offset): int(r.value) for r in reports}


def committed(broker, group: str, topic: str, partitions: int):
    """{partition: committed offset} of `group`, read by a consumer that does not join it."""
    c = clients.consumer(broker, **{"group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=clients.TIMEOUT_S)
        for tp in tps:
            assert tp.error is None, f"OffsetFetch {tp}: {tp.error}"
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def end_offsets(broker, topic: str, partitions: int):
    c = clients.consumer(broker)
    try:
        ends = {}
        for p in range(partitions):
            _, ends[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=clients.TIMEOUT_S)
        return ends
    finally:
        c.close()


def wait_until(predicate, timeout: float, what: str, step=None):
    """Calls `step` (e.g. a poll) until `predicate()` holds; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        if step:
            step()
        else:
            time.sleep(0.05)


def admin_result(future):
    return future.result(timeout=clients.TIMEOUT_S)


def admin_error_code(future):
    """The KafkaError code a failed admin future carries (fails if it succeeded)."""
    try:
        result = future.result(timeout=clients.TIMEOUT_S)
    except KafkaException as e:
        return e.args[0].code()
    raise AssertionError(f"expected an error, got {result!r}")


class Recorder:
    """Polls consumers in turn and records every message each one processed, the way an
    application would: a message counts as processed as soon as poll returned it."""

    def __init__(self, topic: str):
        self.topic = topic
        self.processed = []  # (name, partition, offset, value)
        self.positions = defaultdict(dict)  # name -> {partition: next offset to process}
        self.events = defaultdict(list)  # name -> [("assign"|"revoke"|"lost", [partitions], time)]

    def subscribe(self, name: str, c: Consumer, commit_on_revoke: bool):
        def on_assign(consumer, parts):
            self.events[name].append(("assign", sorted(p.partition for p in parts), time.monotonic()))

        def on_revoke(consumer, parts):
            if commit_on_revoke:
                offsets = [
                    TopicPartition(self.topic, p.partition, self.positions[name][p.partition])
                    for p in parts
                    if p.partition in self.positions[name]
                ]
                if offsets:
                    consumer.commit(offsets=offsets, asynchronous=False)
            for p in parts:
                self.positions[name].pop(p.partition, None)
            self.events[name].append(("revoke", sorted(p.partition for p in parts), time.monotonic()))

        def on_lost(consumer, parts):
            self.events[name].append(("lost", sorted(p.partition for p in parts), time.monotonic()))

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def poll(self, name: str, c: Consumer, timeout: float = 0.05):
        msg = c.poll(timeout)
        if msg is None:
            return
        if msg.error():
            raise AssertionError(f"{name}: consumer error {msg.error()}")
        self.processed.append((name, msg.partition(), msg.offset(), int(msg.value())))
        self.positions[name][msg.partition()] = msg.offset() + 1

    def poll_all(self, consumers: dict, until, timeout: float, what: str):
        def step():
            for name, c in consumers.items():
                self.poll(name, c)

        wait_until(until, timeout, what, step)

    def processed_by(self, name: str):
        return [(p, o) for (n, p, o, _) in self.processed if n == name]

    def assignment_callbacks(self, name: str) -> int:
        return len(self.events[name])


# ----- 1. a consumer process killed mid-batch -------------------------------------------


def _worker_main(cfg):
    """A consumer process: subscribes, processes each message (a line in its file), and
    commits the batch synchronously afterwards. With `hang_after`, it stops in the middle
    of a batch, processed but not committed, for the test to SIGKILL it."""
    out = open(cfg["out"], "a", buffering=1)  # line-buffered: each record is in the kernel at once

    def record(*fields):
        out.write(" ".join(str(f) for f in fields) + "\n")

    topic = cfg["topic"]
    conf = dict(clients.COMMON, **{"bootstrap.servers": cfg["bootstrap"]}, **group_config(cfg["group"]))
    c = Consumer(conf)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    c.subscribe(
        [topic],
        on_assign=lambda _c, parts: record("A", ",".join(str(p.partition) for p in parts)),
        on_revoke=lambda _c, parts: record("R", ",".join(str(p.partition) for p in parts)),
    )
    processed = 0
    while not stop.is_set():
        batch = c.consume(num_messages=cfg["batch"], timeout=0.2)
        done = {}
        for m in batch:
            if m.error():
                record("E", m.error().code())
                continue
            time.sleep(cfg["process_s"])
            record("M", m.partition(), m.offset(), int(m.value()))
            done[m.partition()] = m.offset() + 1
            processed += 1
            if processed == cfg.get("hang_after"):
                record("H")
                time.sleep(3600)
        if done:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in done.items()], asynchronous=False)
                record("C", " ".join(f"{p}:{o}" for p, o in sorted(done.items())))
            except KafkaException as e:
                # A rebalance took the partitions first: their new owner reprocesses.
                record("F", e.args[0].name())
    c.close()
    record("X")


def start_worker(tmp_path, name, **cfg):
    out = tmp_path / f"{name}.log"
    cfg["out"] = str(out)
    proc = subprocess.Popen([sys.executable, __file__, "worker", json.dumps(cfg)], cwd=os.path.dirname(__file__))
    return proc, out


def read_worker(out):
    """[(kind, fields...)] from a worker's file."""
    if not out.exists():
        return []
    return [line.split(" ") for line in out.read_text().splitlines() if line]


def last_assignment(records):
    assigns = [r for r in records if r[0] == "A"]
    return set() if not assigns else {int(p) for p in assigns[-1][1].split(",") if p}


def test_killed_member_hands_over_and_successor_resumes_from_last_commit(broker, tmp_path):
    topic, group, partitions = "groups-kill", "g-kill", 4
    clients.create_topic(broker, topic, partitions=partitions)
    common = dict(bootstrap=broker.bootstrap, topic=topic, group=group, batch=10, process_s=0.005)
    a, a_out = start_worker(tmp_path, "a", hang_after=45, **common)
    b = None
    try:
        wait_until(lambda: last_assignment(read_worker(a_out)) == set(range(partitions)), 30, "a owns every partition")
        b, b_out = start_worker(tmp_path, "b", **common)
        wait_until(
            lambda: len(last_assignment(read_worker(a_out))) == 2 and len(last_assignment(read_worker(b_out))) == 2,
            30,
            "a and b own two partitions each",
        )
        a_parts = last_assignment(read_worker(a_out))
        produced = produce_ids(broker, topic, range(400), partitions)

        wait_until(lambda: ["H"] in read_worker(a_out), 30, "a stopped mid-batch")
        a.kill()
        a.wait(timeout=10)
        killed_at = time.monotonic()

        def b_covers_everything():
            done = {(int(r[1]), int(r[2])) for r in read_worker(a_out) + read_worker(b_out) if r[0] == "M"}
            return done >= set(produced) and last_assignment(read_worker(b_out)) == set(range(partitions))

        wait_until(b_covers_everything, 60, "b took over a's partitions and processed everything")
        takeover_s = time.monotonic() - killed_at
        # The broker noticed the dead member only after its session timeout.
        assert takeover_s >= SESSION_TIMEOUT_MS / 1000 - 1.5, f"takeover after {takeover_s:.1f}s"
        wait_until(
            lambda: committed(broker, group, topic, partitions) == end_offsets(broker, topic, partitions),
            20,
            "b committed everything",
        )
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=30) == 0
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    a_rec, b_rec = read_worker(a_out), read_worker(b_out)
    assert not [r for r in a_rec + b_rec if r[0] in ("E", "F")], "errors or failed commits"
    a_done = [(int(r[1]), int(r[2])) for r in a_rec if r[0] == "M"]
    last_commit = {p: 0 for p in a_parts}  # auto.offset.reset=earliest: nothing committed means 0
    for r in a_rec:
        if r[0] == "C":
            for field in r[1:]:
                p, o = map(int, field.split(":"))
                last_commit[p] = max(last_commit.get(p, 0), o)
    uncommitted = {(p, o) for (p, o) in a_done if o >= last_commit.get(p, 0)}
    assert uncommitted, "a was killed with every processed message committed: not mid-batch"

    # b's records after its last assignment, the one that gave it a's partitions.
    last_assign = max(i for i, r in enumerate(b_rec) if r[0] == "A")
    after = [(int(r[1]), int(r[2])) for r in b_rec[last_assign:] if r[0] == "M"]
    for p in a_parts:
        first = next(o for (q, o) in after if q == p)
        assert first == last_commit[p], f"partition {p}: b resumed at {first}, a's last commit was {last_commit[p]}"

    b_done = [(int(r[1]), int(r[2])) for r in b_rec if r[0] == "M"]
    counts = Counter(a_done + b_done)
    assert set(counts) == set(produced), "a message was skipped or invented"
    # Exactly what a processed but had not committed was processed twice, nothing else.
    assert {po for po, n in counts.items() if n > 1} == uncommitted
    assert max(counts.values()) == 2


# ----- 2. commit in the revoke callback ------------------------------------------------------


def test_committing_in_on_revoke_hands_over_without_processing_twice(broker):
    topic, group, partitions = "groups-revoke", "g-revoke", 4
    clients.create_topic(broker, topic, partitions=partitions)
    produced = produce_ids(broker, topic, range(200), partitions)
    rec = Recorder(topic)
    c1 = group_consumer(broker, group)
    c2 = None
    try:
        # c1 processes everything and commits nothing: only its revoke callback commits.
        rec.subscribe("c1", c1, commit_on_revoke=True)
        rec.poll_all({"c1": c1}, lambda: len(rec.processed) == 200, 30, "c1 processed the first 200")
        assert committed(broker, group, topic, partitions) == {p: OFFSET_INVALID for p in range(partitions)}

        c2 = group_consumer(broker, group)
        rec.subscribe("c2", c2, commit_on_revoke=True)
        both = {"c1": c1, "c2": c2}
        rec.poll_all(both, lambda: len(c1.assignment()) == 2 and len(c2.assignment()) == 2, 30, "two partitions each")
        # c1's revoke callback committed everything it had processed.
        assert committed(broker, group, topic, partitions) == {p: 50 for p in range(partitions)}

        produced.update(produce_ids(broker, topic, range(200, 400), partitions))
        rec.poll_all(both, lambda: len(rec.processed) >= 400, 30, "all 400 processed")
        end = time.monotonic() + 1.0
        rec.poll_all(both, lambda: time.monotonic() > end, 5, "settle")
    finally:
        c1.close()
        if c2 is not None:
            c2.close()

    got = [(p, o) for (_, p, o, _) in rec.processed]
    assert Counter(got).most_common(1)[0][1] == 1, "a message was processed twice"
    assert set(got) == set(produced)
    # c2 began its partitions where c1's revoke callback committed.
    c2_first = {}
    for p, o in rec.processed_by("c2"):
        c2_first.setdefault(p, o)
    assert c2_first and all(o == 50 for o in c2_first.values()), c2_first
    assert not any(kind == "lost" for n in rec.events for kind, _, _ in rec.events[n])
    # Closing revokes too, so the last positions are committed.
    assert committed(broker, group, topic, partitions) == {p: 100 for p in range(partitions)}


# ----- 3. members come and go under load -----------------------------------------------------


REFUSED_DURING_REBALANCE = (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION)


class Member(threading.Thread):
    """One group member in its own thread: processes, commits every 25 messages and in
    its revoke callback, and records when it owned which partition."""

    def __init__(self, name, broker, group, topic, strategy, intervals, lock):
        super().__init__(name=name, daemon=True)
        self.c = group_consumer(broker, group, **{"partition.assignment.strategy": strategy})
        self.topic = topic
        self.intervals = intervals  # partition -> [[member, start, end]]
        self.lock = lock
        self.open = {}
        self.positions = {}
        self.processed = []
        self.problems = []
        self.refused_commits = []
        self.cooperative = strategy == "cooperative-sticky"
        self.stop = threading.Event()

    def commit(self, partitions, revoking=False):
        offsets = [TopicPartition(self.topic, p, self.positions[p]) for p in partitions if p in self.positions]
        if offsets:
            try:
                self.c.commit(offsets=offsets, asynchronous=False)
            except KafkaException as e:
                # The cooperative protocol keeps members consuming and committing while
                # the group rebalances, and Kafka refuses a commit of the old generation
                # (ILLEGAL_GENERATION) or one made while the group waits for its SyncGroup
                # (REBALANCE_IN_PROGRESS); librdkafka does not retry it. The eager protocol
                # revokes first, so there every commit must succeed.
                if self.cooperative and e.args[0].code() in REFUSED_DURING_REBALANCE:
                    where = "on_revoke" if revoking else "after processing"
                    self.refused_commits.append(f"{where}: {e.args[0].name()}")
                else:
                    self.problems.append(f"commit {offsets}: {e.args[0]}")

    def on_assign(self, _c, parts):
        now = time.monotonic()
        with self.lock:
            for p in parts:
                self.open[p.partition] = [self.name, now, None]
                self.intervals[p.partition].append(self.open[p.partition])

    def on_revoke(self, _c, parts):
        self.commit([p.partition for p in parts], revoking=True)
        now = time.monotonic()
        with self.lock:
            for p in parts:
                self.positions.pop(p.partition, None)
                interval = self.open.pop(p.partition, None)
                if interval is None:
                    self.problems.append(f"revoked {p.partition} it did not own")
                else:
                    interval[2] = now

    def on_lost(self, _c, parts):
        self.problems.append(f"lost {[p.partition for p in parts]}")
        self.on_revoke(_c, parts)

    def run(self):
        self.c.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)
        since_commit = 0
        while not self.stop.is_set():
            msg = self.c.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                self.problems.append(f"consumer error {msg.error()}")
                continue
            self.processed.append((msg.partition(), msg.offset()))
            self.positions[msg.partition()] = msg.offset() + 1
            since_commit += 1
            if since_commit >= 25:
                self.commit(list(self.positions))
                since_commit = 0
        self.c.close()  # revokes (and commits) before leaving

    def wait_processing(self, count: int, timeout: float = 30):
        """Until this member processed `count` more messages than it had."""
        target = len(self.processed) + count
        wait_until(lambda: len(self.processed) >= target, timeout, f"{self.name} processing {count} more")

    def leave(self):
        self.stop.set()
        self.join(timeout=30)
        assert not self.is_alive(), f"{self.name} did not close within 30s"


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_members_joining_and_leaving_under_load_lose_nothing_and_never_share_a_partition(broker, strategy):
    topic, group, partitions = f"groups-churn-{strategy}", f"g-churn-{strategy}", 6
    clients.create_topic(broker, topic, partitions=partitions)
    intervals, lock = defaultdict(list), threading.Lock()
    delivered, producing = {}, threading.Event()
    producing.set()

    def produce():
        p = clients.producer(broker, acks="all", linger_ms=2)
        i = 0

        def on_delivery(err, msg):
            if err is None:
                delivered[(msg.partition(), msg.offset())] = int(msg.value())

        while producing.is_set():
            p.produce(topic, value=str(i).encode(), partition=i % partitions, on_delivery=on_delivery)
            p.poll(0.004)
            i += 1
        assert p.flush(clients.TIMEOUT_S) == 0
        delivered["sent"] = i

    members = {n: Member(n, broker, group, topic, strategy, intervals, lock) for n in ("m1", "m2", "m3")}
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        # Each step waits for the last one to show: a member joining during the group's
        # initial rebalance delay would only extend it.
        for name in ("m1", "m2", "m3"):
            members[name].start()
            members[name].wait_processing(100)
        members["m1"].leave()
        members["m2"].wait_processing(100)
        members["m2"].leave()
        members["m3"].wait_processing(100)
        producing.clear()
        producer.join(timeout=30)
        sent = delivered.pop("sent")
        assert len(delivered) == sent, f"{sent - len(delivered)} of {sent} messages not acknowledged"

        def m3_has_everything():
            done = set().union(*(set(m.processed) for m in members.values()))
            return done >= set(delivered)

        wait_until(m3_has_everything, 40, "every produced message processed")
    finally:
        producing.clear()
        for m in members.values():
            if m.is_alive():
                m.leave()

    problems = [f"{n}: {p}" for n, m in members.items() for p in m.problems]
    assert not problems, problems
    counts = Counter(po for m in members.values() for po in m.processed)
    assert set(counts) == set(delivered), "a message was skipped or invented"
    twice = sorted(po for po, n in counts.items() if n > 1)
    refused = [f"{n}: {r}" for n, m in members.items() for r in m.refused_commits]
    # Committing in on_revoke means a new owner starts where the old one stopped; only a
    # commit the broker refused mid-rebalance (cooperative only, see Member.commit) can
    # make it process something again.
    if twice:
        assert any("on_revoke" in r for r in refused), (
            f"{len(twice)} messages processed twice though every commit in on_revoke succeeded, e.g. {twice[:5]}"
        )
    for name, m in members.items():
        assert m.processed, f"{name} never processed anything"
    for p, spans in intervals.items():
        spans = sorted(spans, key=lambda s: s[1])
        for earlier, later in zip(spans, spans[1:]):
            assert earlier[2] is not None and earlier[2] <= later[1], (
                f"partition {p}: {earlier[0]} owned it until {earlier[2]}, {later[0]} from {later[1]}"
            )
    assert set(intervals) == set(range(partitions))


# ----- 4. static membership ------------------------------------------------------------------


def test_static_member_restarting_within_session_timeout_gets_its_partitions_without_rebalance(broker):
    topic, group, partitions = "groups-static", "g-static", 4
    clients.create_topic(broker, topic, partitions=partitions)
    rec = Recorder(topic)
    static = {"session.timeout.ms": 10000}
    a = group_consumer(broker, group, **{"group.instance.id": "static-a"}, **static)
    b = group_consumer(broker, group, **{"group.instance.id": "static-b"}, **static)
    a2 = None
    adm = clients.admin(broker)
    try:
        rec.subscribe("a", a, commit_on_revoke=False)
        rec.poll_all({"a": a}, lambda: len(a.assignment()) == partitions, 30, "a owns everything")
        rec.subscribe("b", b, commit_on_revoke=False)
        rec.poll_all({"a": a, "b": b}, lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30, "2 each")
        a_parts = sorted(tp.partition for tp in a.assignment())
        b_callbacks = rec.assignment_callbacks("b")

        a.close()  # a static member does not leave the group on close
        desc = admin_result(adm.describe_consumer_groups([group], request_timeout=clients.TIMEOUT_S)[group])
        assert desc.state == ConsumerGroupState.STABLE
        assert sorted(m.group_instance_id for m in desc.members) == ["static-a", "static-b"]

        a2 = group_consumer(broker, group, **{"group.instance.id": "static-a"}, **static)
        rec.subscribe("a2", a2, commit_on_revoke=False)
        rec.poll_all({"a2": a2, "b": b}, lambda: a2.assignment(), 30, "a2 got an assignment")
        assert sorted(tp.partition for tp in a2.assignment()) == a_parts
        # b keeps consuming through all this and is never asked to give anything up.
        produced = produce_ids(broker, topic, range(100), partitions)
        rec.poll_all({"a2": a2, "b": b}, lambda: len(rec.processed) >= 100, 30, "100 processed")
        end = time.monotonic() + 3
        rec.poll_all({"a2": a2, "b": b}, lambda: time.monotonic() > end, 10, "settle")
        assert rec.assignment_callbacks("b") == b_callbacks, f"b saw a rebalance: {rec.events['b']}"
        assert sorted({p for p, _ in rec.processed_by("a2")}) == a_parts
        assert sorted(po for po in ((p, o) for (_, p, o, _) in rec.processed)) == sorted(produced)

        desc = admin_result(adm.describe_consumer_groups([group], request_timeout=clients.TIMEOUT_S)[group])
        assert desc.state == ConsumerGroupState.STABLE
        members = {
            m.group_instance_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members
        }
        assert members == {"static-a": a_parts, "static-b": sorted(tp.partition for tp in b.assignment())}
    finally:
        b.close()
        if a2 is not None:
            a2.close()


# ----- 5. broker restarts ----------------------------------------------------------------------


def describe(broker, group):
    adm = clients.admin(broker)
    return admin_result(adm.describe_consumer_groups([group], request_timeout=clients.TIMEOUT_S)[group])


def listed_groups(broker, **kwargs):
    adm = clients.admin(broker)
    result = admin_result(adm.list_consumer_groups(request_timeout=clients.TIMEOUT_S, **kwargs))
    assert not result.errors, result.errors
    return {g.group_id: g for g in result.valid}


def as_committed(positions, partitions):
    """What OffsetFetch answers after committing `positions`: nothing for the others."""
    return {p: positions.get(p, OFFSET_INVALID) for p in range(partitions)}


def test_committed_offsets_and_group_survive_sigterm_and_kill_9_restarts(broker):
    topic, group, partitions = "groups-restart", "g-restart", 2
    clients.create_topic(broker, topic, partitions=partitions)
    produced = produce_ids(broker, topic, range(200), partitions)
    rec = Recorder(topic)
    c = group_consumer(broker, group, **{"client.id": "restart-member"})
    try:
        rec.subscribe("c", c, commit_on_revoke=False)
        rec.poll_all({"c": c}, lambda: len(rec.processed) >= 60, 30, "60 processed")
        first = dict(rec.positions["c"])
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in first.items()], asynchronous=False)
        assert committed(broker, group, topic, partitions) == as_committed(first, partitions)

        broker.restart(clean=True)
        assert committed(broker, group, topic, partitions) == as_committed(first, partitions)
        # The member itself carries on: its heartbeats are still accepted.
        rec.poll_all({"c": c}, lambda: len(rec.processed) >= 120, 30, "120 processed after the SIGTERM restart")
        desc = describe(broker, group)
        assert desc.state == ConsumerGroupState.STABLE
        assert [m.client_id for m in desc.members] == ["restart-member"]
        assert listed_groups(broker)[group].state == ConsumerGroupState.STABLE

        second = dict(rec.positions["c"])
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in second.items()], asynchronous=False)
        broker.restart(clean=False)  # kill -9 straight after the commit was acknowledged
        assert committed(broker, group, topic, partitions) == as_committed(second, partitions)
        desc = describe(broker, group)
        assert desc.state == ConsumerGroupState.STABLE, desc
        assert [m.client_id for m in desc.members] == ["restart-member"]
    finally:
        c.close()

    # A new member resumes exactly at the commit and reads the rest, nothing more.
    rec2 = Recorder(topic)
    c2 = group_consumer(broker, group)
    try:
        rec2.subscribe("c2", c2, commit_on_revoke=False)
        rest = 200 - sum(second.values())
        rec2.poll_all({"c2": c2}, lambda: len(rec2.processed) >= rest, 30, f"the remaining {rest}")
        end = time.monotonic() + 1
        rec2.poll_all({"c2": c2}, lambda: time.monotonic() > end, 5, "settle")
    finally:
        c2.close()
    got = rec2.processed_by("c2")
    assert len(got) == rest
    assert set(got) == {(p, o) for (p, o) in produced if o >= second.get(p, 0)}
    assert listed_groups(broker)[group].state == ConsumerGroupState.EMPTY


# ----- 6. the AdminClient -----------------------------------------------------------------------


def test_admin_lists_describes_alters_and_deletes_groups_and_offsets(broker):
    topic, partitions = "groups-admin", 2
    active, idle = "g-admin-active", "g-admin-idle"
    clients.create_topic(broker, topic, partitions=partitions)
    produce_ids(broker, topic, range(20), partitions)
    adm = clients.admin(broker)
    rec = Recorder(topic)
    member = group_consumer(broker, active, **{"client.id": "admin-member"})
    try:
        rec.subscribe("m", member, commit_on_revoke=False)
        rec.poll_all({"m": member}, lambda: len(rec.processed) == 20, 30, "active member read everything")
        member.commit(offsets=[TopicPartition(topic, p, 10) for p in range(partitions)], asynchronous=False)

        # An idle group: offsets committed by a consumer that never joins (a simple group).
        simple = clients.consumer(broker, **{"group.id": idle})
        simple.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 7)], asynchronous=False)
        simple.close()

        everything = listed_groups(broker)
        assert everything[active].state == ConsumerGroupState.STABLE
        assert everything[active].is_simple_consumer_group is False
        assert everything[idle].state == ConsumerGroupState.EMPTY
        assert set(listed_groups(broker, states={ConsumerGroupState.STABLE})) == {active}
        assert set(listed_groups(broker, states={ConsumerGroupState.EMPTY})) == {idle}

        descs = adm.describe_consumer_groups([active, idle], request_timeout=clients.TIMEOUT_S)
        d = admin_result(descs[active])
        assert d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "range"
        assert d.coordinator.port == broker.port
        assert [m.client_id for m in d.members] == ["admin-member"]
        assert sorted((tp.topic, tp.partition) for tp in d.members[0].assignment.topic_partitions) == [
            (topic, 0),
            (topic, 1),
        ]
        d = admin_result(descs[idle])
        assert d.state == ConsumerGroupState.EMPTY
        assert d.members == []
        # librdkafka asks with DescribeGroups below v6: an unknown group is Dead, no error.
        unknown = admin_result(
            adm.describe_consumer_groups(["g-admin-unknown"], request_timeout=clients.TIMEOUT_S)["g-admin-unknown"]
        )
        assert (unknown.state, unknown.members) == (ConsumerGroupState.DEAD, [])

        def offsets(group):
            req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]
            res = admin_result(adm.list_consumer_group_offsets(req, request_timeout=clients.TIMEOUT_S)[group])
            assert res.group_id == group
            return {tp.partition: tp.offset for tp in res.topic_partitions}

        assert offsets(active) == {0: 10, 1: 10}
        assert offsets(idle) == {0: 3, 1: 7}

        altered = adm.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(idle, [TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 9)])],
            request_timeout=clients.TIMEOUT_S,
        )[idle]
        res = admin_result(altered)
        assert [(tp.partition, tp.offset, tp.error) for tp in res.topic_partitions] == [(0, 1, None), (1, 9, None)]
        assert offsets(idle) == {0: 1, 1: 9}
        # Not while the group has a member: its commits carry a generation the admin lacks.
        res = admin_result(
            adm.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(active, [TopicPartition(topic, 0, 0)])], request_timeout=clients.TIMEOUT_S
            )[active]
        )
        assert [tp.error.code() if tp.error else None for tp in res.topic_partitions] == [KafkaError.UNKNOWN_MEMBER_ID]
        assert offsets(active) == {0: 10, 1: 10}

        deleted = adm.delete_consumer_groups([active, idle, "g-admin-unknown"], request_timeout=clients.TIMEOUT_S)
        assert admin_error_code(deleted[active]) == KafkaError.NON_EMPTY_GROUP
        assert admin_error_code(deleted["g-admin-unknown"]) == KafkaError.GROUP_ID_NOT_FOUND
        assert admin_result(deleted[idle]) is None
        assert idle not in listed_groups(broker)
        assert offsets(idle) == {0: OFFSET_INVALID, 1: OFFSET_INVALID}
    finally:
        member.close()

    # Once its last member left, the group can go too.
    assert listed_groups(broker)[active].state == ConsumerGroupState.EMPTY
    assert admin_result(adm.delete_consumer_groups([active], request_timeout=clients.TIMEOUT_S)[active]) is None
    assert listed_groups(broker) == {}


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker_main(json.loads(sys.argv[2]))
