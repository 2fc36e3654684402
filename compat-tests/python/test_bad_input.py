"""Hostile and broken bytes on a raw socket (no client library). After each, the
connection was either answered with the right Kafka error or closed, the broker is still
running, and a new, normal connection (a librdkafka producer and consumer) still works."""

import gzip
import struct
import time

import pytest
from confluent_kafka import TopicPartition

import clients
import kafkawire as kw

RSS_LIMIT_BYTES = 300 * 1024 * 1024


def assert_broker_still_serves(broker, topic="health-check"):
    """The process is alive and a fresh producer + consumer round trip works."""
    assert broker.is_running(), f"osprey died:\n{broker.log_tail()}"
    value = f"alive-{time.monotonic_ns()}".encode()
    p = clients.producer(broker, acks="all")
    (report,) = clients.produce_all(p, topic, [{"value": value}])
    assert report.error is None, report.error
    c = clients.consumer(broker)
    try:
        c.assign([TopicPartition(topic, report.partition, report.offset)])
        (msg,) = clients.consume_exactly(c, 1, settle=0)
    finally:
        c.close()
    assert (msg.offset(), msg.value()) == (report.offset, value)


def assert_closed_without_answer(conn):
    assert conn.is_closed_by_peer(timeout=10), "the broker neither answered nor closed the connection"


def api_versions_ranges(broker):
    with kw.Conn(broker.host, broker.port) as c:
        _, error_code, ranges = kw.parse_api_versions_v0(c.roundtrip(kw.api_versions_v0(1)))
    assert error_code == kw.NONE
    return ranges


# ----- framing --------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0x7FFFFFFF, -1, -0x80000000], ids=["2GiB", "minus-1", "minus-2GiB"])
def test_absurd_frame_size_closes_the_connection(broker, size):
    with kw.Conn(broker.host, broker.port) as c:
        c.send(struct.pack(">i", size) + b"\x00" * 64)
        assert_closed_without_answer(c)
    assert_broker_still_serves(broker)


