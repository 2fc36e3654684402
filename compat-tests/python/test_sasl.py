"""SASL listeners (issue 18): SASL_PLAINTEXT and SASL_SSL listeners next to the PLAINTEXT
one, with Kafka's keys (`sasl.enabled.mechanisms`, the listener's PlainLoginModule JAAS
config), driven by real clients over real sockets.

- librdkafka (confluent-kafka) produces and consumes with PLAIN over SASL_PLAINTEXT and
  over SASL_SSL;
- a wrong password is refused with librdkafka's authentication error, counted in
  `osprey_sasl_authentication_failures_total`, logged with the peer, answered only after
  `connection.failed.authentication.delay.ms`, and the broker keeps serving;
- on raw sockets: a request other than ApiVersions/SaslHandshake/SaslAuthenticate before
  authentication closes the connection, so does a frame over
  `sasl.server.max.receive.size`; a mechanism not enabled is answered
  UNSUPPORTED_SASL_MECHANISM; the v0 handshake's bare tokens authenticate;
- SCRAM-SHA-512 and SCRAM-SHA-256: credentials created with AlterUserScramCredentials
  (librdkafka's admin client, which salts the password itself), listed with
  DescribeUserScramCredentials, survive a restart in the metadata log, log librdkafka in
  to produce and consume; a wrong password and a deleted credential are refused; on
  three combined nodes, a user created through one broker logs in on every broker;
- brokers logging in to each other over a SASL_PLAINTEXT inter-broker listener
  (`sasl.mechanism.inter.broker.protocol`): with PLAIN, a node with a wrong password is
  refused and leaves the ISR while the others replicate; with SCRAM-SHA-512 once the
  brokers' user exists, their connections replaced before their sessions expire;
- the Java client (Kafka 4.4's kafka-topics and console producer/consumer) with PLAIN
  and SCRAM-SHA-256, and refused with a wrong password; kafka-configs.sh (ConfigCommand)
  adds and deletes a SCRAM-SHA-512 user;
- re-authentication (KIP-368, `connections.max.reauth.ms`): SaslAuthenticate tells the
  session lifetime, a raw client that re-authenticates in time goes on and one that
  does not is closed at its next request; librdkafka and the Java client
  re-authenticate on their own;
- kafka-python, the one client here that sends SaslAuthenticate v0, logs in with PLAIN
  and SCRAM-SHA-512 and is refused with a wrong password;
- config errors: a SASL listener with Kafka's default mechanism (GSSAPI) or without PLAIN
  users stops the start with the key to fix.

Ports are free ones; every wait polls until true.
"""

import shutil
import socket
import struct
import time
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

import kafkawire as kw
from cluster import skip_without_kafka_tools
from conftest import Broker, free_port
from test_tls import Pki, add_listener, internal_listener_cluster, java, metric, produce_and_consume

pytestmark = pytest.mark.timeout(300)

HOST = "127.0.0.1"
WAIT_S = 30.0

API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
UNSUPPORTED_SASL_MECHANISM = 33
SASL_AUTHENTICATION_FAILED = 58

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture
def start_sasl(start_broker, monkeypatch):
    """`start_sasl(mechanisms="PLAIN", listener="SASL_PLAINTEXT", **overrides)`: a broker
    with a PLAINTEXT listener and a SASL one whose PLAIN users are PLAIN_JAAS's."""

    def start(mechanisms="PLAIN", listener="SASL_PLAINTEXT", overrides=None):
        port = add_listener(monkeypatch, listener)
        prefix = f"listener.name.{listener.lower()}"
        config = {
            "sasl.enabled.mechanisms": mechanisms,
            f"{prefix}.plain.sasl.jaas.config": PLAIN_JAAS,
        }
        config.update(overrides or {})
        broker = start_broker(config)
        broker.sasl_port = port
        broker.sasl_bootstrap = f"{HOST}:{port}"
        return broker

    return start


def rdkafka_sasl(broker, user="alice", password="alice-secret", mechanism="PLAIN",
                 protocol="SASL_PLAINTEXT", **extra) -> dict:
    config = {
        "bootstrap.servers": broker.sasl_bootstrap,
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    config.update(extra)
    return config


def refused(config: dict, timeout: float = 10.0) -> str:
    """The errors librdkafka reports when a client with `config` lists topics, which
    must fail."""
    errors = []
    admin = AdminClient(dict(config, **{"error_cb": lambda e: errors.append(str(e))}))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=timeout)
    admin.poll(1.0)
    print("client-side errors:", errors)
    return " | ".join(errors)


