"""Producing with librdkafka: acks levels, every codec, per-key order, size limits and
LogAppendTime, each checked by reading the data back."""

import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError, TopicPartition

import clients
import kafkawire


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_delivered_message_is_read_back_for_acks(broker, acks):
    topic = f"acks-{acks}"
    clients.create_topic(broker, topic, partitions=2)
    p = clients.producer(broker, acks=acks)
    messages = [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2} for i in range(200)]
    reports = clients.produce_all(p, topic, messages)
    assert [r.error for r in reports] == [None] * 200
    if acks != "0":
        # With acks, each report carries the offset the broker assigned: per partition 0..99.
        for part in (0, 1):
            assert sorted(r.offset for r in reports if r.partition == part) == list(range(100))
    got = clients.read_partitions(broker, topic, [0, 1], 200)
    assert sorted((m.partition(), m.key(), m.value()) for m in got) == sorted(
        (m["partition"], m["key"], m["value"]) for m in messages
    )
    for part in (0, 1):
        offsets = [m.offset() for m in got if m.partition() == part]
        assert offsets == list(range(100))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codec_round_trips_key_value_headers_and_timestamps(broker, codec):
    topic = f"codec-{codec}"
    clients.create_topic(broker, topic)
    p = clients.producer(broker, acks="all", compression_type=codec, linger_ms=50)
    base_ts = int(time.time() * 1000) - 3_600_000
    messages = []
    for i in range(50):
        messages.append(
            {
                "key": None if i == 7 else f"key-{i}".encode(),
                "value": None if i == 8 else (f"value {i} " * 40).encode(),
                "headers": [("h-index", str(i).encode()), ("h-empty", b""), ("h-null", None), ("h-index", b"again")],
                "timestamp": base_ts + i * 1000,
            }
        )
    reports = clients.produce_all(p, topic, messages)
    assert [r.error for r in reports] == [None] * 50
    got = clients.read_partitions(broker, topic, [0], 50)
    assert [m.offset() for m in got] == list(range(50))
    for sent, m in zip(messages, got):
        assert m.key() == sent["key"]
        assert m.value() == sent["value"]
        assert m.headers() == sent["headers"]
        assert m.timestamp() == (TIMESTAMP_CREATE_TIME, sent["timestamp"])

    # The broker stored what the client sent: batches with this codec, valid CRCs.
    with kafkawire.Conn(broker.host, broker.port) as c:
        _, parts = kafkawire.parse_fetch_v4(c.roundtrip(kafkawire.fetch_v4(1, topic, 0, 0)))
    (_, _, error_code, hw, records) = parts[0]
    assert (error_code, hw) == (0, 50)
    batches = list(kafkawire.parse_batches(records))
    assert sum(b[2] for b in batches) == 50
    want_codec = ["none", "gzip", "snappy", "lz4", "zstd"].index(codec)
    assert {b[1] & 0x7 for b in batches} == {want_codec}
    assert all(b[3] for b in batches), "a fetched batch has a wrong CRC-32C"


def test_keyed_messages_keep_per_key_order_in_one_partition(broker):
    topic = "keyed"
    partitions = 4
    clients.create_topic(broker, topic, partitions=partitions)
    p = clients.producer(broker, acks="all", linger_ms=2)
    keys = [f"customer-{k}" for k in range(25)]
    messages = [{"key": keys[i % 25].encode(), "value": str(i // 25).encode()} for i in range(25 * 40)]
    reports = clients.produce_all(p, topic, messages)
    assert [r.error for r in reports] == [None] * len(messages)
    got = clients.read_partitions(broker, topic, range(partitions), len(messages))
    by_key = {}
    for m in got:
        by_key.setdefault(m.key(), []).append((m.partition(), m.offset(), int(m.value())))
    assert sorted(by_key) == sorted(k.encode() for k in keys)
    used_partitions = set()
    for key, entries in by_key.items():
        assert len({e[0] for e in entries}) == 1, f"{key} landed in several partitions"
        used_partitions.add(entries[0][0])
        entries.sort(key=lambda e: e[1])
        assert [e[2] for e in entries] == list(range(40)), f"{key} out of order"
    assert len(used_partitions) > 1, "all keys hashed to one partition: the test proves nothing"


def test_message_larger_than_message_max_bytes_is_rejected_and_not_stored(start_broker):
    broker = start_broker({"message.max.bytes": 10000})
    topic = "small-limit"
    clients.create_topic(broker, topic)
    p = clients.producer(broker, acks="all", compression_type="none", retries=0)
    reports = clients.produce_all(p, topic, [{"value": b"x" * 20000}])
    assert reports[0].error is not None
    assert reports[0].error.code() == KafkaError.MSG_SIZE_TOO_LARGE, reports[0].error
    # Nothing stored: the log is empty...
    c = clients.consumer(broker)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=clients.TIMEOUT_S) == (0, 0)
    finally:
        c.close()
    # ...and a message within the limit still goes through, at offset 0.
    ok = clients.produce_all(p, topic, [{"value": b"y" * 1000}])
    assert (ok[0].error, ok[0].offset) == (None, 0)
    got = clients.read_partitions(broker, topic, [0], 1)
    assert got[0].value() == b"y" * 1000


def test_log_append_time_topic_gives_broker_timestamps(broker):
    topic = "log-append-time"
    clients.create_topic(broker, topic, config={"message.timestamp.type": "LogAppendTime"})
    p = clients.producer(broker, acks="all")
    old = int(time.time() * 1000) - 86_400_000
    before = int(time.time() * 1000)
    reports = clients.produce_all(p, topic, [{"value": str(i).encode(), "timestamp": old} for i in range(10)])
    after = int(time.time() * 1000)
    assert [r.error for r in reports] == [None] * 10
    for r in reports:
        kind, ts = r.timestamp
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after, r.timestamp
    got = clients.read_partitions(broker, topic, [0], 10)
    for m in got:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME, m.timestamp()
        assert before <= ts <= after, (before, ts, after)


def test_compacted_topic_refuses_keyless_messages_and_stores_nothing(broker):
    topic = "compacted-keys"
    clients.create_topic(broker, topic, config={"cleanup.policy": "compact"})
    p = clients.producer(broker, acks="all", retries=0, linger_ms=0)
    refused = clients.produce_all(p, topic, [{"value": b"no key"}])
    assert refused[0].error is not None and refused[0].error.code() == KafkaError.INVALID_RECORD, refused[0].error
    kept = clients.produce_all(p, topic, [{"key": b"k", "value": b"with key"}])
    assert (kept[0].error, kept[0].offset) == (None, 0)
    got = clients.read_partitions(broker, topic, [0], 1)
    assert (got[0].key(), got[0].value()) == (b"k", b"with key")


def test_acks_all_on_one_replica_with_min_insync_replicas_2_is_acknowledged(broker):
    # Kafka caps min.insync.replicas at the replica count (KAFKA-15583, 3.7+): on a
    # single-replica topic with min.insync.replicas=2, acks=all is acknowledged.
    topic = "min-isr-above-replicas"
    clients.create_topic(broker, topic, config={"min.insync.replicas": "2"})
    p = clients.producer(broker, acks="all", retries=0)
    messages = [{"value": f"v{i}".encode()} for i in range(10)]
    reports = clients.produce_all(p, topic, messages)
    assert [r.error for r in reports] == [None] * 10
    assert [r.offset for r in reports] == list(range(10))
    got = clients.read_partitions(broker, topic, [0], 10)
    assert [m.value() for m in got] == [m["value"] for m in messages]
