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

import shutil

import pytest

from cluster import KafkaTools, controllers_only, skip_without_kafka_tools


@pytest.fixture
def controllers(tmp_path):
    skip_without_kafka_tools()
    quorum = controllers_only(tmp_path)
    print(f"controller ports: {[c.controller_port for c in quorum.nodes]}, dirs under {tmp_path}")
    quorum.start()
    yield quorum
    quorum.stop()


def test_three_controllers_form_a_quorum_that_kafkas_tool_describes(controllers, tmp_path):
    tools = KafkaTools(tmp_path)
    nodes = controllers.nodes
    by_id = {c.node_id: c for c in nodes}

    def via(c):
        return ("--bootstrap-controller", c.controller_bootstrap)

    def healthy(c):
        s = tools.quorum_status(via(c))
        # The cluster id is the first entry the first leader commits: wait for it too.
        if not s or not s.get("CurrentVoters", "").count('"id"') == 3 or not s.get("ClusterId"):
            return None
        return s

    first = controllers.wait_for("three voters reported", lambda: healthy(nodes[1]))
    cluster_id = first["ClusterId"]
    leader = int(first["LeaderId"])
    epoch = int(first["LeaderEpoch"])
    assert leader in by_id and epoch >= 1 and int(first["HighWatermark"]) > 0, first
    for c in nodes:
        assert f'"id": {c.node_id}' in first["CurrentVoters"]
        assert f"CONTROLLER://{c.controller_bootstrap}" in first["CurrentVoters"], first
    assert first["CurrentObservers"] == "[]"

    rows = controllers.wait_for("replication rows", lambda: tools.quorum_replication(via(nodes[2])))
    assert sorted(r["Status"] for r in rows) == ["Follower", "Follower", "Leader"], rows
    for r in rows:
        assert r["DirectoryId"] == by_id[int(r["NodeId"])].directory_id(), (r, "the directory id of meta.properties")
        assert int(r["LogEndOffset"]) > 0

    # kill -9 the leader: the two left elect a new one, at a higher epoch.
    by_id[leader].kill9()
    others = [c for c in nodes if c.node_id != leader]

    def new_leader():
        s = tools.quorum_status(via(others[0]))
        return s if s and int(s["LeaderId"]) != leader and int(s["LeaderEpoch"]) > epoch else None

    after = controllers.wait_for("a new leader", new_leader)
    assert after["ClusterId"] == cluster_id
    by_id[leader].start()

    # Wipe a follower's metadata directory: it rejoins under a new directory id.
    current = int(after["LeaderId"])
    wiped = next(c for c in nodes if c.node_id not in (current, leader))
    old_directory_id = wiped.directory_id()
    wiped.kill9()
    shutil.rmtree(wiped.dir)
    wiped.start()

    def replaced():
        rows = tools.quorum_replication(via(by_id[current]))
        new_id = wiped.directory_id()
        if not rows or new_id is None or new_id == old_directory_id:
            return None
        mine = [r for r in rows if int(r["NodeId"]) == wiped.node_id]
        voters = [r for r in rows if r["Status"] in ("Leader", "Follower")]
        if len(voters) != 3 or len(mine) != 1 or mine[0]["DirectoryId"] != new_id or mine[0]["Status"] != "Follower":
            return None
        return rows

    rows = controllers.wait_for("the wiped voter replaced under its new directory id", replaced)
    assert old_directory_id not in [r["DirectoryId"] for r in rows]
    final = controllers.wait_for("a healthy quorum", lambda: healthy(wiped))
    assert final["ClusterId"] == cluster_id
    assert "replaced a quorum voter" in "\n".join(c.log_tail(400) for c in nodes)
    replacements = sum(c.counter("osprey_quorum_voter_replacements_total") for c in nodes)
    assert replacements >= 1, "osprey_quorum_voter_replacements_total moved on the leader that replaced it"
