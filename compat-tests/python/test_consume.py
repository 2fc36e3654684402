"""Consuming by assign with librdkafka: start positions (earliest, latest, by
timestamp), watermarks, and the long poll at the end of the log."""

import threading
import time

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

import clients


def produce_values(broker, topic, values, partition=0, timestamps=None):
    p = clients.producer(broker, acks="all")
    messages = []
    for i, v in enumerate(values):
        m = {"value": v, "partition": partition}
        if timestamps:
            m["timestamp"] = timestamps[i]
        messages.append(m)
    reports = clients.produce_all(p, topic, messages)
    assert [r.error for r in reports] == [None] * len(values)
    return reports


def test_assign_from_earliest_reads_every_message_in_order(broker):
    clients.create_topic(broker, "earliest")
    values = [f"m{i}".encode() for i in range(30)]
    produce_values(broker, "earliest", values)
    c = clients.consumer(broker)
    try:
        c.assign([TopicPartition("earliest", 0, OFFSET_BEGINNING)])
        got = clients.consume_exactly(c, 30)
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in got] == list(enumerate(values))


def test_assign_from_latest_reads_only_messages_produced_after(broker):
    clients.create_topic(broker, "latest")
    produce_values(broker, "latest", [f"old{i}".encode() for i in range(10)])
    c = clients.consumer(broker, enable_partition_eof=True)
    try:
        tp = TopicPartition("latest", 0, OFFSET_END)
        c.assign([tp])
        assert clients.wait_position(c, tp) == 10
        produce_values(broker, "latest", [f"new{i}".encode() for i in range(5)])
        got = clients.consume_exactly(c, 5)
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in got] == [(10 + i, f"new{i}".encode()) for i in range(5)]


def test_offsets_for_times_finds_the_first_message_at_or_after_a_timestamp(broker):
    clients.create_topic(broker, "by-time")
    base = int(time.time() * 1000) - 600_000
    stamps = [base + i * 1000 for i in range(10)]
    produce_values(broker, "by-time", [f"t{i}".encode() for i in range(10)], timestamps=stamps)
    c = clients.consumer(broker)
    try:
        # Exactly the timestamp of message 5.
        found = c.offsets_for_times([TopicPartition("by-time", 0, base + 5000)], timeout=clients.TIMEOUT_S)
        assert [(tp.offset, tp.error) for tp in found] == [(5, None)]
        # Between messages 6 and 7: the first at or after it is 7.
        between = c.offsets_for_times([TopicPartition("by-time", 0, base + 6500)], timeout=clients.TIMEOUT_S)
        assert [(tp.offset, tp.error) for tp in between] == [(7, None)]
        # After the newest timestamp: no such offset (-1), as Kafka answers.
        after = c.offsets_for_times([TopicPartition("by-time", 0, base + 60_000)], timeout=clients.TIMEOUT_S)
        assert [(tp.offset, tp.error) for tp in after] == [(-1, None)]
        c.assign(found)
        got = clients.consume_exactly(c, 5)
    finally:
        c.close()
    assert [(m.offset(), m.value(), m.timestamp()[1]) for m in got] == [
        (i, f"t{i}".encode(), stamps[i]) for i in range(5, 10)
    ]


def test_watermark_offsets_are_zero_and_message_count(broker):
    clients.create_topic(broker, "watermarks", partitions=2)
    produce_values(broker, "watermarks", [b"a"] * 7, partition=1)
    c = clients.consumer(broker)
    try:
        assert c.get_watermark_offsets(TopicPartition("watermarks", 0), timeout=clients.TIMEOUT_S) == (0, 0)
        assert c.get_watermark_offsets(TopicPartition("watermarks", 1), timeout=clients.TIMEOUT_S) == (0, 7)
    finally:
        c.close()


def test_consumer_waiting_at_the_end_gets_a_message_produced_later(broker):
    clients.create_topic(broker, "long-poll")
    produce_values(broker, "long-poll", [b"before"])
    # A long fetch wait: the broker holds the Fetch until data arrives or the wait ends.
    c = clients.consumer(broker, fetch_wait_max_ms=5000, enable_partition_eof=True)
    try:
        tp = TopicPartition("long-poll", 0, OFFSET_END)
        c.assign([tp])
        assert clients.wait_position(c, tp) == 1
        time.sleep(0.5)  # the consumer is now parked in a Fetch at offset 1
        sent_at = {}

        def produce_later():
            time.sleep(1.0)
            sent_at["t"] = time.monotonic()
            produce_values(broker, "long-poll", [b"after"])

        t = threading.Thread(target=produce_later, daemon=True)
        t.start()
        got = clients.consume_exactly(c, 1, timeout=15)
        arrived = time.monotonic()
        t.join(timeout=clients.TIMEOUT_S)
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in got] == [(1, b"after")]
    # Answered when the data came, not when the 5 s wait ran out.
    assert arrived - sent_at["t"] < 3.0, f"took {arrived - sent_at['t']:.1f}s after the produce"
