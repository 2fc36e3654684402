"""Partition replication (issue 15) on a cluster of three real combined broker+controller
`osprey` processes, driven by confluent-kafka (librdkafka) and Kafka 4.4's kafka-topics:

- an idempotent acks=all producer (librdkafka, and Kafka's VerifiableProducer on the Java
  client) keeps writing to a replication factor 3 topic with min.insync.replicas=2 while
  the leader's process is killed with SIGKILL, three times;
  every acknowledged message is read back exactly once, each key's in order, and the
  ISR returns to all three replicas;
- a follower stopped with SIGSTOP leaves the ISR and acks=all goes on; with
  min.insync.replicas=3 acks=all gets NOT_ENOUGH_REPLICAS while acks=1 still works;
  kafka-topics --under-replicated-partitions and the metrics show it; the follower
  rejoins once resumed;
- with two of the three nodes gone the quorum is lost, the ISR cannot shrink, and
  acks=all times out with nothing acknowledged, as on Kafka 4.4;
- kafka-leader-election (ElectLeaders) moves a partition's leadership back to its
  preferred replica once that replica is back in the ISR, and says no election is needed
  the second time; with auto.leader.rebalance.enable the controller does it by itself;
- (3 controllers and 3 brokers) a partition whose only in-sync replica died stays
  offline while unclean.leader.election.enable is off; switched on, the lagging replica
  leads within the unclean election interval, and the old leader truncates the records
  the new one never had when it returns.

Every wait polls until true (up to cluster.WAIT_S); times are printed, never asserted.
"""

import json
import re
import signal
import subprocess
import time

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

import clients
from cluster import (
    KAFKA_LIB,
    WAIT_S,
    KafkaTools,
    combined,
    listed_brokers,
    partition_states,
    skip_without_kafka_tools,
    split,
)

pytestmark = pytest.mark.timeout(400)

# Faster failure detection than Kafka's defaults, so each test takes seconds, not
# minutes: fencing after 3 s without a heartbeat, ISR shrink after 2 s of lag.
# The tests place leaders themselves; only the rebalance test lets the controller move them.
NO_REBALANCE = {"auto.leader.rebalance.enable": "false"}

FAST = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 2000,
}


@pytest.fixture
def three(tmp_path, request):
    # Leadership stays where the tests put it unless a test asks for the rebalance.
    yield from three_nodes(tmp_path, request, dict(FAST, **NO_REBALANCE))


@pytest.fixture
def three_slow_fencing(tmp_path, request):
    """As `three`, but a broker is fenced only after 15 s without heartbeats: a target
    paused with SIGSTOP to hold a reassignment in progress stays unfenced long enough for
    kafka-reassign-partitions --execute, which checks the target ids against the live
    brokers (DescribeCluster). (A stopping broker waits at most this long for its
    controlled shutdown, which must fit in the 30 s a stop may take.)"""
    yield from three_nodes(tmp_path, request, dict(FAST, **NO_REBALANCE, **{"broker.session.timeout.ms": 15000}))


def three_nodes(tmp_path, request, config):
    skip_without_kafka_tools()
    cluster = combined(tmp_path, config)
    request.node._osprey_brokers = cluster.nodes
    try:
        cluster.start()
        want = {n.node_id for n in cluster.nodes}
        cluster.wait_for("every broker lists all three", lambda: all(listed_brokers(n) == want for n in cluster.nodes))
        cluster.wait_for_all_voters()
        yield cluster
        for n in cluster.nodes:
            if n.proc is not None:
                n.resume()
        cluster.stop()
    finally:
        cluster.kill_all()


def create(cluster, name: str, partitions: int, min_insync: int):
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": cluster.bootstrap()}))
    topic = NewTopic(name, partitions, 3, config={"min.insync.replicas": str(min_insync)})
    admin.create_topics([topic], operation_timeout=10)[name].result(timeout=60)
    cluster.wait_for(f"{name} has a leader and 3 in-sync replicas everywhere",
                     lambda: all(fully_in_sync(partition_states(n, name), partitions) for n in cluster.nodes))


def fully_in_sync(states, partitions: int) -> bool:
    return bool(states) and len(states) == partitions and all(
        leader >= 0 and sorted(isr) == [1, 2, 3] for leader, _, isr in states.values())


def states_from_any(cluster, topic: str):
    for n in cluster.nodes:
        if n.proc is not None:
            found = partition_states(n, topic)
            if found:
                return found
    return None


