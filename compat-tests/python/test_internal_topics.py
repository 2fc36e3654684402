"""Offset commits while `__consumer_offsets` cannot be created (issue 12, item 6): the
client gets Kafka's answers (FindCoordinator: COORDINATOR_NOT_AVAILABLE, as Kafka while
the topic is missing or its partition has no leader), and the operator gets the cause: a
counter, and a rate-limited log line saying what failed and what to do. Once the cause is
gone, commits work again: a partition log that could not be opened (a full disk) is
opened at the next attempt, without a restart."""

import re
import time
import urllib.request

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

import clients

T = clients.TIMEOUT_S
FAILED_CREATE = "cannot create internal topic __consumer_offsets or open its logs"
# The broker logs the failure at most once per this many seconds.
LOG_INTERVAL_S = 10


def metric(broker, name: str, **labels) -> float:
    text = urllib.request.urlopen(broker.metrics_url, timeout=T).read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.split()[-1])
    return 0.0


def create_errors(broker) -> float:
    return metric(broker, "osprey_internal_topic_create_errors_total", internal_topic="__consumer_offsets")


def committer(broker, group: str):
    # librdkafka fails a commit that waited session.timeout.ms for a coordinator; the
    # group is never joined, so the short timeout only shortens that wait.
    return clients.consumer(broker, group_id=group, session_timeout_ms=3000)


def commit_error(broker, group: str, topic: str) -> int:
    c = committer(broker, group)
    try:
        with pytest.raises(KafkaException) as e:
            c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        return e.value.args[0].code()
    finally:
        c.close()


def commit_and_read_back(broker, group: str, topic: str) -> int:
    """Commits offset 5 (retrying while the coordinator comes up) and reads it back."""
    c = committer(broker, group)
    try:
        deadline = time.monotonic() + T
        while True:
            try:
                c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
                break
            except KafkaException as e:
                assert e.args[0].retriable() and time.monotonic() < deadline, f"commit still fails: {e}"
        return c.committed([TopicPartition(topic, 0)], timeout=T)[0].offset
    finally:
        c.close()


def failure_lines(broker):
    return [line for line in broker.log_text().splitlines() if FAILED_CREATE in line]


def test_offsets_topic_over_the_partition_limit_is_counted_logged_and_answered_as_kafka(start_broker):
    started = time.monotonic()
    broker = start_broker({"osprey.max.partitions": "10"})
    clients.create_topic(broker, "t")
    code = commit_error(broker, "g", "t")
    # librdkafka keeps asking FindCoordinator and gives up waiting for a coordinator.
    assert code == KafkaError._WAIT_COORD, code
    assert metric(broker, "osprey_error_codes_total", api="FindCoordinator", error="COORDINATOR_NOT_AVAILABLE") >= 1
    failures = create_errors(broker)
    assert failures >= 1
    lines = failure_lines(broker)
    assert lines, broker.log_tail()
    assert "more than osprey.max.partitions (10)" in lines[0], lines[0]
    assert "consumer groups cannot join or commit offsets" in lines[0], lines[0]
    assert "raise osprey.max.partitions, lower offsets.topic.num.partitions, or delete topics" in lines[0], lines[0]
    # Rate-limited: at most one line per interval, however often clients retry.
    elapsed = time.monotonic() - started
    assert len(lines) <= 1 + elapsed // LOG_INTERVAL_S + 1, (len(lines), elapsed)
    assert len(lines) <= failures

    broker.overrides["osprey.max.partitions"] = "100"
    broker.restart()
    assert commit_and_read_back(broker, "g", "t") == 5


def test_offsets_log_that_cannot_be_opened_is_reported_and_opened_once_the_cause_is_gone(start_broker):
    broker = start_broker({"offsets.topic.num.partitions": "1"})
    clients.create_topic(broker, "t")
    # A file where the partition's directory must go: creating the log fails with an
    # I/O error, as on a full disk, after the topic is in the metadata.
    blocker = broker.data_dir / "__consumer_offsets-0"
    blocker.write_text("not a directory")
    assert commit_error(broker, "g", "t") == KafkaError._WAIT_COORD
    failures = create_errors(broker)
    assert failures >= 1
    lines = failure_lines(broker)
    assert lines, broker.log_tail()
    assert re.search(rf"create {re.escape(str(blocker))}: File exists", lines[0]), lines[0]
    assert f"To fix: free space in {broker.data_dir}" in lines[0], lines[0]

    blocker.unlink()
    assert commit_and_read_back(broker, "g", "t") == 5
    # Requests the failing client sent before it closed may still have failed after
    # `failures` was read; once a commit succeeded the log is open, and no later request
    # fails to create it.
    served = create_errors(broker)
    assert served >= failures
    assert commit_and_read_back(broker, "g2", "t") == 5
    assert create_errors(broker) == served
    broker.restart()
    c = committer(broker, "g")
    try:
        assert c.committed([TopicPartition("t", 0)], timeout=T)[0].offset == 5
    finally:
        c.close()
