"""ACLs and the authorizer (issue 18), driven by real clients over real sockets.

The broker runs Kafka's StandardAuthorizer settings (`authorizer.class.name`,
`super.users`) with a PLAINTEXT listener, whose clients are User:ANONYMOUS (a super user
here: the tests' administrator, as brokers are for each other), and a SASL_PLAINTEXT one
where alice logs in with PLAIN (test_sasl's users). ACLs are managed with Kafka 4.4's
`kafka-acls.sh` (AclCommand) or librdkafka's admin client.

- without `authorizer.class.name`, kafka-acls.sh reports that no authorizer is configured;
- for each of topic, group, cluster and transactional id, alice is refused with Kafka's
  error by librdkafka (and the Java client for topics), and allowed once the ACL exists;
- a deny overrides an allow; a prefixed ACL covers the names it starts; Metadata hides
  the topics alice may not describe;
- `kafka-acls.sh --list` and `--remove` work, and ACLs survive a restart;
- on three combined nodes, an ACL created through one broker is enforced on another,
  and topics still replicate with the authorizer on.
- a controller authorizes its listener: CLUSTER_ACTION for envelopes, brokers' APIs and
  quorum RPCs, the broker's rules for admin requests sent straight to it;
- an incremental fetch session's partitions are checked on every fetch, and a KIP-848
  regex subscription resolves to the topics the member may describe;
- kafka-python's admin client speaks the ACL APIs at v1, and ACLs survive a kill -9.

Ports are free ones; every wait polls until true.
"""

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from cluster import skip_without_kafka_tools
from conftest import free_port
from test_sasl import HOST, WAIT_S, java_sasl_properties, rdkafka_sasl, start_sasl  # noqa: F401 (fixture)
from test_tls import java, metric

pytestmark = pytest.mark.timeout(300)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER = {
    "authorizer.class.name": STANDARD_AUTHORIZER,
    # User:ANONYMOUS: the PLAINTEXT listener's clients, the tests' administrator.
    "super.users": "User:admin;User:ANONYMOUS",
}
ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)


@pytest.fixture
def start_acl(start_sasl):
    def start(overrides=None):
        return start_sasl(mechanisms="PLAIN", overrides=dict(AUTHORIZER, **(overrides or {})))

    return start


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kafka_acls(broker, *args: str):
    """kafka-acls.sh (Kafka 4.4's AclCommand) as the administrator, over PLAINTEXT."""
    return java("org.apache.kafka.tools.AclCommand", "--bootstrap-server", broker.bootstrap, *args)


def add_acl(broker, *args: str):
    done = kafka_acls(broker, "--add", "--force", *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def create_topic(broker, topic: str, partitions: int = 1, replication_factor: int = 1):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replication_factor)])[topic].result(timeout=WAIT_S)


def alice(broker, **extra) -> dict:
    return rdkafka_sasl(broker, **extra)