def led_elsewhere(states, dead: int):
    """`states` if partition 0 has a leader other than `dead`, else None."""
    return states if states and states[0][0] not in (-1, dead) else None


class KeyedWriter(clients.Background):
    """An idempotent acks=all producer in a thread: key k<i> carries values i:0, i:1, ...
    in order; records every acknowledgement and every failure."""

    def __init__(self, bootstrap: str, topic: str, keys: int = 12):
        self.producer = Producer(dict(clients.COMMON, **{
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 180000, "log_level": 0}))
        self.topic, self.keys = topic, keys
        self.acked, self.failed = [], []
        super().__init__()

    def _on_delivery(self, err, msg):
        if err is None:
            self.acked.append((msg.key(), msg.value(), msg.partition(), msg.offset()))
        else:
            self.failed.append(str(err))

    def _run(self):
        sequence = 0
        while not self.stop.is_set():
            key = sequence % self.keys
            value = f"{key}:{sequence // self.keys}".encode()
            try:
                self.producer.produce(self.topic, key=f"k{key}".encode(), value=value, on_delivery=self._on_delivery)
                sequence += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def finish(self):
        self.__exit__()
        left = self.producer.flush(180)
        assert left == 0, f"{left} messages never answered"


class JavaWriter:
    """Kafka's own VerifiableProducer (the Java client, as Kafka's system tests use it):
    an idempotent acks=all producer of increasing integers with 12 repeating keys, whose
    JSON events on stdout say what was acknowledged where."""

    def __init__(self, bootstrap: str, topic: str, workdir, keys: int = 12):
        config = workdir / "verifiable-producer.properties"
        config.write_text("enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=180000\nlinger.ms=5\n")
        self.args = ["java", "-cp", f"{KAFKA_LIB}/*", "org.apache.kafka.tools.VerifiableProducer",
                     "--bootstrap-server", bootstrap, "--topic", topic, "--acks", "-1", "--throughput", "2000",
                     "--repeating-keys", str(keys), "--command-config", str(config)]
        self.stdout = workdir / "verifiable-producer.out"
        self.acked, self.failed = [], []

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdout=open(self.stdout, "w"), stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *_):
        if self.proc.poll() is None:
            self.proc.kill()

    def _events(self):
        events = []
        for line in self.stdout.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        return events

    def _refresh(self):
        events = self._events()
        self.acked = [(str(e["key"]).encode(), str(e["value"]).encode(), e["partition"], e["offset"])
                      for e in events if e.get("name") == "producer_send_success"]
        self.failed = [e for e in events if e.get("name") == "producer_send_error"]

    def finish(self):
        # SIGTERM: its shutdown hook closes the producer, which waits for every answer.
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=200)
        events = self._events()
        assert any(e.get("name") == "shutdown_complete" for e in events), "the producer did not shut down cleanly"
        self._refresh()


def committed(cluster, topic: str, partitions: int) -> int:
    """The sum of the topic's high watermarks, asked of the live brokers (0 if none answers):
    what acks=all has committed. (The Java producer's reports reach its output file only
    when it exits: its stdout is buffered.)"""
    live = ",".join(n.bootstrap for n in cluster.nodes if n.proc is not None)
    c = clients.consumer(type("B", (), {"bootstrap": live})())
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions))
    except Exception:
        return 0
    finally:
        c.close()


