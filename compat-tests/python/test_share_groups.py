"""Share groups (KIP-932, "queues for Kafka") through librdkafka's share consumer
(confluent-kafka `ShareConsumer`, `share.acknowledgement.mode=explicit`: each record is
acknowledged ACCEPT, RELEASE or REJECT and the acknowledgements are committed with
`commit_sync`, whose per-partition results must all be successes):

- three consumers of one group on a one-partition topic: every record is delivered, the
  records accepted are exactly the records produced, each accepted once and delivered
  once, and every consumer gets some (the partition is shared, not assigned to one);
- RELEASE: a released record is delivered again with its delivery count raised, REJECT:
  a rejected record is never delivered again, not even to a new consumer after the one
  that rejected it closed;
- the acquisition lock (the group config `share.record.lock.duration.ms`, set low): the
  records of a member that stays in the group but neither acknowledges nor polls again
  are delivered to another member once their lock expires, with delivery count 2;
- `share.auto.offset.reset`: latest by default (a new group skips what the partition
  held before it), earliest as a group config (everything from the log start);
- `share.delivery.count.limit` (group config): a record released at every delivery is
  delivered that many times and then archived, never delivered again; lowered while the
  records are in flight, it applies at their next release;
- kill -9 of the broker: records accepted before the kill are never delivered again
  after the restart, records acquired but not acknowledged are delivered (none lost).

"Never delivered again" is checked without waiting on a clock: a new record (the
sentinel) is produced after the ones in question, and a consumer polls until it
receives the sentinel. A share partition hands out the records available to it from
its lowest offset up, and a consumer that closes gives back what it acquired, so a
record wrongly available again comes before the sentinel.

Against osprey, each test starts its own broker (conftest's `start_broker`). With
`COMPAT_CLUSTER=kafka` the same tests run against one Apache Kafka 4.4 node
(`kafka_cluster.single_kafka`) shared by the module, which shows that what they assert is
what Kafka does. Its directory is formatted with `share.version=2` finalized, Kafka 4.4's
default and osprey's (share groups with their dead-letter queues, which these tests leave
unconfigured; `test_share_dlq.py` covers them). Every wait polls against a deadline; no
test asserts how long anything took.
"""

import time
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import clients
import share_clients
from kafka_cluster import KafkaNode, against_kafka
from share_clients import (DELIVERY_WAIT_S, Deliveries, assert_nothing_more_delivered, check_deadline, commit, consume,
                           group_configs, poll, produce, set_group_configs, share_consumer, start_target,
                           until_every_record_and_consumer, wait_ready)

# Above the suite's 120 s: a test waits up to a minute for a group config and again for
# deliveries, and with COMPAT_CLUSTER=kafka the first one also starts the JVM.
pytestmark = pytest.mark.timeout(300 if against_kafka() else 180)

# Kafka refuses a group's share.record.lock.duration.ms below the broker's
# group.share.min.record.lock.duration.ms (default 15000: "share.record.lock.duration.ms
# must be in the range 15000 to 60000 inclusive"); 1000 is the lowest it takes.
BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": 1000}
SHORT_LOCK_MS = 2000


# ----- the broker under test -------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka_nodes(tmp_path_factory):
    """With COMPAT_CLUSTER=kafka, the module's Kafka 4.4 node, else None."""
    with share_clients.kafka_nodes(tmp_path_factory, {"share.version": 2}) as nodes:
        yield nodes


@pytest.fixture
def target(request, kafka_nodes):
    """What the test's clients bootstrap from: its own osprey broker, or the module's Kafka node."""
    return start_target(request, kafka_nodes, BROKER_CONFIG)


def kill9_and_restart(target):
    """SIGKILL the broker and start it again on the same data and ports."""
    if isinstance(target, KafkaNode):
        target.kill9()
        target.start()
        wait_ready(target)
    else:
        target.restart(clean=False)


# ----- tests ------------------------------------------------------------------------------


