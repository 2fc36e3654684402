"""A cluster of real `osprey` processes (issue 14), three combined broker+controller
nodes on free ports (or three controllers and three brokers in separate processes),
driven by Kafka 4.4's own tools (kafka-topics, kafka-metadata-quorum, kafka-features,
each a separate JVM) and by confluent-kafka: the cluster forms from empty directories
with no format step, spreads a topic's leaders over the brokers and serves it, survives
the loss of its active controller, refuses metadata writes without a majority while
partitions led by the survivor go on serving, takes back a voter whose directory was
wiped, and fences a broker that died. `deploy/cluster.sh` starts and stops both
topologies. Topics here have replication factor 1 (these tests are about the metadata);
test_replication.py covers replicated partitions.

Every wait polls until true (up to cluster.WAIT_S); times are printed, never asserted.
Needs java and Kafka 4.4's jars (`$KAFKA_LIB`); skipped visibly without them.
"""

import random
import re
import shutil
import socket
import subprocess
import time

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import clients
from cluster import (
    REPO_ROOT,
    WAIT_S,
    KafkaTools,
    osprey_bin,
    combined,
    listed_brokers,
    metadata,
    port_is_free,
    skip_without_kafka_tools,
    split,
)

# Each test starts and stops several processes and JVMs: more than compat-tests' 120 s.
pytestmark = pytest.mark.timeout(400)

PARTITIONS = 6
# A CreateTopics that no controller answers is answered REQUEST_TIMED_OUT by the broker
# once it gives up forwarding (request.timeout.ms, 30 s; Kafka's brokers: 60 s). The
# client must wait longer than that, or the error seen is its own _TIMED_OUT: librdkafka
# waits for an answer socket.timeout.ms (compat-tests' 10 s), or the operation timeout
# plus 1 s when that is longer, so the admin clients here wait the request timeout.
CREATE_TIMEOUT_MS = 10_000
CLIENT_REQUEST_TIMEOUT_S = 90.0


class Bootstrap:
    """What clients.py takes: something with a `bootstrap` list."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap


def start(cluster):
    """Starts every node and waits until each broker's own Metadata lists every broker."""
    cluster.start()
    want = {b.node_id for b in cluster.brokers}
    cluster.wait_for(f"every broker lists brokers {sorted(want)}",
                     lambda: all(listed_brokers(b) == want for b in cluster.brokers))
    cluster.wait_for_all_voters()
    return cluster


def running(make, tmp_path, request):
    """Starts the cluster `make` builds; stops it with SIGTERM at the end (each node must
    exit 0), killing whatever is left."""
    skip_without_kafka_tools()
    cluster = make(tmp_path)
    request.node._osprey_brokers = cluster.nodes  # their logs in a failure's report
    try:
        yield start(cluster)
        cluster.stop()
    finally:
        cluster.kill_all()


@pytest.fixture
def three(tmp_path, request):
    """Nodes 1-3, process.roles=broker,controller."""
    yield from running(combined, tmp_path, request)


@pytest.fixture
def split_cluster(tmp_path, request):
    """Controllers 1-3 and brokers 4-6 in separate processes."""
    yield from running(split, tmp_path, request)


@pytest.fixture
def tools(tmp_path):
    return KafkaTools(tmp_path)


def patient_admin(bootstrap: str) -> AdminClient:
    """An admin client that waits for the broker's answer up to the request timeout."""
    return AdminClient(dict(clients.COMMON, **{"bootstrap.servers": bootstrap,
                                                "socket.timeout.ms": int(CLIENT_REQUEST_TIMEOUT_S * 1000)}))


def create_topic(bootstrap: str, name: str, partitions: int = 1):
    """CreateTopics through these brokers; raises KafkaException on an error answer."""
    admin = patient_admin(bootstrap)
    future = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=CREATE_TIMEOUT_MS / 1000,
                                 request_timeout=CLIENT_REQUEST_TIMEOUT_S)[name]
    future.result(timeout=CLIENT_REQUEST_TIMEOUT_S + 10)


def first_create_after(bootstrap: str, since: float, prefix: str):
    """Seconds from `since` to the first CreateTopics that succeeds, trying a new topic
    every 0.25 s whatever the earlier attempts are doing (one stuck on the dead
    controller must not hide a later one that would succeed)."""
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": bootstrap}))
    pending, errors = [], []
    deadline = since + WAIT_S
    while time.monotonic() < deadline:
        name = f"{prefix}-{len(pending)}"
        pending.append(admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=5, request_timeout=30)[name])
        until = time.monotonic() + 0.25
        while time.monotonic() < until:
            for future in pending:
                if future.done():
                    if future.exception() is None:
                        return time.monotonic() - since
                    errors.append(str(future.exception()))
            pending = [f for f in pending if not f.done()]
            time.sleep(0.01)
    raise AssertionError(f"no CreateTopics succeeded within {WAIT_S}s; errors: {errors[-5:]}")


