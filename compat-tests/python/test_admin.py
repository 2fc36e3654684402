"""The admin API through librdkafka's AdminClient, checked against Kafka's semantics:
CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs and DescribeCluster."""

import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

import clients

T = clients.TIMEOUT_S


def result(future):
    return future.result(timeout=T)


def error_code(future) -> int:
    with pytest.raises(KafkaException) as e:
        future.result(timeout=T)
    return e.value.args[0].code()


def topics(admin) -> dict:
    return admin.list_topics(timeout=T).topics


def describe_topic_configs(admin, topic) -> dict:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return result(admin.describe_configs([res], request_timeout=T)[res])


def value_and_source(entry):
    return entry.value, ConfigSource(entry.source)


# ----- CreateTopics / DeleteTopics ------------------------------------------------------


def test_create_topics_with_partitions_and_configs(broker):
    a = clients.admin(broker)
    fs = a.create_topics(
        [
            NewTopic("orders", num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"}),
            NewTopic("audit", num_partitions=1, replication_factor=1, config={"cleanup.policy": "compact"}),
        ],
        operation_timeout=10,
        request_timeout=T,
    )
    assert {name: result(f) for name, f in fs.items()} == {"orders": None, "audit": None}
    listed = topics(a)
    assert sorted(listed["orders"].partitions) == [0, 1, 2]
    assert sorted(listed["audit"].partitions) == [0]
    assert all(p.leader == 1 and p.replicas == [1] and p.isrs == [1] for p in listed["orders"].partitions.values())
    assert value_and_source(describe_topic_configs(a, "orders")["retention.ms"]) == (
        "3600000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
    )
    assert describe_topic_configs(a, "audit")["cleanup.policy"].value == "compact"


def test_create_topics_validate_only_creates_nothing(broker):
    a = clients.admin(broker)
    fs = a.create_topics(
        [NewTopic("dry-run", num_partitions=2, replication_factor=1)], validate_only=True, request_timeout=T
    )
    assert result(fs["dry-run"]) is None
    assert "dry-run" not in topics(a)
    # validate_only still validates: a bad config is refused.
    bad = a.create_topics(
        [NewTopic("dry-run", num_partitions=1, replication_factor=1, config={"retention.ms": "soon"})],
        validate_only=True,
        request_timeout=T,
    )
    assert error_code(bad["dry-run"]) == KafkaError.INVALID_CONFIG


def test_creating_an_existing_topic_fails_with_topic_already_exists(broker):
    a = clients.admin(broker)
    assert result(a.create_topics([NewTopic("twice", 2, 1)], request_timeout=T)["twice"]) is None
    assert error_code(a.create_topics([NewTopic("twice", 2, 1)], request_timeout=T)["twice"]) == (
        KafkaError.TOPIC_ALREADY_EXISTS
    )
    assert sorted(topics(a)["twice"].partitions) == [0, 1]


@pytest.mark.parametrize(
    "name",
    ["has space", "slash/in/name", "..", "x" * 250, "star*"],
    ids=["space", "slash", "dot-dot", "250-chars", "star"],
)
def test_invalid_topic_name_is_refused_with_invalid_topic_exception(broker, name):
    a = clients.admin(broker)
    assert error_code(a.create_topics([NewTopic(name, 1, 1)], request_timeout=T)[name]) == KafkaError.TOPIC_EXCEPTION
    assert name not in topics(a)


def test_create_topic_with_unknown_config_fails_with_invalid_config(broker):
    a = clients.admin(broker)
    fs = a.create_topics([NewTopic("bad-config", 1, 1, config={"no.such.config": "1"})], request_timeout=T)
    assert error_code(fs["bad-config"]) == KafkaError.INVALID_CONFIG
    assert "bad-config" not in topics(a)


def test_deleted_topic_is_gone_from_metadata_and_its_data_with_it(broker):
    a = clients.admin(broker)
    clients.create_topic(broker, "doomed", partitions=2)
    clients.create_topic(broker, "kept")
    p = clients.producer(broker, acks="all")
    clients.produce_all(p, "doomed", [{"value": b"x", "partition": 1}])
    assert result(a.delete_topics(["doomed"], operation_timeout=10, request_timeout=T)["doomed"]) is None
    listed = topics(a)
    assert "doomed" not in listed and "kept" in listed
    assert broker.partition_dirs("doomed") == []
    assert error_code(a.delete_topics(["doomed"], request_timeout=T)["doomed"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # The name can be used again, for a new, empty topic.
    clients.create_topic(broker, "doomed", partitions=1)
    c = clients.consumer(broker)
    try:
        assert c.get_watermark_offsets(TopicPartition("doomed", 0), timeout=T) == (0, 0)
    finally:
        c.close()


# ----- CreatePartitions -----------------------------------------------------------------


def test_create_partitions_adds_partitions_that_accept_messages(broker):
    a = clients.admin(broker)
    clients.create_topic(broker, "growing", partitions=1)
    fs = a.create_partitions([NewPartitions("growing", 3)], operation_timeout=10, request_timeout=T)
    assert result(fs["growing"]) is None
    assert sorted(topics(a)["growing"].partitions) == [0, 1, 2]
    p = clients.producer(broker, acks="all")
    reports = clients.produce_all(p, "growing", [{"value": b"new", "partition": 2}])
    assert [(r.error, r.partition, r.offset) for r in reports] == [(None, 2, 0)]
    # Fewer than there are: INVALID_PARTITIONS, nothing changes.
    shrink = a.create_partitions([NewPartitions("growing", 2)], request_timeout=T)
    assert error_code(shrink["growing"]) == KafkaError.INVALID_PARTITIONS
    assert sorted(topics(a)["growing"].partitions) == [0, 1, 2]


# ----- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs -------------------------


def test_describe_configs_of_a_topic_shows_defaults_and_overrides_with_sources(start_broker):
    broker = start_broker({"log.segment.bytes": 536870912})
    a = clients.admin(broker)
    clients.create_topic(broker, "described", config={"retention.ms": "7200000"})
    configs = describe_topic_configs(a, "described")
    assert value_and_source(configs["retention.ms"]) == ("7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    # From the broker's --override: the broker synonym log.segment.bytes, static.
    assert value_and_source(configs["segment.bytes"]) == ("536870912", ConfigSource.STATIC_BROKER_CONFIG)
    # Kafka's defaults.
    assert value_and_source(configs["cleanup.policy"]) == ("delete", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs["max.message.bytes"]) == ("1048588", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs["min.insync.replicas"]) == ("1", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs["message.timestamp.type"]) == ("CreateTime", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs["compression.type"]) == ("producer", ConfigSource.DEFAULT_CONFIG)
    assert configs["retention.ms"].is_default is False
    assert configs["cleanup.policy"].is_default is True


def test_describe_configs_of_the_broker_shows_defaults_and_overrides_with_sources(start_broker):
    broker = start_broker({"num.partitions": 3})
    a = clients.admin(broker)
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = result(a.describe_configs([res], request_timeout=T)[res])
    assert value_and_source(configs["num.partitions"]) == ("3", ConfigSource.STATIC_BROKER_CONFIG)
    assert value_and_source(configs["log.retention.hours"]) == ("168", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs["message.max.bytes"]) == ("1048588", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs["auto.create.topics.enable"]) == ("true", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs["default.replication.factor"]) == ("1", ConfigSource.DEFAULT_CONFIG)
    # The override takes effect, too: an auto-created topic gets 3 partitions.
    p = clients.producer(broker, acks="all")
    reports = clients.produce_all(p, "auto-created", [{"value": b"x"}])
    assert reports[0].error is None
    assert sorted(topics(a)["auto-created"].partitions) == [0, 1, 2]


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_replaces_the_topic_config_and_describe_shows_it(broker):
    a = clients.admin(broker)
    clients.create_topic(broker, "altered", config={"segment.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, "altered", set_config={"retention.ms": "1234567"})
    assert result(a.alter_configs([res], request_timeout=T)[res]) is None
    configs = describe_topic_configs(a, "altered")
    assert value_and_source(configs["retention.ms"]) == ("1234567", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    # AlterConfigs (not incremental) sets the whole set: what it leaves out reverts.
    assert value_and_source(configs["segment.ms"]) == ("604800000", ConfigSource.DEFAULT_CONFIG)


def test_incremental_alter_configs_sets_and_deletes_and_describe_shows_it(broker):
    a = clients.admin(broker)
    clients.create_topic(broker, "incremental", config={"segment.ms": "3600000"})
    res = ConfigResource(
        ResourceType.TOPIC,
        "incremental",
        incremental_configs=[ConfigEntry("retention.ms", "2345678", incremental_operation=AlterConfigOpType.SET)],
    )
    assert result(a.incremental_alter_configs([res], request_timeout=T)[res]) is None
    configs = describe_topic_configs(a, "incremental")
    assert value_and_source(configs["retention.ms"]) == ("2345678", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    # Incremental: what it does not name stays.
    assert value_and_source(configs["segment.ms"]) == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    delete = ConfigResource(
        ResourceType.TOPIC,
        "incremental",
        incremental_configs=[ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)],
    )
    assert result(a.incremental_alter_configs([delete], request_timeout=T)[delete]) is None
    configs = describe_topic_configs(a, "incremental")
    assert value_and_source(configs["retention.ms"]) == ("604800000", ConfigSource.DEFAULT_CONFIG)

    invalid = ConfigResource(
        ResourceType.TOPIC,
        "incremental",
        incremental_configs=[ConfigEntry("retention.ms", "forever", incremental_operation=AlterConfigOpType.SET)],
    )
    assert error_code(a.incremental_alter_configs([invalid], request_timeout=T)[invalid]) == KafkaError.INVALID_CONFIG


def test_altered_retention_survives_a_restart(broker):
    a = clients.admin(broker)
    clients.create_topic(broker, "persisted")
    res = ConfigResource(
        ResourceType.TOPIC,
        "persisted",
        incremental_configs=[ConfigEntry("retention.ms", "3456789", incremental_operation=AlterConfigOpType.SET)],
    )
    assert result(a.incremental_alter_configs([res], request_timeout=T)[res]) is None
    broker.restart()
    a = clients.admin(broker)
    configs = describe_topic_configs(a, "persisted")
    assert value_and_source(configs["retention.ms"]) == ("3456789", ConfigSource.DYNAMIC_TOPIC_CONFIG)


# ----- DescribeCluster ------------------------------------------------------------------


def test_describe_cluster_names_this_node_as_the_only_broker_and_controller(broker):
    a = clients.admin(broker)
    desc = result(a.describe_cluster(request_timeout=T))
    metadata = a.list_topics(timeout=T)
    assert desc.cluster_id == metadata.cluster_id
    assert desc.cluster_id and len(desc.cluster_id) == 22
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(1, broker.host, broker.port)]
    assert desc.controller is not None and desc.controller.id == 1


# ----- topic config changes take effect on the live log ---------------------------------


def test_altered_max_message_bytes_applies_to_the_next_produce(broker):
    topic = "alter-size"
    clients.create_topic(broker, topic)
    p = clients.producer(broker, acks="all", compression_type="none", retries=0)
    first = clients.produce_all(p, topic, [{"value": b"a" * 5000}])
    assert (first[0].error, first[0].offset) == (None, 0)
    a = clients.admin(broker)
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)],
    )
    assert result(a.incremental_alter_configs([res], request_timeout=T)[res]) is None
    refused = clients.produce_all(p, topic, [{"value": b"b" * 5000}])
    assert refused[0].error is not None and refused[0].error.code() == KafkaError.MSG_SIZE_TOO_LARGE, refused[0].error
    small = clients.produce_all(p, topic, [{"value": b"c" * 100}])
    assert (small[0].error, small[0].offset) == (None, 1)


def test_altered_timestamp_type_applies_to_the_next_produce(broker):
    topic = "alter-timestamps"
    clients.create_topic(broker, topic)
    p = clients.producer(broker, acks="all")
    old = int(time.time() * 1000) - 86_400_000
    before = clients.produce_all(p, topic, [{"value": b"1", "timestamp": old}])
    assert before[0].timestamp == (TIMESTAMP_CREATE_TIME, old)
    a = clients.admin(broker)
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert result(a.incremental_alter_configs([res], request_timeout=T)[res]) is None
    start = int(time.time() * 1000)
    after = clients.produce_all(p, topic, [{"value": b"2", "timestamp": old}])
    kind, ts = after[0].timestamp
    assert kind == TIMESTAMP_LOG_APPEND_TIME and ts >= start, after[0].timestamp
