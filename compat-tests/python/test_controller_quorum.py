"""Three real `osprey` processes with process.roles=controller form the controller quorum
from empty directories (no format step), and Kafka 4.4's own
`kafka-metadata-quorum.sh --bootstrap-controller H:P describe --status / --replication`
(`org.apache.kafka.tools.MetadataQuorumCommand`) reads it. kill -9 of the leader: a new
leader with a higher epoch is reported. A voter whose metadata directory is wiped comes
back under a new directory id, is put in place of its old replica key, and the quorum
reports three healthy voters again.

Needs java and Kafka 4.4's jars (`$KAFKA_LIB`, default bench/scratch/kafka-lib in this repository,
where bench/run.sh puts them); skipped visibly without them.
"""

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import _ANSI, free_port, osprey_bin

KAFKA_LIB = Path(os.environ.get("KAFKA_LIB", Path(__file__).resolve().parents[2] / "bench" / "scratch" / "kafka-lib"))
TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"
WAIT_S = 60.0
# The tool's --command-config, written by the fixture into the test's directory.
_tool_config = [None]


def _skip_without_kafka_tools():
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: Kafka's kafka-metadata-quorum tool cannot run")
    if not (KAFKA_LIB / "kafka-tools-4.4.0.jar").is_file():
        pytest.skip(f"no Kafka 4.4 jars in {KAFKA_LIB} (set KAFKA_LIB)")


