"""Client quotas (issue 18): DescribeClientQuotas and AlterClientQuotas (KIP-546), kept
in the cluster metadata, driven by Kafka's own kafka-configs.sh (ConfigCommand) and by
raw frames where the tool cannot say what is checked:

- kafka-configs.sh adds, describes and deletes quotas of a user, a client id, the
  default user, the default client id, and a user with a client id; `--describe
  --entity-type users` lists a SCRAM user beside the quotas;
- values and keys are checked as Kafka checks them, each entity on its own, and
  `validate_only` writes nothing;
- quotas survive a restart (the metadata log), and on three combined nodes a quota set
  through one broker (forwarded to the active controller) is described by every broker
  and throttles a producer on another;
- enforcement (KIP-13, KIP-219): a librdkafka producer held to a `producer_byte_rate` and
  a consumer held to a `consumer_byte_rate` are measured, after their first throttled
  response, over an interval of several quota windows: the rate stays under twice the
  quota and well under an unthrottled client's, and throttle times are reported by the
  client (statistics `throttle`) and by the broker (`osprey_quota_throttle_seconds`).
  The figures are printed (`pytest -s`);
- `request_percentage` (KIP-124): a raw client sending ApiVersions in a loop under a tiny
  request-time quota gets a throttle time (at most one window, as Kafka bounds it) and
  its next request is answered only after it; another client id is not throttled.
- `controller_mutation_rate` (KIP-599): raw CreateTopics v4 (permissive: created and
  throttled for the deficit) and v7 / DeleteTopics v5 (strict: THROTTLING_QUOTA_EXCEEDED
  once the bucket is below zero) on one node, and on three combined nodes a client's
  bucket spent through one broker refuses it through another (the brokers forward in an
  EnvelopeRequest and the active controller measures);
- quotas survive a restart and a kill -9.

Ports are free ones; every wait polls until true.
"""

import json
import struct
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

import kafkawire as kw
from clients import consumer, create_topic, producer
from cluster import skip_without_kafka_tools
from test_tls import java, metric

pytestmark = pytest.mark.timeout(300)

API_DESCRIBE_CLIENT_QUOTAS = 48
API_ALTER_CLIENT_QUOTAS = 49
INVALID_REQUEST = 42

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"


def kafka_configs(bootstrap: str, *args: str):
    """kafka-configs.sh with `args`; the finished process."""
    return java(CONFIG_COMMAND, "--bootstrap-server", bootstrap, *args)