def test_three_consumers_share_one_partition_and_each_record_is_accepted_once(target):
    topic = group = "share-three"
    clients.create_topic(target, topic, partitions=1)
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest"})
    produced = produce(target, topic, range(3000))
    consumers = [share_consumer(target, group, topic) for _ in range(3)]
    deliveries = Deliveries()
    def accept_all(who, c):
        batch = poll(c)
        for m in batch:
            deliveries.add(who, m)
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if batch:
            commit(c)

    try:
        more = lambda n: produce(target, topic, range(n, n + 300))
        until_every_record_and_consumer(produced, consumers, deliveries, more, accept_all)
    finally:
        for c in consumers:
            c.close()

    twice = {o: n for o, n in deliveries.offsets().items() if n > 1}
    assert twice == {}, f"records delivered more than once: {twice}"
    assert {o: v for _, o, _, v in deliveries.log} == produced, "delivered records are not the produced ones"
    assert {count for _, _, count, _ in deliveries.log} == {1}
    per_consumer = Counter(who for who, _, _, _ in deliveries.log)
    print(f"{len(produced)} records, per consumer: {sorted(per_consumer.items())}")
    # Closing gave back whatever a member still held: a record whose acceptance the
    # broker lost would be delivered to the next member.
    assert_nothing_more_delivered(target, group, topic)


def test_released_records_are_delivered_again_with_a_higher_delivery_count(target):
    topic = group = "share-release"
    clients.create_topic(target, topic, partitions=1)
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest"})
    produced = produce(target, topic, range(30))
    released = {o for o in produced if o % 3 == 0}

    def decide(m):
        # Released on its first delivery, accepted on the next.
        return AcknowledgeType.RELEASE if m.offset() in released and m.delivery_count() == 1 else AcknowledgeType.ACCEPT

    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        expected = {o: [1, 2] if o in released else [1] for o in produced}
        consume(c, decide, lambda: all(len(deliveries.counts_of(o)) >= len(expected[o]) for o in produced),
                "every record accepted, the released ones on their second delivery", deliveries)
        assert {o: deliveries.counts_of(o) for o in produced} == expected, "delivery counts by offset"
        assert_nothing_more_delivered(target, group, topic, consumer=c)
    finally:
        c.close()


def test_rejected_records_are_never_delivered_again(target):
    topic = group = "share-reject"
    clients.create_topic(target, topic, partitions=1)
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest"})
    produced = produce(target, topic, range(30))
    rejected = {o for o in produced if o % 3 == 0}
    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        consume(c, lambda m: AcknowledgeType.REJECT if m.offset() in rejected else AcknowledgeType.ACCEPT,
                lambda: set(deliveries.offsets()) >= set(produced), "every record delivered", deliveries)
    finally:
        c.close()
    assert {o: n for o, n in deliveries.offsets().items() if n > 1} == {}
    # A new member, after the one that rejected them left: only the sentinel.
    assert_nothing_more_delivered(target, group, topic)


def test_records_of_a_member_that_stops_polling_go_to_another_member_when_their_lock_expires(target):
    topic = group = "share-lock-expiry"
    clients.create_topic(target, topic, partitions=1)
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": SHORT_LOCK_MS})
    produced = produce(target, topic, range(40))
    stalled = share_consumer(target, group, topic)
    try:
        held = []
        deadline = time.monotonic() + DELIVERY_WAIT_S
        while not held:
            check_deadline(deadline, lambda: f"the first member got nothing within {DELIVERY_WAIT_S}s")
            held = poll(stalled)
        assert all(m.delivery_count() == 1 for m in held)
        held_offsets = {m.offset() for m in held}
        # `stalled` stays in the group (its heartbeats go on in the background) and never
        # acknowledges nor polls again: only the lock's expiry frees what it holds.
        other = share_consumer(target, group, topic)
        try:
            deliveries = Deliveries()
            consume(other, lambda m: AcknowledgeType.ACCEPT, lambda: set(deliveries.offsets()) >= set(produced),
                    "every record at the second member", deliveries)
            assert {o: n for o, n in deliveries.offsets().items() if n > 1} == {}
            assert {o: deliveries.counts_of(o) for o in held_offsets} == {o: [2] for o in held_offsets}, (
                "records whose lock expired come back with delivery count 2")
            assert {count for _, _, count, _ in deliveries.log} <= {1, 2}
        finally:
            other.close()
    finally:
        stalled.close()
    assert_nothing_more_delivered(target, group, topic)