def read_everything(bootstrap: str, topic: str, partitions: int):
    """Every record of the topic, by assign from each partition's log start up to its high
    watermark as it is now."""
    c = clients.consumer(type("B", (), {"bootstrap": bootstrap})(), enable_partition_eof=False)
    try:
        marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(partitions)}
        ends = {p: high for p, (_, high) in marks.items()}
        positions = {p: low for p, (low, _) in marks.items()}
        c.assign([TopicPartition(topic, p, positions[p]) for p in range(partitions) if ends[p] > positions[p]])
        got, deadline = [], time.monotonic() + WAIT_S
        while any(positions[p] < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, f"read {positions} of {ends}"
            m = c.poll(0.5)
            if m is None:
                continue
            assert not m.error(), m.error()
            got.append((m.key(), m.value(), m.partition(), m.offset()))
            positions[m.partition()] = m.offset() + 1
        return got
    finally:
        c.close()


@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_acks_all_survives_repeated_kills_of_the_leader(three, client, tmp_path):
    topic, partitions = "kills", 3
    create(three, topic, partitions, min_insync=2)
    if client == "java":
        writer = JavaWriter(three.bootstrap(), topic, tmp_path)
    else:
        writer = KeyedWriter(three.bootstrap(), topic)
    with writer:
        three.wait_for("the producer runs", lambda: committed(three, topic, partitions) > 100)
        for round in range(3):
            time.sleep(1.5)
            states = three.wait_for("a leader for partition 0", lambda: states_from_any(three, topic))
            leader = three.node(states[0][0])
            before = committed(three, topic, partitions)
            killed = time.monotonic()
            leader.kill9()
            moved = three.wait_for(f"partition 0 led by a live node after killing {leader}",
                                   lambda: led_elsewhere(states_from_any(three, topic), leader.node_id))
            three.wait_for("committed records go on growing", lambda: committed(three, topic, partitions) > before + 50)
            print(f"round {round}: {leader} killed; partition 0 led by {moved[0][0]} after "
                  f"{time.monotonic() - killed:.1f}s; {committed(three, topic, partitions)} records committed so far")
            leader.start()
            three.wait_for("the ISR is back to all three replicas",
                           lambda: fully_in_sync(states_from_any(three, topic), partitions))
        writer.finish()
    assert writer.failed == [], writer.failed[:5]
    assert len(writer.acked) > 500, "the producer barely ran"
    got = read_everything(three.bootstrap(), topic, partitions)
    where = {}
    for key, value, partition, offset in got:
        assert (key, value) not in where, f"{key}={value} twice: at {where[(key, value)]} and {(partition, offset)}"
        where[(key, value)] = (partition, offset)
    lost = [(k, v) for k, v, _, _ in writer.acked if (k, v) not in where]
    assert lost == [], f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
    for key, value, partition, offset in writer.acked:
        assert where[(key, value)] == (partition, offset), f"{key}={value} acknowledged at {(partition, offset)}"
    last = {}
    for key, value, _, _ in got:
        n = int(value.split(b":")[-1])
        assert n > last.get(key, -1), f"key {key}: {value} after {last.get(key)}"
        last[key] = n
    print(f"{len(writer.acked)} acknowledged, {len(got)} read back")


def produce_one(bootstrap: str, topic: str, acks: str):
    """One message with `acks` and no retries; its delivery error (None when acknowledged)."""
    p = Producer(dict(clients.COMMON, **{"bootstrap.servers": bootstrap, "acks": acks, "retries": 0,
                                         "message.timeout.ms": 20000, "log_level": 0}))
    result = []
    p.produce(topic, value=b"x", partition=0, on_delivery=lambda err, msg: result.append(err))
    p.flush(30)
    assert result, "no delivery report"
    return result[0]


def test_a_stopped_follower_leaves_the_isr_and_acks_all_goes_on(three, tmp_path):
    create(three, "two", 1, min_insync=2)
    create(three, "three", 1, min_insync=3)
    # No consumer runs here: the incremental fetches are the followers' (KIP-227 sessions).
    three.wait_for("followers fetch in incremental sessions",
                   lambda: sum(n.gauge(r'osprey_fetch_requests_total\{session="incremental"\}') for n in three.nodes) > 0)
    states = states_from_any(three, "two")
    leader = three.node(states[0][0])
    follower = next(n for n in three.nodes if n is not leader and three.node(states_from_any(three, "three")[0][0]) is not n)
    bootstrap = ",".join(n.bootstrap for n in three.nodes if n is not follower)
    follower.pause()
    stopped = time.monotonic()
    for topic in ("two", "three"):
        three.wait_for(f"{follower} out of the ISR of {topic}",
                       lambda: (s := partition_states(leader, topic)) and follower.node_id not in s[0][2])
    print(f"{follower} out of the ISR after {time.monotonic() - stopped:.1f}s")
    assert produce_one(bootstrap, "two", "all") is None, "acks=all with 2 of min.insync.replicas=2"
    refused = produce_one(bootstrap, "three", "all")
    assert refused is not None and refused.code() == KafkaError.NOT_ENOUGH_REPLICAS, refused
    assert produce_one(bootstrap, "three", "1") is None, "acks=1 needs the leader only"

    tools = KafkaTools(tmp_path)
    out = tools.topics(leader.bootstrap, "--describe", "--under-replicated-partitions")
    assert out is not None and out.returncode == 0, out
    listed = {line.split("Topic:")[1].split()[0] for line in out.stdout.splitlines() if "Topic:" in line and "Partition:" in line}
    assert {"two", "three"} <= listed, out.stdout
    # Eligible leader replicas (KIP-966): below min.insync.replicas=3 the follower that
    # left the ISR of "three" has every committed record, and may lead it cleanly; "two"
    # is at its minimum, so it has none.
    elr = {t: elr_of(tools, leader.bootstrap, t) for t in ("two", "three")}
    assert elr == {"two": [], "three": [follower.node_id]}, elr
    live = [n for n in three.nodes if n is not follower]
    # The gauges are refreshed every 5 s.
    three.wait_for("the live leaders report both partitions under-replicated",
                   lambda: sum(n.gauge("osprey_under_replicated_partitions") for n in live) >= 2)
    assert sum(n.gauge("osprey_isr_shrinks_total") for n in live) >= 2

    follower.resume()
    three.wait_for(f"{follower} back in both ISRs",
                   lambda: all(fully_in_sync(partition_states(leader, t), 1) for t in ("two", "three")))
    assert produce_one(three.bootstrap(), "three", "all") is None, "acks=all with the ISR whole again"
    assert sum(n.gauge("osprey_isr_expands_total") for n in three.nodes) >= 2
    assert elr_of(tools, leader.bootstrap, "three") == [], "an ISR back at its minimum clears the ELR"


def elr_of(tools: KafkaTools, bootstrap: str, topic: str):
    """Partition 0's eligible leader replicas as kafka-topics --describe prints them."""
    out = tools.topics(bootstrap, "--describe", "--topic", topic)
    assert out is not None and out.returncode == 0, out
    m = re.search(r"Partition:\s*0\b.*?\bElr:\s*([0-9,]*)", out.stdout)
    assert m, out.stdout
    return [int(x) for x in m.group(1).split(",") if x]


def test_without_a_quorum_the_isr_cannot_shrink_and_acks_all_times_out(three):
    create(three, "stuck", 1, min_insync=2)
    leader = three.node(states_from_any(three, "stuck")[0][0])
    assert produce_one(leader.bootstrap, "stuck", "all") is None
    for n in three.nodes:
        if n is not leader:
            n.kill9()
    p = Producer(dict(clients.COMMON, **{"bootstrap.servers": leader.bootstrap, "acks": "all",
                                         "request.timeout.ms": 3000, "message.timeout.ms": 10000, "log_level": 0}))
    results = []
    for i in range(5):
        p.produce("stuck", value=f"lost-{i}".encode(), partition=0, on_delivery=lambda err, msg: results.append(err))
    assert p.flush(60) == 0
    assert len(results) == 5
    assert all(err is not None for err in results), f"acknowledged without a quorum: {results}"
    print("errors:", sorted({str(e.name()) for e in results}))
    # The ISR the metadata holds is still all three: no controller could shrink it.
    assert sorted(partition_states(leader, "stuck")[0][2]) == [1, 2, 3]


@pytest.fixture
def split_cluster(tmp_path, request):
    """Controllers 1-3 and brokers 4-6: brokers die without taking the quorum along."""
    skip_without_kafka_tools()
    cluster = split(tmp_path, dict(FAST, **{"unclean.leader.election.interval.ms": 1000}))
    request.node._osprey_brokers = cluster.nodes
    try:
        cluster.start()
        want = {4, 5, 6}
        cluster.wait_for("every broker lists brokers 4-6", lambda: all(listed_brokers(b) == want for b in cluster.brokers))
        cluster.wait_for_all_voters()
        yield cluster
        cluster.stop()
    finally:
        cluster.kill_all()


def values_read(bootstrap: str, topic: str):
    return [v for _, v, _, _ in read_everything(bootstrap, topic, 1)]


def test_unclean_election_only_when_allowed_and_the_old_leader_truncates(split_cluster):
    c = split_cluster
    a, b, other = c.node(4), c.node(5), c.node(6)
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": c.bootstrap()}))
    topic = NewTopic("u", 1, -1, replica_assignment=[[4, 5]], config={"min.insync.replicas": "1"})
    admin.create_topics([topic], operation_timeout=10)["u"].result(timeout=60)
    c.wait_for("u led by 4 with ISR [4, 5]", lambda: (s := partition_states(other, "u")) and s[0][0] == 4
               and sorted(s[0][2]) == [4, 5])
    assert all(produce_one(a.bootstrap, "u", "all") is None for _ in range(3)), "committed on both replicas"
    b.kill9()
    c.wait_for("5 out of the ISR", lambda: (s := partition_states(other, "u")) and s[0][2] == [4])
    assert all(produce_one(a.bootstrap, "u", "all") is None for _ in range(2)), "on 4 only"
    a.kill9()
    b.start()
    c.wait_for("5 registered again", lambda: 5 in (listed_brokers(other) or set()))
    time.sleep(3)  # three unclean-election intervals: nothing may happen without the setting
    states = partition_states(other, "u")
    assert states[0][0] == -1, f"a replica outside the ISR led without unclean.leader.election.enable: {states}"
    assert produce_one(b.bootstrap, "u", "1") is not None, "an offline partition takes no write"
    out = KafkaTools(c.workdir).topics(other.bootstrap, "--describe", "--unavailable-partitions")
    assert out is not None and out.returncode == 0, out
    assert re.search(r"Topic:\s*u\s+Partition:\s*0\s+Leader:\s*none", out.stdout), out.stdout

    resource = ConfigResource("topic", "u", incremental_configs=[
        ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    enabled = time.monotonic()
    c.wait_for("5 leads after the unclean election", lambda: (s := partition_states(other, "u")) and s[0][0] == 5)
    print(f"5 leads {time.monotonic() - enabled:.1f}s after the topic config changed")
    assert sum(n.gauge("osprey_controller_unclean_leader_elections_total") for n in c.controllers) >= 1
    assert produce_one(b.bootstrap, "u", "all") is None
    a.start()
    c.wait_for("4 back in the ISR", lambda: (s := partition_states(other, "u")) and sorted(s[0][2]) == [4, 5])
    c.wait_for("the old leader cut the records 5 never had", lambda: "log truncated" in a.log_tail(400))
    assert values_read(other.bootstrap, "u") == [b"x"] * 4, "3 committed on both, then 1 written to 5"


def test_a_follower_behind_the_leaders_log_start_starts_over_there(three):
    create(three, "gone", 1, min_insync=1)
    leader = three.node(states_from_any(three, "gone")[0][0])
    behind = next(n for n in three.nodes if n is not leader)
    assert produce_one(leader.bootstrap, "gone", "all") is None
    behind.kill9()
    three.wait_for(f"{behind} out of the ISR", lambda: behind.node_id not in partition_states(leader, "gone")[0][2])
    p = Producer(dict(clients.COMMON, **{"bootstrap.servers": leader.bootstrap, "acks": "all", "linger.ms": 0}))
    for i in range(30):
        p.produce("gone", value=f"v{i}".encode(), partition=0)
        p.flush(30)
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": leader.bootstrap}))
    deleted = admin.delete_records([TopicPartition("gone", 0, 25)])
    for future in deleted.values():
        assert future.result(timeout=30).low_watermark == 25
    behind.start()
    three.wait_for(f"{behind} back in the ISR", lambda: (s := partition_states(leader, "gone")) and
                   sorted(s[0][2]) == [1, 2, 3])
    assert "fetches from the leader's log start" in behind.log_tail(400), "it started over at the log start"
    assert [v for v in values_read(leader.bootstrap, "gone")] == [f"v{i}".encode() for i in range(24, 30)]


def preferred_replica_back_in_sync(cluster, topic: str):
    """Kills partition 0's preferred (first) replica, waits for another leader, restarts
    it and waits for the whole ISR; that replica's node."""
    create(cluster, topic, 1, min_insync=2)
    _, replicas, _ = states_from_any(cluster, topic)[0]
    preferred = cluster.node(replicas[0])
    cluster.wait_for(f"{preferred} leads {topic}-0 (leader at creation)",
                     lambda: states_from_any(cluster, topic)[0][0] == preferred.node_id)
    preferred.kill9()
    cluster.wait_for(f"{topic}-0 led elsewhere", lambda: led_elsewhere(states_from_any(cluster, topic), preferred.node_id))
    preferred.start()
    cluster.wait_for(f"{preferred} back in the ISR", lambda: fully_in_sync(states_from_any(cluster, topic), 1))
    return preferred


def leaders_everywhere(cluster, topic: str):
    """Partition 0's leader as every node reports it."""
    return {n.node_id: (s[0][0] if (s := partition_states(n, topic)) else None) for n in cluster.nodes}


def test_kafka_leader_election_moves_leadership_back_to_the_preferred_replica(three, tmp_path):
    preferred = preferred_replica_back_in_sync(three, "pref")
    assert states_from_any(three, "pref")[0][0] != preferred.node_id, "no rebalance while it is off"
    tools = KafkaTools(tmp_path)
    out = tools.leader_election(three.bootstrap(), "--election-type", "PREFERRED", "--all-topic-partitions")
    assert out is not None and out.returncode == 0, out
    assert "Successfully completed leader election (PREFERRED) for partitions" in out.stdout and "pref-0" in out.stdout, out.stdout
    three.wait_for(f"every node sees {preferred} lead pref-0 again",
                   lambda: set(leaders_everywhere(three, "pref").values()) == {preferred.node_id})
    assert produce_one(three.bootstrap(), "pref", "all") is None, "acks=all under the preferred leader"
    again = tools.leader_election(three.bootstrap(), "--election-type", "PREFERRED", "--topic", "pref",
                                  "--partition", "0")
    assert again is not None and again.returncode == 0, again
    assert "Valid replica already elected for partitions pref-0" in again.stdout, again.stdout
    unknown = tools.leader_election(three.bootstrap(), "--election-type", "PREFERRED", "--topic", "nope",
                                    "--partition", "0")
    assert unknown is not None and unknown.returncode != 0, unknown
    assert "UnknownTopicOrPartitionException" in unknown.stdout + unknown.stderr, unknown


@pytest.fixture
def three_rebalancing(tmp_path, request):
    yield from three_nodes(tmp_path, request, dict(FAST, **{"auto.leader.rebalance.enable": "true",
                                                            "leader.imbalance.check.interval.seconds": "2"}))


def test_the_controller_moves_leadership_back_to_the_preferred_replica_by_itself(three_rebalancing):
    c = three_rebalancing
    preferred = preferred_replica_back_in_sync(c, "auto")
    back = time.monotonic()
    c.wait_for(f"every node sees {preferred} lead auto-0 again",
               lambda: set(leaders_everywhere(c, "auto").values()) == {preferred.node_id})
    print(f"leadership back {time.monotonic() - back:.1f}s after the ISR was whole")
    assert sum(n.counter("osprey_controller_preferred_leader_elections_total") for n in c.nodes) >= 1


# ----- reassignment (AlterPartitionReassignments 45, ListPartitionReassignments 46) -----

def reassignment_plan(tmp_path, topic: str, replicas):
    """A kafka-reassign-partitions JSON file moving `topic`-0 to `replicas`."""
    plan = tmp_path / f"reassign-{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}))
    return str(plan)


def reassign_ok(tools: KafkaTools, bootstrap: str, *args: str) -> str:
    out = tools.reassign(bootstrap, *args)
    assert out is not None, f"kafka-reassign-partitions {args} hung"
    assert out.returncode == 0, f"kafka-reassign-partitions {args}: {out.stdout}\n{out.stderr}"
    return out.stdout


def listed_reassignments(tools: KafkaTools, bootstrap: str) -> str:
    """`--list`'s lines about partitions (ListPartitionReassignments)."""
    return reassign_ok(tools, bootstrap, "--list")


def roles_for_a_move(cluster, tools: KafkaTools):
    """(source, target kept running, target paused): the source is the active controller,
    so that pausing a target never stalls the quorum."""
    status = cluster.wait_for("the quorum's leader", lambda: tools.quorum_status(("--bootstrap-server",
                                                                                 cluster.bootstrap())))
    source = cluster.node(int(status["LeaderId"]))
    running, paused = [n for n in cluster.nodes if n is not source]
    return source, running, paused


def produce_values(bootstrap: str, topic: str, values):
    p = Producer(dict(clients.COMMON, **{"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}))
    failed = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, msg: err and failed.append(err))
    assert p.flush(60) == 0
    assert failed == [], failed


def create_on(cluster, topic: str, replicas):
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": cluster.bootstrap()}))
    admin.create_topics([NewTopic(topic, 1, -1, replica_assignment=[replicas])],
                        operation_timeout=10)[topic].result(timeout=60)
    cluster.wait_for(f"{topic} led by {replicas[0]} everywhere",
                     lambda: all((s := partition_states(n, topic)) and s[0][0] == replicas[0] for n in cluster.nodes))


def test_reassignment_moves_a_partition_off_its_only_replica(three_slow_fencing, tmp_path):
    cluster = three_slow_fencing
    tools = KafkaTools(tmp_path)
    a, b, c = roles_for_a_move(cluster, tools)
    topic = "moved"
    create_on(cluster, topic, [a.node_id])
    values = [f"v{i}".encode() * 50 for i in range(2000)]
    produce_values(a.bootstrap, topic, values)
    assert (a.dir / f"{topic}-0").is_dir()

    c.pause()  # holds the reassignment in progress: c cannot catch up
    plan = reassignment_plan(tmp_path, topic, [b.node_id, c.node_id])
    started = time.monotonic()
    out = reassign_ok(tools, a.bootstrap, "--reassignment-json-file", plan, "--execute")
    assert "Successfully started partition reassignment" in out, out
    listed = listed_reassignments(tools, a.bootstrap)
    target = sorted([b.node_id, c.node_id])
    assert f"{topic}-0: replicas: {b.node_id},{c.node_id},{a.node_id}. adding: {target[0]},{target[1]}. " \
           f"removing: {a.node_id}." in listed, listed
    verify = reassign_ok(tools, a.bootstrap, "--reassignment-json-file", plan, "--verify")
    assert f"Reassignment of partition {topic}-0 is still in progress." in verify, verify
    described = tools.topics(a.bootstrap, "--describe", "--topic", topic)
    assert described is not None and described.returncode == 0, described
    assert f"Adding Replicas: {target[0]},{target[1]}\tRemoving Replicas: {a.node_id}" in described.stdout, \
        described.stdout
    cluster.wait_for(f"{b} joins the ISR as a follower",
                   lambda: (s := partition_states(a, topic)) and sorted(s[0][2]) == sorted([a.node_id, b.node_id]))
    states = partition_states(a, topic)
    assert states[0][0] == a.node_id and states[0][1] == [b.node_id, c.node_id, a.node_id], states

    c.resume()
    cluster.wait_for("--verify says complete", lambda: "is completed" in (tools.reassign(
        a.bootstrap, "--reassignment-json-file", plan, "--verify") or type("O", (), {"stdout": ""})).stdout)
    print(f"reassignment completed {time.monotonic() - started:.1f}s after --execute")
    for n in cluster.nodes:
        leader, replicas, isr = cluster.wait_for(f"{n} sees the final state", lambda: (s := partition_states(n, topic))
                                               and s[0][1] == [b.node_id, c.node_id] and s[0])
        assert leader in (b.node_id, c.node_id) and set(isr) <= {b.node_id, c.node_id}, (leader, replicas, isr)
    cluster.wait_for(f"{a}'s replica directory removed", lambda: not (a.dir / f"{topic}-0").exists())
    assert "No partition reassignments found." in listed_reassignments(tools, a.bootstrap)
    new_leader = cluster.node(partition_states(b, topic)[0][0])
    assert [v for _, v, _, _ in read_everything(new_leader.bootstrap, topic, 1)] == values


def test_a_cancelled_reassignment_reverts_to_the_original_replica(three_slow_fencing, tmp_path):
    cluster = three_slow_fencing
    tools = KafkaTools(tmp_path)
    a, b, c = roles_for_a_move(cluster, tools)
    topic = "kept"
    create_on(cluster, topic, [a.node_id])
    produce_values(a.bootstrap, topic, [b"before"] * 10)
    c.pause()
    plan = reassignment_plan(tmp_path, topic, [b.node_id, c.node_id])
    reassign_ok(tools, a.bootstrap, "--reassignment-json-file", plan, "--execute")
    cluster.wait_for(f"{b} holds a replica", lambda: (b.dir / f"{topic}-0").is_dir())
    assert f"{topic}-0: replicas:" in listed_reassignments(tools, a.bootstrap)

    # The tool then clears throttles on every broker, the paused one too: not yet.
    out = reassign_ok(tools, a.bootstrap, "--reassignment-json-file", plan, "--cancel", "--preserve-throttles")
    assert f"Successfully cancelled partition reassignment for: {topic}-0" in out, out
    cluster.wait_for("back to the original replica", lambda: (s := partition_states(a, topic))
                   and s[0] == (a.node_id, [a.node_id], [a.node_id]))
    assert "No partition reassignments found." in listed_reassignments(tools, a.bootstrap)
    cluster.wait_for(f"{b}'s added replica directory removed", lambda: not (b.dir / f"{topic}-0").exists())
    c.resume()
    # Nothing left to cancel: the tool lists first and cancels nothing, then clears the
    # throttles (DELETE of broker and topic throttle configs) on every broker.
    reassign_ok(tools, a.bootstrap, "--reassignment-json-file", plan, "--cancel")
    produce_values(a.bootstrap, topic, [b"after"])
    assert [v for _, v, _, _ in read_everything(a.bootstrap, topic, 1)] == [b"before"] * 10 + [b"after"]


def test_reassignment_replaces_a_follower_and_the_leader_goes_on(three, tmp_path):
    """[a, b] -> [a, c]: c joins as a follower, the leader's AlterPartition that admits
    it completes the move (b leaves, the leader epoch moves on), and a keeps leading.
    With min.insync.replicas=3 on two replicas, acks=all works only once the leader knows
    the replicas are two again (KAFKA-15583's effective minimum). (Whether the
    AlterPartition answer or the metadata reaches the leader first is a race here; the
    replica state machine's unit test and the simulation pin the answer-first case.)"""
    tools = KafkaTools(tmp_path)
    a, b, c = roles_for_a_move(three, tools)
    topic = "swapped"
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": three.bootstrap()}))
    admin.create_topics([NewTopic(topic, 1, -1, replica_assignment=[[a.node_id, b.node_id]],
                                  config={"min.insync.replicas": "3"})], operation_timeout=10)[topic].result(timeout=60)
    three.wait_for(f"{topic} led by {a} with both in sync",
                   lambda: (s := partition_states(a, topic)) and s[0][0] == a.node_id and len(s[0][2]) == 2)
    produce_values(a.bootstrap, topic, [b"before"] * 20)
    plan = reassignment_plan(tmp_path, topic, [a.node_id, c.node_id])
    reassign_ok(tools, a.bootstrap, "--reassignment-json-file", plan, "--execute")
    three.wait_for("--verify says complete", lambda: "is completed" in (tools.reassign(
        a.bootstrap, "--reassignment-json-file", plan, "--verify") or type("O", (), {"stdout": ""})).stdout)
    three.wait_for("replicas [a, c], both in sync, a leads", lambda: all(
        (s := partition_states(n, topic)) and s[0][0] == a.node_id and s[0][1] == [a.node_id, c.node_id]
        and sorted(s[0][2]) == sorted([a.node_id, c.node_id]) for n in three.nodes))
    three.wait_for(f"{b}'s replica directory removed", lambda: not (b.dir / f"{topic}-0").exists())
    assert produce_one(a.bootstrap, topic, "all") is None, "acks=all with both replicas in sync"
    assert [v for _, v, _, _ in read_everything(c.bootstrap, topic, 1)] == [b"before"] * 20 + [b"x"]


def test_reassign_partitions_generate_proposes_a_plan_that_executes(three, tmp_path):
    """--generate (the tool's own plan, from Metadata and DescribeCluster) moves every
    replica off node 3; --execute and --verify carry it out, and the records stay."""
    tools = KafkaTools(tmp_path)
    topic = "drained"
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": three.bootstrap()}))
    admin.create_topics([NewTopic(topic, 3, -1, replica_assignment=[[3, 1], [3, 2], [1, 3]])],
                        operation_timeout=10)[topic].result(timeout=60)
    three.wait_for(f"{topic} fully led and in sync", lambda: (s := states_from_any(three, topic)) and len(s) == 3
                   and all(leader >= 0 and len(isr) == 2 for leader, _, isr in s.values()))
    p = Producer(dict(clients.COMMON, **{"bootstrap.servers": three.bootstrap(), "acks": "all"}))
    for i in range(30):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 3)
    assert p.flush(60) == 0
    moving = tmp_path / "topics.json"
    moving.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    out = reassign_ok(tools, three.bootstrap(), "--topics-to-move-json-file", str(moving), "--broker-list", "1,2",
                      "--generate")
    proposed = json.loads(out.split("Proposed partition reassignment configuration")[1].strip().splitlines()[0])
    assert sorted(pp["partition"] for pp in proposed["partitions"]) == [0, 1, 2], proposed
    assert all(sorted(pp["replicas"]) == [1, 2] for pp in proposed["partitions"]), proposed
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposed))
    reassign_ok(tools, three.bootstrap(), "--reassignment-json-file", str(plan), "--execute")
    three.wait_for("--verify says every move is complete", lambda: (
        (o := tools.reassign(three.bootstrap(), "--reassignment-json-file", str(plan), "--verify")) is not None
        and o.stdout.count("is completed") == 3))
    three.wait_for("no replica on node 3 any more", lambda: (s := states_from_any(three, topic)) and all(
        sorted(replicas) == [1, 2] and set(isr) <= {1, 2} for _, replicas, isr in s.values()))
    three.wait_for("node 3's replica directories removed",
                   lambda: not any((three.node(3).dir / f"{topic}-{i}").exists() for i in range(3)))
    assert sorted(v for _, v, _, _ in read_everything(three.bootstrap(), topic, 3)) == sorted(
        f"v{i}".encode() for i in range(30))
