"""Creating many partitions (issue 12, items 4 and 5): large CreateTopics requests do not
stop the broker answering others, Kafka's per-request limit and osprey's cluster-wide limit
refuse with POLICY_VIOLATION, and SIGTERM or kill -9 in the middle of a creation leaves a
broker that restarts with the whole topic."""

import os
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

import clients
import kafkawire

T = clients.TIMEOUT_S
# Enough partition logs that creating them takes far longer than a few round trips
# on another connection, even on a fast disk.
MANY = 1000


def start_creation(admin, name, partitions):
    futures = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=300, operation_timeout=300)
    return futures[name]


def error_code(future) -> int:
    with pytest.raises(KafkaException) as e:
        future.result(timeout=T)
    return e.value.args[0].code()


def produce_one(broker, topic, partition, correlation_id):
    """A raw Produce v3 on a new connection; returns its error code."""
    batch = kafkawire.record_batch([(b"k", b"v")])
    with kafkawire.Conn(broker.host, broker.port, timeout=T) as c:
        frame = c.roundtrip(kafkawire.produce_v3(correlation_id, topic, partition, batch))
    _, results = kafkawire.parse_produce_v3(frame)
    return results[0][2]


def wait_for_some_dirs(broker, topic, future):
    """Until the creation has visibly started writing partition logs (and not finished)."""
    deadline = time.monotonic() + T
    while not broker.partition_dirs(topic):
        assert time.monotonic() < deadline, "the creation never started"
        assert not future.done(), f"the creation of {topic} finished before it could be observed"
        time.sleep(0.01)


