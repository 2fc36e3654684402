"""Apache Kafka 4.4 itself as the cluster under test, for tests that offer it: the same
three combined broker+controller nodes as cluster.combined() (or one, `single_kafka`, for
tests of a single broker), each a `kafka.Kafka` JVM on the jars in `$KAFKA_LIB`, its
directory formatted by kafka-storage first. A test module uses it when
`COMPAT_CLUSTER=kafka`, which shows that what the test asserts is what Kafka does (the
test, not Osprey, is then under test).
"""

import base64
import os
import subprocess
import uuid
from pathlib import Path

from cluster import KAFKA_LIB, Cluster, Node

# As bench/bench.py runs Kafka, with less heap: three JVMs on a small machine.
KAFKA_JVM_FLAGS = ["-Xmx768m", "-Xms768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"]
# The keys of Osprey's own that Kafka does not know.
OSPREY_ONLY = {"metrics.listener", "osprey.share.version"}
# What a single Kafka node needs to create its internal topics (Kafka's defaults ask for
# three replicas), as a single osprey broker has them.
SINGLE_NODE_CONFIG = {
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
}


def against_kafka() -> bool:
    return os.environ.get("COMPAT_CLUSTER") == "kafka"


def cluster_id() -> str:
    """As Kafka's Uuid.randomUuid: URL-safe base64 of 16 bytes, never starting with '-'
    (the storage tool would take it for an option)."""
    while True:
        made = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not made.startswith("-"):
            return made


class KafkaNode(Node):
    """A Kafka node in place of an osprey process: same ports, directory and log file."""

    cluster_id = None  # set by combined_kafka or single_kafka, shared by the nodes
    # Feature levels the format finalizes (`--feature share.version=1`) instead of the
    # release's defaults.
    features = {}

    def write_config(self, voters: str, extra=None):
        super().write_config(voters, extra)
        lines = [l for l in self.config.read_text().splitlines() if l.split("=", 1)[0] not in OSPREY_ONLY]
        self.config.write_text("\n".join(lines) + "\n")

    def start(self):
        assert self.proc is None, f"{self} already runs"
        classpath = f"{KAFKA_LIB}/*"
        if not (self.dir / "meta.properties").is_file():
            features = [arg for name, level in self.features.items() for arg in ("--feature", f"{name}={level}")]
            subprocess.run(["java", "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                            "-c", str(self.config), *features], check=True, capture_output=True, timeout=120)
        with open(self.log_path, "ab") as log:
            log.write(b"===== start\n")
            log.flush()
            self.proc = subprocess.Popen(["java", *KAFKA_JVM_FLAGS, "-cp", classpath, "kafka.Kafka", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self, timeout: float = 60.0):
        """SIGTERM; Kafka's JVM exits 143 (killed by the signal, after its shutdown hook)."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def combined_kafka(workdir: Path, extra=None) -> Cluster:
    """Kafka nodes 1-3, each process.roles=broker,controller."""
    KafkaNode.cluster_id = cluster_id()
    return Cluster(workdir, [KafkaNode(workdir, i, "broker,controller") for i in (1, 2, 3)], extra)


def single_kafka(workdir: Path, extra=None, features=None) -> Cluster:
    """Kafka node 1, process.roles=broker,controller, with its internal topics on one
    replica and `features` ({name: level}) finalized when its directory is formatted."""
    KafkaNode.cluster_id = cluster_id()
    node = KafkaNode(workdir, 1, "broker,controller")
    node.features = dict(features or {})
    return Cluster(workdir, [node], {**SINGLE_NODE_CONFIG, **(extra or {})})