def configs_ok(bootstrap: str, *args: str) -> str:
    done = kafka_configs(bootstrap, *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


# ----- raw AlterClientQuotas / DescribeClientQuotas v0 ----------------------------------


def alter_quotas_v0(entries, validate_only=False, correlation_id=1) -> bytes:
    """`entries`: [([(entity_type, name or None)], [(key, value, remove)])]."""
    body = struct.pack(">i", len(entries))
    for entity, ops in entries:
        body += struct.pack(">i", len(entity))
        for entity_type, name in entity:
            body += kw.string16(entity_type) + kw.string16(name)
        body += struct.pack(">i", len(ops))
        for key, value, remove in ops:
            body += kw.string16(key) + struct.pack(">d?", value, remove)
    body += struct.pack(">?", validate_only)
    return kw.request(API_ALTER_CLIENT_QUOTAS, 0, correlation_id, body)


def parse_alter_quotas_v0(payload: bytes):
    """[(error_code, error_message, [(entity_type, name)])]."""
    r = kw.Reader(payload)
    r.take(">i")  # correlation id
    r.take(">i")  # throttle time
    results = []
    for _ in range(r.take(">i")):
        code, message = r.take(">h"), r.string16()
        entity = [(r.string16(), r.string16()) for _ in range(r.take(">i"))]
        results.append((code, message, entity))
    return results


def describe_quotas_v0(components, strict=False, correlation_id=1) -> bytes:
    """`components`: [(entity_type, match_type, match or None)]."""
    body = struct.pack(">i", len(components))
    for entity_type, match_type, match in components:
        body += kw.string16(entity_type) + struct.pack(">b", match_type) + kw.string16(match)
    body += struct.pack(">?", strict)
    return kw.request(API_DESCRIBE_CLIENT_QUOTAS, 0, correlation_id, body)


def parse_describe_quotas_v0(payload: bytes):
    """(error_code, error_message, {((type, name), ...): {key: value}} or None)."""
    r = kw.Reader(payload)
    r.take(">i")  # correlation id
    r.take(">i")  # throttle time
    code, message = r.take(">h"), r.string16()
    count = r.take(">i")
    if count < 0:
        return code, message, None
    entries = {}
    for _ in range(count):
        entity = tuple((r.string16(), r.string16()) for _ in range(r.take(">i")))
        entries[entity] = {r.string16(): r.take(">d") for _ in range(r.take(">i"))}
    return code, message, entries


def describe_all(broker):
    with kw.Conn(broker.host, broker.port) as conn:
        code, message, entries = parse_describe_quotas_v0(conn.roundtrip(describe_quotas_v0([])))
    assert code == 0, message
    return entries


def alter(broker, entries, validate_only=False):
    with kw.Conn(broker.host, broker.port) as conn:
        return parse_alter_quotas_v0(conn.roundtrip(alter_quotas_v0(entries, validate_only)))


# ----- kafka-configs.sh -----------------------------------------------------------------


def test_kafka_configs_alters_describes_and_deletes_quotas_of_every_entity_kind(broker):
    skip_without_kafka_tools()
    b = broker.bootstrap
    configs_ok(b, "--alter", "--entity-type", "users", "--entity-name", "alice",
               "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    configs_ok(b, "--alter", "--entity-type", "clients", "--entity-name", "app",
               "--add-config", "request_percentage=50.5")
    configs_ok(b, "--alter", "--entity-type", "users", "--entity-default", "--add-config", "producer_byte_rate=4096")
    configs_ok(b, "--alter", "--entity-type", "clients", "--entity-default",
               "--add-config", "controller_mutation_rate=10")
    configs_ok(b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
               "--entity-name", "app", "--add-config", "producer_byte_rate=512")
    assert describe_all(broker) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        (("client-id", "app"),): {"request_percentage": 50.5},
        (("user", None),): {"producer_byte_rate": 4096.0},
        (("client-id", None),): {"controller_mutation_rate": 10.0},
        (("user", "alice"), ("client-id", "app")): {"producer_byte_rate": 512.0},
    }

    alice = configs_ok(b, "--describe", "--entity-type", "users", "--entity-name", "alice")
    print(alice)
    assert "producer_byte_rate=1024" in alice and "consumer_byte_rate=2048" in alice
    assert "512" not in alice, "the user+client entity is not the user's own"
    both = configs_ok(b, "--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                      "--entity-name", "app")
    print(both)
    assert "producer_byte_rate=512" in both
    default_user = configs_ok(b, "--describe", "--entity-type", "users", "--entity-default")
    assert "producer_byte_rate=4096" in default_user, default_user
    clients = configs_ok(b, "--describe", "--entity-type", "clients")
    print(clients)
    assert "request_percentage=50.5" in clients and "controller_mutation_rate=10" in clients

    configs_ok(b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--delete-config",
               "consumer_byte_rate")
    configs_ok(b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
               "--entity-name", "app", "--delete-config", "producer_byte_rate")
    after = describe_all(broker)
    assert after[(("user", "alice"),)] == {"producer_byte_rate": 1024.0}
    assert (("user", "alice"), ("client-id", "app")) not in after
    alice = configs_ok(b, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "producer_byte_rate=1024" in alice and "consumer_byte_rate" not in alice, alice


def test_kafka_configs_describe_users_lists_scram_credentials_beside_quotas(broker):
    skip_without_kafka_tools()
    b = broker.bootstrap
    # The tool alters SCRAM credentials and quotas in separate runs.
    configs_ok(b, "--alter", "--entity-type", "users", "--entity-name", "alice",
               "--add-config", "SCRAM-SHA-512=[iterations=4096,password=alice-secret]")
    configs_ok(b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config", "producer_byte_rate=1024")
    out = configs_ok(b, "--describe", "--entity-type", "users", "--entity-name", "alice")
    print(out)
    assert "producer_byte_rate=1024" in out
    assert "SCRAM-SHA-512=iterations=4096" in out


def test_kafka_configs_refuses_a_bad_value_and_leaves_the_quota_as_it_was(broker):
    skip_without_kafka_tools()
    b = broker.bootstrap
    configs_ok(b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
               "producer_byte_rate=1024")
    refused = kafka_configs(b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
                            "producer_byte_rate=1.5")
    assert refused.returncode != 0
    assert "fractional" in refused.stdout + refused.stderr, refused.stderr[-3000:]
    assert describe_all(broker) == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}


# ----- raw frames -----------------------------------------------------------------------


def test_each_entity_is_checked_apart_and_validate_only_writes_nothing(broker):
    results = alter(broker, [
        ([("user", "alice")], [("producer_byte_rate", 1024.0, False)]),
        ([("user", "bob")], [("producer_byte_rate", 0.0, False)]),
        ([("user", "carol")], [("no_such_quota", 1.0, False)]),
        ([], [("producer_byte_rate", 1.0, False)]),
        ([("client-id", "app"), ("client-id", "other")], [("producer_byte_rate", 1.0, False)]),
        ([("ip", "10.0.0.1")], [("connection_creation_rate", 1.0, False)]),
    ])
    print(results)
    assert [code for code, _, _ in results] == [0] + [INVALID_REQUEST] * 5
    assert "greater than 0" in results[1][1]
    assert "Invalid configuration key" in results[2][1]
    assert results[0][2] == [("user", "alice")]
    assert describe_all(broker) == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}

    checked = alter(broker, [([("client-id", "app")], [("consumer_byte_rate", 4096.0, False)])], validate_only=True)
    assert [code for code, _, _ in checked] == [0]
    refused = alter(broker, [([("client-id", "app")], [("consumer_byte_rate", -1.0, False)])], validate_only=True)
    assert [code for code, _, _ in refused] == [INVALID_REQUEST]
    assert describe_all(broker) == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}