def test_share_auto_offset_reset_is_latest_by_default(target):
    topic = group = "share-latest"
    clients.create_topic(target, topic, partitions=1)
    assert group_configs(target, group).get("share.auto.offset.reset") == "latest"
    before = produce(target, topic, [f"before-{i}" for i in range(10)])
    c = share_consumer(target, group, topic)
    try:
        # Until the group's share partition starts (at its first fetch, at the end of the
        # log then), what is produced is not for it: produce one record a poll until one
        # arrives, then everything from that one on must arrive.
        deliveries = Deliveries()
        produced = {}
        deadline = time.monotonic() + DELIVERY_WAIT_S
        while not deliveries.log:
            check_deadline(deadline, lambda: f"nothing delivered within {DELIVERY_WAIT_S}s")
            produced.update(produce(target, topic, [f"after-{len(produced)}"]))
            for m in poll(c, 0.5):
                deliveries.add(0, m)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            commit(c)
        produced.update(produce(target, topic, [f"after-{len(produced) + i}" for i in range(10)]))
        first = min(deliveries.offsets())
        expected = {o for o in produced if o >= first}
        consume(c, lambda m: AcknowledgeType.ACCEPT, lambda: set(deliveries.offsets()) >= expected,
                f"every record from offset {first} on", deliveries)
        assert first > max(before), f"offset {first} was in the partition before the group started"
        assert set(deliveries.offsets()) == expected
        assert_nothing_more_delivered(target, group, topic, consumer=c)
    finally:
        c.close()


def test_share_auto_offset_reset_earliest_as_a_group_config_starts_at_the_log_start(target):
    topic = group = "share-earliest"
    clients.create_topic(target, topic, partitions=1)
    before = produce(target, topic, range(25))
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest"})
    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        consume(c, lambda m: AcknowledgeType.ACCEPT, lambda: set(deliveries.offsets()) >= set(before),
                "every record produced before the group started", deliveries)
        assert sorted(deliveries.offsets().items()) == [(o, 1) for o in range(25)]
    finally:
        c.close()


def test_records_released_at_every_delivery_are_archived_after_the_delivery_count_limit(target):
    topic = group = "share-delivery-limit"
    limit = 3
    clients.create_topic(target, topic, partitions=1)
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": limit})
    produced = produce(target, topic, range(10))
    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        consume(c, lambda m: AcknowledgeType.RELEASE, lambda: all(len(deliveries.counts_of(o)) >= limit for o in produced),
                f"every record delivered {limit} times", deliveries)
        assert {o: deliveries.counts_of(o) for o in produced} == {o: list(range(1, limit + 1)) for o in produced}
        # Released a third time, each record was archived rather than made available.
        assert_nothing_more_delivered(target, group, topic, consumer=c)
    finally:
        c.close()


def test_a_lowered_delivery_count_limit_applies_to_the_share_partition_in_use(target):
    """`share.delivery.count.limit` lowered while the group's share partition is loaded and
    its records in flight: Kafka reads the limit at each release, so the records are
    archived at the new limit, not at the one in force when they were first delivered."""
    topic = group = "share-limit-lowered"
    clients.create_topic(target, topic, partitions=1)
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest"})
    produced = produce(target, topic, range(10))
    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        delivered = lambda n: lambda: all(len(deliveries.counts_of(o)) >= n for o in produced)
        consume(c, lambda m: AcknowledgeType.RELEASE, delivered(2), "every record delivered twice", deliveries)
        set_group_configs(target, group, {"share.delivery.count.limit": 3})
        consume(c, lambda m: AcknowledgeType.RELEASE, delivered(3), "every record delivered three times", deliveries)
        assert {o: deliveries.counts_of(o) for o in produced} == {o: [1, 2, 3] for o in produced}
        # Released at the third delivery, under the default limit (5) they would come back.
        assert_nothing_more_delivered(target, group, topic, consumer=c)
    finally:
        c.close()