def produce_and_read_back(bootstrap: str, topic: str, partitions, per_partition: int = 20, earlier: int = 0):
    """acks=all, per_partition records to each partition, then read back by assign from the
    beginning: on each partition the `earlier` records a previous call acknowledged, then
    these, exactly and in order."""
    target = Bootstrap(bootstrap)
    p = clients.producer(target, acks="all")
    numbers = range(earlier, earlier + per_partition)
    messages = [{"partition": part, "key": f"{part}".encode(), "value": f"{part}-{i}".encode()}
                for part in partitions for i in numbers]
    reports = clients.produce_all(p, topic, messages)
    assert [r.error for r in reports if r.error] == []
    got = clients.read_partitions(target, topic, partitions, (earlier + per_partition) * len(partitions))
    by_partition = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append(m.value())
    for part in partitions:
        expected = [f"{part}-{i}".encode() for i in range(earlier + per_partition)]
        assert by_partition.get(part) == expected, part


def leaders(node, topic):
    """{partition: leader} of `topic` in this node's own Metadata, or None."""
    md = metadata(node, [topic])
    return None if md is None else md[2].get(topic)


def active_controller(tools, node) -> int:
    """The quorum leader's id through a broker (DescribeQuorum, kafka-metadata-quorum)."""
    status = tools.quorum_status(("--bootstrap-server", node.bootstrap))
    assert status and status.get("LeaderId"), status
    return int(status["LeaderId"])


# ----- forming and serving --------------------------------------------------------------


def test_cluster_forms_from_empty_directories_with_one_cluster_id(three):
    ids = three.wait_for("a cluster id in every meta.properties",
                         lambda: all(n.cluster_id() for n in three.nodes) and [n.cluster_id() for n in three.nodes])
    assert len(set(ids)) == 1, ids
    for n in three.nodes:
        meta = n.meta_properties()
        assert meta["node.id"] == str(n.node_id) and meta.get("directory.id"), meta
        md = metadata(n)
        assert md is not None and md[0] == {b.node_id: b.port for b in three.brokers}, md
    assert len({n.directory_id() for n in three.nodes}) == 3


def test_topic_leaders_spread_over_the_brokers_and_serve(three, tools):
    bootstrap = three.bootstrap()
    out = tools.topics(bootstrap, "--create", "--topic", "spread", "--partitions", str(PARTITIONS),
                       "--replication-factor", "1")
    assert out is not None and out.returncode == 0, out
    described = three.wait_for("kafka-topics --describe lists 6 partitions with leaders", lambda: (
        (d := tools.describe_topic(bootstrap, "spread")) and len(d) == PARTITIONS and None not in d.values() and d))
    assert set(described.values()) == {1, 2, 3}, described
    # Every broker serves the same leaders in its own Metadata.
    for n in three.brokers:
        seen = three.wait_for(f"spread in {n}'s Metadata", lambda n=n: leaders(n, "spread"))
        assert seen == described, (n, seen)
    admin = clients.admin(Bootstrap(bootstrap))
    assert sorted(b.id for b in admin.list_topics(timeout=20).brokers.values()) == [1, 2, 3]
    produce_and_read_back(bootstrap, "spread", range(PARTITIONS))


def test_kafka_tools_describe_the_quorum_and_features_through_a_broker(three, tools):
    cluster_id = three.nodes[0].cluster_id()
    via = ("--bootstrap-server", three.brokers[1].bootstrap)

    def healthy():
        s = tools.quorum_status(via)
        return s if s and s.get("CurrentVoters", "").count('"id"') == 3 else None

    status = three.wait_for("describe --status with three voters", healthy)
    assert status["ClusterId"] == cluster_id, status
    assert int(status["LeaderId"]) in (1, 2, 3) and int(status["LeaderEpoch"]) >= 1, status
    for n in three.nodes:
        assert f"CONTROLLER://{n.controller_bootstrap}" in status["CurrentVoters"], status

    rows = three.wait_for("describe --replication", lambda: tools.quorum_replication(via))
    voters = sorted(r["Status"] for r in rows if r["Status"] in ("Leader", "Follower"))
    assert voters == ["Follower", "Follower", "Leader"], rows
    for r in rows:
        if r["Status"] in ("Leader", "Follower"):
            assert r["DirectoryId"] == three.node(int(r["NodeId"])).directory_id(), r

    out = tools.features(three.brokers[2].bootstrap)
    assert out is not None and out.returncode == 0, out
    found = dict(re.findall(r"Feature:\s*(\S+)\s.*?FinalizedVersionLevel:\s*(\S+)", out.stdout))
    assert "metadata.version" in found and found["metadata.version"] not in ("-", "0"), out.stdout


