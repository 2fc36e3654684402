"""Multi-process Osprey clusters for the compatibility tests: controller-only, broker-only
and combined (broker,controller) nodes of the real binary on free ports, each with its own
directory, config file, log and metrics listener; Kafka 4.4's command-line tools run as
separate JVMs against them; raw Metadata v1 requests that ask one node about itself
(librdkafka asks whichever broker it likes).

Kafka's tools need java and Kafka 4.4's jars in `$KAFKA_LIB` (default
bench/scratch/kafka-lib, which compat-tests/run.sh fills through bench/setup.sh);
`skip_without_kafka_tools()` skips a test visibly without them.
"""

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import kafkawire
from conftest import _ANSI, REPO_ROOT, free_port, osprey_bin

KAFKA_LIB = Path(os.environ.get("KAFKA_LIB", REPO_ROOT / "bench" / "scratch" / "kafka-lib"))
# How long a test waits for anything a cluster does (an election, a fence, a rejoin).
WAIT_S = 60.0
STOP_TIMEOUT_S = 30.0
TOOL_TIMEOUT_S = 60.0

QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"
TOPICS_TOOL = "org.apache.kafka.tools.TopicCommand"
REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
FEATURES_TOOL = "org.apache.kafka.tools.FeatureCommand"
LEADER_ELECTION_TOOL = "org.apache.kafka.tools.LeaderElectionCommand"


def skip_without_kafka_tools():
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: Kafka's command-line tools cannot run")
    if not (KAFKA_LIB / "kafka-tools-4.4.0.jar").is_file():
        pytest.skip(f"no Kafka 4.4 jars in {KAFKA_LIB} (set KAFKA_LIB)")