def test_other_connections_are_answered_while_large_create_topics_run(broker):
    clients.create_topic(broker, "other")
    assert produce_one(broker, "other", 0, 1) == 0
    # One creation per async worker thread (tokio starts one per CPU), each from its own
    # client: had creations run on those threads, none would be left to answer others.
    count = max(2, os.cpu_count() or 2)
    per_topic = max(250, 2 * MANY // count)
    admins = [clients.admin(broker) for _ in range(count)]
    creating = {f"big{i}": start_creation(a, f"big{i}", per_topic) for i, a in enumerate(admins)}
    for name, future in creating.items():
        wait_for_some_dirs(broker, name, future)
    # A new connection's ApiVersions, another client's Metadata and a produce to another
    # topic, each answered while no CreateTopics has been: none waits for a creation.
    with kafkawire.Conn(broker.host, broker.port, timeout=T) as c:
        correlation_id, error, _ = kafkawire.parse_api_versions_v0(c.roundtrip(kafkawire.api_versions_v0(2)))
    assert (correlation_id, error) == (2, 0)
    # Another client: one connection answers in request order, so a creating client's
    # own Metadata would rightly wait behind its CreateTopics.
    assert "other" in clients.admin(broker).list_topics(topic="other", timeout=T).topics
    assert produce_one(broker, "other", 0, 3) == 0
    answered = [name for name, future in creating.items() if future.done()]
    assert not answered, f"CreateTopics for {answered} answered before the requests sent after them"
    for future in creating.values():
        future.result(timeout=300)
    md = admins[0].list_topics(timeout=T).topics
    assert all(len(md[name].partitions) == per_topic for name in creating)
    assert produce_one(broker, "big0", per_topic - 1, 4) == 0


def test_create_topics_over_ten_thousand_partitions_is_refused_whole_even_validate_only(broker):
    admin = clients.admin(broker)
    # 6,000 + 5,000: each topic alone would do, the request as a whole is over Kafka's cap.
    for validate_only in (True, False):
        futures = admin.create_topics(
            [NewTopic("a", 6000, 1), NewTopic("b", 5000, 1)], validate_only=validate_only, request_timeout=T
        )
        for name in ("a", "b"):
            with pytest.raises(KafkaException) as e:
                futures[name].result(timeout=T)
            assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
            assert "Excessively large number of partitions per request" in e.value.args[0].str()
    assert not {"a", "b"} & set(admin.list_topics(timeout=T).topics)
    # Exactly the cap is allowed.
    ok = admin.create_topics([NewTopic("c", 10_000, 1)], validate_only=True, request_timeout=T)
    ok["c"].result(timeout=T)


def test_cluster_wide_partition_limit_refuses_with_policy_violation(start_broker):
    broker = start_broker({"osprey.max.partitions": "20"})
    admin = clients.admin(broker)
    clients.create_topic(broker, "a", partitions=15)
    refused = admin.create_topics([NewTopic("b", 6, 1)], request_timeout=T)["b"]
    with pytest.raises(KafkaException) as e:
        refused.result(timeout=T)
    assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "osprey.max.partitions (20)" in e.value.args[0].str()
    grow = admin.create_partitions([NewPartitions("a", 21)], request_timeout=T)["a"]
    assert error_code(grow) == KafkaError.POLICY_VIOLATION
    clients.create_topic(broker, "b", partitions=5)
    topics = admin.list_topics(timeout=T).topics
    assert (len(topics["a"].partitions), len(topics["b"].partitions)) == (15, 5)


def test_sigterm_during_a_large_creation_exits_cleanly_and_the_restart_serves_the_whole_topic(broker):
    admin = clients.admin(broker)
    creating = start_creation(admin, "big", MANY)
    wait_for_some_dirs(broker, "big", creating)
    broker.stop()  # SIGTERM: exit code 0 within the fixture's bound, asserted there
    assert len(broker.partition_dirs("big")) < MANY, "SIGTERM waited for the whole creation"
    broker.start()
    assert_whole_topic(broker, "big", MANY)


def test_kill9_during_a_large_creation_restarts_with_the_whole_topic(broker):
    admin = clients.admin(broker)
    creating = start_creation(admin, "big", MANY)
    wait_for_some_dirs(broker, "big", creating)
    broker.kill9()
    broker.start()
    assert_whole_topic(broker, "big", MANY)


def assert_whole_topic(broker, topic, partitions):
    """Metadata lists every partition with a leader, each has its log, and each accepts
    a produce: no half topic served."""
    md = clients.admin(broker).list_topics(topic=topic, timeout=T).topics[topic]
    assert len(md.partitions) == partitions
    assert all(p.leader == 1 for p in md.partitions.values())
    assert len(broker.partition_dirs(topic)) == partitions
    for i, partition in enumerate((0, partitions // 2, partitions - 1)):
        assert produce_one(broker, topic, partition, 10 + i) == 0


def delete_dirs(broker, topic):
    """The directories of `topic`'s partitions being deleted (`<topic>-<n>.<id>-delete`)."""
    return [p for p in broker.data_dir.iterdir() if p.name.startswith(f"{topic}-") and p.name.endswith("-delete")]


def test_kill9_during_a_large_delete_restarts_with_the_topic_gone_and_nothing_of_it_loaded(broker):
    admin = clients.admin(broker)
    start_creation(admin, "big", MANY).result(timeout=300)
    for i, partition in enumerate((0, MANY // 2, MANY - 1)):
        assert produce_one(broker, "big", partition, 10 + i) == 0
    deleting = admin.delete_topics(["big"], request_timeout=300, operation_timeout=300)["big"]
    # The first directory renamed for deletion: the delete is durable in the metadata log
    # by then, and the renames and removals are under way.
    deadline = time.monotonic() + T
    while not delete_dirs(broker, "big"):
        assert time.monotonic() < deadline, "no partition directory was renamed for deletion"
        assert not (deleting.done() and not broker.partition_dirs("big")), "the delete finished before it could be observed"
        time.sleep(0.005)
    broker.kill9()
    left = len(broker.partition_dirs("big")) + len(delete_dirs(broker, "big"))
    broker.start()
    assert "big" not in admin_topics(broker), "the deleted topic came back"
    deadline = time.monotonic() + T
    while broker.partition_dirs("big") or delete_dirs(broker, "big"):
        assert time.monotonic() < deadline, f"{len(delete_dirs(broker, 'big'))} delete directories never removed"
        time.sleep(0.05)
    # Re-created under the name, the topic starts empty: nothing adopted from the old one.
    clients.create_topic(broker, "big", partitions=MANY)
    c = clients.consumer(broker)
    try:
        for partition in (0, MANY // 2, MANY - 1):
            assert c.get_watermark_offsets(TopicPartition("big", partition), timeout=T) == (0, 0)
    finally:
        c.close()
    assert left > 0, "the kill came after the whole delete: nothing was left to clean up"


def admin_topics(broker):
    return clients.admin(broker).list_topics(timeout=T).topics
