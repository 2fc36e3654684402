"""Several client listeners (`listeners=INTERNAL://...,EXTERNAL://...`, each advertised,
as Docker and Kubernetes set Kafka up): a broker answers every request with the
endpoints of the listener it came in on (Kafka's `request.context.listenerName`), so a
client that bootstraps on EXTERNAL addresses is told EXTERNAL addresses only, and one on
INTERNAL addresses INTERNAL ones; replication goes over `inter.broker.listener.name`.

Checked with raw Metadata and FindCoordinator requests on each listener of each node,
and with a confluent-kafka producer and consumer group bootstrapped on the EXTERNAL
ports only: every broker they learn of, and connect to, is at an EXTERNAL port. Both
listeners are on 127.0.0.1, so a client sent to the wrong one would still work; the
ports it was given are what shows it. A 3-node cluster (combined nodes) and a single
node. Ports are free ones; every wait polls until true, no time is asserted.
"""

import json

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import clients
import kafkawire
from cluster import combined, listed_brokers
from conftest import Broker, free_port

# Starts three nodes and runs clients against them: more than compat-tests' 120 s.
pytestmark = pytest.mark.timeout(300)

HOST = "127.0.0.1"
MESSAGES = 30


def listener_keys(internal: int, external: int, controller=None) -> dict:
    """INTERNAL and EXTERNAL client listeners on these ports, both advertised as bound,
    INTERNAL first (the one answers used to fall back to) and the inter-broker one."""
    client = f"INTERNAL://{HOST}:{internal},EXTERNAL://{HOST}:{external}"
    keys = {
        "listeners": client if controller is None else f"{client},CONTROLLER://{HOST}:{controller}",
        "advertised.listeners": client,
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
    }
    return keys


@pytest.fixture
def cluster(tmp_path, request):
    """Combined nodes 1-3, each with INTERNAL (`node.port`, which cluster.py's helpers
    ask) and EXTERNAL (`node.external_port`) client listeners."""
    c = combined(tmp_path)
    for n in c.nodes:
        n.external_port = free_port()
        n.write_config(c.voters, listener_keys(n.port, n.external_port, n.controller_port))
    request.node._osprey_brokers = c.nodes  # their logs in a failure's report
    try:
        c.start()
        want = {n.node_id for n in c.brokers}
        c.wait_for(f"every broker lists brokers {sorted(want)}",
                   lambda: all(listed_brokers(n) == want for n in c.brokers))
        yield c
        c.stop()
    finally:
        c.kill_all()


@pytest.fixture
def single_node(tmp_path, request):
    """A single node (no controller.quorum.voters) with INTERNAL (`broker.port`, which
    its readiness check asks) and EXTERNAL (`broker.external_port`) client listeners."""
    b = Broker(tmp_path / "broker")
    b.workdir.mkdir(parents=True)
    b.external_port = free_port()
    b.overrides.update(listener_keys(b.port, b.external_port))
    request.node._osprey_brokers = [b]
    try:
        yield b.start()
        b.stop()
    finally:
        if b.proc is not None:
            b.kill9()


def metadata_endpoints(port: int):
    """{broker id: (host, port)} of a Metadata v1 answer from HOST:port."""
    with kafkawire.Conn(HOST, port, timeout=10.0) as c:
        correlation_id, brokers, _controller, _topics = kafkawire.parse_metadata_v1(
            c.roundtrip(kafkawire.metadata_v1(1)))
    assert correlation_id == 1
    return brokers


def group_coordinator(port: int, group: str):
    """(node id, host, port) of the group's coordinator from HOST:port, or None while it
    answers an error (`__consumer_offsets` being created, its leaders being elected)."""
    with kafkawire.Conn(HOST, port, timeout=10.0) as c:
        correlation_id, error_code, node = kafkawire.parse_find_coordinator_v1_node(
            c.roundtrip(kafkawire.find_coordinator_v1(2, group, 0)))
    assert correlation_id == 2
    return node if error_code == kafkawire.NONE else None