def test_a_single_node_describes_itself_as_its_quorum(broker, tools):
    """DescribeQuorum on a single node (no controller quorum): kafka-metadata-quorum
    --bootstrap-server reads one voter, the node itself, leading."""
    skip_without_kafka_tools()
    status = tools.quorum_status(("--bootstrap-server", broker.bootstrap))
    assert status is not None, "kafka-metadata-quorum describe --status failed"
    assert status["LeaderId"] == "1" and status["CurrentVoters"].count('"id"') == 1, status
    assert '"id": 1' in status["CurrentVoters"] or '"id":1' in status["CurrentVoters"], status
    rows = tools.quorum_replication(("--bootstrap-server", broker.bootstrap))
    assert rows and [(r["NodeId"], r["Status"]) for r in rows] == [("1", "Leader")], rows


def test_a_single_node_needs_no_leader_election(broker, tools):
    """ElectLeaders on a single node: its only replica leads every partition, so
    kafka-leader-election finds nothing to elect, and an unknown topic is refused."""
    skip_without_kafka_tools()
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": broker.bootstrap}))
    admin.create_topics([NewTopic("solo", 2, 1)])["solo"].result(timeout=30)
    out = tools.leader_election(broker.bootstrap, "--election-type", "PREFERRED", "--topic", "solo",
                                "--partition", "1")
    assert out is not None and out.returncode == 0, out
    assert "Valid replica already elected for partitions solo-1" in out.stdout, out.stdout
    unknown = tools.leader_election(broker.bootstrap, "--election-type", "UNCLEAN", "--topic", "nope",
                                    "--partition", "0")
    assert unknown is not None and unknown.returncode != 0, unknown
    assert "UnknownTopicOrPartitionException" in unknown.stdout + unknown.stderr, unknown
    # librdkafka's ElectLeaders too (confluent-kafka's AdminClient.elect_leaders).
    answered = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("solo", 1)]).result(timeout=30)
    errors = {(tp.topic, tp.partition): (e.code() if e else None) for tp, e in answered.items()}
    assert errors == {("solo", 1): KafkaError.ELECTION_NOT_NEEDED}, errors


def test_a_clean_stop_keeps_the_broker_epoch_for_the_next_registration(three):
    """KIP-966's unclean-shutdown detection: SIGTERM leaves the broker epoch in the data
    directory's clean-shutdown marker (Kafka's {"version":0,"brokerEpoch":N}), which the
    next start takes and registers with as previous_broker_epoch; a kill -9 leaves no
    marker, so that registration says -1 and the controller treats the stop as unclean."""
    node = three.node(2)
    marker = node.dir / ".clean-shutdown"
    node.stop()
    content = marker.read_text()
    assert re.fullmatch(r'\{"version":0,"brokerEpoch":\d+\}', content), content
    node.start()
    three.wait_for("the marker taken at start", lambda: not marker.exists())
    three.wait_for("every broker lists three brokers again",
                   lambda: all(listed_brokers(b) == {1, 2, 3} for b in three.brokers))
    node.kill9()
    assert not marker.exists(), "a kill -9 leaves no marker"


# ----- failures -------------------------------------------------------------------------


def test_kill9_of_the_active_controller_elects_another_and_create_topics_succeeds(three, tools):
    create_topic(three.bootstrap(), "before")
    leader = active_controller(tools, three.brokers[0])
    epoch = int(tools.quorum_status(("--bootstrap-server", three.brokers[0].bootstrap))["LeaderEpoch"])
    dead = three.node(leader)
    survivors = [n for n in three.nodes if n is not dead]
    dead.kill9()
    killed = time.monotonic()
    took = first_create_after(three.bootstrap(survivors), killed, "after-failover")
    print(f"kill -9 of the active controller (node {leader}) -> next successful CreateTopics: {took:.2f} s")

    def new_leader():
        s = tools.quorum_status(("--bootstrap-server", survivors[0].bootstrap))
        return s if s and int(s["LeaderId"]) != leader and int(s["LeaderEpoch"]) > epoch else None

    three.wait_for("a new active controller at a higher epoch", new_leader)
    # Back: it rejoins as a voter and is listed again.
    dead.start()
    three.wait_for("every broker lists three brokers again",
                   lambda: all(listed_brokers(b) == {1, 2, 3} for b in three.brokers))


