"""Log compaction on a `cleanup.policy=compact` topic: after the cleaner runs, a
consumer reading from the beginning finds the latest value of every key in the sealed
segments, once, and nothing else of them; offsets keep their original values."""

import time

from confluent_kafka import TopicPartition

import clients

KEYS = 10
ROUNDS = 8


def test_compacted_topic_keeps_only_the_latest_value_per_key(start_broker):
    broker = start_broker({"log.cleaner.backoff.ms": "200"})
    topic = "compacted"
    clients.create_topic(
        broker,
        topic,
        config={"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"},
    )
    p = clients.producer(broker, acks="all", linger_ms=0)
    last_offset = {}
    for r in range(ROUNDS):
        reports = clients.produce_all(p, topic, [{"key": b"k%d" % k, "value": b"r%d" % r} for k in range(KEYS)])
        for k, rep in enumerate(reports):
            assert rep.error is None
            last_offset[b"k%d" % k] = rep.offset
        time.sleep(0.15)  # past segment.ms: the next append rolls a new segment
    # One more record so the last round's segment is sealed (the active one is never cleaned).
    tail = clients.produce_all(p, topic, [{"key": b"tail", "value": b"tail"}])[0]

    deadline = time.monotonic() + 30
    while True:
        c = clients.consumer(broker)
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            messages = []
            end = time.monotonic() + 3
            while time.monotonic() < end:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    messages.append(m)
                    if m.offset() == tail.offset:
                        break
        finally:
            c.close()
        kept = [(m.key(), m.value(), m.offset()) for m in messages if m.key() != b"tail"]
        if len(kept) == KEYS:
            break
        assert time.monotonic() < deadline, f"still {len(kept)} records of {KEYS} keys after 30 s: not compacted"
        time.sleep(0.5)
    assert sorted(kept) == sorted((k, b"r%d" % (ROUNDS - 1), off) for k, off in last_offset.items())
    assert messages[-1].offset() == tail.offset
