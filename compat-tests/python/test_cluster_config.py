"""Cluster configuration and start-up, on the real binary: issue 14's 3-node example
starts a cluster, a broker waits for its controllers, bad cluster configs fail
naming the key, `osprey format` then start, a directory of another cluster or node is
refused, an old meta.properties is upgraded, and every listener is bound on port 0."""

import os
import re
import signal
import socket
import subprocess
import time

import kafkawire
from conftest import _ANSI, Broker, free_port, osprey_bin

READY = re.compile(r"osprey is ready.*? listener=(\S+) listeners=(\S+)")


def run(*args, timeout=30):
    """Runs the binary to completion; returns (exit code, stdout + stderr)."""
    env = dict(os.environ, NO_COLOR="1")
    p = subprocess.run([str(osprey_bin()), *args], capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout + p.stderr


def overrides(pairs):
    args = []
    for key, value in pairs.items():
        args += ["--override", f"{key}={value}"]
    return args


def meta_properties(directory):
    text = (directory / "meta.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def issue_example(node, data_dir, ports):
    """Issue 14's 3-node example for `node`, on free ports."""
    voters = ",".join(f"{n}@127.0.0.1:{ports[n]['controller']}" for n in (1, 2, 3))
    p = ports[node]
    return {
        "node.id": node,
        "process.roles": "broker,controller",
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{p['client']},CONTROLLER://127.0.0.1:{p['controller']}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{p['client']}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir),
        "metrics.listener": "",
    }


def start_logged(args, log_path):
    log = open(log_path, "wb")
    return subprocess.Popen([str(osprey_bin()), *args], stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, NO_COLOR="1"))


def wait_for_log(proc, log_path, pattern, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        text = _ANSI.sub("", log_path.read_text())
        found = re.search(pattern, text)
        if found:
            return found
        assert proc.poll() is None, text
        assert time.monotonic() < deadline, text
        time.sleep(0.05)


def test_issue_14_example_starts_a_three_node_cluster(tmp_path):
    """The issue's example, as given (on free ports): three combined nodes on empty
    directories, no format step, form one cluster; every broker lists all three."""
    from confluent_kafka.admin import AdminClient

    ports = {n: {"client": free_port(), "controller": free_port()} for n in (1, 2, 3)}
    procs = {}
    try:
        for node in (1, 2, 3):
            args = overrides(issue_example(node, tmp_path / f"node{node}", ports))
            procs[node] = start_logged(args, tmp_path / f"node{node}.log")
        for node, proc in procs.items():
            wait_for_log(proc, tmp_path / f"node{node}.log", READY)
        ids = {meta_properties(tmp_path / f"node{n}")["cluster.id"] for n in (1, 2, 3)}
        assert len(ids) == 1, ids
        for node in (1, 2, 3):
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[node]['client']}"})
            deadline = time.monotonic() + 30
            while True:
                brokers = admin.list_topics(timeout=10).brokers
                if sorted(brokers) == [1, 2, 3]:
                    break
                assert time.monotonic() < deadline, f"node {node} lists brokers {sorted(brokers)}"
                time.sleep(0.2)
            assert {b.port for b in brokers.values()} == {ports[n]["client"] for n in (1, 2, 3)}
    finally:
        for node, proc in procs.items():
            proc.send_signal(signal.SIGTERM)
        codes = {node: proc.wait(timeout=60) for node, proc in procs.items()}
    assert codes == {1: 0, 2: 0, 3: 0}, {n: (tmp_path / f"node{n}.log").read_text()[-3000:] for n in procs}


def test_a_broker_waits_for_its_controllers_and_says_so(tmp_path):
    """A broker-only node whose controllers are not up does not serve: it says it waits
    for the quorum, and SIGTERM stops it cleanly."""
    voters = f"1@127.0.0.1:{free_port()},2@127.0.0.1:{free_port()},3@127.0.0.1:{free_port()}"
    broker_only = {
        "node.id": 4,
        "process.roles": "broker",
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
        "log.dirs": str(tmp_path / "b4"),
        "metrics.listener": "",
    }
    log_path = tmp_path / "b4.log"
    proc = start_logged(overrides(broker_only), log_path)
    try:
        wait_for_log(proc, log_path, r"waiting for the controller quorum \(controller.quorum.voters\) to form")
        assert "osprey is ready" not in log_path.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log_path.read_text()
    assert not (tmp_path / "b4" / "meta.properties").exists(), "no cluster id yet: nothing written"


def test_bad_cluster_configs_fail_naming_the_key(tmp_path):
    voters = "1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093"
    cases = [
        # A controller must be one of the voters.
        ({"node.id": 4, "controller.quorum.voters": voters,
          "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "controller.listener.names": "CONTROLLER"},
         "controller.quorum.voters", "this node's id 4"),
        # A broker-only node is never a voter.
        ({"node.id": 2, "process.roles": "broker", "controller.quorum.voters": voters,
          "controller.listener.names": "CONTROLLER"},
         "controller.quorum.voters", "without this node's id 2"),
        # A broker-only node must know the controllers' listener name.
        ({"node.id": 4, "process.roles": "broker", "controller.quorum.voters": voters},
         "controller.listener.names", "process.roles=broker"),
        # Split roles need voters or bootstrap servers.
        ({"process.roles": "controller"}, "process.roles", "controller.quorum.bootstrap.servers"),
        # Malformed voters.
        ({"controller.quorum.voters": "1@127.0.0.1"}, "controller.quorum.voters", "{id}@{host}:{port}"),
        # The controller listener cannot be the inter-broker listener.
        ({"listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "controller.listener.names": "CONTROLLER",
          "inter.broker.listener.name": "CONTROLLER"},
         "inter.broker.listener.name", "advertised.listeners"),
    ]
    for i, (config, key, fragment) in enumerate(cases):
        config = {"log.dirs": str(tmp_path / f"d{i}"), "metrics.listener": "", **config}
        code, out = run(*overrides(config))
        assert code == 2, f"{config}: {out}"
        assert f"`{key}`" in out and fragment in out, f"{config}: {out}"
        assert not (tmp_path / f"d{i}").exists()


def test_random_uuid_prints_kafka_style_ids():
    ids = set()
    for _ in range(3):
        code, out = run("random-uuid")
        assert code == 0, out
        ids.add(out.strip())
    assert len(ids) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) and not i.startswith("-") for i in ids), ids


