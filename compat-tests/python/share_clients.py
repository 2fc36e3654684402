"""What the share-group tests (test_share_groups.py, test_share_dlq.py,
test_share_cluster.py) have in common: the broker under test, and confluent-kafka's
`ShareConsumer` acknowledging explicitly (each record ACCEPT, RELEASE or REJECT, each
poll's acknowledgements committed with `commit_sync`, whose per-partition results must
all be successes).

The broker under test (`start_target`) is a new osprey broker for each test (conftest's
`start_broker`), or with `COMPAT_CLUSTER=kafka` a Kafka 4.4 node of the module
(`KafkaNodes`): one per set of broker configs the module's tests ask for, started by the
first test that asks and shared by the others, which shows that what the tests assert is
what Kafka does.

"Never delivered again" is checked without waiting on a clock: a new record (the
sentinel) is produced after the ones in question, and a consumer polls until it receives
the sentinel. A share partition hands out the records available to it from its lowest
offset up, and a consumer that closes gives back what it acquired, so a record wrongly
available again comes before the sentinel. Every wait polls against a deadline.
"""

import contextlib
import time
from collections import Counter

from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import clients
from cluster import WAIT_S, listed_brokers, skip_without_kafka_tools
from kafka_cluster import KafkaNode, against_kafka, single_kafka

# How long a test waits for deliveries that must come.
DELIVERY_WAIT_S = 60.0
# How long a consumer keeps polling after what it waited for, for anything extra.
SETTLE_S = 1.0
POLL_S = 0.2


# ----- the broker under test --------------------------------------------------------------


class KafkaNodes:
    """A test module's Kafka 4.4 nodes: one single node (`kafka_cluster.single_kafka`,
    `features` finalized when its directory is formatted) per set of broker configs,
    started when a test first asks for it."""

    def __init__(self, tmp_path_factory, features: dict):
        self.tmp_path_factory = tmp_path_factory
        self.features = dict(features)
        self.clusters = {}

    def node(self, config: dict) -> KafkaNode:
        key = tuple(sorted((k, str(v)) for k, v in config.items()))
        if key not in self.clusters:
            cluster = single_kafka(self.tmp_path_factory.mktemp("kafka"), config, features=self.features)
            self.clusters[key] = cluster
            cluster.start()
            wait_ready(cluster.nodes[0])
        return self.clusters[key].nodes[0]

    def kill_all(self):
        for cluster in self.clusters.values():
            cluster.kill_all()


@contextlib.contextmanager
def kafka_nodes(tmp_path_factory, features: dict):
    """For a module-scoped fixture: the module's `KafkaNodes` with COMPAT_CLUSTER=kafka
    (the test skipped, visibly, without Kafka's jars), else None; killed at the end."""
    if not against_kafka():
        yield None
        return
    skip_without_kafka_tools()
    nodes = KafkaNodes(tmp_path_factory, features)
    try:
        yield nodes
    finally:
        nodes.kill_all()


def start_target(request, nodes, config: dict):
    """What the test's clients bootstrap from (`.bootstrap`), with the broker configs
    `config`: a new osprey broker (keys of osprey's own, kafka_cluster.OSPREY_ONLY, are
    left out for Kafka), or the Kafka node of `nodes` (a `KafkaNodes`) for `config`."""
    if nodes is not None:
        node = nodes.node(config)
        request.node._osprey_brokers = [node]  # its log in a failure's report
        return node
    return request.getfixturevalue("start_broker")(config)


def wait_ready(node: KafkaNode):
    """Until the Kafka node lists itself as the only broker in its Metadata."""
    deadline = time.monotonic() + 3 * WAIT_S
    while listed_brokers(node) != {node.node_id}:
        assert node.exited() is None, f"Kafka exited with {node.exited()}:\n{node.log_tail()}"
        check_deadline(deadline, lambda: f"Kafka not serving Metadata after {3 * WAIT_S}s:\n{node.log_tail()}")
        time.sleep(0.5)


# ----- share consumers ------------------------------------------------------------------


def check_deadline(deadline: float, what):
    """Fails with the message `what()` once time.monotonic() is past `deadline`."""
    if time.monotonic() > deadline:
        raise AssertionError(what())