class Node:
    """One osprey process; its ports and directory survive restarts. `roles` is Kafka's
    process.roles: "controller", "broker" or "broker,controller"."""

    def __init__(self, workdir: Path, node_id: int, roles: str):
        self.node_id = node_id
        self.roles = roles
        self.is_broker = "broker" in roles.split(",")
        self.is_controller = "controller" in roles.split(",")
        self.port = free_port() if self.is_broker else None
        self.controller_port = free_port() if self.is_controller else None
        self.metrics_port = free_port()
        self.dir = workdir / f"node-{node_id}"
        self.config = workdir / f"node-{node_id}.properties"
        self.log_path = workdir / f"node-{node_id}.log"
        self.proc = None
        # Where its listeners are, and what runs the binary: the chaos runner puts each
        # node in a network namespace of its own (`ip netns exec NS`) on an address there.
        self.host = "127.0.0.1"
        self.command_prefix = []

    def __repr__(self):
        return f"node {self.node_id} ({self.roles})"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def controller_bootstrap(self) -> str:
        return f"{self.host}:{self.controller_port}"

    def write_config(self, voters: str, extra=None):
        """A server.properties with issue 14's keys for this node's roles."""
        listeners = []
        if self.is_broker:
            listeners.append(f"PLAINTEXT://{self.bootstrap}")
        if self.is_controller:
            listeners.append(f"CONTROLLER://{self.controller_bootstrap}")
        keys = {
            "process.roles": self.roles,
            "node.id": self.node_id,
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.dir,
            "metrics.listener": f"127.0.0.1:{self.metrics_port}",
        }
        if self.is_broker:
            keys["advertised.listeners"] = f"PLAINTEXT://{self.bootstrap}"
            keys["inter.broker.listener.name"] = "PLAINTEXT"
        keys.update(extra or {})
        self.config.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))

    def start(self):
        assert self.proc is None, f"{self} already runs"
        with open(self.log_path, "ab") as log:
            log.write(b"===== start\n")
            log.flush()
            self.proc = subprocess.Popen([*self.command_prefix, str(osprey_bin()), str(self.config)], stdout=log,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=dict(os.environ, NO_COLOR="1"))

    def kill9(self):
        """SIGKILL: the process dies at once."""
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        with open(self.log_path, "ab") as log:
            log.write(b"===== killed with SIGKILL\n")

    def stop(self, timeout: float = STOP_TIMEOUT_S):
        """SIGTERM; asserts a clean exit (code 0) within `timeout`."""
        self.terminate()
        self.wait_stopped(timeout)

    def terminate(self):
        """SIGTERM, without waiting: see `wait_stopped`."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float = STOP_TIMEOUT_S):
        """Asserts a clean exit (code 0) within `timeout` of a `terminate`."""
        if self.proc is None:
            return
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            raise AssertionError(f"{self} did not stop within {timeout}s of SIGTERM:\n{self.log_tail()}")
        self.proc = None
        assert code == 0, f"{self} exited with {code} after SIGTERM:\n{self.log_tail()}"

    def exited(self):
        """The exit code if the process ended by itself, else None."""
        return None if self.proc is None else self.proc.poll()

    def meta_properties(self) -> dict:
        """meta.properties of its (first and metadata) directory; empty until written."""
        path = self.dir / "meta.properties"
        if not path.is_file():
            return {}
        lines = (l.split("=", 1) for l in path.read_text().splitlines() if "=" in l and not l.startswith("#"))
        return {k.strip(): v.strip() for k, v in lines}

    def directory_id(self):
        return self.meta_properties().get("directory.id")

    def cluster_id(self):
        return self.meta_properties().get("cluster.id")

    def _series(self, name: str) -> list:
        """The values of every series of `name` on /metrics (none when unreachable)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return []
        return [float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)]

    def counter(self, name: str) -> float:
        """A counter's value on /metrics: its first series (0 when absent or unreachable)."""
        return next(iter(self._series(name)), 0.0)

    def gauge(self, name: str) -> float:
        """A gauge's (or counter's) value on /metrics: the sum over its series (0 when
        absent or unreachable)."""
        return sum(self._series(name))

    def pause(self):
        """SIGSTOP: the process stops answering, its sockets stay open."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, lines: int = 200) -> str:
        if not self.log_path.is_file():
            return ""
        return "\n".join(_ANSI.sub("", self.log_path.read_text(errors="replace")).splitlines()[-lines:])


class Cluster:
    """Nodes sharing one `controller.quorum.voters`."""

    def __init__(self, workdir: Path, nodes, extra=None):
        self.workdir = workdir
        self.nodes = nodes
        self.voters = ",".join(f"{n.node_id}@{n.controller_bootstrap}" for n in nodes if n.is_controller)
        for n in nodes:
            n.write_config(self.voters, extra)

    @property
    def brokers(self):
        return [n for n in self.nodes if n.is_broker]

    @property
    def controllers(self):
        return [n for n in self.nodes if n.is_controller]

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def bootstrap(self, nodes=None) -> str:
        """The client bootstrap list of these brokers (default: every broker)."""
        return ",".join(n.bootstrap for n in (nodes or self.brokers))

    def start(self):
        for n in self.nodes:
            n.start()

    def stop(self):
        """SIGTERM to every running node, each of which must exit 0 (see `stop_all`)."""
        failures = self.stop_all()
        assert not failures, "\n\n".join(failures)

    def stop_all(self, timeout: float = STOP_TIMEOUT_S) -> list:
        """SIGTERM to every running node: the nodes with a broker all at once, then the
        controller-only nodes (a broker's controlled shutdown needs the quorum). One by
        one, the last broker of a combined cluster would find no majority left and wait out
        its controlled shutdown (broker.session.timeout.ms). Returns what went wrong for
        each node that did not exit 0 within `timeout`."""
        failures = []
        for group in ([n for n in self.nodes if n.is_broker], [n for n in self.nodes if not n.is_broker]):
            for n in group:
                n.terminate()
            for n in group:
                try:
                    n.wait_stopped(timeout)
                except AssertionError as e:
                    failures.append(str(e))
        return failures

    def kill_all(self):
        for n in self.nodes:
            if n.proc is not None:
                n.kill9()

    def logs(self, lines: int = 60) -> str:
        return "\n".join(f"--- {n} {n.log_path}\n{n.log_tail(lines)}" for n in self.nodes)

    def wait_for_all_voters(self):
        """Until every controller says it is a voter: the quorum forms from the voters that
        answered first and adds the others a moment later, and a test that kills a node
        before then can leave the quorum without a majority of its voters."""
        self.wait_for("every controller a voter of the quorum", lambda: all(
            "this controller is a voter of the quorum" in n.log_tail(100_000) for n in self.controllers))

    def wait_for(self, what: str, probe, timeout: float = WAIT_S, every: float = 0.5):
        """Polls `probe` until it returns something true, and returns it; fails with the
        last value and every node's log at the end of `timeout`, or at once when a node
        exits by itself."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for n in self.nodes:
                code = n.exited()
                assert code is None, f"{n} exited with {code} while waiting for: {what}\n{self.logs()}"
            last = probe()
            if last:
                return last
            time.sleep(every)
        raise AssertionError(f"never within {timeout}s: {what}; last: {last!r}\n{self.logs()}")


def combined(workdir: Path, extra=None) -> Cluster:
    """Nodes 1-3, each process.roles=broker,controller."""
    return Cluster(workdir, [Node(workdir, i, "broker,controller") for i in (1, 2, 3)], extra)


def split(workdir: Path, extra=None) -> Cluster:
    """Controllers 1-3 (process.roles=controller) and brokers 4-6 (process.roles=broker)."""
    nodes = [Node(workdir, i, "controller") for i in (1, 2, 3)] + [Node(workdir, i, "broker") for i in (4, 5, 6)]
    return Cluster(workdir, nodes, extra)


def controllers_only(workdir: Path) -> Cluster:
    """Controllers 1-3 and no broker."""
    return Cluster(workdir, [Node(workdir, i, "controller") for i in (1, 2, 3)])


# ----- Kafka's command-line tools -------------------------------------------------------


class KafkaTools:
    """Kafka 4.4's tools, each run as its own JVM with a --command-config whose admin
    timeouts are short, so that a poll is retried rather than hung."""

    def __init__(self, workdir: Path):
        self.command_config = workdir / "kafka-tools.properties"
        self.command_config.write_text("default.api.timeout.ms=15000\nrequest.timeout.ms=5000\n")

    def run(self, main_class: str, *args: str, timeout: float = TOOL_TIMEOUT_S):
        """The finished process (stdout, stderr, returncode), or None if it hung."""
        try:
            return subprocess.run(["java", "-cp", f"{KAFKA_LIB}/*", main_class, *args], capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def quorum(self, bootstrap, *what: str):
        """kafka-metadata-quorum; `bootstrap` is ("--bootstrap-server" or
        "--bootstrap-controller", "host:port")."""
        return self.run(QUORUM_TOOL, *bootstrap, "--command-config", str(self.command_config), "describe", *what)

    def quorum_status(self, bootstrap):
        """`describe --status` as a dict, or None when the tool failed."""
        out = self.quorum(bootstrap, "--status")
        if out is None or out.returncode != 0:
            return None
        fields = dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)
        return {k.strip(): v.strip() for k, v in fields.items()}

    def quorum_replication(self, bootstrap):
        """`describe --replication` rows as dicts, or None when the tool failed."""
        out = self.quorum(bootstrap, "--replication")
        if out is None or out.returncode != 0:
            return None
        lines = [l.split() for l in out.stdout.splitlines() if l.strip() and not l.startswith("SLF4J")]
        if not lines:
            return None
        header, rows = lines[0], lines[1:]
        return [dict(zip(header, row)) for row in rows]

    def topics(self, bootstrap: str, *args: str):
        return self.run(TOPICS_TOOL, "--bootstrap-server", bootstrap, "--command-config", str(self.command_config),
                        *args)

    def describe_topic(self, bootstrap: str, topic: str):
        """{partition: leader} from `kafka-topics --describe` (leader None where it prints
        "none"), or None when the tool failed."""
        out = self.topics(bootstrap, "--describe", "--topic", topic)
        if out is None or out.returncode != 0:
            return None
        leaders = {}
        for m in re.finditer(r"Partition:\s*(\d+)\s+Leader:\s*(\S+)", out.stdout):
            leaders[int(m.group(1))] = None if m.group(2) == "none" else int(m.group(2))
        return leaders or None

    def leader_election(self, bootstrap: str, *args: str):
        """kafka-leader-election, e.g. ("--election-type", "PREFERRED", "--all-topic-partitions")."""
        return self.run(LEADER_ELECTION_TOOL, "--bootstrap-server", bootstrap, "--admin.config",
                        str(self.command_config), *args)

    def reassign(self, bootstrap: str, *args: str):
        """kafka-reassign-partitions (`--execute`, `--verify`, `--cancel` with
        `--reassignment-json-file`, or `--list`)."""
        return self.run(REASSIGN_TOOL, "--bootstrap-server", bootstrap, "--command-config", str(self.command_config),
                        *args)

    def features(self, bootstrap: str):
        return self.run(FEATURES_TOOL, "--bootstrap-server", bootstrap, "--command-config", str(self.command_config),
                        "describe")


# ----- raw Metadata ---------------------------------------------------------------------


def metadata_states(node: Node, topics=(), timeout: float = 5.0):
    """Metadata v1 sent to this node only: ({broker id: port}, controller id,
    {topic: {partition: (leader, replicas, isr)}} with None for a topic answered with an
    error), or None when the node does not answer."""
    try:
        with kafkawire.Conn(node.host, node.port, timeout=timeout) as c:
            payload = c.roundtrip(kafkawire.metadata_v1(11, list(topics)))
    except (OSError, kafkawire.Closed):
        return None
    correlation_id, endpoints, controller_id, topics = kafkawire.parse_metadata_v1(payload)
    assert correlation_id == 11, "correlation id"
    brokers = {broker_id: port for broker_id, (_host, port) in endpoints.items()}
    found = {name: None if error else {i: p[1:] for i, p in partitions.items()}
             for name, (error, partitions) in topics.items()}
    return brokers, controller_id, found


def metadata(node: Node, topics=(), timeout: float = 5.0):
    """As `metadata_states`, with each partition's leader only."""
    md = metadata_states(node, topics, timeout)
    if md is None:
        return None
    brokers, controller_id, found = md
    leaders = {name: None if parts is None else {i: s[0] for i, s in parts.items()} for name, parts in found.items()}
    return brokers, controller_id, leaders


def partition_states(node: Node, topic: str, timeout: float = 5.0):
    """{partition: (leader, replicas, isr)} of `topic` from this node, or None when the
    node does not answer or does not know the topic."""
    md = metadata_states(node, [topic], timeout)
    return None if md is None else md[2].get(topic)


def fill_with_ballast(path: Path) -> int:
    """Writes `path` until the file system refuses (ENOSPC); returns the bytes written."""
    chunk = b"\0" * (1 << 20)
    written = 0
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                chunk = chunk[: len(chunk) // 2]
                if not chunk:
                    return written


def listed_brokers(node: Node):
    """The broker ids this node's Metadata lists, or None when it does not answer."""
    md = metadata(node)
    return None if md is None else set(md[0])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
