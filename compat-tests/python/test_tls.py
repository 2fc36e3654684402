"""TLS listeners (issue 18): an SSL listener next to the PLAINTEXT one, served by rustls
with Kafka's `ssl.*` keys (PEM stores), driven by real clients over real sockets.

- librdkafka (confluent-kafka) produces and consumes over TLS, and over mutual TLS
  (`ssl.client.auth=required`, a client certificate);
- the Java client (Kafka 4.4's kafka-topics and console producer/consumer) over TLS
  with a PEM trust store;
- refused, each with a clear error on the client's side, while the broker keeps serving:
  a client trusting another CA, an expired server certificate, an expired client
  certificate, no client certificate when one is required, a plaintext client on the
  TLS port;
- garbage before the handshake, and 1,000 TCP connections that never send a
  ClientHello: each is closed (the handshake deadline), and a TLS client is served
  afterwards;
- reload: the key store file is replaced, and a new connection sees the new
  certificate while the broker did not restart;
- inter-broker TLS, and an SSL controller listener over which three controllers form
  their quorum and two brokers register, client certificates required;
- config errors: an SSL listener without a key store, an unknown cipher suite name.

Certificates are made by the test with the `openssl` command (a CA, server and client
certificates signed by it, expired ones with `openssl ca -startdate/-enddate`). Ports
are free ones; every wait polls until true.
"""

import os
import shutil
import socket
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from cluster import KAFKA_LIB, skip_without_kafka_tools
from conftest import Broker, free_port, osprey_bin

pytestmark = pytest.mark.timeout(300)

HOST = "127.0.0.1"
WAIT_S = 30.0


# ----- certificates -------------------------------------------------------------------


def run(*args, cwd=None):
    subprocess.run(args, check=True, capture_output=True, cwd=cwd)


class Pki:
    """A CA in `dir` and certificates it signs, made with the openssl command."""

    def __init__(self, dir: Path, name: str = "Osprey Test CA"):
        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)
        (dir / "newcerts").mkdir(exist_ok=True)
        (dir / "index.txt").write_text("")
        (dir / "serial").write_text(uuid.uuid4().hex[:16] + "\n")
        self.ca_key = dir / "ca.key"
        self.ca_pem = dir / "ca.pem"
        run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(self.ca_key), "-out", str(self.ca_pem), "-days", "30", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        (dir / "ca.cnf").write_text(f"""
[ ca ]
default_ca = CA_default
[ CA_default ]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir/newcerts
serial = $dir/serial
default_md = sha256
policy = policy_any
unique_subject = no
email_in_dn = no
[ policy_any ]
commonName = supplied
organizationName = optional
organizationalUnitName = optional
countryName = optional
[ leaf ]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
""")

    def issue(self, name: str, subject: str, start: str = None, end: str = None) -> tuple:
        """A key and a certificate for `subject` (`/C=US/O=Org/CN=x`), valid from `start` to
        `end` (openssl's YYMMDDHHMMSSZ; default: from an hour ago for 30 days). Returns
        (key path, certificate path, one PEM file with both: a Kafka PEM key store)."""
        key = self.dir / f"{name}.key"
        csr = self.dir / f"{name}.csr"
        cert = self.dir / f"{name}.pem"
        run("openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", subject)
        dates = ["-startdate", start or time.strftime("%y%m%d%H%M%SZ", time.gmtime(time.time() - 3600))]
        dates += ["-enddate", end] if end else ["-days", "30"]
        run("openssl", "ca", "-batch", "-config", str(self.dir / "ca.cnf"), "-extensions", "leaf", "-preserveDN",
            "-notext", "-keyfile", str(self.ca_key), "-cert", str(self.ca_pem), "-in", str(csr), "-out", str(cert),
            *dates)
        # The PKCS#8 form of the key, which Java reads too.
        pkcs8 = self.dir / f"{name}.p8.key"
        run("openssl", "pkcs8", "-topk8", "-nocrypt", "-in", str(key), "-out", str(pkcs8))
        store = self.dir / f"{name}.keystore.pem"
        store.write_text(pkcs8.read_text() + cert.read_text())
        return pkcs8, cert, store


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make certificates")
    root = tmp_path_factory.mktemp("pki")
    p = Pki(root / "ca")
    p.server = p.issue("server", "/C=US/O=Osprey/CN=localhost")
    p.client = p.issue("client", "/C=US/O=Osprey/OU=Clients/CN=alice")
    p.expired_server = p.issue("expired-server", "/CN=localhost", start="200101000000Z", end="200102000000Z")
    p.expired_client = p.issue("expired-client", "/CN=old", start="200101000000Z", end="200102000000Z")
    p.other = Pki(root / "other", name="Another CA")
    p.other.server = p.other.issue("server", "/CN=localhost")
    p.other.client = p.other.issue("client", "/CN=mallory")
    return p