def test_a_share_groups_configs_are_described_and_bounded_as_kafkas(target):
    """DescribeConfigs of a share group (one nobody uses, as Kafka allows) lists every
    share.* group config at Kafka 4.4's default, and IncrementalAlterConfigs refuses values
    outside Kafka's bounds with INVALID_CONFIG, changing nothing."""
    group = "share-configs-described"
    described = group_configs(target, group)
    defaults = {
        "share.session.timeout.ms": "45000",
        "share.heartbeat.interval.ms": "5000",
        "share.record.lock.duration.ms": "30000",
        "share.delivery.count.limit": "5",
        "share.partition.max.record.locks": "2000",
        "share.assignment.interval.ms": "1000",
        "share.renew.acknowledge.enable": "true",
        "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted",
    }
    assert {k: described.get(k) for k in defaults} == defaults
    a = clients.admin(target)
    for key, value in (("share.partition.max.record.locks", "4001"), ("share.partition.max.record.locks", "99"),
                       ("share.renew.acknowledge.enable", "yes"), ("share.assignment.interval.ms", "15001"),
                       ("share.delivery.count.limit", "11")):
        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
        with pytest.raises(KafkaException) as refused:
            a.incremental_alter_configs([resource], request_timeout=clients.TIMEOUT_S)[resource].result(
                timeout=clients.TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, (key, value, refused.value)
    assert {k: group_configs(target, group).get(k) for k in defaults} == defaults


def test_kill_9_keeps_accepted_records_accepted_and_delivers_the_unacknowledged_ones(target):
    topic = group = "share-kill9"
    clients.create_topic(target, topic, partitions=1)
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest"})
    produced = produce(target, topic, range(200))
    first = share_consumer(target, group, topic)
    accepted, acquired = set(), set()
    try:
        deadline = time.monotonic() + DELIVERY_WAIT_S
        while not accepted:
            check_deadline(deadline, lambda: f"nothing delivered within {DELIVERY_WAIT_S}s")
            batch = poll(first)
            for m in batch:
                first.acknowledge(m, AcknowledgeType.ACCEPT)
            if batch:
                commit(first)  # acknowledged by the broker: these must stay accepted
                accepted = {m.offset() for m in batch}
        while not acquired:
            check_deadline(deadline, lambda: f"no second batch within {DELIVERY_WAIT_S}s")
            acquired = {m.offset() for m in poll(first)}  # acquired, never acknowledged
        assert not accepted & acquired
        kill9_and_restart(target)
    finally:
        first.close()
    print(f"accepted {len(accepted)}, acquired and lost with the broker {len(acquired)}, of {len(produced)}")

    c = share_consumer(target, group, topic)
    try:
        rest = set(produced) - accepted
        deliveries = Deliveries()
        consume(c, lambda m: AcknowledgeType.ACCEPT, lambda: set(deliveries.offsets()) >= rest,
                "every record not accepted before the kill", deliveries)
        again = set(deliveries.offsets()) & accepted
        assert again == set(), f"records accepted before the kill delivered again: {sorted(again)}"
        assert set(deliveries.offsets()) == rest
        print("delivery counts after the restart of the records acquired before it:",
              sorted(Counter(deliveries.counts_of(o)[0] for o in acquired).items()))
        assert_nothing_more_delivered(target, group, topic, consumer=c)
    finally:
        c.close()