def test_describe_filters_by_exact_default_and_any_name_and_refuses_a_bad_filter(broker):
    for entity in ([("user", "alice")], [("user", None)], [("user", "alice"), ("client-id", "app")],
                   [("client-id", "app")]):
        assert [c for c, _, _ in alter(broker, [(entity, [("consumer_byte_rate", 100.0, False)])])] == [0]
    with kw.Conn(broker.host, broker.port) as conn:
        def describe(components, strict):
            code, message, entries = parse_describe_quotas_v0(conn.roundtrip(describe_quotas_v0(components, strict)))
            assert code == 0, message
            return set(entries)

        assert describe([("user", 0, "alice")], True) == {(("user", "alice"),)}
        assert describe([("user", 0, "alice")], False) == {(("user", "alice"),),
                                                           (("user", "alice"), ("client-id", "app"))}
        assert describe([("user", 1, None)], True) == {(("user", None),)}
        assert describe([("user", 2, None)], True) == {(("user", "alice"),), (("user", None),)}
        assert describe([("client-id", 2, None)], False) == {(("client-id", "app"),),
                                                             (("user", "alice"), ("client-id", "app"))}
        code, message, entries = parse_describe_quotas_v0(
            conn.roundtrip(describe_quotas_v0([("user", 0, None)])))
        assert code == INVALID_REQUEST and entries is None, message
        code, message, _ = parse_describe_quotas_v0(
            conn.roundtrip(describe_quotas_v0([("user", 2, None), ("user", 1, None)])))
        assert code == INVALID_REQUEST, message


