"""Dynamic broker configs through librdkafka's AdminClient: the legacy AlterConfigs on a
broker replaces that broker's whole set of dynamic configs, IncrementalAlterConfigs can
APPEND to a list config, and a topic without overrides picks both up. librdkafka cannot
name the cluster-wide default (an empty broker name); kafka-configs.sh --entity-default
and the Java Admin do, in DynamicBrokerConfigsTest."""

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

import clients
import kafkawire as kw

T = clients.TIMEOUT_S


def describe(admin, resource_type, name) -> dict:
    res = ConfigResource(resource_type, name)
    return admin.describe_configs([res], request_timeout=T)[res].result(timeout=T)


def value_and_source(entry):
    return entry.value, ConfigSource(entry.source)


def error_code(future) -> int:
    with pytest.raises(KafkaException) as e:
        future.result(timeout=T)
    return e.value.args[0].code()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_configs_replaces_the_brokers_dynamic_set_and_topics_follow(broker):
    a = clients.admin(broker)
    clients.create_topic(broker, "follows-broker")
    first = ConfigResource(
        ResourceType.BROKER, "1", set_config={"log.retention.ms": "7200000", "log.segment.bytes": "2097152"}
    )
    assert a.alter_configs([first], request_timeout=T)[first].result(timeout=T) is None
    configs = describe(a, ResourceType.BROKER, "1")
    assert value_and_source(configs["log.retention.ms"]) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    topic = describe(a, ResourceType.TOPIC, "follows-broker")
    assert value_and_source(topic["retention.ms"]) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert value_and_source(topic["segment.bytes"]) == ("2097152", ConfigSource.DYNAMIC_BROKER_CONFIG)

    # The legacy form sets the whole set: log.retention.ms, left out, is deleted.
    second = ConfigResource(ResourceType.BROKER, "1", set_config={"log.segment.bytes": "3145728"})
    assert a.alter_configs([second], request_timeout=T)[second].result(timeout=T) is None
    topic = describe(a, ResourceType.TOPIC, "follows-broker")
    assert value_and_source(topic["retention.ms"]) == ("604800000", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(topic["segment.bytes"]) == ("3145728", ConfigSource.DYNAMIC_BROKER_CONFIG)

    # A key Kafka does not change at run time: INVALID_REQUEST, and nothing changes.
    static = ConfigResource(ResourceType.BROKER, "1", set_config={"num.partitions": "3"})
    assert error_code(a.alter_configs([static], request_timeout=T)[static]) == KafkaError.INVALID_REQUEST
    configs = describe(a, ResourceType.BROKER, "1")
    assert value_and_source(configs["log.segment.bytes"]) == ("3145728", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert value_and_source(configs["num.partitions"]) == ("1", ConfigSource.DEFAULT_CONFIG)


def test_incremental_append_to_the_brokers_cleanup_policy_reaches_topics(broker):
    a = clients.admin(broker)
    clients.create_topic(broker, "follows-append")
    append = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    assert a.incremental_alter_configs([append], request_timeout=T)[append].result(timeout=T) is None
    configs = describe(a, ResourceType.BROKER, "1")
    assert value_and_source(configs["log.cleanup.policy"]) == ("delete,compact", ConfigSource.DYNAMIC_BROKER_CONFIG)
    topic = describe(a, ResourceType.TOPIC, "follows-append")
    assert value_and_source(topic["cleanup.policy"]) == ("delete,compact", ConfigSource.DYNAMIC_BROKER_CONFIG)

    # APPEND to a config that is not a list is Kafka's INVALID_CONFIG.
    not_a_list = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)],
    )
    assert (
        error_code(a.incremental_alter_configs([not_a_list], request_timeout=T)[not_a_list])
        == KafkaError.INVALID_CONFIG
    )


def test_a_raised_max_connections_serves_more_connections_at_once(start_broker):
    """max.connections is dynamic in Kafka (cluster-wide): raised at run time, the
    broker accepts connections it would have left waiting in the listen backlog."""
    broker = start_broker({"max.connections": "3"})
    a = clients.admin(broker)
    raise_limit = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[ConfigEntry("max.connections", "20", incremental_operation=AlterConfigOpType.SET)],
    )
    assert a.incremental_alter_configs([raise_limit], request_timeout=T)[raise_limit].result(timeout=T) is None
    configs = describe(a, ResourceType.BROKER, "1")
    assert value_and_source(configs["max.connections"]) == ("20", ConfigSource.DYNAMIC_BROKER_CONFIG)
    # The admin client holds two of the slots; ten more are served side by side, where
    # the static limit of 3 would have served one and left the others waiting.
    conns = [kw.Conn(broker.host, broker.port) for _ in range(10)]
    try:
        for i, c in enumerate(conns):
            c.send(kw.api_versions_v0(i))
        for c in conns:
            assert kw.parse_api_versions_v0(c.recv_frame())[1] == 0
    finally:
        for c in conns:
            c.close()
