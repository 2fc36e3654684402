"""Share-group dead-letter queues (KIP-1191, the `share.version` feature at level 2)
through librdkafka's share consumer acknowledging explicitly (share_clients.py), the DLQ
topic read with a plain consumer (assign, from the beginning):

- a record acknowledged REJECT is written to the group's DLQ topic (group config
  `errors.deadletterqueue.topic.name`, an existing `dlq.`-prefixed topic with
  `errors.deadletterqueue.group.enable=true`) and never delivered again: no key, no
  value, CreateTime the time of writing, and only the headers `__dlq.errors.topic`,
  `.partition`, `.offset`, `.group`, `.delivery.count` and `.message` ("Offset rejected
  by client."), in that order, the numbers in decimal;
- its DLQ partition is the source partition modulo the DLQ topic's partition count;
- with `errors.deadletterqueue.copy.record.enable=true` the original key and value are
  copied (also from compressed batches, and a null key or value stays null), the
  original headers are not;
- a record released at the `share.delivery.count.limit`th delivery, or whose
  acquisition lock expires then, is written with the limit as its delivery count and
  "Offset delivery count exceeded the threshold.";
- with the broker config `errors.deadletterqueue.auto.create.topics.enable=true` a
  missing `dlq.` topic is created (one partition, one replica here: the broker's
  defaults) with `errors.deadletterqueue.group.enable=true` and
  `message.timestamp.type=CreateTime`;
- nothing is written, and the records are archived all the same, when the DLQ topic
  exists without `errors.deadletterqueue.group.enable=true`, is missing and the broker
  does not auto create DLQ topics, or lacks the broker's prefix
  (`errors.deadletterqueue.topic.name.prefix`, "dlq."), whether it exists or not;
- IncrementalAlterConfigs refuses a DLQ topic name starting with "__" (INVALID_CONFIG)
  and takes any other name, also one the broker will not write to; DescribeConfigs lists
  the two group configs at their defaults for every group, the two broker configs and the
  topic config at theirs.

"Nothing is written" is shown without waiting on a clock: once the sentinel shows the
records archived, the group is given a DLQ topic that works and rejects one more record
(the marker); when the marker is there, so would the others be.

Against osprey, each test starts its own broker (osprey.share.version=2). With
`COMPAT_CLUSTER=kafka` the same tests run against Kafka 4.4 nodes formatted with
`share.version=2`: one for the module, and one more for the tests that ask for DLQ topic
auto creation. Every wait polls against a deadline; no test asserts how long anything
took.
"""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, AcknowledgeType, KafkaError, KafkaException, \
    TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import clients
import share_clients
from kafka_cluster import against_kafka
from share_clients import (DELIVERY_WAIT_S, SETTLE_S, Deliveries, assert_nothing_more_delivered, check_deadline,
                           commit, consume, group_configs, poll, produce, set_group_configs, share_consumer,
                           start_target)

# A test waits up to a minute for a group config and again for deliveries, and with
# COMPAT_CLUSTER=kafka the first one also starts the JVM.
pytestmark = pytest.mark.timeout(300 if against_kafka() else 180)

# As test_share_groups.py: the lowest share.record.lock.duration.ms Kafka lets a group
# take is the broker's group.share.min.record.lock.duration.ms. DLQs are on from
# share.version 2: osprey's setting of it (Kafka's nodes are formatted with it, below;
# kafka_cluster.OSPREY_ONLY keeps the key out of their configs).
BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": 1000, "osprey.share.version": 2}
AUTO_CREATE = {"errors.deadletterqueue.auto.create.topics.enable": "true"}
SHORT_LOCK_MS = 2000

DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
DLQ_ENABLED = {"errors.deadletterqueue.group.enable": "true"}
REJECTED = "Offset rejected by client."
EXCEEDED = "Offset delivery count exceeded the threshold."


# ----- the broker under test -------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka_nodes(tmp_path_factory):
    """With COMPAT_CLUSTER=kafka, the module's Kafka 4.4 nodes, else None."""
    with share_clients.kafka_nodes(tmp_path_factory, {"share.version": 2}) as nodes:
        yield nodes