def test_quotas_survive_a_restart_and_a_kill_9(broker):
    alter(broker, [([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 2048.0, False)]),
                   ([("client-id", "app")], [("request_percentage", 25.0, False)])])
    before = describe_all(broker)
    assert len(before) == 2
    broker.restart(clean=True)
    assert describe_all(broker) == before
    # An acknowledged AlterClientQuotas is in the fsynced metadata log: a kill -9 keeps it.
    results = alter(broker, [([("user", "bob")], [("controller_mutation_rate", 5.0, False)])])
    assert [code for code, _, _ in results] == [0], results
    broker.kill9()
    broker.start()
    assert describe_all(broker) == {**before, (("user", "bob"),): {"controller_mutation_rate": 5.0}}


def test_a_quota_set_through_one_cluster_broker_is_described_by_every_broker(tmp_path):
    """Three combined nodes: AlterClientQuotas sent to one broker is forwarded to the
    active controller, and every broker describes the quota once the metadata reached
    it."""
    from cluster import combined, listed_brokers, partition_states

    c = combined(tmp_path)
    try:
        c.start()
        want = {n.node_id for n in c.brokers}
        c.wait_for("every broker lists every broker", lambda: all(listed_brokers(n) == want for n in c.brokers))
        first = c.brokers[0]
        topic = f"quota-{uuid.uuid4().hex[:8]}"
        create_topic(first, topic)
        c.wait_for("the topic has a leader", lambda: (partition_states(first, topic) or {}).get(0, (-1,))[0] >= 0)
        leader_id = partition_states(first, topic)[0][0]
        leader = c.node(leader_id)
        # Set through a broker that does not lead the partition.
        other = next(n for n in c.brokers if n.node_id != leader_id)
        results = alter(other, [([("client-id", "slow")], [("producer_byte_rate", 1024.0, False)])])
        assert [code for code, _, _ in results] == [0], results
        for n in c.brokers:
            c.wait_for(f"broker {n.node_id} describes the quota",
                       lambda n=n: describe_all(n) == {(("client-id", "slow"),): {"producer_byte_rate": 1024.0}})
        p = producer(leader, client_id="slow", batch_size=4096)
        for _ in range(40):
            p.produce(topic, b"x" * 1000)
            p.poll(0)
        assert p.flush(60) == 0
        throttled = leader.gauge('osprey_quota_throttle_seconds_count{quota="produce"}')
        print(f"leader {leader_id}: {throttled} throttled produce responses")
        assert throttled > 0
        c.stop()
    finally:
        c.kill_all()


# ----- enforcement ----------------------------------------------------------------------


QUOTA_BYTES_PER_S = 128 * 1024
VALUE_BYTES = 8 * 1024
MEASURE_S = 12.0
# Kafka's sensor measures a new client over at least ten 1 s windows, so its first burst
# runs unthrottled up to ten seconds' worth of quota and is then paid back until that
# sample ages out, eleven windows later. The measurement starts after that transient.
SETTLE_S = 11.0


class Throttles:
    """librdkafka's statistics: the largest `throttle` (ms) any broker reported."""

    def __init__(self):
        self.max_ms = 0

    def __call__(self, stats_json: str):
        stats = json.loads(stats_json)
        for b in stats.get("brokers", {}).values():
            self.max_ms = max(self.max_ms, b.get("throttle", {}).get("max", 0))


def check_held_to_quota(broker, quota: str, unthrottled: float, throttled: float, throttles: Throttles):
    """Prints the figures of a client held to QUOTA_BYTES_PER_S (bytes per second
    `unthrottled` and `throttled`), and asserts what the measurement allows: under twice
    the quota, well under the unthrottled rate, some progress, and throttle times
    reported by the client and by the broker's `quota` metrics."""
    count = metric(broker, "osprey_quota_throttle_seconds_count", quota=quota)
    total = metric(broker, "osprey_quota_throttle_seconds_sum", quota=quota)
    print(f"\n{quota}: unthrottled {unthrottled / 1024:.0f} KiB/s; quota {QUOTA_BYTES_PER_S / 1024:.0f} KiB/s; "
          f"throttled {throttled / 1024:.1f} KiB/s over {MEASURE_S} s; client max throttle {throttles.max_ms} ms; "
          f"broker: {count:.0f} throttled responses, {total:.1f} s throttle in all")
    assert throttled < 2 * QUOTA_BYTES_PER_S
    assert throttled < unthrottled / 3
    assert throttled > 0, "no progress at all"
    assert throttles.max_ms > 0 and count > 0 and total > 0