class Controller:
    """One controller-only osprey process; its port and directory survive restarts."""

    def __init__(self, workdir: Path, node_id: int, port: int):
        self.node_id = node_id
        self.port = port
        self.dir = workdir / f"controller-{node_id}"
        self.config = workdir / f"controller-{node_id}.properties"
        self.log_path = workdir / f"controller-{node_id}.log"
        self.metrics_port = free_port()
        self.proc = None

    def write_config(self, voters: str):
        self.config.write_text(
            "process.roles=controller\n"
            f"node.id={self.node_id}\n"
            f"controller.quorum.voters={voters}\n"
            f"listeners=CONTROLLER://127.0.0.1:{self.port}\n"
            "controller.listener.names=CONTROLLER\n"
            f"log.dirs={self.dir}\n"
            f"metrics.listener=127.0.0.1:{self.metrics_port}\n"
        )

    def start(self):
        with open(self.log_path, "ab") as log:
            log.write(b"===== start\n")
            log.flush()
            self.proc = subprocess.Popen([str(osprey_bin()), str(self.config)], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def stop(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.proc = None
        assert code == 0, f"controller {self.node_id} exited with {code} after SIGTERM:\n{self.log_tail()}"

    def directory_id(self):
        """The directory.id of its meta.properties, once written (when the cluster id is known)."""
        path = self.dir / "meta.properties"
        if not path.is_file():
            return None
        found = re.search(r"^directory\.id=(\S+)$", path.read_text(), re.M)
        return found.group(1) if found else None

    def counter(self, name: str) -> float:
        """A counter's value on /metrics (0 when absent or unreachable)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return 0.0
        found = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        return float(found.group(1)) if found else 0.0

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.is_file():
            return ""
        return "\n".join(_ANSI.sub("", self.log_path.read_text(errors="replace")).splitlines()[-lines:])


def quorum_tool(port: int, *what: str):
    """The tool's result, or None if it did not finish (its admin client gives up after
    `default.api.timeout.ms`, kept short so that a poll is retried rather than hung)."""
    config = _tool_config[0]
    try:
        return subprocess.run(
            ["java", "-cp", f"{KAFKA_LIB}/*", TOOL, "--bootstrap-controller", f"127.0.0.1:{port}",
             "--command-config", str(config), "describe", *what],
            capture_output=True, text=True, timeout=30,
        )
    except subprocess.TimeoutExpired:
        return None


def status(port: int):
    """`describe --status` as a dict, or None when the tool failed."""
    out = quorum_tool(port, "--status")
    if out is None or out.returncode != 0:
        return None
    fields = dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in fields.items()}


def replication(port: int):
    """`describe --replication` rows as dicts, or None when the tool failed."""
    out = quorum_tool(port, "--replication")
    if out is None or out.returncode != 0:
        return None
    lines = [l.split() for l in out.stdout.splitlines() if l.strip() and not l.startswith("SLF4J")]
    header, rows = lines[0], lines[1:]
    return [dict(zip(header, row)) for row in rows]


def wait_for(what, probe, controllers):
    deadline = time.monotonic() + WAIT_S
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    logs = "\n".join(f"--- controller {c.node_id} (port {c.port})\n{c.log_tail()}" for c in controllers)
    raise AssertionError(f"never: {what}; last: {last!r}\n{logs}")


@pytest.fixture
def controllers(tmp_path):
    _skip_without_kafka_tools()
    assert osprey_bin().is_file(), "build it: cargo build -p osprey-server --bin osprey"
    _tool_config[0] = tmp_path / "quorum-tool.properties"
    _tool_config[0].write_text("default.api.timeout.ms=15000\nrequest.timeout.ms=5000\n")
    nodes = [Controller(tmp_path, n, free_port()) for n in (1, 2, 3)]
    voters = ",".join(f"{c.node_id}@127.0.0.1:{c.port}" for c in nodes)
    print(f"controller ports: {[c.port for c in nodes]}, dirs under {tmp_path}")
    for c in nodes:
        c.write_config(voters)
        c.start()
    yield nodes
    for c in nodes:
        if c.proc is not None:
            c.stop()


def test_three_controllers_form_a_quorum_that_kafkas_tool_describes(controllers):
    by_id = {c.node_id: c for c in controllers}

    def healthy(port):
        s = status(port)
        # The cluster id is the first entry the first leader commits: wait for it too.
        if not s or not s.get("CurrentVoters", "").count('"id"') == 3 or not s.get("ClusterId"):
            return None
        return s

    first = wait_for("three voters reported", lambda: healthy(controllers[1].port), controllers)
    cluster_id = first["ClusterId"]
    leader = int(first["LeaderId"])
    epoch = int(first["LeaderEpoch"])
    assert leader in by_id and epoch >= 1 and int(first["HighWatermark"]) > 0, first
    for c in controllers:
        assert f'"id": {c.node_id}' in first["CurrentVoters"]
        assert f"CONTROLLER://127.0.0.1:{c.port}" in first["CurrentVoters"], first
    assert first["CurrentObservers"] == "[]"

    rows = wait_for("replication rows", lambda: replication(controllers[2].port), controllers)
    assert sorted(r["Status"] for r in rows) == ["Follower", "Follower", "Leader"], rows
    for r in rows:
        assert r["DirectoryId"] == by_id[int(r["NodeId"])].directory_id(), (r, "the directory id of meta.properties")
        assert int(r["LogEndOffset"]) > 0

    # kill -9 the leader: the two left elect a new one, at a higher epoch.
    by_id[leader].kill9()
    others = [c for c in controllers if c.node_id != leader]

    def new_leader():
        s = status(others[0].port)
        return s if s and int(s["LeaderId"]) != leader and int(s["LeaderEpoch"]) > epoch else None

    after = wait_for("a new leader", new_leader, controllers)
    assert after["ClusterId"] == cluster_id
    by_id[leader].start()

    # Wipe a follower's metadata directory: it rejoins under a new directory id.
    current = int(after["LeaderId"])
    wiped = next(c for c in controllers if c.node_id not in (current, leader))
    old_directory_id = wiped.directory_id()
    wiped.kill9()
    shutil.rmtree(wiped.dir)
    wiped.start()

    def replaced():
        rows = replication(by_id[current].port)
        new_id = wiped.directory_id()
        if not rows or new_id is None or new_id == old_directory_id:
            return None
        mine = [r for r in rows if int(r["NodeId"]) == wiped.node_id]
        voters = [r for r in rows if r["Status"] in ("Leader", "Follower")]
        if len(voters) != 3 or len(mine) != 1 or mine[0]["DirectoryId"] != new_id or mine[0]["Status"] != "Follower":
            return None
        return rows

    rows = wait_for("the wiped voter replaced under its new directory id", replaced, controllers)
    assert old_directory_id not in [r["DirectoryId"] for r in rows]
    final = wait_for("a healthy quorum", lambda: healthy(wiped.port), controllers)
    assert final["ClusterId"] == cluster_id
    assert "replaced a quorum voter" in "\n".join(c.log_tail(400) for c in controllers)
    replacements = sum(c.counter("osprey_quorum_voter_replacements_total") for c in controllers)
    assert replacements >= 1, "osprey_quorum_voter_replacements_total moved on the leader that replaced it"