# ----- brokers ------------------------------------------------------------------------


def add_listener(monkeypatch, name: str) -> int:
    """Brokers started from now on in this test get listener `name` (mapped to the
    protocol of the same name: SSL, SASL_PLAINTEXT, SASL_SSL) on the returned port beside
    their PLAINTEXT one, on which the fixture checks readiness."""
    port = free_port()
    original = Broker.command

    def command(self):
        args = original(self)
        i = args.index(f"listeners=PLAINTEXT://{self.host}:{self.port}")
        args[i] = f"listeners=PLAINTEXT://{self.host}:{self.port},{name}://{self.host}:{port}"
        return args

    monkeypatch.setattr(Broker, "command", command)
    return port


def add_ssl_listener(monkeypatch) -> int:
    """An SSL listener beside the PLAINTEXT one (see `add_listener`)."""
    return add_listener(monkeypatch, "SSL")


@pytest.fixture
def start_tls(start_broker, monkeypatch):
    """`start_tls(keystore, **ssl_keys)`: a broker with PLAINTEXT and SSL listeners;
    `ssl_keys` are `listener.name.ssl.ssl.*` settings, `_` standing for `.`."""

    def start(keystore: Path, **ssl_keys):
        ssl_port = add_ssl_listener(monkeypatch)
        overrides = {"listener.name.ssl.ssl.keystore.location": str(keystore)}
        for key, value in ssl_keys.items():
            overrides[f"listener.name.ssl.ssl.{key.replace('_', '.')}"] = value
        broker = start_broker(overrides)
        broker.ssl_port = ssl_port
        broker.ssl_bootstrap = f"{HOST}:{ssl_port}"
        return broker

    return start


def rdkafka_ssl(pki, broker, **extra) -> dict:
    config = {
        "bootstrap.servers": broker.ssl_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_pem),
    }
    config.update(extra)
    return config


def with_client_cert(pki, cert=None) -> dict:
    key, pem, _ = cert or pki.client
    return {"ssl.key.location": str(key), "ssl.certificate.location": str(pem)}


