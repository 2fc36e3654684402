"""Admin questions answered as Kafka answers them: authorized operations (KIP-430) through
kafka-python and confluent-kafka, the ACL APIs, which Kafka without an authorizer serves
with SECURITY_DISABLED, and ListOffsets for the largest timestamp (KIP-734)."""

import time

import pytest
from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import KafkaAdminClient

import clients
import kafkawire

T = clients.TIMEOUT_S

# What Kafka 4.4 without an authorizer answers: every operation that applies to the
# resource type (AclEntry.supportedOperations), by AclOperation name.
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
GROUP_OPERATIONS = {"READ", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {
    "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
}

SECURITY_DISABLED = 54


def names(operations) -> set:
    return {op.name for op in operations}


def stable_group(broker, topic, group, protocol="classic"):
    """A consumer that has joined `group` and holds its partitions; close it when done."""
    consumer = clients.consumer(
        broker, group_id=group, group_protocol=protocol, auto_offset_reset="earliest"
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + T
    while not consumer.assignment():
        assert time.monotonic() < deadline, f"{group} got no assignment"
        consumer.poll(0.2)
    return consumer


def kafka_python_admin(broker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(T * 1000))


# ----- authorized operations -----------------------------------------------------------


def test_kafka_python_describe_cluster_gets_every_cluster_operation(broker):
    admin = kafka_python_admin(broker)
    try:
        assert set(admin.describe_cluster()["authorized_operations"]) == CLUSTER_OPERATIONS
    finally:
        admin.close()


def test_kafka_python_describe_topics_gets_every_topic_operation(broker):
    clients.create_topic(broker, "ops-topic")
    admin = kafka_python_admin(broker)
    try:
        [described] = admin.describe_topics(["ops-topic"])
        assert described["topic"] == "ops-topic"
        assert set(described["authorized_operations"]) == TOPIC_OPERATIONS
    finally:
        admin.close()


def test_kafka_python_describe_consumer_groups_gets_every_group_operation(broker):
    clients.create_topic(broker, "ops-topic")
    consumer = stable_group(broker, "ops-topic", "ops-group")
    admin = kafka_python_admin(broker)
    try:
        [described] = admin.describe_consumer_groups(["ops-group"])
        assert described.group == "ops-group" and described.state == "Stable"
        assert set(described.authorized_operations) == GROUP_OPERATIONS
    finally:
        admin.close()
        consumer.close()


def test_confluent_describe_cluster_and_topics_with_authorized_operations(broker):
    clients.create_topic(broker, "ops-topic")
    a = clients.admin(broker)
    cluster = a.describe_cluster(include_authorized_operations=True, request_timeout=T).result(timeout=T)
    assert names(cluster.authorized_operations) == CLUSTER_OPERATIONS
    topics = a.describe_topics(TopicCollection(["ops-topic"]), include_authorized_operations=True, request_timeout=T)
    assert names(topics["ops-topic"].result(timeout=T).authorized_operations) == TOPIC_OPERATIONS
    # Not asked: not provided, as Kafka answers.
    assert a.describe_cluster(request_timeout=T).result(timeout=T).authorized_operations is None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_confluent_describe_consumer_groups_with_authorized_operations(broker, protocol):
    """classic: DescribeGroups; consumer (KIP-848): ConsumerGroupDescribe."""
    clients.create_topic(broker, "ops-topic")
    group = f"ops-{protocol}"
    consumer = stable_group(broker, "ops-topic", group, protocol)
    try:
        a = clients.admin(broker)
        futures = a.describe_consumer_groups([group], include_authorized_operations=True, request_timeout=T)
        described = futures[group].result(timeout=T)
        assert described.group_id == group
        assert names(described.authorized_operations) == GROUP_OPERATIONS
        plain = a.describe_consumer_groups([group], request_timeout=T)[group].result(timeout=T)
        assert plain.authorized_operations is None
    finally:
        consumer.close()


# ----- ACLs without an authorizer ------------------------------------------------------

ANY_ACL = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
)


def failure(future):
    with pytest.raises(KafkaException) as e:
        future.result(timeout=T)
    return e.value.args[0]


def test_describe_acls_is_served_and_lists_nothing(broker):
    # Kafka answers SECURITY_DISABLED, which librdkafka reports as an empty list;
    # a broker that does not serve DescribeAcls fails the call instead.
    a = clients.admin(broker)  # must outlive the future: destroying it cancels the request
    assert a.describe_acls(ANY_ACL, request_timeout=T).result(timeout=T) == []


def test_create_acls_fails_with_security_disabled(broker):
    binding = AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    a = clients.admin(broker)
    [future] = a.create_acls([binding], request_timeout=T).values()
    error = failure(future)
    assert (error.code(), error.str()) == (SECURITY_DISABLED, "No Authorizer is configured.")


def test_delete_acls_fails_with_security_disabled(broker):
    a = clients.admin(broker)
    [future] = a.delete_acls([ANY_ACL], request_timeout=T).values()
    error = failure(future)
    assert (error.code(), error.str()) == (SECURITY_DISABLED, "No Authorizer is configured.")


# ----- ListOffsets: the largest timestamp ----------------------------------------------


def test_list_offsets_max_timestamp_is_the_record_holding_it_not_its_batch(broker):
    """librdkafka's 0081_admin: three records in one batch, the middle one the newest."""
    clients.create_topic(broker, "max-ts")
    base = int(time.time() * 1000) - 60_000
    timestamps = [base, base + 2000, base + 1000]
    p = clients.producer(broker, linger_ms=5000)
    for i, ts in enumerate(timestamps):
        p.produce("max-ts", value=b"v%d" % i, partition=0, timestamp=ts)
    assert p.flush(T) == 0
    with kafkawire.Conn(broker.host, broker.port) as c:
        _, [(_, _, _, _, records)] = kafkawire.parse_fetch_v4(c.roundtrip(kafkawire.fetch_v4(1, "max-ts", 0, 0)))
    assert [(b[0], b[2]) for b in kafkawire.parse_batches(records)] == [(0, 3)], "not one batch of three"

    a = clients.admin(broker)
    partition = TopicPartition("max-ts", 0)
    futures = a.list_offsets({partition: OffsetSpec.max_timestamp()}, request_timeout=T)
    found = futures[partition].result(timeout=T)
    assert (found.offset, found.timestamp) == (1, base + 2000)


def _deletion_refused(node, topic):
    """librdkafka's delete_topics of `topic`: the KafkaError it fails with (None if it
    succeeds)."""
    a = clients.admin(node)
    try:
        a.delete_topics([topic], request_timeout=30)[topic].result(timeout=60)
    except KafkaException as e:
        return e.args[0]
    return None


def test_delete_topic_enable_false_refuses_deletion_on_a_node_and_on_a_cluster(start_broker, tmp_path):
    """`delete.topic.enable=false`: DeleteTopics answers TOPIC_DELETION_DISABLED and the
    topic stays, on a single node (its handler) and on three combined nodes (the active
    controller decides the forwarded request)."""
    from confluent_kafka import KafkaError

    from cluster import combined, listed_brokers

    single = start_broker(overrides={"delete.topic.enable": "false"})
    clients.create_topic(single, "kept")
    refused = _deletion_refused(single, "kept")
    assert refused is not None and refused.code() == KafkaError.TOPIC_DELETION_DISABLED, refused
    assert "kept" in clients.admin(single).list_topics(timeout=30).topics

    (tmp_path / "cluster").mkdir()
    c = combined(tmp_path / "cluster", extra={"delete.topic.enable": "false"})
    try:
        c.start()
        want = {n.node_id for n in c.brokers}
        c.wait_for("every broker lists every broker", lambda: all(listed_brokers(n) == want for n in c.brokers))
        first = c.brokers[0]
        clients.create_topic(first, "kept")
        refused = _deletion_refused(c.brokers[1], "kept")
        assert refused is not None and refused.code() == KafkaError.TOPIC_DELETION_DISABLED, refused
        assert "kept" in clients.admin(first).list_topics(timeout=30).topics
        c.stop()
    finally:
        c.kill_all()
