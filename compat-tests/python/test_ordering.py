"""A connection's requests take effect in the order they were sent, as on Kafka, which
processes one connection's requests one after another. Clients rely on it: librdkafka's
test 0030_offset_commit pipelines dozens of asynchronous commits and then reads back the
last one, and a producer with several requests in flight relies on them landing in order.
"""

import struct
import time

import clients
import kafkawire as kw
from confluent_kafka import TopicPartition


def test_pipelined_async_commits_leave_the_last_one_committed(broker):
    topic = "ordering-commits"
    clients.create_topic(broker, topic, partitions=1)
    done = []
    c = clients.consumer(
        broker,
        group_id="ordering-commits",
        on_commit=lambda err, partitions: done.append(err),
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        c.poll(0.1)  # connects to the coordinator
        for round_ in range(3):
            base = round_ * 1000
            done.clear()
            # One commit request per call, all on the coordinator connection at once.
            for offset in range(base + 1, base + 101):
                c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
            deadline = time.monotonic() + clients.TIMEOUT_S
            while len(done) < 100 and time.monotonic() < deadline:
                c.poll(0.05)
            assert len(done) == 100, f"{len(done)} of 100 commit callbacks"
            assert all(err is None for err in done), done
            [committed] = c.committed([TopicPartition(topic, 0)], timeout=clients.TIMEOUT_S)
            assert committed.offset == base + 100, f"round {round_}: committed {committed.offset}"
    finally:
        c.close()


def test_pipelined_produce_requests_append_in_the_order_sent(broker):
    topic = "ordering-produce"
    clients.create_topic(broker, topic, partitions=1)
    count = 200
    with kw.Conn(broker.host, broker.port) as conn:
        # Every request is written before any response is read.
        for i in range(count):
            batch = kw.record_batch([(None, b"%d" % i)])
            conn.send(kw.produce_v3(i, topic, 0, batch, acks=-1))
        offsets = []
        for i in range(count):
            correlation, [(_, _, error, base_offset)] = kw.parse_produce_v3(conn.recv_frame())
            assert (correlation, error) == (i, 0)
            offsets.append(base_offset)
        assert offsets == list(range(count)), "responses out of order or offsets not in send order"
    got = clients.read_partitions(broker, topic, [0], count)
    assert [m.value() for m in got] == [b"%d" % i for i in range(count)]


# ----- admin writes run off the async workers, and still take effect in order ------------

API_CREATE_TOPICS, API_DELETE_TOPICS, API_DESCRIBE_CONFIGS, API_ALTER_CONFIGS = 19, 20, 32, 33
RESOURCE_TOPIC = 2


def _alter_topic_config_v0(correlation_id, topic, name, value):
    body = struct.pack(">i", 1) + struct.pack(">b", RESOURCE_TOPIC) + kw.string16(topic)
    body += struct.pack(">i", 1) + kw.string16(name) + kw.string16(value)
    body += struct.pack(">?", False)  # validate_only
    return kw.request(API_ALTER_CONFIGS, 0, correlation_id, body)


def _describe_topic_config_v1(correlation_id, topic, name):
    body = struct.pack(">i", 1) + struct.pack(">b", RESOURCE_TOPIC) + kw.string16(topic)
    body += struct.pack(">i", 1) + kw.string16(name)
    body += struct.pack(">?", False)  # include_synonyms
    return kw.request(API_DESCRIBE_CONFIGS, 1, correlation_id, body)


def _parse_describe_configs_v1(payload):
    """(correlation_id, {name: value}) of the first resource."""
    r = kw.Reader(payload)
    correlation_id, _throttle, _results = r.take(">i"), r.take(">i"), r.take(">i")
    error_code, _message, _type, _name = r.take(">h"), r.string16(), r.take(">b"), r.string16()
    assert error_code == 0, error_code
    configs = {}
    for _ in range(r.take(">i")):
        name, value = r.string16(), r.string16()
        r.take(">?b?")  # read_only, config_source, is_sensitive
        for _ in range(r.take(">i")):  # synonyms
            r.string16(), r.string16(), r.take(">b")
        configs[name] = value
    return correlation_id, configs


def _delete_topic_v1(correlation_id, topic):
    body = struct.pack(">i", 1) + kw.string16(topic) + struct.pack(">i", 10000)
    return kw.request(API_DELETE_TOPICS, 1, correlation_id, body)


def _create_topic_v2(correlation_id, topic):
    body = struct.pack(">i", 1) + kw.string16(topic) + struct.pack(">ih", 1, 1)
    body += struct.pack(">i", 0) + struct.pack(">i", 0)  # no assignments, no configs
    body += struct.pack(">i?", 10000, False)  # timeout, validate_only
    return kw.request(API_CREATE_TOPICS, 2, correlation_id, body)


def _topic_error_codes(payload, kind):
    """(correlation_id, [error_code]) of a CreateTopics v2 (`kind` "create") or
    DeleteTopics v1 ("delete") response."""
    r = kw.Reader(payload)
    correlation_id, _throttle = r.take(">i"), r.take(">i")
    codes = []
    for _ in range(r.take(">i")):
        r.string16()  # name
        codes.append(r.take(">h"))
        if kind == "create":
            r.string16()  # error_message
    return correlation_id, codes


def test_pipelined_config_changes_are_seen_by_the_next_request(broker):
    """AlterConfigs writes the metadata log on the blocking pool; a DescribeConfigs sent
    right behind it on the same connection must see the new value, as on Kafka."""
    topic = "ordering-configs"
    clients.create_topic(broker, topic, partitions=1)
    with kw.Conn(broker.host, broker.port) as conn:
        rounds = 20
        for i in range(rounds):
            conn.send(_alter_topic_config_v0(2 * i, topic, "retention.ms", str(100000 + i)))
            conn.send(_describe_topic_config_v1(2 * i + 1, topic, "retention.ms"))
        for i in range(rounds):
            payload = conn.recv_frame()
            assert struct.unpack_from(">i", payload)[0] == 2 * i
            correlation_id, configs = _parse_describe_configs_v1(conn.recv_frame())
            assert correlation_id == 2 * i + 1
            assert configs["retention.ms"] == str(100000 + i), f"round {i}: saw {configs['retention.ms']}"


def test_pipelined_delete_then_create_of_one_topic_both_succeed(broker):
    """DeleteTopics and CreateTopics of the same name, pipelined: the create sees the
    delete done, so neither answers TOPIC_ALREADY_EXISTS or UNKNOWN_TOPIC_OR_PARTITION."""
    topic = "ordering-recreate"
    with kw.Conn(broker.host, broker.port) as conn:
        conn.send(_create_topic_v2(0, topic))
        rounds = 10
        for i in range(rounds):
            conn.send(_delete_topic_v1(1 + 2 * i, topic))
            conn.send(_create_topic_v2(2 + 2 * i, topic))
        assert _topic_error_codes(conn.recv_frame(), "create") == (0, [0])
        for i in range(rounds):
            assert _topic_error_codes(conn.recv_frame(), "delete") == (1 + 2 * i, [0]), f"round {i}: delete"
            assert _topic_error_codes(conn.recv_frame(), "create") == (2 + 2 * i, [0]), f"round {i}: create"