def produce_one(config: dict, topic: str):
    """Produces one record; the delivery error (a KafkaError) or None."""
    outcome = []
    p = Producer(dict(config, **{"message.timeout.ms": 15000}))
    p.produce(topic, value=b"v", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(WAIT_S)
    assert outcome, "no delivery report"
    return outcome[0]


def consume_one(config: dict, topic: str, group: str):
    """Polls a consumer of `group` subscribed to `topic` until a record or an error
    arrives; the record's value or the KafkaError."""
    errors = []
    c = Consumer(dict(config, **{"group.id": group, "auto.offset.reset": "earliest",
                                 "error_cb": errors.append}))
    c.subscribe([topic])
    try:
        for _ in range(int(WAIT_S / 0.5)):
            m = c.poll(0.5)
            if m is not None:
                return m.error() if m.error() else m.value()
            if errors:
                return errors[0]
    finally:
        c.close()
    return None


def code(outcome) -> int:
    return outcome.code() if isinstance(outcome, KafkaError) else None


def visible_topics(config: dict) -> set:
    return set(AdminClient(config).list_topics(timeout=WAIT_S).topics)


# ----- without an authorizer ------------------------------------------------------------


def test_without_an_authorizer_kafka_acls_says_none_is_configured(start_sasl):
    skip_without_kafka_tools()
    broker = start_sasl(mechanisms="PLAIN")
    listed = kafka_acls(broker, "--list")
    out = listed.stdout + listed.stderr
    assert "No Authorizer is configured" in out or "SecurityDisabledException" in out, out[-3000:]
    # Everything is allowed: alice produces to a topic nobody granted her.
    topic = unique("open")
    create_topic(broker, topic)
    assert produce_one(alice(broker), topic) is None


# ----- topics -----------------------------------------------------------------------------


def test_topic_write_and_read_are_refused_until_the_acls_exist(start_acl, tmp_path):
    skip_without_kafka_tools()
    broker = start_acl()
    topic = unique("orders")
    create_topic(broker, topic)
    assert produce_one({"bootstrap.servers": broker.bootstrap}, topic) is None

    # No ACL: Metadata hides the topic, and a produce is refused.
    assert topic not in visible_topics(alice(broker))
    assert code(produce_one(alice(broker), topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The Java client too.
    props = java_sasl_properties(tmp_path / "alice.properties", "PLAIN", "alice", "alice-secret")
    produced = java("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", "1",
                    "--record-size", "10", "--throughput", "-1", "--producer.config", props,
                    "--producer-props", f"bootstrap.servers={broker.sasl_bootstrap}", "max.block.ms=20000")
    out = produced.stdout + produced.stderr
    assert "TopicAuthorizationException" in out or "Not authorized to access topics" in out, out[-3000:]
    # The clients were refused at Metadata (DESCRIBE, which WRITE would imply) before any
    # Produce.
    assert metric(broker, "osprey_authorization_failures_total", resource_type="TOPIC", operation="DESCRIBE") >= 1

    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic)
    # WRITE implies DESCRIBE: the topic is visible now.
    assert topic in visible_topics(alice(broker))
    assert produce_one(alice(broker), topic) is None

    # Reading needs READ on the topic and on the group.
    group = unique("readers")
    assert code(consume_one(alice(broker), topic, group)) in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                                                KafkaError.TOPIC_AUTHORIZATION_FAILED)
    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic,
            "--group", group)
    assert consume_one(alice(broker), topic, group) == b"v"


def test_a_deny_overrides_an_allow(start_acl):
    skip_without_kafka_tools()
    broker = start_acl()
    topic = unique("denied")
    create_topic(broker, topic)
    add_acl(broker, "--allow-principal", "User:*", "--operation", "All", "--topic", topic)
    assert produce_one(alice(broker), topic) is None
    add_acl(broker, "--deny-principal", "User:alice", "--operation", "Write", "--topic", topic)
    assert code(produce_one(alice(broker), topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The deny names WRITE only: the topic is still described.
    assert topic in visible_topics(alice(broker))


def test_a_prefixed_acl_covers_the_names_it_starts(start_acl):
    skip_without_kafka_tools()
    broker = start_acl()
    prefix = unique("eu") + "-"
    inside, outside = prefix + "orders", unique("us")
    for t in (inside, outside):
        create_topic(broker, t)
    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Write", "--topic", prefix,
            "--resource-pattern-type", "prefixed")
    assert produce_one(alice(broker), inside) is None
    assert code(produce_one(alice(broker), outside)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # An idempotent producer's InitProducerId is allowed by WRITE on some topic (here a
    # prefixed one), as in Kafka 3+, without IDEMPOTENT_WRITE on the cluster.
    assert produce_one(alice(broker, **{"enable.idempotence": True}), inside) is None
    seen = visible_topics(alice(broker))
    assert inside in seen and outside not in seen


# ----- groups, cluster, transactional ids ---------------------------------------------------


def test_a_group_is_refused_until_alice_may_read_it(start_acl):
    skip_without_kafka_tools()
    broker = start_acl()
    topic, group = unique("g-topic"), unique("group")
    create_topic(broker, topic)
    assert produce_one({"bootstrap.servers": broker.bootstrap}, topic) is None
    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    assert code(consume_one(alice(broker), topic, group)) == KafkaError.GROUP_AUTHORIZATION_FAILED
    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Read", "--group", group)
    assert consume_one(alice(broker), topic, group) == b"v"


def test_creating_topics_and_listing_acls_need_the_cluster(start_acl, tmp_path):
    skip_without_kafka_tools()
    broker = start_acl()
    admin = AdminClient(alice(broker))
    first = unique("made")
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic(first, 1, 1)])[first].result(timeout=WAIT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # DescribeAcls needs DESCRIBE on the cluster (asked with the Java client: librdkafka
    # 2.x reports DescribeAcls's top-level error as an empty list).
    props = java_sasl_properties(tmp_path / "alice.properties", "PLAIN", "alice", "alice-secret")
    listed = java("org.apache.kafka.tools.AclCommand", "--bootstrap-server", broker.sasl_bootstrap,
                  "--command-config", props, "--list")
    assert "ClusterAuthorizationException" in listed.stdout + listed.stderr, listed.stderr[-3000:]

    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Create", "--cluster")
    second = unique("made")
    admin.create_topics([NewTopic(second, 1, 1)])[second].result(timeout=WAIT_S)
    assert second in visible_topics({"bootstrap.servers": broker.bootstrap})


def test_a_transactional_id_is_refused_until_alice_may_write_it(start_acl):
    skip_without_kafka_tools()
    broker = start_acl()
    topic, txn = unique("txn-topic"), unique("txn")
    create_topic(broker, topic)
    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic)
    p = Producer(alice(broker, **{"transactional.id": txn}))
    with pytest.raises(KafkaException) as refused:
        p.init_transactions(WAIT_S)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert metric(broker, "osprey_authorization_failures_total", resource_type="TRANSACTIONAL_ID") >= 1

    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Write", "--transactional-id", txn)
    p = Producer(alice(broker, **{"transactional.id": txn}))
    p.init_transactions(WAIT_S)
    p.begin_transaction()
    p.produce(topic, value=b"in-txn")
    p.commit_transaction(WAIT_S)
    committed = consume_one({"bootstrap.servers": broker.bootstrap, "isolation.level": "read_committed"}, topic,
                            unique("check"))
    assert committed == b"in-txn"