def test_without_a_majority_metadata_writes_fail_and_the_survivor_serves(three, tools):
    bootstrap = three.bootstrap()
    create_topic(bootstrap, "held", PARTITIONS)
    placed = three.wait_for("held led everywhere", lambda: (
        (d := leaders(three.brokers[0], "held")) and len(d) == PARTITIONS and min(d.values()) >= 0 and d))
    survivor = three.node(placed[0])
    own = sorted(p for p, leader in placed.items() if leader == survivor.node_id)
    for n in three.nodes:
        if n is not survivor:
            n.kill9()

    # The survivor names itself as the controller (the killed brokers are never fenced
    # without a majority), so librdkafka sends the CreateTopics to it.
    assert metadata(survivor)[1] == survivor.node_id
    admin = patient_admin(survivor.bootstrap)
    future = admin.create_topics([NewTopic("without-majority", 1, 1)], operation_timeout=CREATE_TIMEOUT_MS / 1000,
                                 request_timeout=CLIENT_REQUEST_TIMEOUT_S)["without-majority"]
    started = time.monotonic()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=CLIENT_REQUEST_TIMEOUT_S + 10)
    print(f"CreateTopics without a majority: {refused.value.args[0]} after {time.monotonic() - started:.2f} s")
    # The broker's answer (Kafka's REQUEST_TIMED_OUT), not the client giving up (_TIMED_OUT).
    assert refused.value.args[0].code() == KafkaError.REQUEST_TIMED_OUT, refused.value.args[0]

    produce_and_read_back(survivor.bootstrap, "held", own)

    for n in three.nodes:
        if n is not survivor:
            n.start()
    three.wait_for("every broker lists three brokers again",
                   lambda: all(listed_brokers(b) == {1, 2, 3} for b in three.brokers))
    create_topic(bootstrap, "with-majority-again")


def test_a_wiped_voter_rejoins_and_the_quorum_reports_three_voters(three, tools):
    via = ("--bootstrap-server", three.brokers[0].bootstrap)
    leader = active_controller(tools, three.brokers[0])
    wiped = next(n for n in three.nodes if n.node_id != leader)
    old_directory_id = wiped.directory_id()
    wiped.kill9()
    shutil.rmtree(wiped.dir)
    wiped.start()

    def replaced():
        rows = tools.quorum_replication(via)
        new_id = wiped.directory_id()
        if not rows or new_id is None or new_id == old_directory_id:
            return None
        mine = [r for r in rows if int(r["NodeId"]) == wiped.node_id and r["Status"] in ("Leader", "Follower")]
        voters = [r for r in rows if r["Status"] in ("Leader", "Follower")]
        return rows if len(voters) == 3 and len(mine) == 1 and mine[0]["DirectoryId"] == new_id else None

    rows = three.wait_for("the wiped voter back under its new directory id", replaced)
    assert old_directory_id not in [r["DirectoryId"] for r in rows if r["Status"] in ("Leader", "Follower")]
    status = three.wait_for("three voters", lambda: (
        (s := tools.quorum_status(via)) and s.get("CurrentVoters", "").count('"id"') == 3 and s))
    assert status["ClusterId"] == wiped.cluster_id() == three.nodes[0].cluster_id()
    three.wait_for("every broker lists three brokers",
                   lambda: all(listed_brokers(b) == {1, 2, 3} for b in three.brokers))
    create_topic(three.bootstrap(), "after-wipe")