@pytest.fixture
def start_dlq_target(request, kafka_nodes):
    """`start_dlq_target(overrides)`: the test's broker with these broker configs too."""
    return lambda overrides=None: start_target(request, kafka_nodes, {**BROKER_CONFIG, **(overrides or {})})


@pytest.fixture
def target(start_dlq_target):
    return start_dlq_target()


# ----- helpers ---------------------------------------------------------------------------


def dlq_group(target, group: str, dlq_topic: str, **configs):
    """`group` reads from the log start and writes to `dlq_topic`, with `configs` too."""
    set_group_configs(target, group, {"share.auto.offset.reset": "earliest", DLQ_TOPIC_NAME: dlq_topic, **configs})


def produce_records(target, topic: str, records, **producer_config) -> list:
    """Produces `records` (dicts of Producer.produce arguments); returns their delivery reports."""
    reports = clients.produce_all(clients.producer(target, acks="all", **producer_config), topic, records)
    assert [r.error for r in reports] == [None] * len(reports)
    return reports


def dlq_headers(topic: str, partition: int, offset: int, group: str, delivery_count: int, message: str) -> list:
    """The headers of a DLQ record, in the order Kafka writes them."""
    return [
        ("__dlq.errors.topic", topic.encode()),
        ("__dlq.errors.partition", str(partition).encode()),
        ("__dlq.errors.offset", str(offset).encode()),
        ("__dlq.errors.group", group.encode()),
        ("__dlq.errors.delivery.count", str(delivery_count).encode()),
        ("__dlq.errors.message", message.encode()),
    ]


def source_offset(m) -> int:
    return int(dict(m.headers())["__dlq.errors.offset"])


def listed_topic(target, topic: str):
    """`topic` as the metadata of every topic lists it, or None. (A Metadata request naming
    a missing topic could have the broker create it, with auto.create.topics.enable.)"""
    described = clients.admin(target).list_topics(timeout=clients.TIMEOUT_S).topics.get(topic)
    return described if described is not None and described.error is None else None


def wait_for_topic(target, topic: str) -> int:
    """Until the metadata lists `topic` with a leader for each partition; its partition count."""
    deadline = time.monotonic() + DELIVERY_WAIT_S
    while True:
        described = listed_topic(target, topic)
        if described is not None and described.partitions and all(p.leader >= 0 for p in described.partitions.values()):
            return len(described.partitions)
        check_deadline(deadline, lambda: f"topic {topic} not in the metadata within {DELIVERY_WAIT_S}s")
        time.sleep(0.1)


def read_topic(target, topic: str, count: int) -> list:
    """Every record of `topic` from the beginning, exactly `count`: waits up to
    DELIVERY_WAIT_S for them and SETTLE_S more for any extra."""
    partitions = wait_for_topic(target, topic)
    c = clients.consumer(target)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        return clients.consume_exactly(c, count, timeout=DELIVERY_WAIT_S, settle=SETTLE_S)
    finally:
        c.close()


def alter_group_config(target, group: str, key: str, value: str):
    """IncrementalAlterConfigs SET of one config of `group`; raises KafkaException if refused."""
    a = clients.admin(target)
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    a.incremental_alter_configs([resource], request_timeout=clients.TIMEOUT_S)[resource].result(timeout=clients.TIMEOUT_S)


def topic_configs(target, topic: str) -> dict:
    a = clients.admin(target)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = a.describe_configs([resource], request_timeout=clients.TIMEOUT_S)[resource].result(timeout=clients.TIMEOUT_S)
    return {name: entry.value for name, entry in described.items()}


def reject_all(target, group: str, topic: str, offsets):
    """A member of `group` rejects every record it is given until it was given each of
    `offsets`; closed afterwards."""
    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        consume(c, lambda m: AcknowledgeType.REJECT, lambda: set(deliveries.offsets()) >= set(offsets),
                f"offsets {sorted(offsets)} rejected", deliveries)
    finally:
        c.close()


def broker_id(target) -> int:
    brokers = clients.admin(target).list_topics(timeout=clients.TIMEOUT_S).brokers
    assert len(brokers) == 1, brokers
    return next(iter(brokers))