def produce_and_consume(config: dict, count: int = 20, topic=None):
    """Produces `count` records with acks=all to `topic` (a new one by default) and
    consumes them back in order."""
    topic = topic or f"tls-{uuid.uuid4().hex[:8]}"
    errors = []
    p = Producer(dict(config, **{"acks": "all", "error_cb": errors.append}))
    for i in range(count):
        p.produce(topic, value=f"m{i}".encode())
    assert p.flush(WAIT_S) == 0, f"messages left unsent: {errors}"
    c = Consumer(dict(config, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
    finally:
        c.close()
    assert got == [f"m{i}" for i in range(count)]


def refused(config: dict, timeout: float = 10.0) -> str:
    """The errors librdkafka reports when a client with `config` tries to list topics,
    which must fail."""
    errors = []
    admin = AdminClient(dict(config, **{"error_cb": lambda e: errors.append(str(e))}))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=timeout)
    admin.poll(1.0)  # serves the error callbacks
    print("client-side errors:", errors)
    return " | ".join(errors)


def python_tls(port: int, cafile: Path, cert=None) -> ssl.SSLSocket:
    """A handshake with Python's ssl module (OpenSSL), for what it shows of the server."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    if cert:
        ctx.load_cert_chain(str(cert[1]), str(cert[0]))
    raw = socket.create_connection((HOST, port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def still_serves(pki, broker):
    """The broker answers a TLS client (and its PLAINTEXT listener) after what went before."""
    admin = AdminClient(rdkafka_ssl(pki, broker))
    assert admin.list_topics(timeout=WAIT_S).brokers
    plain = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert plain.list_topics(timeout=WAIT_S).brokers


def metric(broker, name: str, **labels) -> float:
    import urllib.request

    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# ----- librdkafka ---------------------------------------------------------------------


def test_librdkafka_produces_and_consumes_over_tls(pki, start_tls):
    broker = start_tls(pki.server[2])
    produce_and_consume(rdkafka_ssl(pki, broker))
    # The certificate the broker presents is the key store's, verified for 127.0.0.1.
    with python_tls(broker.ssl_port, pki.ca_pem) as s:
        assert dict(x[0] for x in s.getpeercert()["subject"])["commonName"] == "localhost"


def test_librdkafka_over_mutual_tls_and_the_principal_from_the_certificate(pki, start_tls):
    broker = start_tls(
        pki.server[2],
        truststore_location=str(pki.ca_pem),
        client_auth="required",
        principal_mapping_rules="RULE:^CN=([^,]*),OU=Clients,.*$/$1/U,DEFAULT",
    )
    produce_and_consume(rdkafka_ssl(pki, broker, **with_client_cert(pki)))


def test_principal_is_logged_at_debug_on_connect(pki, monkeypatch, tmp_path):
    ssl_port = add_ssl_listener(monkeypatch)
    broker = Broker(tmp_path / "b", {
        "ssl.keystore.location": str(pki.server[2]),
        "ssl.truststore.location": str(pki.ca_pem),
        "ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=Clients,.*$/$1/U,DEFAULT",
    }, env={"OSPREY_LOG": "info,osprey_server::tls=debug"})
    broker.workdir.mkdir(parents=True)
    broker.start()
    try:
        broker.ssl_bootstrap = f"{HOST}:{ssl_port}"
        broker.ssl_port = ssl_port
        # With a certificate: User:ALICE (the rule, upper-cased); without one: ANONYMOUS.
        produce_and_consume(rdkafka_ssl(pki, broker, **with_client_cert(pki)), count=1)
        AdminClient(rdkafka_ssl(pki, broker)).list_topics(timeout=WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            log = broker.log_text()
            if "principal=User:ALICE" in log and "principal=User:ANONYMOUS" in log:
                break
            time.sleep(0.2)
        log = broker.log_text()
        assert "principal=User:ALICE" in log, log[-3000:]
        assert "principal=User:ANONYMOUS" in log, log[-3000:]
    finally:
        broker.stop()


# ----- the Java client ----------------------------------------------------------------


def java(main_class: str, *args: str, input: str = None, timeout: float = 90.0):
    return subprocess.run(["java", "-cp", f"{KAFKA_LIB}/*", main_class, *args], capture_output=True, text=True,
                          input=input, timeout=timeout)


def java_ssl_properties(path: Path, ca_pem: Path) -> Path:
    """A Java client's --command-config for TLS, trusting `ca_pem` (a PEM trust store)."""
    path.write_text("security.protocol=SSL\nssl.truststore.type=PEM\n"
                    f"ssl.truststore.location={ca_pem}\n"
                    "default.api.timeout.ms=30000\nrequest.timeout.ms=10000\n")
    return path


def test_java_client_over_tls_with_a_pem_truststore(pki, start_tls, tmp_path):
    skip_without_kafka_tools()
    broker = start_tls(pki.server[2])
    props = java_ssl_properties(tmp_path / "client-ssl.properties", pki.ca_pem)
    topic = f"java-tls-{uuid.uuid4().hex[:8]}"
    created = java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.ssl_bootstrap,
                   "--command-config", str(props), "--create", "--topic", topic, "--partitions", "1")
    assert created.returncode == 0, created.stderr[-3000:]
    produced = java("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", broker.ssl_bootstrap,
                    "--command-config", str(props), "--topic", topic, input="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr[-3000:]
    consumed = java("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", broker.ssl_bootstrap,
                    "--command-config", str(props), "--topic", topic, "--from-beginning",
                    "--max-messages", "3", "--timeout-ms", "30000")
    assert consumed.stdout.split() == ["one", "two", "three"], consumed.stderr[-3000:]


def test_java_client_trusting_another_ca_is_refused(pki, start_tls, tmp_path):
    skip_without_kafka_tools()
    broker = start_tls(pki.server[2])
    props = java_ssl_properties(tmp_path / "wrong-ca.properties", pki.other.ca_pem)
    listed = java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.ssl_bootstrap,
                  "--command-config", str(props), "--list", timeout=60)
    output = listed.stdout + listed.stderr
    assert listed.returncode != 0, output[-3000:]
    assert "SSL handshake failed" in output or "PKIX path" in output, output[-3000:]
    still_serves(pki, broker)


