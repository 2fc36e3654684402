"""Fetch honours its byte limits as Kafka's does (KIP-74): the response carries at most
min(request max_bytes, broker fetch.max.bytes) of records, each partition at most its
partition_max_bytes, except that the first batch of the first partition with data is
returned whole even if larger, so that a consumer always makes progress. Raw Fetch v4
over many partitions, then librdkafka with the settings of its own test
0082-fetch_max_bytes."""

import kafkawire as kw
from clients import TIMEOUT_S, consumer, consume_exactly, create_topic, produce_all, producer

BATCH_VALUE_BYTES = 10_000


def produce_raw(conn, correlation_id, topic, partition, batch):
    cid, results = kw.parse_produce_v3(conn.roundtrip(kw.produce_v3(correlation_id, topic, partition, batch)))
    assert cid == correlation_id
    assert [r[2] for r in results] == [kw.NONE], results


def fetch_all(conn, topic, partitions, max_bytes, partition_max_bytes=1 << 20):
    """One Fetch v4 from offset 0 of each partition, in the order given; returns the
    response's size and [(partition, error, records)]."""
    frame = kw.fetch_v4_partitions(9, topic, [(p, 0, partition_max_bytes) for p in partitions], max_bytes)
    payload = conn.roundtrip(frame)
    cid, out = kw.parse_fetch_v4(payload)
    assert cid == 9
    return len(payload), [(p, err, records) for _t, p, err, _hw, records in out]


def record_bytes(parts):
    return sum(len(records) for _p, _err, records in parts)


def test_fetch_over_many_partitions_stays_within_max_bytes(start_broker):
    broker = start_broker()
    topic, count = "many", 150
    create_topic(broker, topic, partitions=count)
    batch = kw.record_batch([(None, b"v" * BATCH_VALUE_BYTES)])
    with kw.Conn(broker.host, broker.port) as conn:
        for p in range(count):
            produce_raw(conn, p, topic, p, batch)
        max_bytes = 50_000
        size, parts = fetch_all(conn, topic, range(count), max_bytes)
        assert all(err == kw.NONE for _p, err, _r in parts)
        got = record_bytes(parts)
        # Whole batches only, within the limit: 4 of them (len(batch) is ~10 KB).
        assert got <= max_bytes, f"{got} record bytes for max_bytes={max_bytes}"
        assert got == (max_bytes // len(batch)) * len(batch)
        assert size < max_bytes + count * 100, f"response of {size} bytes"
        # The first partitions are the ones answered, in request order.
        with_data = [p for p, _err, records in parts if records]
        assert with_data == list(range(max_bytes // len(batch)))


def test_first_batch_is_returned_whole_even_above_the_limits(start_broker):
    broker = start_broker()
    topic = "big-first"
    create_topic(broker, topic, partitions=3)
    big = kw.record_batch([(None, b"b" * 100_000)])
    small = kw.record_batch([(None, b"s" * 100)])
    with kw.Conn(broker.host, broker.port) as conn:
        produce_raw(conn, 1, topic, 1, big)
        produce_raw(conn, 2, topic, 2, small)
        # Partition 0 is empty: the first partition *with data* gets the exception, and
        # nothing after it (the limit is spent).
        _size, parts = fetch_all(conn, topic, [0, 1, 2], max_bytes=1000, partition_max_bytes=1000)
        by_partition = {p: records for p, _err, records in parts}
        assert len(by_partition[1]) == len(big)
        assert [b[0] for b in kw.parse_batches(by_partition[1])] == [0]
        assert by_partition[0] == b"" and by_partition[2] == b""
        # Not first: a batch larger than what is left is not returned.
        _size, parts = fetch_all(conn, topic, [2, 1], max_bytes=1000, partition_max_bytes=1000)
        by_partition = {p: records for p, _err, records in parts}
        assert len(by_partition[2]) == len(small)
        assert by_partition[1] == b""


def test_broker_fetch_max_bytes_caps_the_request(start_broker):
    broker = start_broker({"fetch.max.bytes": 30_000})
    topic, count = "capped", 20
    create_topic(broker, topic, partitions=count)
    batch = kw.record_batch([(None, b"v" * BATCH_VALUE_BYTES)])
    with kw.Conn(broker.host, broker.port) as conn:
        for p in range(count):
            produce_raw(conn, p, topic, p, batch)
        _size, parts = fetch_all(conn, topic, range(count), max_bytes=50 << 20)
        got = record_bytes(parts)
        assert 0 < got <= 30_000, f"{got} record bytes with fetch.max.bytes=30000"


def test_librdkafka_0082_fetch_max_bytes_smaller_than_partition_limit(broker):
    """librdkafka's own test 0082-fetch_max_bytes: ~900 KiB messages on 3 partitions,
    max.partition.fetch.bytes=20000000, fetch.max.bytes=1000000 and
    receive.message.max.bytes=1000512: a response may carry one such batch only. Every
    message arrives (librdkafka refused Osprey's multi-megabyte responses)."""
    topic, partitions, per_partition, size = "t0082", 3, 10, 900 * 1024
    create_topic(broker, topic, partitions=partitions)
    p = producer(broker)
    messages = [{"partition": part, "value": bytes([65 + i]) * size} for part in range(partitions) for i in range(per_partition)]
    reports = produce_all(p, topic, messages)
    assert all(r.error is None for r in reports), [r.error for r in reports if r.error]
    c = consumer(
        broker,
        group_id="g0082",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=20_000_000,
        fetch_max_bytes=1_000_000,
        receive_message_max_bytes=1_000_512,
    )
    try:
        c.subscribe([topic])
        got = consume_exactly(c, len(messages), timeout=TIMEOUT_S * 3)
    finally:
        c.close()
    assert sorted((m.partition(), m.offset(), m.value()[:1]) for m in got) == sorted(
        (part, i, bytes([65 + i])) for part in range(partitions) for i in range(per_partition)
    )