def time_ms() -> int:
    return int(time.time() * 1000)


# ----- tests -----------------------------------------------------------------------------


def test_rejected_records_go_to_the_dlq_topic_with_headers_naming_them_and_no_key_or_value(target):
    topic, dlq, group = "dlq-src-reject", "dlq.reject", "share-dlq-reject"
    clients.create_topic(target, topic)
    clients.create_topic(target, dlq, config=DLQ_ENABLED)
    dlq_group(target, group, dlq)
    an_hour_ago_ms = time_ms() - 3_600_000
    produced = produce_records(target, topic, [
        {"key": f"key-{i}".encode(), "value": f"value-{i}".encode(), "headers": [("origin", b"test")],
         "timestamp": an_hour_ago_ms} for i in range(12)])
    offsets = [r.offset for r in produced]
    # A third rejected at their first delivery, a third released then and rejected at
    # their second, the rest accepted.
    rejected_first = {o for o in offsets if o % 3 == 0}
    rejected_second = {o for o in offsets if o % 3 == 1}

    def decide(m):
        if m.offset() in rejected_first or (m.offset() in rejected_second and m.delivery_count() == 2):
            return AcknowledgeType.REJECT
        return AcknowledgeType.RELEASE if m.offset() in rejected_second else AcknowledgeType.ACCEPT

    before_ms = time_ms()
    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        consume(c, decide, lambda: set(deliveries.offsets()) >= set(offsets) and all(
            len(deliveries.counts_of(o)) == 2 for o in rejected_second), "every record decided", deliveries)
        written = read_topic(target, dlq, len(rejected_first) + len(rejected_second))
        assert_nothing_more_delivered(target, group, topic, consumer=c)
    finally:
        c.close()

    print("DLQ records (DLQ offset, source offset):", [(m.offset(), source_offset(m)) for m in written])
    assert sorted(source_offset(m) for m in written) == sorted(rejected_first | rejected_second)
    for m in written:
        o = source_offset(m)
        count = 1 if o in rejected_first else 2
        assert (m.partition(), m.key(), m.value()) == (0, None, None), f"DLQ record of offset {o}"
        assert m.headers() == dlq_headers(topic, 0, o, group, count, REJECTED), f"DLQ record of offset {o}"
        timestamp_type, timestamp_ms = m.timestamp()
        assert timestamp_type == TIMESTAMP_CREATE_TIME and before_ms <= timestamp_ms <= time_ms(), (
            f"DLQ record of offset {o}: {m.timestamp()} is not the time it was written")
    # Each delivery's rejections are written in offset order.
    for rejected in (rejected_first, rejected_second):
        order = [source_offset(m) for m in written if source_offset(m) in rejected]
        assert order == sorted(rejected)


def test_a_dlq_record_goes_to_the_source_partition_modulo_the_dlq_topics_partition_count(target):
    topic, dlq, group = "dlq-src-partitions", "dlq.partitions", "share-dlq-partitions"
    clients.create_topic(target, topic, partitions=3)
    clients.create_topic(target, dlq, partitions=2, config=DLQ_ENABLED)
    dlq_group(target, group, dlq)
    produced = produce_records(target, topic, [{"value": f"{p}-{i}".encode(), "partition": p}
                                               for p in range(3) for i in range(4)])
    wanted = {(r.partition, r.offset) for r in produced}
    c = share_consumer(target, group, topic)
    try:
        rejected = set()
        deadline = time.monotonic() + DELIVERY_WAIT_S
        while rejected != wanted:
            check_deadline(deadline, lambda: f"not every record delivered within {DELIVERY_WAIT_S}s: {sorted(rejected)}")
            batch = poll(c)
            for m in batch:
                rejected.add((m.partition(), m.offset()))
                c.acknowledge(m, AcknowledgeType.REJECT)
            if batch:
                commit(c)
    finally:
        c.close()

    written = read_topic(target, dlq, len(wanted))
    placed = {(int(dict(m.headers())["__dlq.errors.partition"]), source_offset(m)): m.partition() for m in written}
    assert placed == {(p, o): p % 2 for p, o in wanted}


