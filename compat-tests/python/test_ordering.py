"""A connection's requests take effect in the order they were sent, as on Kafka, which
processes one connection's requests one after another. Clients rely on it: librdkafka's
test 0030_offset_commit pipelines dozens of asynchronous commits and then reads back the
last one, and a producer with several requests in flight relies on them landing in order.
"""

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
