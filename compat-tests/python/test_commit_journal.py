"""The commit journal (`osprey.log.journal.topics`, README "Durability"): with
`__consumer_offsets` in the list, as by default, an offset commit
is answered once the data directory's journal, shared by every `__consumer_offsets`
partition, is fsynced; the partition's own segment is not fsynced on that path.

A power loss is played out on the real binary: the broker is killed with SIGKILL, and
then every `__consumer_offsets` segment and index is cut back to what was on disk
before the commits. That is a state a power loss can leave: those partitions were
created by this broker (empty, fsynced) and nothing fsynced their segments since, which
the test checks from the broker's metrics. The commits must come back from the journal.
"""

import re
import time
import urllib.request

from confluent_kafka import TopicPartition

import clients

GROUPS = 6


def metric(broker, name):
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    values = [float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    return sum(values) if values else None


def wait_metric(broker, name, holds, timeout=20):
    """The metric's value once `holds` is true of it (the broker refreshes its partition
    metrics every 5 s)."""
    deadline = time.monotonic() + timeout
    while True:
        value = metric(broker, name)
        if value is not None and holds(value):
            return value
        assert time.monotonic() < deadline, f"{name} is {value} after {timeout} s"
        time.sleep(0.5)


def commit(broker, group, topic, offset):
    c = clients.consumer(broker, group_id=group, enable_auto_commit=False)
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def committed(broker, group, topic):
    c = clients.consumer(broker, group_id=group, enable_auto_commit=False)
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        c.close()


def cut_segments(broker, topic):
    """Cuts every segment and index file of `topic` to empty; returns the bytes the
    segments held."""
    held = 0
    for d in broker.partition_dirs(topic):
        for f in d.iterdir():
            if f.suffix in (".log", ".index", ".timeindex"):
                if f.suffix == ".log":
                    held += f.stat().st_size
                with open(f, "r+b") as fh:
                    fh.truncate(0)
    return held


def test_offset_commits_acknowledged_through_the_journal_survive_a_power_loss(start_broker):
    # The default configuration: the journal holds the coordinators' topics.
    broker = start_broker()
    topic = "journal-commits"
    clients.create_topic(broker, topic)
    expected = {}
    for g in range(GROUPS):
        group = f"journal-group-{g}"
        commit(broker, group, topic, 100 + g)
        expected[group] = 100 + g
    assert {g: committed(broker, g, topic) for g in expected} == expected
    entries = wait_metric(broker, "osprey_journal_entries_total", lambda v: v >= GROUPS)
    # The segments of __consumer_offsets were never fsynced after the partitions were
    # created: the commits' fsyncs were the journal's. (Read after the refresh that
    # counted the commits' journal entries.)
    before = metric(broker, "osprey_fsyncs_total")
    assert before == 0, f"{before} partition log fsyncs: cutting the segments would not be a power loss"
    assert metric(broker, "osprey_journal_fsyncs_total") > 0
    assert metric(broker, "osprey_journal_entries_total") == entries, "commits after the check"

    broker.kill9()
    held = cut_segments(broker, "__consumer_offsets")
    assert held > 0, "the commits were not in the __consumer_offsets segments to begin with"
    broker.start()

    assert {g: committed(broker, g, topic) for g in expected} == expected
    wait_metric(broker, "osprey_journal_replayed_batches_total", lambda v: v >= GROUPS)
    assert "batches replayed from the commit journal" in broker.log_since_last_start()


def test_offset_commits_survive_a_power_loss_after_journal_files_were_retired(start_broker):
    # Small journal files: many retire during the commits, each after its partitions
    # fsynced their segments. The cut then removes only what the journal still holds.
    broker = start_broker({"osprey.log.journal.file.bytes": 4096})
    topic = "journal-retired"
    clients.create_topic(broker, topic)
    for round_ in range(8):
        for g in range(GROUPS):
            commit(broker, f"retired-group-{g}", topic, round_ * 10 + g)
    wait_metric(broker, "osprey_journal_files_retired_total", lambda v: v >= 1)
    assert len(list((broker.data_dir / ".osprey-journal").iterdir())) <= 2
    expected = {f"retired-group-{g}": 70 + g for g in range(GROUPS)}
    assert {g: committed(broker, g, topic) for g in expected} == expected

    broker.kill9()
    broker.start()
    assert {g: committed(broker, g, topic) for g in expected} == expected


def test_an_empty_topic_list_turns_the_journal_off(start_broker):
    broker = start_broker({"osprey.log.journal.topics": ""})
    topic = "journal-off"
    clients.create_topic(broker, topic)
    commit(broker, "journal-off-group", topic, 5)
    assert committed(broker, "journal-off-group", topic) == 5
    wait_metric(broker, "osprey_fsyncs_total", lambda v: v > 0)
    assert not (broker.data_dir / ".osprey-journal").exists()


def test_a_star_journals_every_topic_and_its_acknowledged_records_survive_a_power_loss(start_broker):
    """`*` attaches every topic's partitions: records a producer had acknowledged with
    acks=all come back from the journal after their segments are cut back to what was
    fsynced (nothing: only the journal was)."""
    broker = start_broker({"osprey.log.journal.topics": "*"})
    topic, partitions, count = "journal-every-topic", 4, 200
    clients.create_topic(broker, topic, partitions)
    p = clients.producer(broker, acks="all", **{"linger.ms": 0})
    reports = clients.produce_all(
        p, topic, [{"partition": i % partitions, "value": b"v%d" % i} for i in range(count)]
    )
    assert all(r.error is None for r in reports), [r.error for r in reports if r.error]
    wait_metric(broker, "osprey_journal_entries_total", lambda v: v >= partitions)
    before = metric(broker, "osprey_fsyncs_total")
    assert before == 0, f"{before} partition log fsyncs: cutting the segments would not be a power loss"
    assert metric(broker, "osprey_journal_fsyncs_total") > 0

    broker.kill9()
    held = cut_segments(broker, topic)
    assert held > 0, "the records were not in the segments to begin with"
    broker.start()

    got = clients.read_partitions(broker, topic, range(partitions), count)
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(count))
    wait_metric(broker, "osprey_journal_replayed_batches_total", lambda v: v >= partitions)