def test_copy_record_enable_copies_the_key_and_value_but_not_the_headers(target):
    topic, dlq, group = "dlq-src-copy", "dlq.copy", "share-dlq-copy"
    clients.create_topic(target, topic)
    clients.create_topic(target, dlq, config=DLQ_ENABLED)
    dlq_group(target, group, dlq, **{COPY_RECORD: "true"})
    records = [{"key": f"key-{i}".encode(), "value": f"value-{i}".encode(), "headers": [("origin", b"test")]}
               for i in range(3)]
    records += [{"key": None, "value": b"no key"}, {"key": b"no value", "value": None}]
    # The original is read back from the log: in batches as they were produced, and compressed.
    produced = produce_records(target, topic, records) + produce_records(target, topic, records, compression_type="lz4")
    originals = {r.offset: (r.key, r.value) for r in produced}
    reject_all(target, group, topic, originals)

    written = read_topic(target, dlq, len(originals))
    assert {source_offset(m): (m.key(), m.value()) for m in written} == originals
    assert {source_offset(m): m.headers() for m in written} == {
        o: dlq_headers(topic, 0, o, group, 1, REJECTED) for o in originals}, "the original headers are not copied"
    assert_nothing_more_delivered(target, group, topic)


def test_copied_records_larger_together_than_the_dlq_topics_max_message_bytes_are_all_written(target):
    """The DLQ records of one acknowledgement go in several batches when their copies do
    not fit in one of the DLQ topic's max.message.bytes (the broker also reads the
    originals back in rounds of that size)."""
    topic, dlq, group = "dlq-src-large", "dlq.large", "share-dlq-large"
    clients.create_topic(target, topic)
    clients.create_topic(target, dlq, config={**DLQ_ENABLED, "max.message.bytes": "2000"})
    dlq_group(target, group, dlq, **{COPY_RECORD: "true"})
    records = [{"key": f"key-{i}".encode(), "value": bytes([65 + i]) * 700} for i in range(6)]
    produced = produce_records(target, topic, records)
    originals = {r.offset: (r.key, r.value) for r in produced}
    reject_all(target, group, topic, originals)

    written = read_topic(target, dlq, len(originals))
    assert {source_offset(m): (m.key(), m.value()) for m in written} == originals


def test_records_released_at_the_delivery_count_limit_go_to_the_dlq_with_the_limit_as_delivery_count(target):
    topic, dlq, group = "dlq-src-released", "dlq.released", "share-dlq-released"
    limit = 2  # the lowest Kafka takes (test_dlq_topic_names_starting_with_two_underscores_...)
    clients.create_topic(target, topic)
    clients.create_topic(target, dlq, config=DLQ_ENABLED)
    dlq_group(target, group, dlq, **{"share.delivery.count.limit": limit})
    produced = produce(target, topic, range(5))
    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        consume(c, lambda m: AcknowledgeType.RELEASE, lambda: all(len(deliveries.counts_of(o)) >= limit for o in produced),
                f"every record delivered {limit} times", deliveries)
        assert {o: deliveries.counts_of(o) for o in produced} == {o: [1, 2] for o in produced}
        written = read_topic(target, dlq, len(produced))
        assert_nothing_more_delivered(target, group, topic, consumer=c)
    finally:
        c.close()
    assert {source_offset(m): m.headers() for m in written} == {
        o: dlq_headers(topic, 0, o, group, limit, EXCEEDED) for o in produced}
    assert [source_offset(m) for m in written] == sorted(produced)