# ----- refusals -----------------------------------------------------------------------


def test_client_trusting_another_ca_is_refused(pki, start_tls):
    broker = start_tls(pki.server[2])
    errors = refused(rdkafka_ssl(pki, broker, **{"ssl.ca.location": str(pki.other.ca_pem)}))
    assert "certificate verify failed" in errors, errors
    still_serves(pki, broker)


def test_expired_server_certificate_is_refused_by_the_client(pki, start_tls):
    broker = start_tls(pki.expired_server[2])
    errors = refused(rdkafka_ssl(pki, broker))
    assert "certificate verify failed" in errors, errors
    # The PLAINTEXT listener still serves.
    assert AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=WAIT_S).brokers


def test_expired_or_foreign_client_certificate_and_none_when_required_are_refused(pki, start_tls):
    broker = start_tls(pki.server[2], truststore_location=str(pki.ca_pem), client_auth="required")
    before = metric(broker, "osprey_tls_handshake_failures_total")
    # The broker's alert, as librdkafka reports it. (A certificate of another CA: the
    # client may hold it back, since it is not from a CA the server's request names.)
    for cert, alerts in ((pki.expired_client, ["alert certificate expired"]),
                         (pki.other.client, ["alert unknown ca", "alert certificate required"]),
                         (None, ["alert certificate required"])):
        config = rdkafka_ssl(pki, broker, **(with_client_cert(pki, cert) if cert else {}))
        errors = refused(config)
        assert any(alert in errors for alert in alerts), errors
    # Python's ssl shows the alert's name for the missing certificate (TLS 1.3: on first read).
    with pytest.raises((ssl.SSLError, ConnectionError)) as e:
        with python_tls(broker.ssl_port, pki.ca_pem) as s:
            s.sendall(b"\x00\x00\x00\x00")
            s.recv(1)
    assert "CERTIFICATE_REQUIRED" in str(e.value).upper() or "certificate required" in str(e.value), e.value
    assert metric(broker, "osprey_tls_handshake_failures_total", listener="SSL", reason="client_certificate") >= 3
    assert metric(broker, "osprey_tls_handshake_failures_total") > before
    produce_and_consume(rdkafka_ssl(pki, broker, **with_client_cert(pki)), count=3)