# ----- kafka-acls.sh --list / --remove, restarts --------------------------------------------


def test_kafka_acls_lists_and_removes_and_acls_survive_a_restart_and_a_kill_9(start_acl):
    skip_without_kafka_tools()
    broker = start_acl()
    topic = unique("kept")
    create_topic(broker, topic)
    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Describe",
            "--topic", topic)
    listed = kafka_acls(broker, "--list", "--topic", topic)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "User:alice" in listed.stdout and "WRITE" in listed.stdout and "DESCRIBE" in listed.stdout, listed.stdout

    broker.stop()
    broker.start()
    listed = kafka_acls(broker, "--list", "--topic", topic)
    assert "User:alice" in listed.stdout and "WRITE" in listed.stdout, listed.stdout
    assert produce_one(alice(broker), topic) is None
    # An acknowledged CreateAcls is in the fsynced metadata log: a kill -9 keeps it.
    add_acl(broker, "--allow-principal", "User:bob", "--operation", "Read", "--topic", topic)
    broker.kill9()
    broker.start()
    listed = kafka_acls(broker, "--list", "--topic", topic)
    assert "User:bob" in listed.stdout and "User:alice" in listed.stdout, listed.stdout

    removed = kafka_acls(broker, "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write",
                         "--topic", topic)
    assert removed.returncode == 0, removed.stdout[-2000:] + removed.stderr[-3000:]
    listed = kafka_acls(broker, "--list", "--topic", topic)
    assert "WRITE" not in listed.stdout and "DESCRIBE" in listed.stdout, listed.stdout
    assert code(produce_one(alice(broker), topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_librdkafka_creates_describes_and_deletes_acls(start_acl):
    broker = start_acl()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = unique("rd")
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        f.result(timeout=WAIT_S)
    match = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    described = admin.describe_acls(match).result(timeout=WAIT_S)
    assert [(b.name, b.principal, b.operation) for b in described] == [(topic, "User:alice", AclOperation.READ)]
    deleted = list(admin.delete_acls([match]).values())[0].result(timeout=WAIT_S)
    assert [b.name for b in deleted] == [topic]
    assert admin.describe_acls(match).result(timeout=WAIT_S) == []


# ----- a cluster ----------------------------------------------------------------------------


def test_an_acl_created_through_one_broker_is_enforced_on_another_and_topics_replicate(tmp_path):
    """Three combined nodes with the authorizer; brokers talk PLAINTEXT to each other as
    User:ANONYMOUS, which is in `super.users` as Kafka's operators put the brokers'
    principal. A replicated topic takes acks=all writes (followers fetch with
    CLUSTER_ACTION); an ACL created through broker 1 (forwarded to the active controller)
    lets alice write through broker 3."""
    from cluster import combined, listed_brokers

    c = combined(tmp_path)
    for n in c.nodes:
        n.sasl_port = free_port()
        listeners = f"PLAINTEXT://{HOST}:{n.port},SASL_PLAINTEXT://{HOST}:{n.sasl_port}"
        n.write_config(c.voters, dict(AUTHORIZER, **{
            "listeners": f"{listeners},CONTROLLER://{HOST}:{n.controller_port}",
            "advertised.listeners": listeners,
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";',
        }))
    try:
        c.start()
        want = {n.node_id for n in c.brokers}
        c.wait_for("every broker lists every broker", lambda: all(listed_brokers(n) == want for n in c.brokers))
        first, last = c.brokers[0], c.brokers[-1]
        topic = unique("replicated")
        create_topic(first, topic, partitions=1, replication_factor=3)
        admin = {"bootstrap.servers": first.bootstrap, "acks": "all"}
        c.wait_for("an acks=all write through the authorizer",
                   lambda: produce_one(admin, topic) is None)
        # Every replica is still in the ISR: the followers' fetches were allowed (a
        # refused follower would only have let the write through once it left the ISR).
        partition = AdminClient({"bootstrap.servers": first.bootstrap}).list_topics(
            topic, timeout=WAIT_S).topics[topic].partitions[0]
        assert sorted(partition.isrs) == sorted(partition.replicas) and len(partition.replicas) == 3, partition

        last.sasl_bootstrap = f"{HOST}:{last.sasl_port}"
        alice_on_last = {"bootstrap.servers": last.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
        assert code(produce_one(alice_on_last, topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED

        binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)
        admin_client = AdminClient({"bootstrap.servers": first.bootstrap})
        for f in admin_client.create_acls([binding]).values():
            f.result(timeout=WAIT_S)
        c.wait_for("alice writes through the last broker", lambda: produce_one(alice_on_last, topic) is None)
        c.stop()
    finally:
        c.kill_all()


# ----- the controller listener ---------------------------------------------------------


def envelope_v0(correlation_id: int, request_data: bytes) -> bytes:
    """An EnvelopeRequest (KIP-590) with a principal nobody checks first."""
    import struct

    import kafkawire as kw

    principal = struct.pack(">h", 0) + kw.compact_string("User") + kw.compact_string("alice") + b"\x00\x00"
    body = (kw.uvarint(len(request_data) + 1) + request_data + kw.uvarint(len(principal) + 1) + principal
            + kw.uvarint(5) + bytes([127, 0, 0, 1]) + b"\x00")
    return kw.request(58, 0, correlation_id, body, flexible=True)


def envelope_error(payload: bytes) -> int:
    import kafkawire as kw

    r = kw.Reader(payload)
    r.take(">i")
    r.skip_tags()
    n = r.uvarint() - 1
    r.pos += max(n, 0)
    return r.take(">h")


def controller_answers(node, workdir):
    """What a controller-only node with the StandardAuthorizer answers a PLAINTEXT
    connection (User:ANONYMOUS) on its controller listener: (ApiVersions keys, the
    envelope's error, CreateTopics v7's error, whether a quorum RPC closed the
    connection, kafka-metadata-quorum's finished process)."""
    import kafkawire as kw
    from cluster import KafkaTools
    from test_quotas import create_topics_v7, parse_create_topics_v7

    with kw.Conn(node.host, node.controller_port) as conn:
        _, code, keys = kw.parse_api_versions_v0(conn.roundtrip(kw.api_versions_v0(1)))
        assert code == 0
        envelope = envelope_error(conn.roundtrip(envelope_v0(2, b"not a request")))
        _, created = parse_create_topics_v7(conn.roundtrip(create_topics_v7(3, [("direct", 1)], "tool")))
    with kw.Conn(node.host, node.controller_port) as conn:
        # A broker's metadata fetch (one of the quorum's own RPCs, key 10004): header v2
        # and a JSON body.
        fetch = b'{"broker_id": 7, "next_offset": 0, "max_wait_ms": 0, "max_records": 1}'
        conn.send(kw.request(10_004, 0, 4, fetch, flexible=True))
        quorum_rpc_closed = conn.is_closed_by_peer(timeout=5)
    tools = KafkaTools(workdir)
    described = tools.quorum(("--bootstrap-controller", node.controller_bootstrap), "--status")
    return keys, envelope, created["direct"], quorum_rpc_closed, described


def test_a_controller_authorizes_quorum_broker_and_admin_requests(tmp_path):
    """A controller-only node with `super.users=User:admin`: a PLAINTEXT peer
    (User:ANONYMOUS) without CLUSTER_ACTION gets CLUSTER_AUTHORIZATION_FAILED for an
    envelope (a broker's forwarded request), TOPIC_AUTHORIZATION_FAILED for a CreateTopics
    sent straight to the controller, DescribeQuorum refused (kafka-metadata-quorum
    fails), and a quorum RPC closes the connection; each refusal is counted. The same
    node with User:ANONYMOUS a super user answers each of them for what it is: the
    envelope's content is malformed (INVALID_REQUEST), the topic is decided (no broker
    is registered: INVALID_REPLICATION_FACTOR), the tool describes the quorum."""
    skip_without_kafka_tools()
    from cluster import Cluster, Node

    results = {}
    for super_users in ("User:admin", "User:admin;User:ANONYMOUS"):
        workdir = tmp_path / ("refused" if "ANONYMOUS" not in super_users else "allowed")
        workdir.mkdir()
        quorum = Cluster(workdir, [Node(workdir, 1, "controller")],
                         extra={"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": super_users})
        node = quorum.nodes[0]
        quorum.start()
        try:
            quorum.wait_for("the controller is active", lambda: node.gauge("osprey_controller_active") == 1)
            results[super_users] = controller_answers(node, workdir)
            failures = node.gauge('osprey_authorization_failures_total{resource_type="CLUSTER",'
                                  'operation="CLUSTER_ACTION"}')
            results[super_users] += (failures,)
        finally:
            quorum.stop()

    keys, envelope, created, rpc_closed, described, failures = results["User:admin"]
    print(f"\nrefused: envelope {envelope}, CreateTopics {created}, quorum RPC closed {rpc_closed}, "
          f"tool rc {described.returncode}, CLUSTER_ACTION refusals {failures}")
    assert keys.get(58) == (0, 0), "a controller advertises Envelope v0"
    assert envelope == 31, "CLUSTER_AUTHORIZATION_FAILED"
    assert created == 29, "TOPIC_AUTHORIZATION_FAILED"
    assert rpc_closed
    assert described.returncode != 0
    assert "ClusterAuthorization" in described.stdout + described.stderr, described.stderr[-2000:]
    assert failures >= 2

    keys, envelope, created, rpc_closed, described, failures = results["User:admin;User:ANONYMOUS"]
    assert envelope == 42, "INVALID_REQUEST: the envelope was opened"
    assert created == 38, "INVALID_REPLICATION_FACTOR: decided, and no broker is registered"
    assert not rpc_closed
    assert described.returncode == 0, described.stderr[-2000:]
    assert failures == 0


# ----- fetch sessions -------------------------------------------------------------------


def sasl_plain_login(conn, user: str, password: str):
    """SaslHandshake v1 (PLAIN) then SaslAuthenticate v1, as raw frames."""
    import struct

    import kafkawire as kw

    r = kw.Reader(conn.roundtrip(kw.request(17, 1, 1, kw.string16("PLAIN"))))
    r.take(">i")
    assert r.take(">h") == 0, "SaslHandshake refused"
    token = b"\0" + user.encode() + b"\0" + password.encode()
    r = kw.Reader(conn.roundtrip(kw.request(36, 1, 2, struct.pack(">i", len(token)) + token)))
    r.take(">i")
    assert r.take(">h") == 0, f"SaslAuthenticate refused: {r.string16()}"


def test_a_partition_an_incremental_fetch_session_carries_is_checked_on_every_fetch(start_acl):
    """Alice reads a partition through a fetch session (Fetch v7, raw frames over the
    SASL listener). Once her READ ACL is removed, the next incremental fetch, which names
    no partition, answers the session's partition TOPIC_AUTHORIZATION_FAILED, as Kafka
    checks every partition of the session each time."""
    skip_without_kafka_tools()
    import kafkawire as kw

    broker = start_acl()
    topic = unique("session")
    create_topic(broker, topic)
    assert produce_one({"bootstrap.servers": broker.bootstrap}, topic) is None
    read_acl = ("--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    add_acl(broker, *read_acl)
    host, port = broker.sasl_bootstrap.rsplit(":", 1)
    with kw.Conn(host, int(port)) as conn:
        sasl_plain_login(conn, "alice", "alice-secret")
        _, error, session, parts = kw.parse_fetch_v7(conn.roundtrip(kw.fetch_v7(3, 0, 0, topic, [(0, 0)])))
        assert error == 0 and session != 0
        assert [(p[1], p[2]) for p in parts] == [(0, 0)] and parts[0][4], parts
        removed = kafka_acls(broker, "--remove", "--force", *read_acl)
        assert removed.returncode == 0, removed.stderr[-2000:]
        _, error, _, parts = kw.parse_fetch_v7(conn.roundtrip(kw.fetch_v7(4, session, 1, topic, [])))
        print(f"\nincremental fetch after the ACL went: {[(p[1], p[2]) for p in parts]}")
        assert error == 0
        assert [(p[0], p[1], p[2]) for p in parts] == [(topic, 0, 29)], "TOPIC_AUTHORIZATION_FAILED"


def test_a_regex_subscription_resolves_to_the_topics_the_member_may_describe(start_acl):
    """Alice's KIP-848 consumer (librdkafka, `group.protocol=consumer`) subscribes to
    `^REG-…`: of two matching topics she may read one, and the group is assigned that one
    only (Kafka filters a regex's topics by the member's DESCRIBE, KAFKA-18813). Once she
    is granted the other, the metadata moved, the next heartbeat resolves the pattern
    again, and she consumes it too."""
    skip_without_kafka_tools()
    import time

    broker = start_acl()
    prefix = f"REG-{uuid.uuid4().hex[:6]}"
    allowed, secret = f"{prefix}-open", f"{prefix}-secret"
    group = unique("regex-readers")
    for topic in (allowed, secret):
        create_topic(broker, topic)
        assert produce_one({"bootstrap.servers": broker.bootstrap}, topic) is None
    add_acl(broker, "--allow-principal", "User:alice", "--operation", "Read", "--topic", allowed, "--group", group)
    c = Consumer(alice(broker, **{"group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest"}))
    seen = set()

    def consume_until(want):
        deadline = time.monotonic() + WAIT_S
        while not want <= seen:
            assert time.monotonic() < deadline, f"consumed from {seen}"
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen.add(m.topic())

    def assigned():
        a = AdminClient({"bootstrap.servers": broker.bootstrap})
        d = a.describe_consumer_groups([group], request_timeout=WAIT_S)[group].result(timeout=WAIT_S)
        return {tp.topic for m in d.members for tp in m.assignment.topic_partitions}

    try:
        c.subscribe([f"^{prefix}-.*"])
        consume_until({allowed})
        # A few more heartbeats: the secret topic stays out.
        for _ in range(10):
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen.add(m.topic())
        assert seen == {allowed}, seen
        assert assigned() == {allowed}
        add_acl(broker, "--allow-principal", "User:alice", "--operation", "Read", "--topic", secret)
        consume_until({allowed, secret})
        assert assigned() == {allowed, secret}
    finally:
        c.close()


def test_kafka_python_creates_describes_and_deletes_acls_at_version_1(start_acl):
    """kafka-python 2.3's admin client speaks CreateAcls, DescribeAcls and DeleteAcls v1
    (Kafka's tools use v3): a prefixed ACL created, described by a filter, enforced, and
    deleted with the count of what it matched."""
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter, ResourceType)

    broker = start_acl()
    prefix = unique("kp")
    topic = f"{prefix}-t"
    create_topic(broker, topic)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(WAIT_S * 1000))
    try:
        pattern = ResourcePattern(ResourceType.TOPIC, prefix, ACLResourcePatternType.PREFIXED)
        acl = ACL("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1, created

        any_of_prefix = ACLFilter("User:alice", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                  ResourcePatternFilter(ResourceType.TOPIC, prefix, ACLResourcePatternType.PREFIXED))
        described, error = admin.describe_acls(any_of_prefix)
        assert error.errno == 0, error
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in described] == \
            [("User:alice", ACLOperation.WRITE, prefix)], described
        assert produce_one(alice(broker), topic) is None

        deleted = admin.delete_acls([any_of_prefix])
        (_, matched, error), = deleted
        assert error.errno == 0 and len(matched) == 1, deleted
        described, _ = admin.describe_acls(any_of_prefix)
        assert described == []
        assert code(produce_one(alice(broker), topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # The broker's request counts say which versions the client spoke.
        for api in ("CreateAcls", "DescribeAcls", "DeleteAcls"):
            assert metric(broker, "osprey_requests_total", api=api, version="1") >= 1, api
    finally:
        admin.close()