def test_a_record_whose_lock_expires_at_the_delivery_count_limit_goes_to_the_dlq(target):
    topic, dlq, group = "dlq-src-expired", "dlq.expired", "share-dlq-expired"
    clients.create_topic(target, topic)
    clients.create_topic(target, dlq, config=DLQ_ENABLED)
    dlq_group(target, group, dlq, **{"share.delivery.count.limit": 2, "share.record.lock.duration.ms": SHORT_LOCK_MS})
    produced = produce(target, topic, range(5))
    c = share_consumer(target, group, topic)
    try:
        deliveries = Deliveries()
        consume(c, lambda m: AcknowledgeType.RELEASE, lambda: set(deliveries.offsets()) >= set(produced),
                "every record released once", deliveries)
        # Delivered a second time and then neither acknowledged nor polled again: the
        # member stays in the group and only the lock's expiry frees them.
        held = []
        deadline = time.monotonic() + DELIVERY_WAIT_S
        while not held:
            check_deadline(deadline, lambda: f"no second delivery within {DELIVERY_WAIT_S}s")
            held = poll(c)
        assert sorted((m.offset(), m.delivery_count()) for m in held) == [(o, 2) for o in sorted(produced)]
        written = read_topic(target, dlq, len(held))
    finally:
        c.close()
    assert {source_offset(m): m.headers() for m in written} == {
        o: dlq_headers(topic, 0, o, group, 2, EXCEEDED) for o in produced}
    assert_nothing_more_delivered(target, group, topic)


def test_a_missing_dlq_topic_is_created_when_the_broker_auto_creates_dlq_topics(start_dlq_target):
    target = start_dlq_target(AUTO_CREATE)
    topic, dlq, group = "dlq-src-auto", "dlq.auto-created", "share-dlq-auto"
    clients.create_topic(target, topic)
    dlq_group(target, group, dlq)
    assert listed_topic(target, dlq) is None
    produced = produce(target, topic, range(3))
    reject_all(target, group, topic, produced)

    written = read_topic(target, dlq, len(produced))
    assert {source_offset(m): m.headers() for m in written} == {
        o: dlq_headers(topic, 0, o, group, 1, REJECTED) for o in produced}
    configs = topic_configs(target, dlq)
    assert {k: configs.get(k) for k in ("errors.deadletterqueue.group.enable", "message.timestamp.type")} == {
        "errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"}
    # The broker's defaults (num.partitions, default.replication.factor): 1 and 1.
    assert {p: len(d.replicas) for p, d in listed_topic(target, dlq).partitions.items()} == {0: 1}
    assert_nothing_more_delivered(target, group, topic)


# Each case: the DLQ topic's name, whether it exists (and with which configs), and the
# broker configs.
REFUSED_DLQ_TOPICS = {
    "not enabled for DLQ": ("dlq.not-enabled", {}, {}),
    "missing, auto creation off": ("dlq.missing", None, {}),
    "without the prefix": ("errors.no-prefix", DLQ_ENABLED, {}),
    "missing without the prefix, auto creation on": ("errors.no-prefix-auto", None, AUTO_CREATE),
    # Enabled, but its max.message.bytes is below one DLQ record: the produce fails for good.
    "too small for a DLQ record": ("dlq.too-small", {**DLQ_ENABLED, "max.message.bytes": "100"}, {}),
}


@pytest.mark.parametrize("case", REFUSED_DLQ_TOPICS)
def test_rejected_records_are_archived_without_a_dlq_record_when_the_dlq_topic_is_refused(start_dlq_target, case):
    dlq, dlq_configs, broker_configs = REFUSED_DLQ_TOPICS[case]
    target = start_dlq_target(broker_configs)
    slug = dlq.split(".", 1)[1]
    topic, group, working = f"dlq-src-{slug}", f"share-dlq-{slug}", f"dlq.{slug}-working"
    clients.create_topic(target, topic)
    if dlq_configs is not None:
        clients.create_topic(target, dlq, config=dlq_configs)
    clients.create_topic(target, working, config=DLQ_ENABLED)
    dlq_group(target, group, dlq)
    produced = produce(target, topic, range(3))
    reject_all(target, group, topic, produced)
    assert_nothing_more_delivered(target, group, topic)

    # The marker: rejected once the group's DLQ topic works, it is written there; the
    # records rejected before it would have been written before it.
    set_group_configs(target, group, {DLQ_TOPIC_NAME: working})
    marker = max(produce(target, topic, ["marker"]))
    reject_all(target, group, topic, [marker])
    assert [m.headers() for m in read_topic(target, working, 1)] == [dlq_headers(topic, 0, marker, group, 1, REJECTED)]
    if dlq_configs is None:
        assert listed_topic(target, dlq) is None, f"{dlq} was created"
    else:
        assert read_topic(target, dlq, 0) == []