def test_plaintext_client_on_the_tls_port_is_refused(pki, start_tls):
    broker = start_tls(pki.server[2])
    errors = refused({"bootstrap.servers": broker.ssl_bootstrap}, timeout=8.0)
    assert errors, "librdkafka reported nothing"
    assert metric(broker, "osprey_tls_handshake_failures_total", listener="SSL", reason="not_tls") >= 1
    still_serves(pki, broker)


# ----- bad input before the handshake -------------------------------------------------


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_garbage_before_the_handshake_closes_the_connection(pki, start_tls):
    broker = start_tls(pki.server[2])
    for garbage in (os.urandom(512), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\xff\xff" + b"\x00" * 64):
        with socket.create_connection((HOST, broker.ssl_port)) as s:
            s.sendall(garbage)
            assert closed_within(s, 15.0), f"still open after {garbage[:16]!r}"
    still_serves(pki, broker)


def test_a_thousand_connections_that_never_shake_hands_are_closed(pki, start_tls):
    broker = start_tls(pki.server[2])
    rss_before = broker.rss_bytes()
    socks = []
    try:
        for _ in range(1000):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(True)
            s.connect((HOST, broker.ssl_port))
            socks.append(s)
        # While they are held open the broker still serves a TLS client.
        still_serves(pki, broker)
        rss_held = broker.rss_bytes()
        # Each is closed by the handshake deadline (10 s), none left open.
        deadline = time.monotonic() + 60
        open_socks = list(socks)
        while open_socks and time.monotonic() < deadline:
            left = []
            for s in open_socks:
                s.settimeout(0.0)
                try:
                    if s.recv(1) != b"":
                        left.append(s)
                except BlockingIOError:
                    left.append(s)
                except ConnectionResetError:
                    pass
            open_socks = left
            time.sleep(0.5)
        assert not open_socks, f"{len(open_socks)} of 1000 still open after 60 s"
    finally:
        for s in socks:
            s.close()
    timeouts = metric(broker, "osprey_tls_handshake_failures_total", listener="SSL", reason="timeout")
    assert timeouts >= 1000, timeouts
    print(f"RSS before {rss_before >> 20} MiB, with 1000 pending handshakes {rss_held >> 20} MiB")
    assert rss_held - rss_before < 200 << 20
    still_serves(pki, broker)


# ----- reload -------------------------------------------------------------------------


def test_replaced_keystore_is_used_by_new_connections_without_a_restart(pki, start_tls, tmp_path):
    store = tmp_path / "live-keystore.pem"
    shutil.copy(pki.server[2], store)
    broker = start_tls(store)
    pid = broker.pid
    with python_tls(broker.ssl_port, pki.ca_pem) as old:
        old_serial = old.getpeercert()["serialNumber"]
        # A new certificate from the same CA, for the same name; written beside and renamed in.
        _, _, renewed = pki.issue(f"renewed-{uuid.uuid4().hex[:6]}", "/C=US/O=Osprey/CN=localhost")
        staged = tmp_path / "staged.pem"
        shutil.copy(renewed, staged)
        os.replace(staged, store)
        deadline = time.monotonic() + WAIT_S
        new_serial = old_serial
        while new_serial == old_serial and time.monotonic() < deadline:
            time.sleep(0.5)
            with python_tls(broker.ssl_port, pki.ca_pem) as s:
                new_serial = s.getpeercert()["serialNumber"]
        assert new_serial != old_serial, "the broker still presents the old certificate"
        # The connection opened before keeps working with its certificate.
        assert old.getpeercert()["serialNumber"] == old_serial
    assert broker.pid == pid and broker.is_running()
    assert metric(broker, "osprey_tls_reloads_total", listener="SSL", result="success") >= 1
    produce_and_consume(rdkafka_ssl(pki, broker), count=3)


# ----- config errors ------------------------------------------------------------------


def start_fails(tmp_path, *overrides: str) -> str:
    args = [str(osprey_bin()), "--override", f"log.dirs={tmp_path / 'data'}"]
    for o in overrides:
        args += ["--override", o]
    done = subprocess.run(args, capture_output=True, text=True, timeout=30, env=dict(os.environ, NO_COLOR="1"))
    assert done.returncode != 0, done.stderr
    return done.stdout + done.stderr


def test_ssl_listener_without_a_keystore_fails_the_start(tmp_path):
    out = start_fails(tmp_path, f"listeners=SSL://{HOST}:0")
    assert "ssl.keystore.location" in out and "SSL" in out, out


def test_unknown_cipher_suite_name_fails_the_start_naming_it(tmp_path, pki):
    out = start_fails(tmp_path, f"listeners=SSL://{HOST}:0", f"ssl.keystore.location={pki.server[2]}",
                      "ssl.cipher.suites=TLS_AES_128_GCM_SHA256,TLS_NOT_A_SUITE")
    assert "TLS_NOT_A_SUITE" in out and "ssl.cipher.suites" in out, out


def test_bad_stores_fail_the_start_saying_what_to_fix(tmp_path, pki):
    missing = tmp_path / "missing.pem"
    out = start_fails(tmp_path, f"listeners=SSL://{HOST}:0", f"ssl.keystore.location={missing}")
    assert str(missing) in out and "cannot read" in out, out
    mismatched = tmp_path / "mismatched.pem"
    mismatched.write_text(pki.client[0].read_text() + pki.server[1].read_text())
    out = start_fails(tmp_path, f"listeners=SSL://{HOST}:0", f"ssl.keystore.location={mismatched}")
    assert "does not match" in out, out
    out = start_fails(tmp_path, f"listeners=SSL://{HOST}:0", f"ssl.keystore.location={pki.server[2]}",
                      "ssl.keystore.type=JKS")
    assert "PEM" in out and "ssl.keystore.type" in out, out
    # SASL_SSL is TLS first: the same key store is needed.
    out = start_fails(tmp_path, f"listeners=SASL_SSL://{HOST}:0", "sasl.enabled.mechanisms=PLAIN")
    assert "ssl.keystore.location" in out and "SASL_SSL" in out, out


# ----- inter-broker TLS ---------------------------------------------------------------


def internal_listener_cluster(tmp_path, protocol: str, settings_of):
    """Three combined nodes whose brokers reach each other over an INTERNAL listener of
    security protocol `protocol`, configured with `settings_of(node)`; clients use the
    PLAINTEXT one."""
    from cluster import combined

    c = combined(tmp_path)
    for n in c.nodes:
        n.internal_port = free_port()
        listeners = f"PLAINTEXT://{HOST}:{n.port},INTERNAL://{HOST}:{n.internal_port}"
        n.write_config(c.voters, {
            "listeners": f"{listeners},CONTROLLER://{HOST}:{n.controller_port}",
            "advertised.listeners": listeners,
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,INTERNAL:{protocol},CONTROLLER:PLAINTEXT",
            **settings_of(n),
        })
    return c


def test_brokers_replicate_over_an_ssl_inter_broker_listener(pki, tmp_path, monkeypatch):
    """Three combined nodes whose inter-broker listener INTERNAL is SSL with client
    certificates required: a topic with min.insync.replicas=3 takes acks=all writes only
    if every follower fetches over TLS, presenting its key store."""
    from cluster import listed_brokers

    monkeypatch.setenv("OSPREY_LOG", "info,osprey_server::tls=debug")
    c = internal_listener_cluster(tmp_path, "SSL", lambda n: {
        "listener.name.internal.ssl.keystore.location": pki.server[2],
        "listener.name.internal.ssl.truststore.location": pki.ca_pem,
        "listener.name.internal.ssl.client.auth": "required",
    })
    try:
        c.start()
        want = {n.node_id for n in c.brokers}
        c.wait_for("every broker lists every broker", lambda: all(listed_brokers(n) == want for n in c.brokers))
        admin = AdminClient({"bootstrap.servers": c.bootstrap()})
        from confluent_kafka.admin import NewTopic

        topic = "replicated-over-tls"
        admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "3"})],
                            operation_timeout=30)[topic].result(timeout=60)
        p = Producer({"bootstrap.servers": c.bootstrap(), "acks": "all", "message.timeout.ms": 60000})
        errors = []
        for i in range(10):
            p.produce(topic, value=b"x", on_delivery=lambda err, _m: err and errors.append(err))
        assert p.flush(90) == 0 and not errors, errors
        # The followers' fetchers shook hands with their leader, and were named by their certificate.
        logs = "".join(n.log_path.read_text() for n in c.nodes)
        assert "principal=User:CN=localhost,O=Osprey,C=US" in logs, c.logs()
        c.stop()
    finally:
        c.kill_all()