def produce_for(broker, topic: str, seconds: float, client_id: str, throttles=None, until_throttled=False):
    """Produces VALUE_BYTES values as fast as the client is let for `seconds` (after the
    first throttle and SETTLE_S more, when `until_throttled`); the bytes acknowledged
    per second over that interval."""
    # Kafka's request timeout: pipelined requests of a muted connection wait their turn.
    config = {"client_id": client_id, "batch_size": 32 * 1024, "queue_buffering_max_kbytes": 256,
              "message_timeout_ms": 120000, "socket_timeout_ms": 30000}
    if throttles is not None:
        config.update(statistics_interval_ms=500, stats_cb=throttles)
    p = producer(broker, **config)
    acked = []

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    value = b"q" * VALUE_BYTES
    deadline = time.monotonic() + 60
    start = time.monotonic()
    while until_throttled and throttles.max_ms == 0:
        assert time.monotonic() < deadline, "never throttled"
        try:
            p.produce(topic, value, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
        start = time.monotonic() + SETTLE_S
    end = start + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, value, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.poll(0.5)
    sent = sum(n for t, n in acked if start <= t <= end)
    p.purge()
    p.flush(5)
    return sent / seconds


def test_a_producer_is_held_to_its_producer_byte_rate(broker):
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic)
    unthrottled = produce_for(broker, topic, 3.0, "fast")
    results = alter(broker, [([("client-id", "slow")], [("producer_byte_rate", float(QUOTA_BYTES_PER_S), False)])])
    assert [code for code, _, _ in results] == [0], results
    throttles = Throttles()
    throttled = produce_for(broker, topic, MEASURE_S, "slow", throttles, until_throttled=True)
    check_held_to_quota(broker, "produce", unthrottled, throttled, throttles)
    # Another client id is not limited by the quota.
    assert produce_for(broker, topic, 2.0, "fast") > 2 * QUOTA_BYTES_PER_S


def consume_for(broker, topic: str, seconds: float, client_id: str, throttles=None, until_throttled=False):
    """Reads `topic` from the beginning for `seconds` (after the first throttle and
    SETTLE_S more, when `until_throttled`); the record bytes received per second over
    that interval."""
    config = {"client_id": client_id, "group_id": f"g-{client_id}", "fetch_max_bytes": 32 * 1024, "message_max_bytes": 32 * 1024,
              "max_partition_fetch_bytes": 32 * 1024, "fetch_wait_max_ms": 100}
    if throttles is not None:
        config.update(statistics_interval_ms=500, stats_cb=throttles)
    c = consumer(broker, **config)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = time.monotonic() + 60
    start = time.monotonic()
    try:
        while until_throttled and throttles.max_ms == 0:
            assert time.monotonic() < deadline, "never throttled"
            c.poll(0.1)
            start = time.monotonic() + SETTLE_S
        received = 0
        end = start + seconds
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and m.error() is None and time.monotonic() >= start:
                received += len(m.value())
        return received / seconds
    finally:
        c.close()