class Stats:
    """Every broker address a client knew of, from librdkafka's statistics: the
    brokers it learned from Metadata and the coordinator it was sent to, connected or not."""

    def __init__(self):
        self.addresses = set()
        self.rounds = 0

    def config(self) -> dict:
        return {"statistics.interval.ms": 200, "stats_cb": self.record}

    def record(self, text: str):
        self.rounds += 1
        for b in json.loads(text)["brokers"].values():
            if b.get("nodename"):
                host, port = b["nodename"].rsplit(":", 1)
                self.addresses.add((host, int(port)))


def produce_and_consume_on(bootstrap_ports, replication_factor: int) -> set:
    """A topic created, produced to (acks=all) and read back by a consumer group, every
    client bootstrapped on `bootstrap_ports` only; returns the (host, port) of every
    broker the clients knew of."""
    bootstrap = ",".join(f"{HOST}:{p}" for p in bootstrap_ports)
    stats = Stats()
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": bootstrap}, **stats.config()))
    topic = "listeners"
    admin.create_topics([NewTopic(topic, 3, replication_factor)], operation_timeout=30,
                        request_timeout=60)[topic].result(timeout=90)

    producer = Producer(dict(clients.COMMON, **{"bootstrap.servers": bootstrap, "acks": "all",
                                                "message.timeout.ms": 60000}, **stats.config()))
    values = [f"m-{i}".encode() for i in range(MESSAGES)]
    reports = clients.produce_all(producer, topic, [{"value": v} for v in values])
    assert [r.error for r in reports if r.error] == []

    # A group: FindCoordinator, then the coordinator's JoinGroup, SyncGroup and OffsetFetch.
    consumer = Consumer(dict(clients.COMMON, **{"bootstrap.servers": bootstrap, "group.id": "listeners-group",
                                                "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100},
                             **stats.config()))
    try:
        consumer.subscribe([topic])
        got = clients.consume_exactly(consumer, MESSAGES, timeout=90.0)
        assert sorted(m.value() for m in got) == sorted(values)
        consumer.commit(asynchronous=False)
        # A few more statistics rounds of every client, so that what each knows at the
        # end is counted.
        until = stats.rounds + 9
        while stats.rounds < until:
            consumer.poll(0.1)
            producer.poll(0)
            admin.poll(0)
    finally:
        consumer.close()
    return stats.addresses


def test_a_cluster_answers_each_client_with_the_listener_it_came_in_on(cluster):
    internal = {n.node_id: (HOST, n.port) for n in cluster.brokers}
    external = {n.node_id: (HOST, n.external_port) for n in cluster.brokers}
    for n in cluster.brokers:
        assert metadata_endpoints(n.port) == internal, f"Metadata on {n}'s INTERNAL listener"
        assert metadata_endpoints(n.external_port) == external, f"Metadata on {n}'s EXTERNAL listener"

    for n in cluster.brokers:
        node, host, port = cluster.wait_for(f"the group coordinator through {n}'s EXTERNAL listener",
                                            lambda n=n: group_coordinator(n.external_port, "g"))
        assert (host, port) == external[node], f"FindCoordinator on {n}'s EXTERNAL listener"
        node, host, port = cluster.wait_for(f"the group coordinator through {n}'s INTERNAL listener",
                                            lambda n=n: group_coordinator(n.port, "g"))
        assert (host, port) == internal[node], f"FindCoordinator on {n}'s INTERNAL listener"

    known = produce_and_consume_on([n.external_port for n in cluster.brokers], replication_factor=3)
    assert known == set(external.values()), f"EXTERNAL {sorted(external.values())}, clients knew {sorted(known)}"


def test_a_single_node_answers_with_its_endpoint_on_the_listener_asked(single_node):
    b = single_node
    for port in (b.port, b.external_port):
        assert metadata_endpoints(port) == {1: (HOST, port)}
        assert group_coordinator(port, "g") == (1, HOST, port)
    known = produce_and_consume_on([b.external_port], replication_factor=1)
    assert known == {(HOST, b.external_port)}