def started(workdir, overrides=None):
    """A broker on `workdir` (which may already hold formatted directories)."""
    return Broker(workdir, overrides).start()


def test_format_then_start_keeps_the_cluster_id(tmp_path):
    code, out = run("random-uuid")
    cluster_id = out.strip()
    data = tmp_path / "broker0" / "data"
    meta = tmp_path / "broker0" / "metadata"
    fmt = ["format", "--cluster-id", cluster_id, "--override", f"log.dirs={data}", "--override", f"metadata.log.dir={meta}"]
    code, out = run(*fmt)
    assert code == 0, out
    assert f"Formatting data directory {data}" in out and f"Formatting metadata directory {meta}" in out, out
    formatted = {d: meta_properties(d) for d in (data, meta)}
    for props in formatted.values():
        assert props["cluster.id"] == cluster_id and props["node.id"] == "1" and props["version"] == "1", props
    assert formatted[data]["directory.id"] != formatted[meta]["directory.id"]

    # Formatting again fails, unless told to skip formatted directories.
    code, out = run(*fmt)
    assert code == 1 and "already formatted" in out and "--ignore-formatted" in out, out
    code, out = run(*fmt, "--ignore-formatted")
    assert code == 0 and "already formatted" in out, out

    b = started(tmp_path / "broker0", {"metadata.log.dir": str(meta)})
    try:
        assert f"cluster_id={cluster_id}" in b.log_since_last_start()
        assert (meta / "__cluster_metadata-0").is_dir(), "the metadata log lives in metadata.log.dir"
        assert not (data / "__cluster_metadata-0").exists()
        b.restart()
        assert {d: meta_properties(d) for d in (data, meta)} == formatted, "ids are kept across starts"
    finally:
        b.stop()