def test_controllers_and_brokers_speak_tls_on_an_ssl_controller_listener(pki, tmp_path):
    """CONTROLLER mapped to SSL with client certificates required: three controller-only
    nodes form their quorum over it (openraft's RPCs in TLS), two broker-only nodes
    register and fetch the metadata over it, and a topic on both brokers takes acks=all
    writes. A plaintext client on a controller port is closed, and the failed handshake
    counted."""
    from cluster import Cluster, Node, listed_brokers

    nodes = [Node(tmp_path, i, "controller") for i in (1, 2, 3)] + [Node(tmp_path, i, "broker") for i in (4, 5)]
    c = Cluster(tmp_path, nodes, {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
        "listener.name.controller.ssl.keystore.location": pki.server[2],
        "listener.name.controller.ssl.truststore.location": pki.ca_pem,
        "listener.name.controller.ssl.client.auth": "required",
    })
    try:
        c.start()
        want = {4, 5}
        c.wait_for("both brokers registered", lambda: all(listed_brokers(n) == want for n in c.brokers))
        from confluent_kafka.admin import NewTopic

        admin = AdminClient({"bootstrap.servers": c.bootstrap()})
        topic = "over-tls-controllers"
        admin.create_topics([NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})],
                            operation_timeout=30)[topic].result(timeout=60)
        produce_and_consume({"bootstrap.servers": c.bootstrap()}, count=5, topic=topic)

        controller = c.node(1)
        with socket.create_connection((HOST, controller.controller_port), timeout=WAIT_S) as s:
            s.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test")  # ApiVersions v0
            answer = b""
            while chunk := s.recv(1024):
                answer += chunk
            # At most a TLS alert record (content type 21), then the close; never a Kafka answer.
            assert answer == b"" or answer[0] == 21, answer
        c.wait_for("the plaintext handshake counted",
                   lambda: controller.gauge("osprey_tls_handshake_failures_total") >= 1)
        c.stop()
    finally:
        c.kill_all()


# ----- encrypted private keys ---------------------------------------------------------


def test_encrypted_pkcs8_key_with_ssl_key_password(pki, start_tls, tmp_path):
    key, cert, _ = pki.server
    encrypted = tmp_path / "server.enc.key"
    run("openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout", "pass:s3cret", "-in", str(key),
        "-out", str(encrypted))
    store = tmp_path / "encrypted-keystore.pem"
    store.write_text(encrypted.read_text() + cert.read_text())
    assert "ENCRYPTED PRIVATE KEY" in store.read_text()
    broker = start_tls(store, key_password="s3cret")
    produce_and_consume(rdkafka_ssl(pki, broker), count=3)
    out = start_fails(tmp_path, f"listeners=SSL://{HOST}:0", f"ssl.keystore.location={store}",
                      "ssl.key.password=wrong")
    assert "cannot decrypt" in out and "ssl.key.password" in out, out
    out = start_fails(tmp_path, f"listeners=SSL://{HOST}:0", f"ssl.keystore.location={store}")
    assert "set ssl.key.password" in out, out
