"""Fetch sessions (KIP-227) move through Kafka's transitions, checked on the wire with
raw Fetch v7 requests: open (0, 0), incremental (X, n), reset (X, 0: close X and open
a new one), close (X, -1), unknown ids and wrong epochs, a session whose partitions
are all forgotten, and which partitions an incremental response carries under a small
byte limit. Then librdkafka (which fetches without sessions) reading every record
while its assignment and positions change mid-stream."""

import kafkawire as kw
from clients import consumer, consume_exactly, create_topic, produce_all, producer
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71


class Session:
    """One raw connection speaking Fetch v7 for one topic."""

    def __init__(self, conn, topic):
        self.conn, self.topic, self.correlation_id = conn, topic, 0

    def fetch(self, session_id, epoch, partitions=(), forgotten=(), max_bytes=1 << 20):
        self.correlation_id += 1
        frame = kw.fetch_v7(self.correlation_id, session_id, epoch, self.topic, list(partitions), list(forgotten),
                            max_bytes=max_bytes)
        cid, error, new_id, parts = kw.parse_fetch_v7(self.conn.roundtrip(frame))
        assert cid == self.correlation_id
        return error, new_id, {p: records for _t, p, _err, _hw, records in parts}


def produce_one_batch_each(conn, topic, partitions, value_bytes):
    batch = kw.record_batch([(None, b"v" * value_bytes)])
    for p in partitions:
        _cid, results = kw.parse_produce_v3(conn.roundtrip(kw.produce_v3(100 + p, topic, p, batch)))
        assert results[0][2] == kw.NONE
    return len(batch)


def test_session_transitions_match_kafka(broker):
    topic = "sessions"
    create_topic(broker, topic, partitions=2)
    with kw.Conn(broker.host, broker.port) as conn:
        s = Session(conn, topic)
        error, first, parts = s.fetch(0, 0, [(0, 0), (1, 0)])
        assert (error, sorted(parts)) == (0, [0, 1]) and first != 0
        error, same, _ = s.fetch(first, 1)
        assert (error, same) == (0, first)
        # Reset: the old id with epoch 0 closes it and opens a new session (franz-go's
        # way after losing track of its epoch).
        error, second, parts = s.fetch(first, 0, [(0, 0)])
        assert error == 0, f"reset answered with error {error}"
        assert second not in (0, first) and sorted(parts) == [0]
        assert s.fetch(first, 2)[0] == FETCH_SESSION_ID_NOT_FOUND
        assert s.fetch(second, 5)[0] == INVALID_FETCH_SESSION_EPOCH
        # Forgetting every partition closes the session; the answer is sessionless.
        error, closed_as, _ = s.fetch(second, 1, forgotten=[0])
        assert (error, closed_as) == (0, 0)
        assert s.fetch(second, 2)[0] == FETCH_SESSION_ID_NOT_FOUND
        # The final epoch closes a session and fetches without one.
        _, third, _ = s.fetch(0, 0, [(1, 0)])
        error, closed_as, parts = s.fetch(third, -1, [(0, 0)])
        assert (error, closed_as, sorted(parts)) == (0, 0, [0])
        assert s.fetch(third, 1)[0] == FETCH_SESSION_ID_NOT_FOUND
        # An incremental epoch with no session id: no such session.
        assert s.fetch(0, 1)[0] == FETCH_SESSION_ID_NOT_FOUND


def test_incremental_responses_take_turns_under_the_byte_limit(broker):
    """Three partitions with a 10 KB batch each, a session limited to 15 KB per
    response, and a consumer that does not move: each response carries the next
    partition's batch in turn (a partition that returned records goes to the back),
    never the same one over and over, and never more than the limit."""
    topic = "turns"
    create_topic(broker, topic, partitions=3)
    with kw.Conn(broker.host, broker.port) as conn:
        batch_bytes = produce_one_batch_each(conn, topic, range(3), 10_000)
        limit = batch_bytes + batch_bytes // 2
        s = Session(conn, topic)
        error, session, parts = s.fetch(0, 0, [(0, 0), (1, 0), (2, 0)], max_bytes=limit)
        assert error == 0 and session != 0
        with_records = [[p for p, r in sorted(parts.items()) if r]]
        for epoch in (1, 2, 3, 4):
            error, _, parts = s.fetch(session, epoch, max_bytes=limit)
            assert error == 0
            assert sum(len(r) for r in parts.values()) <= limit
            with_records.append([p for p, r in sorted(parts.items()) if r])
        # The full fetch keeps the request's order; from then on each partition that
        # returned records goes to the back (as Kafka's session does).
        assert with_records == [[0], [0], [1], [2], [0]]


def test_librdkafka_reads_every_record_while_assignment_and_positions_change(broker):
    topic, per_partition = "moving", 200
    create_topic(broker, topic, partitions=3)
    p = producer(broker)
    messages = [{"partition": part, "value": f"{part}-{i}".encode()} for part in range(3) for i in range(per_partition)]
    produce_all(p, topic, messages)
    c = consumer(broker, fetch_max_bytes=2000, message_max_bytes=2000, max_partition_fetch_bytes=1000)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        first = consume_exactly(c, per_partition, settle=0.2)
        assert [m.value() for m in first] == [f"0-{i}".encode() for i in range(per_partition)]
        # Seek partition 0 back to 50 and add partitions 1 and 2 mid-stream.
        c.seek(TopicPartition(topic, 0, 50))
        c.incremental_assign([TopicPartition(topic, 1, OFFSET_BEGINNING), TopicPartition(topic, 2, 100)])
        got = consume_exactly(c, (per_partition - 50) + per_partition + (per_partition - 100), settle=0.2)
        assert sorted(m.value() for m in got) == sorted(
            [f"0-{i}".encode() for i in range(50, per_partition)]
            + [f"1-{i}".encode() for i in range(per_partition)]
            + [f"2-{i}".encode() for i in range(100, per_partition)]
        )
        # Drop partition 1; what is produced next arrives on 0 and 2 only.
        c.incremental_unassign([TopicPartition(topic, 1)])
        produce_all(p, topic, [{"partition": part, "value": f"late-{part}".encode()} for part in range(3)])
        late = consume_exactly(c, 2, settle=0.5)
        assert sorted(m.value() for m in late) == [b"late-0", b"late-2"]
    finally:
        c.close()