def test_truncated_frame_then_close_leaves_the_broker_serving(broker):
    frame = kw.api_versions_v0(5)
    with kw.Conn(broker.host, broker.port) as c:
        c.send(struct.pack(">i", 1000) + frame[4:])  # promises 1000 bytes, sends a few
    with kw.Conn(broker.host, broker.port) as c:
        c.send(frame[: len(frame) // 2])  # cut inside the header
    assert_broker_still_serves(broker)


def test_garbage_after_a_valid_header_closes_the_connection(broker):
    with kw.Conn(broker.host, broker.port) as c:
        # Metadata v12 (flexible) header, then bytes that are no Metadata request.
        c.send(kw.request(kw.API_METADATA, 12, 9, b"\xff" * 40, flexible=True))
        assert_closed_without_answer(c)
    with kw.Conn(broker.host, broker.port) as c:
        # Produce v3 whose topic array claims 2^31-1 entries.
        c.send(kw.request(kw.API_PRODUCE, 3, 10, kw.string16(None) + struct.pack(">hii", -1, 1000, 0x7FFFFFFF)))
        assert_closed_without_answer(c)
    assert_broker_still_serves(broker)


def test_earlier_requests_are_answered_before_a_bad_one_closes(broker):
    with kw.Conn(broker.host, broker.port) as c:
        c.send(kw.api_versions_v0(21) + kw.request(kw.API_METADATA, 12, 22, b"\xff" * 40, flexible=True))
        correlation_id, error_code, _ = kw.parse_api_versions_v0(c.recv_frame())
        assert (correlation_id, error_code) == (21, kw.NONE)
        assert_closed_without_answer(c)
    assert_broker_still_serves(broker)


# ----- API keys and versions ------------------------------------------------------------


@pytest.mark.parametrize("api_key", [9999, 32767, -1])
def test_unknown_api_key_closes_the_connection(broker, api_key):
    with kw.Conn(broker.host, broker.port) as c:
        c.send(kw.request(api_key, 0, 3, b""))
        assert_closed_without_answer(c)
    assert_broker_still_serves(broker)


@pytest.mark.parametrize(
    "api_key,version",
    [(kw.API_METADATA, 99), (kw.API_FETCH, 3), (kw.API_PRODUCE, 14)],
    ids=["metadata-v99", "fetch-v3-below-min", "produce-v14-above-max"],
)
def test_unsupported_version_of_a_served_api_closes_the_connection(broker, api_key, version):
    lo, hi = api_versions_ranges(broker)[api_key]
    assert not lo <= version <= hi
    with kw.Conn(broker.host, broker.port) as c:
        c.send(kw.request(api_key, version, 4, b"\x00" * 16, flexible=True))
        assert_closed_without_answer(c)
    assert_broker_still_serves(broker)


def test_api_versions_v99_gets_a_v0_answer_with_unsupported_version_and_the_ranges(broker):
    expected = api_versions_ranges(broker)
    with kw.Conn(broker.host, broker.port) as c:
        correlation_id, error_code, ranges = kw.parse_api_versions_v0(c.roundtrip(kw.api_versions_flexible(99, 77)))
        assert (correlation_id, error_code) == (77, kw.UNSUPPORTED_VERSION)
        assert ranges == expected
        assert ranges[kw.API_API_VERSIONS] == (0, 5)
        assert ranges[kw.API_PRODUCE][0] == 0
        # KIP-511: the connection stays open and the client retries with a version it knows.
        body = c.roundtrip(kw.api_versions_flexible(3, 78))
        assert struct.unpack_from(">ih", body) == (78, kw.NONE)
    assert_broker_still_serves(broker)


def test_api_versions_refuses_a_software_name_kafka_would_refuse(broker):
    """Kafka 4.4 answers INVALID_REQUEST to ApiVersions v3+ whose client software name or
    version is empty or not [a-zA-Z0-9][a-zA-Z0-9.-]*[a-zA-Z0-9]; the connection stays open."""
    cases = [
        (b"", b"1.0", kw.INVALID_REQUEST),
        (b"client", b"", kw.INVALID_REQUEST),
        (b"-client", b"1.0", kw.INVALID_REQUEST),
        (b"client", b"1.0-", kw.INVALID_REQUEST),
        (b"my client", b"1.0", kw.INVALID_REQUEST),
        (b"c", b"1", kw.NONE),
        (b"apache-kafka-java", b"4.4.0", kw.NONE),
    ]
    with kw.Conn(broker.host, broker.port) as c:
        for i, (name, ver, expected) in enumerate(cases):
            body = c.roundtrip(kw.api_versions_flexible(3, 200 + i, name=name, ver=ver))
            assert struct.unpack_from(">ih", body) == (200 + i, expected), (name, ver)
    assert_broker_still_serves(broker)


def test_api_versions_v5_names_the_cluster_and_node_it_expects(broker):
    """Kafka 4.4: a client that names another cluster or node is told to bootstrap again
    (REBOOTSTRAP_REQUIRED); naming only one of the two is INVALID_REQUEST."""
    a = clients.admin(broker)
    cluster_id = a.list_topics(timeout=clients.TIMEOUT_S).cluster_id
    cases = [
        (None, -1, kw.NONE),
        (cluster_id, 1, kw.NONE),
        (cluster_id, 2, kw.REBOOTSTRAP_REQUIRED),
        ("AAAAAAAAAAAAAAAAAAAAAA", 1, kw.REBOOTSTRAP_REQUIRED),
        (cluster_id, -1, kw.INVALID_REQUEST),
        (None, 1, kw.INVALID_REQUEST),
    ]
    with kw.Conn(broker.host, broker.port) as c:
        for i, (cluster, node, expected) in enumerate(cases):
            body = c.roundtrip(kw.api_versions_v5(100 + i, cluster, node))
            assert struct.unpack_from(">ih", body) == (100 + i, expected), (cluster, node)
    assert_broker_still_serves(broker)


# ----- record batches -------------------------------------------------------------------


def produce_raw(conn, correlation_id, topic, records):
    cid, partitions = kw.parse_produce_v3(conn.roundtrip(kw.produce_v3(correlation_id, topic, 0, records)))
    assert cid == correlation_id
    assert [(t, p) for t, p, _, _ in partitions] == [(topic, 0)]
    return partitions[0][2], partitions[0][3]


def test_batch_with_a_wrong_crc_is_refused_with_corrupt_message_and_not_stored(broker):
    clients.create_topic(broker, "crc")
    good = kw.record_batch([(b"k", b"good")])
    assert kw.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    with kw.Conn(broker.host, broker.port) as c:
        assert produce_raw(c, 1, "crc", kw.with_bad_crc(good)) == (kw.CORRUPT_MESSAGE, -1)
        # Same connection, still usable; the bad batch took no offset.
        assert produce_raw(c, 2, "crc", good) == (kw.NONE, 0)
    assert_broker_still_serves(broker)


def test_batch_whose_content_was_altered_after_the_crc_is_refused(broker):
    clients.create_topic(broker, "crc-content")
    batch = bytearray(kw.record_batch([(b"k", b"value-to-flip")]))
    batch[-3] ^= 0x01  # flip a bit of the value; the CRC no longer matches
    with kw.Conn(broker.host, broker.port) as c:
        assert produce_raw(c, 1, "crc-content", bytes(batch)) == (kw.CORRUPT_MESSAGE, -1)
    assert_broker_still_serves(broker)


def test_batch_larger_than_message_max_bytes_is_refused_with_message_too_large(start_broker):
    broker = start_broker({"message.max.bytes": 10000})
    clients.create_topic(broker, "oversize")
    with kw.Conn(broker.host, broker.port) as c:
        assert produce_raw(c, 1, "oversize", kw.record_batch([(None, b"x" * 20000)])) == (kw.MESSAGE_TOO_LARGE, -1)
        assert produce_raw(c, 2, "oversize", kw.record_batch([(None, b"x" * 1000)])) == (kw.NONE, 0)
    assert_broker_still_serves(broker)


def test_batch_length_larger_than_the_bytes_sent_is_refused(broker):
    clients.create_topic(broker, "lying-length")
    batch = bytearray(kw.record_batch([(None, b"x" * 100)]))
    struct.pack_into(">i", batch, 8, 1 << 30)  # batchLength: 1 GiB, in a 200-byte field
    with kw.Conn(broker.host, broker.port) as c:
        error_code, base_offset = produce_raw(c, 1, "lying-length", bytes(batch))
        # Kafka answers INVALID_RECORD (no whole batch); CORRUPT_MESSAGE is as clear.
        assert error_code in (kw.INVALID_RECORD, kw.CORRUPT_MESSAGE) and base_offset == -1, error_code
    assert_broker_still_serves(broker)


# ----- batches whose records contradict their header (valid CRC) ------------------------


def records_section(n: int, first_delta=0) -> bytes:
    return b"".join(kw.record(first_delta + i, b"k", f"lie-{i}".encode()) for i in range(n))


def fetch_batches(conn, correlation_id, topic):
    """(high watermark, [(base_offset, records_count, crc_ok)]) of the partition from 0."""
    _, ((_, _, error_code, hw, data),) = kw.parse_fetch_v4(conn.roundtrip(kw.fetch_v4(correlation_id, topic, 0, 0)))
    assert error_code == kw.NONE
    return hw, [(base, count, crc_ok) for base, _, count, crc_ok in kw.parse_batches(data)]


def assert_refused_and_nothing_stored(broker, topic, lying, expected, version=3):
    """The lying batch is refused with `expected` and takes no offset: a good batch sent
    next lands at offset 0, and a fetch returns only the good batch."""
    clients.create_topic(broker, topic)
    good = kw.record_batch([(b"k", b"good-1"), (b"k", b"good-2")])
    with kw.Conn(broker.host, broker.port) as c:
        _, ((_, _, error_code, base_offset, _, message),) = kw.parse_produce_v8(
            c.roundtrip(kw.produce(1, topic, 0, lying, version=8)))
        assert (error_code, base_offset) == (expected, -1), message
        assert produce_raw(c, 2, topic, good) == (kw.NONE, 0)
        assert fetch_batches(c, 3, topic) == (2, [(0, 2, True)])
    assert_broker_still_serves(broker)


@pytest.mark.parametrize("count, present", [(0x7FFFFFFF, 1), (1, 1000), (1000, 1)],
                         ids=["count-2^31-1-holds-1", "count-1-holds-1000", "count-1000-holds-1"])
def test_batch_whose_record_count_is_a_lie_is_refused_with_invalid_record(broker, count, present):
    lying = kw.raw_batch(records_section(present), count)
    assert_refused_and_nothing_stored(broker, f"lying-count-{count}-{present}", lying, kw.INVALID_RECORD)


def test_record_with_a_negative_length_is_refused_with_invalid_record(broker):
    record = kw.record(0, b"k", b"value")
    lying = kw.raw_batch(kw.varint(-5) + record[1:], 1)
    assert_refused_and_nothing_stored(broker, "negative-record-length", lying, kw.INVALID_RECORD)


def test_garbage_in_place_of_records_is_refused_with_invalid_record(broker):
    garbage = bytes((i * 151 + 7) % 256 for i in range(300))
    lying = kw.raw_batch(garbage, 3)
    assert_refused_and_nothing_stored(broker, "garbage-records", lying, kw.INVALID_RECORD)


def test_garbage_records_under_a_wrong_crc_are_corrupt_message_as_kafka_checks_the_crc_first(broker):
    garbage = bytes((i * 151 + 7) % 256 for i in range(300))
    damaged = kw.with_bad_crc(kw.raw_batch(garbage, 3))
    assert_refused_and_nothing_stored(broker, "garbage-bad-crc", damaged, kw.CORRUPT_MESSAGE)


def test_records_whose_offset_deltas_skip_are_refused_with_invalid_record(broker):
    lying = kw.raw_batch(kw.record(0, b"k", b"a") + kw.record(5, b"k", b"b"), 2)
    assert_refused_and_nothing_stored(broker, "skipping-deltas", lying, kw.INVALID_RECORD)


def test_gzip_batch_whose_record_count_is_a_lie_is_refused_with_invalid_record(broker):
    lying = kw.raw_batch(gzip.compress(records_section(1000)), 1, attributes=kw.ATTR_GZIP)
    assert_refused_and_nothing_stored(broker, "lying-gzip", lying, kw.INVALID_RECORD)


def test_zstd_bomb_of_4_gib_zeros_is_refused_not_stored(broker):
    # 4 GiB of zeros in 131 KB: zeros are no record, so the first record refuses it.
    bomb = kw.zstd_rle_frame(b"", 4 << 30)
    assert len(bomb) < 140_000
    lying = kw.raw_batch(bomb, 1, attributes=kw.ATTR_ZSTD)
    assert_refused_and_nothing_stored(broker, "zstd-bomb", lying, kw.INVALID_RECORD)
    assert broker.rss_bytes() < RSS_LIMIT_BYTES


def test_zstd_record_inflating_past_the_decompression_budget_is_refused_not_stored(broker):
    # One well-formed record whose value is 2 GiB of zeros: only its size gives it away,
    # and the broker stops inflating at its budget (MESSAGE_TOO_LARGE, as for any batch
    # too large: a Java producer splits it).
    value_bytes = (2 << 30) - 64
    head = b"\x00" + kw.varint(0) + kw.varint(0) + kw.varint(-1) + kw.varint(value_bytes)
    prefix = kw.varint(len(head) + value_bytes + 1) + head
    bomb = kw.zstd_rle_frame(prefix, value_bytes + 1)  # the last zero: no headers
    lying = kw.raw_batch(bomb, 1, attributes=kw.ATTR_ZSTD)
    assert_refused_and_nothing_stored(broker, "zstd-value-bomb", lying, kw.MESSAGE_TOO_LARGE)
    assert broker.rss_bytes() < RSS_LIMIT_BYTES


def test_compressed_batch_past_the_configured_decompression_budget_is_refused(start_broker):
    broker = start_broker({"osprey.produce.decompressed.max.bytes": 1 << 20})
    clients.create_topic(broker, "budget")
    big = [kw.record(i, b"k", bytes(512 * 1024)) for i in range(3)]  # 1.5 MiB inflated
    small = [kw.record(i, b"k", bytes(256 * 1024)) for i in range(3)]  # 0.75 MiB
    with kw.Conn(broker.host, broker.port) as c:
        refused = kw.raw_batch(gzip.compress(b"".join(big)), 3, attributes=kw.ATTR_GZIP)
        assert produce_raw(c, 1, "budget", refused) == (kw.MESSAGE_TOO_LARGE, -1)
        accepted = kw.raw_batch(gzip.compress(b"".join(small)), 3, attributes=kw.ATTR_GZIP)
        assert produce_raw(c, 2, "budget", accepted) == (kw.NONE, 0)
        assert fetch_batches(c, 3, "budget") == (3, [(0, 3, True)])


def test_compressed_batch_inflating_to_many_mib_within_the_budget_is_stored(broker):
    # Past the first MiB the broker walks the records again off its worker, with the whole
    # budget (64 MiB by default): the batch is stored like any other.
    clients.create_topic(broker, "inflating")
    records = b"".join(kw.record(i, b"k", bytes(1 << 20)) for i in range(5))
    batch = kw.raw_batch(gzip.compress(records), 5, attributes=kw.ATTR_GZIP)
    with kw.Conn(broker.host, broker.port) as c:
        assert produce_raw(c, 1, "inflating", batch) == (kw.NONE, 0)
        assert fetch_batches(c, 2, "inflating") == (5, [(0, 5, True)])


# ----- memory ---------------------------------------------------------------------------


def test_declared_frame_sizes_do_not_allocate_memory(broker):
    """Many connections declaring 2 GiB and ~100 MB frames, and one that trickles bytes
    of a big frame: memory follows bytes received, not sizes declared."""
    for _ in range(20):
        with kw.Conn(broker.host, broker.port) as c:
            c.send(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 1024)
            assert_closed_without_answer(c)
    held = []
    try:
        for i in range(8):
            c = kw.Conn(broker.host, broker.port)
            held.append(c)
            # Just under socket.request.max.bytes (100 MiB): a legal size, of which
            # only 1 MiB arrives; the broker must not reserve the rest up front.
            c.send(struct.pack(">i", 100 * 1024 * 1024 - 1) + kw.api_versions_v0(i)[4:] + b"\x00" * (1 << 20))
        time.sleep(0.5)
        rss = broker.rss_bytes()
        assert rss < RSS_LIMIT_BYTES, f"RSS {rss / 2**20:.0f} MiB with 8 connections holding 1 MiB each"
    finally:
        for c in held:
            c.close()
    rss = broker.rss_bytes()
    assert rss < RSS_LIMIT_BYTES, f"RSS {rss / 2**20:.0f} MiB after the 2 GiB-prefix attempts"
    assert_broker_still_serves(broker)
