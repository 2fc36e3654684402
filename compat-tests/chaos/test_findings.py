"""Regression tests of what the chaos runs found, each on a real cluster in the runner's
network namespaces (root and `ip` needed: the test fails without them, it is never
skipped).

- Seeds 1035 and 1042 of the long run: a group coordinator cut off from the other nodes
  went on answering OffsetFetch with the offsets it last knew, while the partition's new
  leader took newer commits, and for about a second after the heal; a consumer reading
  its group's position there would have gone back. Also when the cut-off node is the
  active controller too. A cut-off node does not name itself the coordinator either.
"""

import re
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import run  # puts compat-tests/python on sys.path

import kafkawire  # noqa: E402
from cluster import Cluster, Node  # noqa: E402

NOT_COORDINATOR = 16
COORDINATOR_NOT_AVAILABLE = 15
WAIT_S = 120.0


def commit(bootstrap: str, group: str, topic: str, offset: int):
    """Commits `offset` for partition 0 of `topic`, retrying until a coordinator takes it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "socket.timeout.ms": 5000})
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
                return
            except KafkaException as e:
                assert time.monotonic() < deadline, f"no coordinator took the commit of {offset}: {e}"
                time.sleep(0.5)
    finally:
        consumer.close()


def offsets_from(node: Node, group: str, topic: str):
    """What `node` answers to OffsetFetch v1 for partition 0: (offset, error code), or
    None when it cannot be reached."""
    try:
        with kafkawire.Conn(node.host, node.port, timeout=5) as c:
            _, answers = kafkawire.parse_offset_fetch_v1(c.roundtrip(kafkawire.offset_fetch_v1(1, group, topic, [0])))
    except OSError:
        return None
    [(_, _, offset, _, error)] = answers
    return offset, error


def find_coordinator(node: Node, group: str) -> tuple:
    """(error code, node id) of FindCoordinator v1 for `group`, asked of `node`."""
    with kafkawire.Conn(node.host, node.port) as c:
        _, error, node_id = kafkawire.parse_find_coordinator_v1(c.roundtrip(kafkawire.find_coordinator_v1(1, group, 0)))
    return error, node_id


def coordinator_of(node: Node, group: str) -> int:
    error, node_id = find_coordinator(node, group)
    assert error == 0, f"FindCoordinator answered {error}"
    return node_id


def active_controller(nodes):
    """The node whose /metrics says it is the active controller, if one is (read from inside
    its network namespace, where its metrics listener is)."""
    for n in nodes:
        if re.search(r"^osprey_controller_active(?:\{[^}]*\})? 1(?:\.0)?$", run.node_metrics(n), re.M):
            return n
    return None


def group_coordinated_by(node: Node, node_id: int) -> str:
    """A group name whose coordinator is `node_id` (asked of `node`)."""
    for i in range(1000):
        group = f"readers-{i}"
        if coordinator_of(node, group) == node_id:
            return group
    raise AssertionError(f"no group of 1000 is coordinated by node {node_id}")


def test_a_cut_off_coordinator_never_answers_offsets_older_than_a_commit_made_elsewhere():
    cut_off_coordinator(on_the_active_controller=False)


def test_a_cut_off_coordinator_that_is_also_the_active_controller_never_answers_older_offsets():
    """The cut-off node is the group's coordinator and the active controller as well: the
    others must elect a new controller before they can fence it and move the group."""
    cut_off_coordinator(on_the_active_controller=True)


def cut_off_coordinator(on_the_active_controller: bool):
    assert run.Network.available(), "needs root and `ip` (iproute2) for network namespaces"
    workdir = Path(tempfile.mkdtemp(prefix="osprey-finding-"))
    nodes = [Node(workdir, i, "broker,controller") for i in (1, 2, 3)]
    network = run.Network(nodes)
    cluster = None
    try:
        cluster = Cluster(workdir, nodes, run.BROKER_CONFIG)
        cluster.start()
        topic, group = "positions", "readers"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        cluster.wait_for("the topic is created", lambda: admin.create_topics(
            [NewTopic(topic, 1, 3)], operation_timeout=30)[topic].exception(timeout=60) is None, every=1)
        commit(cluster.bootstrap(), group, topic, 5)
        old = cluster.node(coordinator_of(nodes[0], group))
        if on_the_active_controller:
            controller = cluster.wait_for("an active controller", lambda: active_controller(nodes))
            group = group_coordinated_by(nodes[0], controller.node_id)
            commit(cluster.bootstrap(), group, topic, 5)
            old = controller
        assert offsets_from(old, group, topic) == (5, 0)

        others = [n for n in nodes if n is not old]
        network.partition([[old.node_id], [n.node_id for n in others]])
        # Taken once the others fenced the cut-off node and elected a new leader of the
        # group's partition among themselves. The committing client is on their side: a
        # client that still reaches the cut-off node may keep being sent back to it (it
        # names itself the coordinator, from metadata it cannot update) until its commits
        # time out, for longer than this test waits on a loaded machine.
        run.ip("route", "add", "blackhole", f"{old.host}/32")
        try:
            commit(cluster.bootstrap(others), group, topic, 10)
        finally:
            run.ip("route", "del", "blackhole", f"{old.host}/32", check=False)
        assert coordinator_of(others[0], group) != old.node_id
        if on_the_active_controller:
            new = cluster.wait_for("the majority's own active controller", lambda: active_controller(others))
            assert new is not old
        # Its lease ran out before the others could fence it: it no longer names itself.
        looked_up = find_coordinator(old, group)
        assert looked_up[0] == COORDINATOR_NOT_AVAILABLE or looked_up[1] != old.node_id, \
            f"the cut-off node still names itself the coordinator: {looked_up}"
        answer = offsets_from(old, group, topic)
        assert answer in ((10, 0), (-1, NOT_COORDINATOR)), f"the cut-off coordinator answered {answer}"

        network.heal()
        answers = set()
        until = time.monotonic() + 10
        while time.monotonic() < until:
            answers.add(offsets_from(old, group, topic))
            time.sleep(0.05)
        assert answers <= {(10, 0), (-1, NOT_COORDINATOR), None}, f"after the heal it answered {answers}"
        cluster.wait_for("the healed node answers the newer offset or sends the client away",
                         lambda: offsets_from(old, group, topic) in ((10, 0), (-1, NOT_COORDINATOR)))
    finally:
        for n in nodes:
            if n.proc is not None:
                n.kill9()
        network.close()