def set_group_configs(target, group: str, configs: dict):
    """IncrementalAlterConfigs SET on the GROUP resource, then DescribeConfigs until the
    broker reports every value (Kafka applies a group config after answering the change,
    and a share partition initialised meanwhile would use the old value)."""
    a = clients.admin(target)
    entries = [ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    a.incremental_alter_configs([resource], request_timeout=clients.TIMEOUT_S)[resource].result(timeout=clients.TIMEOUT_S)
    want = {k: str(v) for k, v in configs.items()}
    deadline = time.monotonic() + WAIT_S
    while True:
        got = group_configs(target, group)
        if all(got.get(k) == v for k, v in want.items()):
            return
        check_deadline(deadline, lambda: f"group {group} configs {want} not applied within {WAIT_S}s: {got}")
        time.sleep(0.1)


def group_configs(target, group: str) -> dict:
    a = clients.admin(target)
    resource = ConfigResource(ResourceType.GROUP, group)
    described = a.describe_configs([resource], request_timeout=clients.TIMEOUT_S)[resource].result(timeout=clients.TIMEOUT_S)
    return {name: entry.value for name, entry in described.items()}


def produce(target, topic: str, values) -> dict:
    """Produces one record per value (keys and values the value's text), in batches of
    at most 20 records so that a share fetch can take a few without taking them all;
    returns {offset: value}."""
    p = clients.producer(target, acks="all", batch_num_messages=20)
    reports = clients.produce_all(p, topic, [{"key": str(v).encode(), "value": str(v).encode()} for v in values])
    assert [r.error for r in reports] == [None] * len(reports)
    return {r.offset: r.value for r in reports}


def share_consumer(target, group: str, topic: str) -> ShareConsumer:
    """A member of `group` subscribed to `topic`, acknowledging explicitly, at most about
    20 records a poll (a soft limit: whole batches are acquired)."""
    conf = dict(
        clients.COMMON,
        **{
            "bootstrap.servers": target.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": 20,
        },
    )
    c = ShareConsumer(conf)
    c.subscribe([topic])
    return c


def poll(c: ShareConsumer, timeout: float = POLL_S) -> list:
    """One poll's records; a record carrying an error fails the test."""
    batch = list(c.poll(timeout))
    errors = [m.error() for m in batch if m.error() is not None]
    assert not errors, f"share consumer errors: {errors}"
    return batch


def commit(c: ShareConsumer):
    """commit_sync of what was acknowledged; every partition's result must be a success."""
    results = c.commit_sync(clients.TIMEOUT_S)
    failed = {f"{tp.topic}[{tp.partition}]": str(e) for tp, e in results.items() if e is not None}
    assert not failed, f"acknowledgements refused: {failed}"


class Deliveries:
    """Every record a test's consumers were given: (consumer, offset, delivery count,
    value), in the order they were given."""

    def __init__(self):
        self.log = []

    def add(self, who, m):
        count = m.delivery_count()
        assert count is not None and count >= 1, f"offset {m.offset()}: delivery count {count}"
        self.log.append((who, m.offset(), count, m.value()))

    def counts_of(self, offset: int) -> list:
        return [count for _, o, count, _ in self.log if o == offset]

    def offsets(self) -> Counter:
        return Counter(o for _, o, _, _ in self.log)


def consume(c: ShareConsumer, decide, until, what: str, deliveries: Deliveries, who=0):
    """Polls `c`, acknowledging each record as `decide(message)` says (and recording it in
    `deliveries`) and committing each poll's acknowledgements, until `until()`; fails
    after DELIVERY_WAIT_S."""
    deadline = time.monotonic() + DELIVERY_WAIT_S
    while not until():
        check_deadline(deadline, lambda: f"not within {DELIVERY_WAIT_S}s: {what}; deliveries: {deliveries.log}")
        batch = poll(c)
        for m in batch:
            deliveries.add(who, m)
            c.acknowledge(m, decide(m))
        if batch:
            commit(c)


def assert_nothing_more_delivered(target, group: str, topic: str, consumer: ShareConsumer = None):
    """Produces a sentinel record and polls `consumer` (else a new member of `group`,
    closed afterwards) until it arrives and SETTLE_S more, accepting everything: the
    sentinel must be all it receives."""
    sentinel = max(produce(target, topic, ["sentinel"]))
    c = consumer or share_consumer(target, group, topic)
    try:
        extra = Deliveries()
        consume(c, lambda m: AcknowledgeType.ACCEPT, lambda: sentinel in extra.offsets(), "the sentinel", extra)
        end = time.monotonic() + SETTLE_S
        while time.monotonic() < end:
            batch = poll(c)
            for m in batch:
                extra.add(0, m)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if batch:
                commit(c)
        assert [(o, n) for _, o, n, _ in extra.log] == [(sentinel, 1)], "records delivered again before the sentinel"
    finally:
        if consumer is None:
            c.close()


def until_every_record_and_consumer(produced, consumers, deliveries, more, step, wait_s=DELIVERY_WAIT_S):
    """Runs `step(who, consumer)` for each consumer, round after round, until every record
    of `produced` ({offset: value}) is among `deliveries` (its `.log` and `.offsets()`) and
    every consumer got some. When the records all went to the consumers that joined first,
    `more(n)` produces more (from value n on) for the others and they join `produced`.
    Fails after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        delivered_to = {who for who, _, _, _ in deliveries.log}
        if set(deliveries.offsets()) >= set(produced) and len(delivered_to) == len(consumers):
            return
        check_deadline(deadline, lambda: (
            f"not within {wait_s}s: {len(set(deliveries.offsets()) & set(produced))} of "
            f"{len(produced)} records delivered, to consumers {sorted(delivered_to)} of 0-{len(consumers) - 1}"))
        if set(deliveries.offsets()) >= set(produced):
            produced.update(more(len(produced)))
        for who, c in enumerate(consumers):
            step(who, c)