def test_with_an_empty_prefix_a_dlq_topic_of_any_name_is_used(start_dlq_target):
    target = start_dlq_target({"errors.deadletterqueue.topic.name.prefix": ""})
    topic, group, dlq = "dlq-src-any-name", "share-dlq-any-name", "errors.any-name"
    clients.create_topic(target, topic)
    clients.create_topic(target, dlq, config=DLQ_ENABLED)
    dlq_group(target, group, dlq)
    produced = produce(target, topic, range(2))
    reject_all(target, group, topic, produced)
    written = read_topic(target, dlq, len(produced))
    assert [m.headers() for m in written] == [dlq_headers(topic, 0, o, group, 1, REJECTED) for o in sorted(produced)]


def test_dlq_topic_names_starting_with_two_underscores_are_refused_and_any_other_name_taken(target):
    """IncrementalAlterConfigs: INVALID_CONFIG for a DLQ topic name starting with "__",
    for a copy.record.enable that is not a boolean, and for a share.delivery.count.limit
    below 2, each changing nothing; names the broker will not write to are taken."""
    group = "share-dlq-names"
    for key, value, message in (
            (DLQ_TOPIC_NAME, "__dlq", "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
            (DLQ_TOPIC_NAME, "__consumer_offsets", "DLQ topic name must not start with '__'"),
            (COPY_RECORD, "yes", "Expected value to be either true or false"),
            ("share.delivery.count.limit", "1", "Value must be at least 2")):
        with pytest.raises(KafkaException) as refused:
            alter_group_config(target, group, key, value)
        error = refused.value.args[0]
        assert (error.code(), message in error.str()) == (KafkaError.INVALID_CONFIG, True), (key, value, error)
    defaults = {DLQ_TOPIC_NAME: "", COPY_RECORD: "false", "share.delivery.count.limit": "5"}
    assert {k: group_configs(target, group).get(k) for k in defaults} == defaults
    for name in ("_one-underscore", "no-prefix", "dlq.not-there-yet", ""):
        set_group_configs(target, group, {DLQ_TOPIC_NAME: name})
    # As Kafka's booleans, in any case; described in lower case.
    alter_group_config(target, group, COPY_RECORD, "TRUE")
    deadline = time.monotonic() + DELIVERY_WAIT_S
    while group_configs(target, group).get(COPY_RECORD) != "true":
        check_deadline(deadline, lambda: f"{COPY_RECORD}=TRUE not described as true: {group_configs(target, group)}")
        time.sleep(0.1)


def test_dlq_configs_are_described_at_their_defaults(target):
    """DescribeConfigs lists errors.deadletterqueue.topic.name ("") and
    errors.deadletterqueue.copy.record.enable (false) for any group: one nobody uses, a
    consumer group; the broker's DLQ configs and a topic's at their defaults too."""
    defaults = {DLQ_TOPIC_NAME: "", COPY_RECORD: "false"}
    assert {k: group_configs(target, "share-dlq-unused").get(k) for k in defaults} == defaults
    topic = "dlq-described"
    clients.create_topic(target, topic)
    c = clients.consumer(target, group_id="consumer-group-dlq-described")
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    assert {k: group_configs(target, "consumer-group-dlq-described").get(k) for k in defaults} == defaults

    a = clients.admin(target)
    broker = ConfigResource(ResourceType.BROKER, str(broker_id(target)))
    described = a.describe_configs([broker], request_timeout=clients.TIMEOUT_S)[broker].result(timeout=clients.TIMEOUT_S)
    broker_defaults = {"errors.deadletterqueue.auto.create.topics.enable": "false",
                       "errors.deadletterqueue.topic.name.prefix": "dlq."}
    assert {k: described[k].value for k in broker_defaults if k in described} == broker_defaults
    assert topic_configs(target, topic).get("errors.deadletterqueue.group.enable") == "false"