def still_serves(broker):
    assert AdminClient(rdkafka_sasl(broker)).list_topics(timeout=WAIT_S).brokers
    assert AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=WAIT_S).brokers


# ----- raw sockets --------------------------------------------------------------------


def connect(broker) -> socket.socket:
    return socket.create_connection((HOST, broker.sasl_port), timeout=10)


def recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, size)


def closed_by_broker(s: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the broker closes the connection (EOF or reset) within `timeout`."""
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def sasl_handshake(s: socket.socket, mechanism: str, version=1, correlation_id=1):
    """Sends SaslHandshake; returns (error code, mechanisms)."""
    s.sendall(kw.request(API_SASL_HANDSHAKE, version, correlation_id, kw.string16(mechanism)))
    r = kw.Reader(recv_frame(s))
    assert r.take(">i") == correlation_id
    error = r.take(">h")
    count = r.take(">i")
    return error, [r.string16() for _ in range(count)]


def sasl_authenticate(s: socket.socket, token: bytes, correlation_id=2, lifetime=False):
    """Sends SaslAuthenticate v1; returns (error code, error message, auth bytes), and
    the session lifetime (ms) last when `lifetime`."""
    s.sendall(kw.request(API_SASL_AUTHENTICATE, 1, correlation_id, kw.bytes32(token)))
    r = kw.Reader(recv_frame(s))
    assert r.take(">i") == correlation_id
    error = r.take(">h")
    message = r.string16()
    auth_bytes = r.bytes32()
    if lifetime:
        return error, message, auth_bytes, r.take(">q")
    return error, message, auth_bytes


# ----- librdkafka ---------------------------------------------------------------------


def test_librdkafka_produces_and_consumes_with_plain_over_sasl_plaintext(start_sasl, monkeypatch):
    monkeypatch.setenv("OSPREY_LOG", "info,osprey_server::network=debug")
    broker = start_sasl()
    produce_and_consume(rdkafka_sasl(broker))
    produce_and_consume(rdkafka_sasl(broker, user="admin", password="admin-secret"), count=3)
    # The connection's principal is the SASL user's.
    log = broker.log_text()
    assert "principal=User:alice" in log and "principal=User:admin" in log, log[-3000:]


def test_librdkafka_with_plain_over_sasl_ssl(start_sasl, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make certificates")
    pki = Pki(tmp_path / "ca")
    _, _, keystore = pki.issue("server", "/C=US/O=Osprey/CN=localhost")
    broker = start_sasl(listener="SASL_SSL", overrides={"listener.name.sasl_ssl.ssl.keystore.location": str(keystore)})
    produce_and_consume(rdkafka_sasl(broker, protocol="SASL_SSL", **{"ssl.ca.location": str(pki.ca_pem)}))


def test_a_wrong_password_is_refused_counted_and_logged_while_the_broker_serves(start_sasl):
    broker = start_sasl()
    errors = refused(rdkafka_sasl(broker, password="wrong"))
    assert "Authentication failed" in errors or "SASL authentication error" in errors, errors
    assert "alice-secret" not in errors
    errors = refused(rdkafka_sasl(broker, user="nobody", password="x"))
    assert "Authentication failed" in errors or "SASL authentication error" in errors, errors
    assert metric(broker, "osprey_sasl_authentication_failures_total",
                  listener="SASL_PLAINTEXT", mechanism="PLAIN") >= 2
    log = broker.log_text()
    assert "failed authentication" in log and "127.0.0.1" in log, log[-3000:]
    assert "wrong password for user alice" in log, log[-3000:]
    still_serves(broker)


def test_the_failure_answer_waits_for_the_authentication_delay(start_sasl):
    broker = start_sasl(overrides={"connection.failed.authentication.delay.ms": "700"})
    with connect(broker) as s:
        assert sasl_handshake(s, "PLAIN") == (0, ["PLAIN"])
        started = time.monotonic()
        error, message, _ = sasl_authenticate(s, b"\0alice\0wrong")
        waited = time.monotonic() - started
        assert error == SASL_AUTHENTICATION_FAILED
        assert message == "Authentication failed: Invalid username or password"
        assert waited >= 0.6, waited
        assert closed_by_broker(s)
    with connect(broker) as s:
        # The right password: no delay, then requests are served.
        assert sasl_handshake(s, "PLAIN") == (0, ["PLAIN"])
        started = time.monotonic()
        assert sasl_authenticate(s, b"\0alice\0alice-secret")[0] == 0
        assert time.monotonic() - started < 0.5
        s.sendall(kw.metadata_v1(3))
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 3


# ----- raw sockets: what closes the connection ------------------------------------------


def test_a_request_before_authentication_closes_the_connection(start_sasl):
    broker = start_sasl()
    with connect(broker) as s:
        s.sendall(kw.metadata_v1(1))
        assert closed_by_broker(s)
    # ApiVersions is answered first; then anything but SaslHandshake closes too.
    with connect(broker) as s:
        s.sendall(kw.api_versions_v0(1))
        _, _, versions = kw.parse_api_versions_v0(recv_frame(s))
        assert versions[API_SASL_HANDSHAKE] == (0, 1)
        assert versions[API_SASL_AUTHENTICATE] == (0, 2)
        s.sendall(kw.metadata_v1(2))
        assert closed_by_broker(s)
    # After the handshake, only SaslAuthenticate.
    with connect(broker) as s:
        assert sasl_handshake(s, "PLAIN") == (0, ["PLAIN"])
        s.sendall(kw.metadata_v1(2))
        assert closed_by_broker(s)
    still_serves(broker)


def test_an_oversized_sasl_authenticate_closes_the_connection(start_sasl):
    broker = start_sasl()
    with connect(broker) as s:
        assert sasl_handshake(s, "PLAIN") == (0, ["PLAIN"])
        token = b"\0alice\0" + b"x" * (600 * 1024)
        try:
            s.sendall(kw.request(API_SASL_AUTHENTICATE, 1, 2, kw.bytes32(token)))
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert closed_by_broker(s)
    # Declared only, never sent: closed on the size alone.
    with connect(broker) as s:
        s.sendall(struct.pack(">i", 512 * 1024 + 1))
        assert closed_by_broker(s)
    still_serves(broker)


def test_a_mechanism_not_enabled_is_answered_with_the_enabled_ones(start_sasl):
    broker = start_sasl()
    with connect(broker) as s:
        assert sasl_handshake(s, "GSSAPI") == (UNSUPPORTED_SASL_MECHANISM, ["PLAIN"])
        assert closed_by_broker(s)
    assert metric(broker, "osprey_sasl_authentication_failures_total", mechanism="UNSUPPORTED") >= 1


def test_handshake_v0_then_bare_tokens(start_sasl):
    broker = start_sasl()
    with connect(broker) as s:
        assert sasl_handshake(s, "PLAIN", version=0) == (0, ["PLAIN"])
        token = b"\0alice\0alice-secret"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert recv_frame(s) == b""
        s.sendall(kw.metadata_v1(5))
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 5
    with connect(broker) as s:
        assert sasl_handshake(s, "PLAIN", version=0) == (0, ["PLAIN"])
        token = b"\0alice\0wrong"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert closed_by_broker(s)


def test_sasl_requests_on_a_plaintext_listener_are_illegal_sasl_state(start_sasl):
    broker = start_sasl()
    with socket.create_connection((HOST, broker.port), timeout=10) as s:
        assert sasl_handshake(s, "PLAIN")[0] == 34  # ILLEGAL_SASL_STATE


# ----- re-authentication (KIP-368) ------------------------------------------------------


def test_an_expired_session_closes_the_connection_at_its_next_request(start_sasl):
    broker = start_sasl(overrides={"connections.max.reauth.ms": "1500"})
    with connect(broker) as s:
        assert sasl_handshake(s, "PLAIN") == (0, ["PLAIN"])
        error, _, _, lifetime_ms = sasl_authenticate(s, b"\0alice\0alice-secret", lifetime=True)
        assert (error, lifetime_ms) == (0, 1500)
        s.sendall(kw.metadata_v1(3))
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 3
        # Re-authenticated in time: the session runs on.
        time.sleep(1.0)
        assert sasl_handshake(s, "PLAIN", correlation_id=4) == (0, ["PLAIN"])
        assert sasl_authenticate(s, b"\0alice\0alice-secret", correlation_id=5, lifetime=True)[3] == 1500
        time.sleep(1.0)
        s.sendall(kw.metadata_v1(6))
        assert struct.unpack(">i", recv_frame(s)[:4])[0] == 6
        # Not re-authenticated: the next request closes the connection.
        time.sleep(1.7)
        s.sendall(kw.metadata_v1(7))
        assert closed_by_broker(s)
    assert "expired (connections.max.reauth.ms)" in broker.log_text()


def test_librdkafka_reauthenticates_before_its_session_expires(start_sasl, monkeypatch):
    monkeypatch.setenv("OSPREY_LOG", "info,osprey_server::network=debug")
    broker = start_sasl(overrides={"connections.max.reauth.ms": "2000"})
    from confluent_kafka import Producer

    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    errors, delivered = [], []
    p = Producer(dict(rdkafka_sasl(broker), **{"error_cb": errors.append}))
    deadline = time.monotonic() + 7
    i = 0
    while time.monotonic() < deadline:
        p.produce(topic, value=f"m{i}".encode(), on_delivery=lambda err, m: delivered.append(err))
        p.poll(0.25)
        i += 1
    assert p.flush(WAIT_S) == 0
    assert delivered and all(e is None for e in delivered), delivered[:5]
    log = broker.log_text()
    assert "SASL re-authentication succeeded" in log, log[-3000:]
    assert "expired (connections.max.reauth.ms)" not in log, log[-3000:]


def test_the_java_client_reauthenticates_before_its_session_expires(start_sasl, tmp_path, monkeypatch):
    skip_without_kafka_tools()
    monkeypatch.setenv("OSPREY_LOG", "info,osprey_server::network=debug")
    broker = start_sasl(overrides={"connections.max.reauth.ms": "2000"})
    props = java_sasl_properties(tmp_path / "client.properties", "PLAIN", "alice", "alice-secret")
    # 60 records at 10 a second: six seconds on one connection, three session lifetimes.
    run = java("org.apache.kafka.tools.ProducerPerformance", "--topic", f"reauth-{uuid.uuid4().hex[:8]}",
               "--num-records", "60", "--record-size", "100", "--throughput", "10", "--producer.config", props,
               "--producer-props", f"bootstrap.servers={broker.sasl_bootstrap}", "acks=all")
    assert run.returncode == 0 and "60 records sent" in run.stdout, run.stdout[-2000:] + run.stderr[-3000:]
    log = broker.log_text()
    assert "SASL re-authentication succeeded" in log, log[-3000:]
    assert "expired (connections.max.reauth.ms)" not in log, log[-3000:]


# ----- SCRAM --------------------------------------------------------------------------


def alter_scram(broker, *alterations):
    """AlterUserScramCredentials over the PLAINTEXT listener; returns {user: error or None}."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    outcome = {}
    for user, future in admin.alter_user_scram_credentials(list(alterations)).items():
        try:
            future.result(timeout=WAIT_S)
            outcome[user] = None
        except KafkaException as e:
            outcome[user] = e.args[0]
    return outcome


def test_scram_credentials_log_librdkafka_in_and_survive_a_restart(start_sasl):
    broker = start_sasl(mechanisms="SCRAM-SHA-512,SCRAM-SHA-256")
    assert alter_scram(
        broker,
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"bob-secret"),
    ) == {"alice": None, "bob": None}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_user_scram_credentials(["alice", "bob"])
    alice = described["alice"].result(timeout=WAIT_S)
    assert [(i.mechanism, i.iterations) for i in alice.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512, 4096)]
    bob = described["bob"].result(timeout=WAIT_S)
    assert [(i.mechanism, i.iterations) for i in bob.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]

    produce_and_consume(rdkafka_sasl(broker, mechanism="SCRAM-SHA-512"))
    produce_and_consume(rdkafka_sasl(broker, user="bob", password="bob-secret", mechanism="SCRAM-SHA-256"), count=3)

    errors = refused(rdkafka_sasl(broker, password="wrong", mechanism="SCRAM-SHA-512"))
    assert "Authentication failed" in errors or "SASL authentication error" in errors, errors
    # alice has no SHA-256 credential.
    refused(rdkafka_sasl(broker, mechanism="SCRAM-SHA-256"))
    assert metric(broker, "osprey_sasl_authentication_failures_total",
                  listener="SASL_PLAINTEXT", mechanism="SCRAM-SHA-512") >= 1
    assert "wrong password for user alice" in broker.log_text()
    # Only the keys are stored: the password is nowhere in the metadata.
    for path in broker.data_dir.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert b"alice-secret" not in path.read_bytes(), path

    broker.stop()
    broker.start()
    produce_and_consume(rdkafka_sasl(broker, mechanism="SCRAM-SHA-512"), count=2)

    assert alter_scram(broker, UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)) == {"alice": None}
    refused(rdkafka_sasl(broker, mechanism="SCRAM-SHA-512"))
    still = AdminClient(rdkafka_sasl(broker, user="bob", password="bob-secret", mechanism="SCRAM-SHA-256"))
    assert still.list_topics(timeout=WAIT_S).brokers


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_logs_in_with_sasl_authenticate_v0(start_sasl, mechanism):
    """kafka-python 2.3 sends SaslHandshake v1 and then its tokens in SaslAuthenticate
    v0 (the version no other client here uses), and produces and consumes once in."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka import errors as kafka_errors

    broker = start_sasl(mechanisms="PLAIN,SCRAM-SHA-512")
    if mechanism == "SCRAM-SHA-512":
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        assert alter_scram(broker, UserScramCredentialUpsertion("alice", info, b"alice-secret")) == {"alice": None}
    login = {"bootstrap_servers": broker.sasl_bootstrap, "security_protocol": "SASL_PLAINTEXT",
             "sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
    topic = f"kafka-python-sasl-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(acks="all", **login)
    sent = [producer.send(topic, f"v{i}".encode()).get(timeout=WAIT_S).offset for i in range(3)]
    producer.close()
    assert sent == [0, 1, 2]
    consumer = KafkaConsumer(auto_offset_reset="earliest", consumer_timeout_ms=10_000, **login)
    consumer.assign([TopicPartition(topic, 0)])
    assert [m.value for m in consumer] == [b"v0", b"v1", b"v2"]
    consumer.close()
    # kafka-python logs SaslAuthenticationFailedError and keeps retrying until its
    # metadata wait ends; the broker counts each refusal.
    wrong = KafkaProducer(max_block_ms=3_000, **dict(login, sasl_plain_password="wrong"))
    with pytest.raises(kafka_errors.KafkaTimeoutError):
        wrong.send(topic, b"never").get(timeout=WAIT_S)
    wrong.close(timeout=1)
    assert metric(broker, "osprey_sasl_authentication_failures_total",
                  listener="SASL_PLAINTEXT", mechanism=mechanism) >= 1
    still_serves(broker)


def test_kafka_configs_adds_a_scram_user_that_logs_in(start_sasl):
    skip_without_kafka_tools()
    broker = start_sasl(mechanisms="SCRAM-SHA-512")
    added = java("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", broker.bootstrap, "--alter",
                 "--add-config", "SCRAM-SHA-512=[password=alice-secret]", "--entity-type", "users",
                 "--entity-name", "alice")
    assert added.returncode == 0, added.stdout[-2000:] + added.stderr[-3000:]
    produce_and_consume(rdkafka_sasl(broker, mechanism="SCRAM-SHA-512"), count=3)
    deleted = java("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", broker.bootstrap, "--alter",
                   "--delete-config", "SCRAM-SHA-512", "--entity-type", "users", "--entity-name", "alice")
    assert deleted.returncode == 0, deleted.stdout[-2000:] + deleted.stderr[-3000:]
    refused(rdkafka_sasl(broker, mechanism="SCRAM-SHA-512"))


def java_sasl_properties(path, mechanism: str, user: str, password: str) -> str:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    path.write_text("security.protocol=SASL_PLAINTEXT\n"
                    f"sasl.mechanism={mechanism}\n"
                    f'sasl.jaas.config={module} required username="{user}" password="{password}";\n'
                    "default.api.timeout.ms=30000\nrequest.timeout.ms=10000\n")
    return str(path)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_java_client_produces_and_consumes_over_sasl(start_sasl, tmp_path, mechanism):
    skip_without_kafka_tools()
    broker = start_sasl(mechanisms="PLAIN,SCRAM-SHA-256")
    if mechanism != "PLAIN":
        upsert = UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-secret")
        assert alter_scram(broker, upsert) == {"alice": None}
    props = java_sasl_properties(tmp_path / "client.properties", mechanism, "alice", "alice-secret")
    topic = f"java-sasl-{uuid.uuid4().hex[:8]}"
    created = java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.sasl_bootstrap,
                   "--command-config", props, "--create", "--topic", topic, "--partitions", "1")
    assert created.returncode == 0, created.stderr[-3000:]
    produced = java("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", broker.sasl_bootstrap,
                    "--command-config", props, "--topic", topic, input="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr[-3000:]
    consumed = java("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", broker.sasl_bootstrap,
                    "--command-config", props, "--topic", topic, "--from-beginning",
                    "--max-messages", "3", "--timeout-ms", "30000")
    assert consumed.stdout.split() == ["one", "two", "three"], consumed.stderr[-3000:]
    wrong = java_sasl_properties(tmp_path / "wrong.properties", mechanism, "alice", "wrong")
    listed = java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.sasl_bootstrap,
                  "--command-config", wrong, "--list")
    assert listed.returncode != 0
    assert "Authentication failed" in listed.stdout + listed.stderr, listed.stderr[-3000:]


def test_a_cluster_broker_forwards_scram_users_to_the_controller_and_every_broker_logs_them_in(tmp_path):
    """Three combined nodes, each with a SASL_PLAINTEXT client listener beside the
    PLAINTEXT one (which brokers use between them): a SCRAM user created through one
    broker (AlterUserScramCredentials forwarded to the active controller) logs in on
    every broker once the metadata reached it."""
    from cluster import combined, listed_brokers

    c = combined(tmp_path)
    for n in c.nodes:
        n.sasl_port = free_port()
        listeners = f"PLAINTEXT://{HOST}:{n.port},SASL_PLAINTEXT://{HOST}:{n.sasl_port}"
        n.write_config(c.voters, {
            "listeners": f"{listeners},CONTROLLER://{HOST}:{n.controller_port}",
            "advertised.listeners": listeners,
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        })
    try:
        c.start()
        want = {n.node_id for n in c.brokers}
        c.wait_for("every broker lists every broker", lambda: all(listed_brokers(n) == want for n in c.brokers))
        first = c.brokers[0]
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        upsert = UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret")
        admin.alter_user_scram_credentials([upsert])["alice"].result(timeout=WAIT_S)
        for n in c.brokers:
            n.sasl_bootstrap = f"{HOST}:{n.sasl_port}"

            def logs_in(n=n):
                try:
                    config = dict(rdkafka_sasl(n, mechanism="SCRAM-SHA-512"), **{"bootstrap.servers": n.sasl_bootstrap})
                    return bool(AdminClient(config).list_topics(timeout=5).brokers)
                except KafkaException:
                    return False

            c.wait_for(f"alice logs in on broker {n.node_id}", logs_in)
        c.stop()
    finally:
        c.kill_all()


def sasl_inter_broker_cluster(tmp_path, mechanism: str, jaas_of, extra=None):
    """Three combined nodes whose brokers reach each other over an INTERNAL
    SASL_PLAINTEXT listener, logging in with `mechanism` as the JAAS config
    `jaas_of(node)` says; clients use the PLAINTEXT one."""
    return internal_listener_cluster(tmp_path, "SASL_PLAINTEXT", lambda n: {
        "sasl.enabled.mechanisms": mechanism,
        "sasl.mechanism.inter.broker.protocol": mechanism,
        f"listener.name.internal.{mechanism.lower()}.sasl.jaas.config": jaas_of(n),
        "replica.lag.time.max.ms": 3000,
        **(extra or {}),
    })


def replicated_topic(node, name: str, replicas):
    """Creates `name` with one partition on `replicas` (the first leads) and
    min.insync.replicas 2, through `node`."""
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": node.bootstrap})  # outlives its future
    topic = NewTopic(name, 1, -1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})
    admin.create_topics([topic], request_timeout=WAIT_S)[name].result(timeout=WAIT_S)


def test_brokers_log_in_to_each_other_with_plain_and_one_with_a_wrong_password_is_kept_out(tmp_path):
    """sasl.mechanism.inter.broker.protocol=PLAIN: nodes 1 and 2 log in to each other as
    `broker` and replicate; node 3 logs in with a wrong password, is refused by node 1
    (counted and logged there), says why in its own log, and leaves the ISR, while the
    partition keeps taking acks=all writes."""
    from cluster import partition_states

    def jaas(n):
        password = "wrong" if n.node_id == 3 else "broker-secret"
        return ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
                f'password="{password}" user_broker="broker-secret";')

    c = sasl_inter_broker_cluster(tmp_path, "PLAIN", jaas)
    try:
        c.start()
        first, _, third = c.brokers
        c.wait_for("the topic created", lambda: _try(lambda: replicated_topic(first, "internal-plain", [1, 2, 3])))
        c.wait_for("node 3 out of the ISR, node 2 in it",
                   lambda: sorted((partition_states(first, "internal-plain") or {}).get(0, (None, None, []))[2])
                   == [1, 2])
        produce_and_consume({"bootstrap.servers": first.bootstrap}, topic="internal-plain")
        assert "SASL login failed with PLAIN as broker" in third.log_tail(2000), third.log_tail(200)
        assert "wrong password for user broker" in first.log_tail(2000), first.log_tail(200)
        assert first.counter("osprey_sasl_authentication_failures_total") >= 1
        c.stop()
    finally:
        c.kill_all()


def test_brokers_log_in_to_each_other_with_scram_once_the_credential_exists(tmp_path):
    """sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512, whose users live in the
    metadata: the brokers' user is created through one broker (forwarded to the
    controller, over the controller listener), then a partition on all three nodes
    replicates, every follower in the ISR, and takes acks=all writes (the INTERNAL
    listener serves nothing before a login, so followers in the ISR have logged in).
    Sessions last 4 s (connections.max.reauth.ms): the brokers' connections are
    replaced before theirs expire, and none is closed for an expired session."""
    from cluster import partition_states

    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            'password="broker-secret";')
    c = sasl_inter_broker_cluster(tmp_path, "SCRAM-SHA-512", lambda n: jaas, {"connections.max.reauth.ms": 4000})
    try:
        c.start()
        first = c.brokers[0]
        upsert = UserScramCredentialUpsertion(
            "broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"broker-secret")
        admin = AdminClient({"bootstrap.servers": first.bootstrap})  # outlives its futures
        c.wait_for("the brokers' credential created", lambda: _try(
            lambda: admin.alter_user_scram_credentials([upsert])["broker"].result(timeout=WAIT_S)))
        c.wait_for("the topic created", lambda: _try(lambda: replicated_topic(first, "internal-scram", [2, 3, 1])))
        c.wait_for("every replica in the ISR",
                   lambda: sorted((partition_states(first, "internal-scram") or {}).get(0, (None, None, []))[2])
                   == [1, 2, 3])
        produce_and_consume({"bootstrap.servers": first.bootstrap}, topic="internal-scram")

        def connected(n):
            return n.counter("osprey_interbroker_connection_attempts_total") - n.counter(
                "osprey_interbroker_connection_failures_total")

        follower = c.node(3)
        before = connected(follower)
        c.wait_for("the follower's connection replaced three times", lambda: connected(follower) >= before + 3)
        produce_and_consume({"bootstrap.servers": first.bootstrap}, topic="internal-scram", count=5)
        for n in c.brokers:
            assert "without re-authentication" not in n.log_tail(5000), n.log_tail(100)
        c.stop()
    finally:
        c.kill_all()


def _try(action) -> bool:
    """Whether `action` ran without a Kafka error (for polling what may fail at first)."""
    try:
        action()
        return True
    except KafkaException:
        return False


def test_scram_credential_errors_are_kafkas(start_sasl):
    broker = start_sasl(mechanisms="SCRAM-SHA-512")
    outcome = alter_scram(
        broker,
        UserScramCredentialUpsertion("weak", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1024), b"pw"),
        UserScramCredentialDeletion("ghost", ScramMechanism.SCRAM_SHA_512),
    )
    print(outcome)
    assert outcome["weak"] is not None and "iterations" in outcome["weak"].str()
    assert outcome["ghost"] is not None and "does not exist" in outcome["ghost"].str()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException):
        admin.describe_user_scram_credentials(["ghost"])["ghost"].result(timeout=WAIT_S)


# ----- config errors ------------------------------------------------------------------


def start_fails(tmp_path, overrides: dict) -> str:
    b = Broker(tmp_path / f"fail-{uuid.uuid4().hex[:6]}", overrides)
    b.workdir.mkdir(parents=True)
    b.spawn()
    try:
        code = b.proc.wait(timeout=WAIT_S)
    except Exception:
        b.proc.kill()
        raise
    assert code != 0
    return b.log_text()


def test_gssapi_default_and_missing_plain_users_stop_the_start(tmp_path, monkeypatch):
    add_listener(monkeypatch, "SASL_PLAINTEXT")
    log = start_fails(tmp_path, {})
    assert "sasl.enabled.mechanisms" in log and "GSSAPI" in log, log[-2000:]
    log = start_fails(tmp_path, {"sasl.enabled.mechanisms": "PLAIN"})
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in log, log[-2000:]
