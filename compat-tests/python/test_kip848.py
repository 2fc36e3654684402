"""The KIP-848 consumer protocol (`group.protocol=consumer`) with librdkafka: the
broker's assignor splits the partitions between two members, every message is
processed and committed exactly once, and the group is reported as a consumer group."""

import time

from confluent_kafka import ConsumerGroupType, TopicPartition

import clients

PARTITIONS = 4
MESSAGES = 200


def test_two_consumer_protocol_members_split_partitions_and_process_everything_once(broker):
    topic, group = "kip848", "kip848-group"
    clients.create_topic(broker, topic, partitions=PARTITIONS)
    p = clients.producer(broker, acks="all")
    clients.produce_all(p, topic, [{"key": b"%d" % i, "value": b"%d" % i} for i in range(MESSAGES)])
    assigned = [set(), set()]

    def on_assign(i):
        def cb(_consumer, parts):
            assigned[i].update(tp.partition for tp in parts)

        return cb

    def on_revoke(i):
        def cb(_consumer, parts):
            assigned[i].difference_update(tp.partition for tp in parts)

        return cb

    consumers = [
        clients.consumer(
            broker,
            **{"group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest"},
        )
        for _ in range(2)
    ]
    processed, duplicates = set(), []
    try:
        for i, c in enumerate(consumers):
            c.subscribe([topic], on_assign=on_assign(i), on_revoke=on_revoke(i))
        deadline = time.monotonic() + 60
        while len(processed) < MESSAGES or not all(len(a) == PARTITIONS // 2 for a in assigned):
            assert time.monotonic() < deadline, f"processed {len(processed)}, assignments {assigned}"
            for c in consumers:
                m = c.poll(0.2)
                if m is None or m.error():
                    continue
                if m.value() in processed:
                    duplicates.append(m.value())
                processed.add(m.value())
                c.commit(message=m, asynchronous=False)
        assert duplicates == []
        assert assigned[0] | assigned[1] == set(range(PARTITIONS)) and not assigned[0] & assigned[1], assigned
        a = clients.admin(broker)
        d = a.describe_consumer_groups([group], request_timeout=clients.TIMEOUT_S)[group].result(timeout=clients.TIMEOUT_S)
        assert d.type == ConsumerGroupType.CONSUMER and len(d.members) == 2, d
        committed = consumers[0].committed([TopicPartition(topic, part) for part in range(PARTITIONS)], timeout=clients.TIMEOUT_S)
        assert sum(tp.offset for tp in committed) == MESSAGES
    finally:
        for c in consumers:
            c.close()


def test_a_regex_subscription_consumes_matching_topics_including_ones_created_later(broker):
    """librdkafka sends a subscription starting with '^' as KIP-848's SubscribedTopicRegex;
    the broker resolves it against the topics that exist and again when a matching topic
    is created after the consumer subscribed."""
    clients.create_topic(broker, "PFX-early", partitions=2)
    clients.create_topic(broker, "unrelated", partitions=1)
    p = clients.producer(broker, acks="all")
    clients.produce_all(p, "PFX-early", [{"value": b"early-%d" % i} for i in range(10)])
    clients.produce_all(p, "unrelated", [{"value": b"unrelated-%d" % i} for i in range(10)])
    c = clients.consumer(
        broker,
        **{"group.id": "kip848-regex", "group.protocol": "consumer", "auto.offset.reset": "earliest"},
    )
    seen = []

    def consume_until(count):
        deadline = time.monotonic() + 60
        while len(seen) < count:
            assert time.monotonic() < deadline, f"consumed {seen}"
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen.append((m.topic(), m.value()))

    try:
        c.subscribe(["^PFX-.*"])
        consume_until(10)
        clients.create_topic(broker, "PFX-late", partitions=1)
        clients.produce_all(p, "PFX-late", [{"value": b"late-%d" % i} for i in range(5)])
        consume_until(15)
        topics = {t for t, _ in seen}
        assert topics == {"PFX-early", "PFX-late"}, seen
        assert len(set(seen)) == 15, seen
        a = clients.admin(broker)
        d = a.describe_consumer_groups(["kip848-regex"], request_timeout=clients.TIMEOUT_S)["kip848-regex"].result(
            timeout=clients.TIMEOUT_S
        )
        assigned = {tp.topic for m in d.members for tp in m.assignment.topic_partitions}
        assert assigned == {"PFX-early", "PFX-late"}, d
    finally:
        c.close()
