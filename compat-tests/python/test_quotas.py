"""Client quotas (issue 18): DescribeClientQuotas and AlterClientQuotas (KIP-546), kept
in the cluster metadata, driven by Kafka's own kafka-configs.sh (ConfigCommand) and by
raw frames where the tool cannot say what is checked:

- kafka-configs.sh adds, describes and deletes quotas of a user, a client id, the
  default user, the default client id, and a user with a client id; `--describe
  --entity-type users` lists a SCRAM user beside the quotas;
- values and keys are checked as Kafka checks them, each entity on its own, and
  `validate_only` writes nothing;
- quotas survive a restart (the metadata log), and on three combined nodes a quota set
  through one broker (forwarded to the active controller) is described by every broker.

Ports are free ones; every wait polls until true.
"""

import struct
import time

import pytest

import kafkawire as kw
from cluster import skip_without_kafka_tools
from test_tls import java

pytestmark = pytest.mark.timeout(300)

HOST = "127.0.0.1"
WAIT_S = 30.0

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


def test_quotas_survive_a_restart(broker):
    alter(broker, [([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 2048.0, False)]),
                   ([("client-id", "app")], [("request_percentage", 25.0, False)])])
    before = describe_all(broker)
    assert len(before) == 2
    broker.restart(clean=True)
    assert describe_all(broker) == before


def test_a_quota_set_through_one_cluster_broker_is_described_by_every_broker(tmp_path):
    """Three combined nodes: AlterClientQuotas sent to one broker is forwarded to the
    active controller, and every broker describes the quota once the metadata reached
    it."""
    from cluster import combined, listed_brokers

    c = combined(tmp_path)
    try:
        c.start()
        want = {n.node_id for n in c.brokers}
        c.wait_for("every broker lists every broker", lambda: all(listed_brokers(n) == want for n in c.brokers))
        first = c.brokers[0]
        results = alter(first, [([("user", "alice")], [("producer_byte_rate", 1024.0, False)])])
        assert [code for code, _, _ in results] == [0], results
        for n in c.brokers:
            c.wait_for(f"broker {n.node_id} describes alice's quota",
                       lambda n=n: describe_all(n) == {(("user", "alice"),): {"producer_byte_rate": 1024.0}})
        c.stop()
    finally:
        c.kill_all()