def test_a_consumer_is_held_to_its_consumer_byte_rate(broker):
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic)
    p = producer(broker, batch_size=64 * 1024)
    value = b"c" * VALUE_BYTES
    # Enough for the first quota windows' allowance and everything after it.
    for _ in range((16 << 20) // VALUE_BYTES):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    unthrottled = consume_for(broker, topic, 2.0, "fast-consumer")
    # The quota is on the user: a PLAINTEXT client is User:ANONYMOUS, whose name is the
    # entity's.
    results = alter(broker, [([("user", "ANONYMOUS"), ("client-id", "slow-consumer")],
                              [("consumer_byte_rate", float(QUOTA_BYTES_PER_S), False)])])
    assert [code for code, _, _ in results] == [0], results
    throttles = Throttles()
    throttled = consume_for(broker, topic, MEASURE_S, "slow-consumer", throttles, until_throttled=True)
    check_held_to_quota(broker, "fetch", unthrottled, throttled, throttles)


def api_versions_v1_throttle_ms(conn, client_id: str, correlation_id: int) -> int:
    """Sends ApiVersions v1 and returns the response's throttle_time_ms."""
    payload = conn.roundtrip(kw.request(18, 1, correlation_id, b"", client_id=client_id))
    r = kw.Reader(payload)
    assert r.take(">i") == correlation_id
    assert r.take(">h") == 0
    for _ in range(r.take(">i")):
        r.take(">hhh")
    return r.take(">i")


def test_request_percentage_throttles_a_client_that_keeps_a_handler_busy(broker):
    results = alter(broker, [([("client-id", "busy")], [("request_percentage", 0.001, False)])])
    assert [code for code, _, _ in results] == [0], results
    with kw.Conn(broker.host, broker.port) as conn:
        throttle_ms = 0
        sent = 0
        while throttle_ms == 0:
            assert sent < 20000, "never throttled"
            sent += 1
            throttle_ms = api_versions_v1_throttle_ms(conn, "busy", sent)
        began = time.monotonic()
        api_versions_v1_throttle_ms(conn, "busy", sent + 1)
        waited = time.monotonic() - began
    print(f"\nrequest_percentage=0.001: throttled after {sent} requests for {throttle_ms} ms; "
          f"next answered after {waited * 1000:.0f} ms")
    # Kafka bounds a request-time throttle to one quota window.
    assert 0 < throttle_ms <= 1000
    # The connection was muted: the next request waited (a lower bound only).
    assert waited >= throttle_ms / 1000 * 0.5
    assert metric(broker, "osprey_quota_throttle_seconds_count", quota="request") > 0
    with kw.Conn(broker.host, broker.port) as conn:
        assert api_versions_v1_throttle_ms(conn, "idle", 1) == 0


# ----- controller_mutation_rate (KIP-599) -----------------------------------------------
#
# CreateTopics v4 (permissive: every topic created, the response throttled for the
# deficit) and v7 and DeleteTopics v5 (strict: THROTTLING_QUOTA_EXCEEDED for a topic once
# the requester's bucket is below zero) as raw frames, so that what each broker answers
# is seen exactly; the Java Admin client's own handling is in the Java suite
# (ControllerMutationQuotaTest). A bucket holds 11 s of the rate and starts full.

API_CREATE_TOPICS = 19
API_DELETE_TOPICS = 20
THROTTLING_QUOTA_EXCEEDED = 89


def flexible_response(payload: bytes):
    """A reader past a flexible response's header and its throttle_time_ms, and that
    throttle."""
    r = kw.Reader(payload)
    r.take(">i")  # correlation id
    r.skip_tags()
    return r, r.take(">i")


def create_topics_v4(correlation_id: int, topics, client_id: str) -> bytes:
    """`topics`: [(name, partitions)], replication factor 1."""
    body = struct.pack(">i", len(topics))
    for name, partitions in topics:
        body += kw.string16(name) + struct.pack(">ihii", partitions, 1, 0, 0)
    body += struct.pack(">i?", 30000, False)
    return kw.request(API_CREATE_TOPICS, 4, correlation_id, body, client_id=client_id)


def parse_create_topics_v4(payload: bytes):
    """(throttle_time_ms, {name: error_code})."""
    r = kw.Reader(payload)
    r.take(">i")
    throttle = r.take(">i")
    results = {}
    for _ in range(r.take(">i")):
        name, code = r.string16(), r.take(">h")
        r.string16()
        results[name] = code
    return throttle, results


def create_topics_v7(correlation_id: int, topics, client_id: str) -> bytes:
    body = kw.uvarint(len(topics) + 1)
    for name, partitions in topics:
        body += kw.compact_string(name) + struct.pack(">ih", partitions, 1) + kw.uvarint(1) + kw.uvarint(1) + b"\x00"
    body += struct.pack(">i?", 30000, False) + b"\x00"
    return kw.request(API_CREATE_TOPICS, 7, correlation_id, body, client_id=client_id, flexible=True)


def parse_create_topics_v7(payload: bytes):
    """(throttle_time_ms, {name: error_code})."""
    r, throttle = flexible_response(payload)
    results = {}
    for _ in range(r.uvarint() - 1):
        name = r.compact_string()
        r.pos += 16  # topic id
        code = r.take(">h")
        r.compact_string()
        r.take(">ih")
        configs = r.uvarint() - 1
        for _ in range(max(configs, 0)):
            r.compact_string(), r.compact_string(), r.take(">?b?")
            r.skip_tags()
        r.skip_tags()
        results[name] = code
    return throttle, results


def delete_topics_v5(correlation_id: int, names, client_id: str) -> bytes:
    body = kw.uvarint(len(names) + 1) + b"".join(kw.compact_string(n) for n in names) + struct.pack(">i", 30000) + b"\x00"
    return kw.request(API_DELETE_TOPICS, 5, correlation_id, body, client_id=client_id, flexible=True)


def parse_delete_topics_v5(payload: bytes):
    r, throttle = flexible_response(payload)
    results = {}
    for _ in range(r.uvarint() - 1):
        name, code = r.compact_string(), r.take(">h")
        r.compact_string()
        r.skip_tags()
        results[name] = code
    return throttle, results


def roundtrip(node, frame: bytes) -> bytes:
    with kw.Conn(node.host, node.port, timeout=40) as conn:
        return conn.roundtrip(frame)


def set_mutation_rate(node, client_id: str, rate: float):
    results = alter(node, [([("client-id", client_id)], [("controller_mutation_rate", rate, False)])])
    assert [code for code, _, _ in results] == [0], results


def test_controller_mutation_rate_permissive_for_old_versions_and_strict_for_new(broker):
    """rate 1/s, so an 11-token bucket. v4 creates 8 then 8 partitions: both created, the
    second response throttled for the 5 tokens missing (5 s, less what refilled). v7:
    the bucket is below zero, so a topic is refused with THROTTLING_QUOTA_EXCEEDED and a
    throttle time, and another client id is not held back."""
    set_mutation_rate(broker, "creator", 1.0)
    tag = uuid.uuid4().hex[:6]
    throttle, results = parse_create_topics_v4(roundtrip(broker, create_topics_v4(1, [(f"a-{tag}", 8)], "creator")))
    assert results == {f"a-{tag}": 0} and throttle == 0, (throttle, results)
    throttle, results = parse_create_topics_v4(roundtrip(broker, create_topics_v4(2, [(f"b-{tag}", 8)], "creator")))
    print(f"\npermissive: second topic created, throttle {throttle} ms")
    assert results == {f"b-{tag}": 0}
    assert 3000 <= throttle <= 5000, throttle

    names = [f"c-{tag}", f"d-{tag}"]
    throttle, results = parse_create_topics_v7(roundtrip(broker, create_topics_v7(3, [(n, 1) for n in names], "creator")))
    print(f"strict: {results}, throttle {throttle} ms")
    assert results == {n: THROTTLING_QUOTA_EXCEEDED for n in names}
    assert 0 < throttle <= 5000
    throttle, results = parse_delete_topics_v5(roundtrip(broker, delete_topics_v5(4, [f"a-{tag}"], "creator")))
    assert results == {f"a-{tag}": THROTTLING_QUOTA_EXCEEDED} and throttle > 0, (throttle, results)

    # Another client id has no quota.
    throttle, results = parse_create_topics_v7(roundtrip(broker, create_topics_v7(5, [(f"e-{tag}", 50)], "other")))
    assert results == {f"e-{tag}": 0} and throttle == 0
    assert metric(broker, "osprey_quota_throttle_seconds_count", quota="controller_mutation") >= 3
    # Refused topics were not created, and the deletion refused left its topic.
    from clients import admin

    listed = set(admin(broker).list_topics(timeout=10).topics)
    assert not listed & set(names), listed
    assert {f"a-{tag}", f"b-{tag}", f"e-{tag}"} <= listed, listed


def test_controller_mutation_rate_is_shared_across_a_clusters_brokers(tmp_path):
    """Three combined nodes: brokers forward CreateTopics to the active controller in an
    EnvelopeRequest naming the client, and the controller measures the quota. A client
    that spends its bucket through one broker is refused through another."""
    from cluster import combined, listed_brokers

    c = combined(tmp_path)
    try:
        c.start()
        want = {n.node_id for n in c.brokers}
        c.wait_for("every broker lists every broker", lambda: all(listed_brokers(n) == want for n in c.brokers))
        first, second = c.brokers[0], c.brokers[1]
        set_mutation_rate(first, "creator", 1.0)
        c.wait_for("every broker describes the quota",
                   lambda: all(("client-id", "creator") in [e[0] for e in describe_all(n)] for n in c.brokers))
        tag = uuid.uuid4().hex[:6]
        throttle, results = parse_create_topics_v7(
            roundtrip(first, create_topics_v7(1, [(f"a-{tag}", 12)], "creator")))
        assert results == {f"a-{tag}": 0} and throttle == 0, (throttle, results)
        throttle, results = parse_create_topics_v7(
            roundtrip(second, create_topics_v7(2, [(f"b-{tag}", 1)], "creator")))
        print(f"\nthrough another broker: {results}, throttle {throttle} ms")
        assert results == {f"b-{tag}": THROTTLING_QUOTA_EXCEEDED}
        assert 0 < throttle <= 1000
        # Another client id through the second broker is not held back.
        throttle, results = parse_create_topics_v7(
            roundtrip(second, create_topics_v7(3, [(f"c-{tag}", 1)], "other")))
        assert results == {f"c-{tag}": 0} and throttle == 0
        assert second.gauge('osprey_quota_throttle_seconds_count{quota="controller_mutation"}') >= 1
        c.stop()
    finally:
        c.kill_all()


def test_a_throttled_fetch_comes_without_records_and_the_consumer_still_reads_everything(broker):
    """A raw consumer (Fetch v4) under `consumer_byte_rate=4096`: a fetch over the quota is
    answered with its throttle and no records (the high watermark still there), as Kafka
    answers it; the fetch size is capped at what the quota allows over its windows (40
    KiB here, where the request asks 1 MiB), so the consumer still reads every record."""
    results = alter(broker, [([("client-id", "osprey-compat")], [("consumer_byte_rate", 4096.0, False)])])
    assert [code for code, _, _ in results] == [0], results
    topic = f"throttled-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic)
    records = 60
    p = producer(broker, linger_ms=0, batch_size=2500)
    for i in range(records):
        p.produce(topic, b"%04d" % i + b"x" * 2000)
        p.poll(0)
    assert p.flush(30) == 0
    offset, empty_throttled, largest = 0, 0, 0
    with kw.Conn(broker.host, broker.port, timeout=60) as conn:
        for correlation_id in range(1, 200):
            if offset >= records:
                break
            payload = conn.roundtrip(kw.fetch_v4(correlation_id, topic, 0, offset))
            throttle = struct.unpack_from(">i", payload, 4)[0]
            _, [(_, _, code, hw, data)] = kw.parse_fetch_v4(payload)
            assert code == 0 and hw == records
            largest = max(largest, len(data))
            batches = [b for b in kw.parse_batches(data)]
            if throttle > 0 and not data:
                empty_throttled += 1
            if batches:
                base, _, count, _ = batches[-1]
                offset = base + count
    print(f"\nread {offset} of {records} records; {empty_throttled} throttled fetches came empty; "
          f"largest response {largest} bytes")
    assert offset == records
    assert empty_throttled >= 1
    assert largest <= 4096 * 10 + 2500, "the fetch was capped at the quota's window allowance"