def test_kill9_of_a_broker_fences_it_and_it_comes_back(split_cluster, tools):
    cluster = split_cluster
    bootstrap = cluster.bootstrap()
    create_topic(bootstrap, "fenced", PARTITIONS)
    first = cluster.brokers[0]
    placed = cluster.wait_for("fenced led everywhere", lambda: (
        (d := leaders(first, "fenced")) and len(d) == PARTITIONS and min(d.values()) >= 0 and d))
    victim = cluster.node(5)
    survivors = [b for b in cluster.brokers if b is not victim]
    victims_partitions = sorted(p for p, leader in placed.items() if leader == victim.node_id)
    assert victims_partitions, f"broker 5 leads none of {placed}"
    # Acknowledged (acks=all) before the kill: still there once the broker is back.
    produce_and_read_back(bootstrap, "fenced", victims_partitions)
    victim.kill9()
    killed = time.monotonic()

    cluster.wait_for("the dead broker unlisted by the survivors' Metadata",
                     lambda: all(listed_brokers(b) == {4, 6} for b in survivors))
    unlisted = time.monotonic() - killed
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": cluster.bootstrap(survivors)}))
    described = admin.describe_cluster(request_timeout=20).result(timeout=30)
    assert sorted(n.id for n in described.nodes) == [4, 6], described.nodes

    def offline():
        d = tools.describe_topic(cluster.bootstrap(survivors), "fenced")
        return d if d and all(d[p] is None for p in victims_partitions) else None

    shown = cluster.wait_for("its partitions shown with leader none", offline)
    print(f"kill -9 of broker 5 -> unlisted: {unlisted:.2f} s, leader none: {time.monotonic() - killed:.2f} s "
          f"(broker.session.timeout.ms 9000)")
    assert all(shown[p] == placed[p] for p in placed if p not in victims_partitions), (placed, shown)

    victim.start()
    cluster.wait_for("the broker listed again", lambda: all(listed_brokers(b) == {4, 5, 6} for b in cluster.brokers))
    cluster.wait_for("its partitions led by it again", lambda: (
        (d := leaders(first, "fenced")) and all(d[p] == victim.node_id for p in victims_partitions)))
    produce_and_read_back(bootstrap, "fenced", victims_partitions, earlier=20)


# ----- deploy/cluster.sh ----------------------------------------------------------------

SCRIPT = REPO_ROOT / "deploy" / "cluster.sh"


def free_base_port(processes: int) -> int:
    """A base port whose 10 ports per process are all free now (the script's layout)."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - 10 * processes)
        if all(port_is_free(base + i) for i in range(10 * processes)):
            return base
    raise AssertionError("no free range of ports for deploy/cluster.sh")


def script(*args, timeout=180):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def osprey_processes_under(path) -> list:
    """pids of processes whose command line names this directory."""
    out = subprocess.run(["pgrep", "-f", f"log.dirs={path}/"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


@pytest.mark.parametrize("topology,processes", [("combined", 3), ("split", 6)])
def test_deploy_script_starts_answers_and_stops_a_cluster(tmp_path, topology, processes):
    directory = tmp_path / "cluster"
    base = free_base_port(processes)
    args = ["--dir", str(directory), "--base-port", str(base), "--bin", str(osprey_bin())]
    try:
        started = script("start", "--topology", topology, *args, "--timeout", "90")
        assert started.returncode == 0, started.stdout + started.stderr
        servers = re.search(r"^bootstrap servers: (\S+)$", started.stdout, re.M).group(1)
        brokers = (1, 2, 3) if topology == "combined" else (4, 5, 6)
        assert servers == ",".join(f"127.0.0.1:{base + 10 * (n - 1)}" for n in brokers)
        assert len({(directory / f"node-{n}" / "data" / "meta.properties").read_text().split("cluster.id=")[1].split()[0]
                     for n in range(1, processes + 1)}) == 1
        status = script("status", "--dir", str(directory))
        assert status.returncode == 0 and status.stdout.count(": running") == processes, status.stdout
        listing = clients.admin(Bootstrap(servers)).list_topics(timeout=20)
        assert sorted(b.id for b in listing.brokers.values()) == list(brokers)
        # A second start on a running cluster is refused and leaves it running.
        again = script("start", "--topology", topology, *args)
        assert again.returncode != 0 and "already runs" in again.stderr, again.stderr
        assert len(osprey_processes_under(directory)) == processes
        stopped = script("stop", "--dir", str(directory))
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        assert osprey_processes_under(directory) == []
        assert script("status", "--dir", str(directory)).returncode != 0
    finally:
        script("stop", "--dir", str(directory), "--timeout", "10")


def test_deploy_script_that_fails_to_start_leaves_no_process(tmp_path):
    """Node 2's client port is taken: the start fails, and every process it started stops."""
    directory = tmp_path / "cluster"
    base = free_base_port(3)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", base + 10))
        taken.listen()
        out = script("start", "--dir", str(directory), "--base-port", str(base), "--bin", str(osprey_bin()),
                     "--timeout", "30")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "start failed" in out.stderr and "node 2 exited" in out.stderr, out.stderr
    assert osprey_processes_under(directory) == []