def test_a_directory_of_another_cluster_or_node_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ids = []
    for d in (a, b):
        code, out = run("random-uuid")
        ids.append(out.strip())
        code, out = run("format", "-t", ids[-1], "--override", f"log.dirs={d}")
        assert code == 0, out
    before = {d: (d / "meta.properties").read_text() for d in (a, b)}
    code, out = run("--override", f"log.dirs={a},{b}", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                    "--override", "metrics.listener=")
    assert code == 1, out
    assert ids[0] in out and ids[1] in out and "cluster" in out, out
    code, out = run("--override", f"log.dirs={a}", "--override", "node.id=7",
                    "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", "metrics.listener=")
    assert code == 1, out
    assert "node.id=1" in out and "node.id=7" in out, out
    assert {d: (d / "meta.properties").read_text() for d in (a, b)} == before
    assert sorted(p.name for p in a.iterdir()) == ["meta.properties"], "a refused start writes nothing"


def test_an_old_osprey_meta_properties_is_upgraded_in_place(tmp_path):
    data = tmp_path / "broker0" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text(
        "# Written by osprey. Do not edit.\nversion=1\ncluster.id=Gx6yo2ctTU2nUtxsNaTT-w\nnode.id=1\n")
    b = started(tmp_path / "broker0")
    try:
        props = meta_properties(data)
        assert props["cluster.id"] == "Gx6yo2ctTU2nUtxsNaTT-w" and props["node.id"] == "1", props
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", props["directory.id"]), props
        assert "cluster_id=Gx6yo2ctTU2nUtxsNaTT-w" in b.log_since_last_start()
        b.restart()
        assert meta_properties(data) == props, "the new directory id is kept"
    finally:
        b.stop()


def test_every_listener_is_bound_on_port_0_and_reported(tmp_path):
    log_path = tmp_path / "osprey.log"
    args = [str(osprey_bin()), *overrides({
        "listeners": "PLAINTEXT://127.0.0.1:0,SECOND://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECOND:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(tmp_path / "data"),
        "metrics.listener": "",
    })]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, NO_COLOR="1"))
    try:
        deadline = time.monotonic() + 30
        ready = None
        while ready is None:
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            ready = READY.search(_ANSI.sub("", log_path.read_text()))
            time.sleep(0.05)
        first, listeners = ready.group(1), dict(l.split("://") for l in ready.group(2).split(","))
        assert set(listeners) == {"PLAINTEXT", "SECOND", "CONTROLLER"}, listeners
        ports = {name: int(addr.rsplit(":", 1)[1]) for name, addr in listeners.items()}
        assert all(p != 0 for p in ports.values()) and len(set(ports.values())) == 3, ports
        assert first == listeners["PLAINTEXT"], "the first client listener keeps the `listener=` field"
        for name in ("PLAINTEXT", "SECOND"):
            with kafkawire.Conn("127.0.0.1", ports[name], timeout=5.0) as c:
                correlation_id, error_code, ranges = kafkawire.parse_api_versions_v0(
                    c.roundtrip(kafkawire.api_versions_v0(3)))
                assert (correlation_id, error_code) == (3, 0) and kafkawire.API_PRODUCE in ranges, name
        # The controller listener is bound but serves nothing until the quorum exists:
        # it accepts and closes, so a client is not left waiting.
        with socket.create_connection(("127.0.0.1", ports["CONTROLLER"]), timeout=5.0) as s:
            try:
                s.sendall(kafkawire.api_versions_v0(4))
                answer = s.recv(4)
            except (ConnectionResetError, BrokenPipeError):
                answer = b""  # closed before or after the request arrived: the same answer
            assert answer == b"", "the controller listener must not answer yet"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log_path.read_text()
