"""Transactions between brokers (issue 16) on a cluster of three real combined
broker+controller `osprey` processes, driven by confluent-kafka (librdkafka):

- a transactional producer commits and aborts transactions that each span partitions
  led by all three brokers: the transaction coordinator writes the markers of the
  partitions led elsewhere with WriteTxnMarkers, and each partition leader checks the
  transaction's first batch with the coordinator on its broker (KIP-890 part 1,
  AddPartitionsToTxn verify-only). A read_committed consumer sees exactly the committed
  records, in order, and no partition is left with an open transaction;
- offsets sent with send_offsets_to_transaction reach a group whose coordinator may be
  on another broker than the transaction's: they are committed with the transaction
  (the marker reaches the `__consumer_offsets` leader) and not with an abort;
- a marker for a partition whose leader is killed stays pending, retried, until the
  new leader writes it;
- Kafka's TransactionalMessageCopier (Java client, transaction version 2) copies three
  partitions exactly once through random aborts, its implicit adds going to a
  coordinator on another broker;
- on a raw socket, a transactional batch for a partition that never joined the
  transaction is refused by a leader on another broker than the coordinator, which must
  have asked that coordinator.

Every wait polls until true (up to cluster.WAIT_S); times are printed, never asserted.
"""

import re
import subprocess
import time
import urllib.request
from collections import defaultdict

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import clients
import kafkawire as kw
from cluster import KAFKA_LIB, listed_brokers, partition_states
from test_replication import three_nodes
from test_transactions import produce_txn
from test_txn_verification import init_transactional_producer

pytestmark = pytest.mark.timeout(300)

FAST = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 2000,
    # Leadership stays where the controller first put it.
    "auto.leader.rebalance.enable": "false",
}

TXN_ATTRIBUTE = 0x10
INVALID_TXN_STATE = 48


class Bootstrap:
    """What `clients` needs of a broker: a bootstrap list (here, every broker)."""

    def __init__(self, cluster):
        self.bootstrap = cluster.bootstrap()


@pytest.fixture
def three(tmp_path, request):
    yield from three_nodes(tmp_path, request, FAST)


def create(cluster, name: str, partitions: int):
    """A replication factor 3 topic, min.insync.replicas=2, fully in sync everywhere;
    returns {partition: leader}."""
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": cluster.bootstrap()}))
    topic = NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([topic], operation_timeout=10)[name].result(timeout=60)

    def in_sync():
        states = [partition_states(n, name) for n in cluster.nodes]
        ok = all(s and len(s) == partitions and all(leader >= 0 and sorted(isr) == [1, 2, 3]
                                                      for leader, _, isr in s.values()) for s in states)
        return ok and {i: leader for i, (leader, _, _) in states[0].items()}

    return cluster.wait_for(f"{name} has a leader and 3 in-sync replicas everywhere", in_sync)


def one_partition_per_leader(leaders: dict) -> dict:
    """{leader: a partition it leads}; every broker must lead one."""
    by_leader = {}
    for partition, leader in sorted(leaders.items()):
        by_leader.setdefault(leader, partition)
    assert sorted(by_leader) == [1, 2, 3], f"the partitions are not led by all three brokers: {leaders}"
    return by_leader


def txn_producer(cluster, transactional_id: str):
    p = clients.producer(Bootstrap(cluster), transactional_id=transactional_id, acks="all")
    p.init_transactions(60)
    return p


def bootstrap_of(where):
    return where if isinstance(where, Bootstrap) else Bootstrap(where)


def read(cluster, tps, isolation: str, count: int):
    c = clients.consumer(bootstrap_of(cluster), isolation_level=isolation)
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
        msgs = clients.consume_exactly(c, count)
    finally:
        c.close()
    out = defaultdict(list)
    for m in sorted(msgs, key=lambda m: (m.topic(), m.partition(), m.offset())):
        out[(m.topic(), m.partition())].append(m.value())
    return dict(out)


def watermarks(cluster, tps, isolation: str):
    c = clients.consumer(bootstrap_of(cluster), isolation_level=isolation)
    try:
        return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=20, cached=False)[1] for t, p in tps}
    finally:
        c.close()


def wait_stable(cluster, tps):
    """Until every partition's last stable offset reaches its high watermark: every
    marker was written, wherever the partition is led."""
    return cluster.wait_for("no open transaction left on any partition",
                            lambda: (lambda hw: hw if hw == watermarks(cluster, tps, "read_committed") else None)(
                                watermarks(cluster, tps, "read_uncommitted")))


def sent_ok(node, api: str) -> float:
    """Requests of `api` this node sent to other nodes and got an answer to."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    total = 0.0
    for labels, value in re.findall(r'^osprey_interbroker_requests_total\{([^}]*)\} (\S+)$', text, re.M):
        if f'api="{api}"' in labels and 'result="ok"' in labels:
            total += float(value)
    return total


def coordinator_of(cluster, key: str, key_type: int):
    """The node id FindCoordinator names for `key` (retried while it is being set up)."""
    node = cluster.brokers[0]

    def ask():
        with kw.Conn("127.0.0.1", node.port) as conn:
            _, error, found = kw.parse_find_coordinator_v1(conn.roundtrip(kw.find_coordinator_v1(1, key, key_type)))
        return found if error == 0 else None

    return cluster.wait_for(f"a coordinator for {key}", ask)


def serving_transactional_id(cluster, prefix: str, not_on=None):
    """A transactional id whose coordinator answers InitProducerId (its
    `__transaction_state` partition loaded), and that coordinator; with `not_on`, one
    coordinated by another broker than that one."""
    def find():
        for i in range(64):
            transactional_id = f"{prefix}-{i}"
            node = cluster.node(coordinator_of(cluster, transactional_id, 1))
            if node.node_id == not_on:
                continue
            with kw.Conn("127.0.0.1", node.port) as conn:
                _, error, _, _ = kw.parse_init_producer_id_v0(conn.roundtrip(kw.init_producer_id_v0(1, transactional_id)))
            if error == 0:
                return transactional_id, node.node_id
        return None

    return cluster.wait_for("a transactional id whose coordinator serves it", find)


def test_transactions_spanning_partitions_led_by_every_broker_are_all_or_nothing(three):
    cluster = three
    topic = "txn-spread"
    leaders = create(cluster, topic, 6)
    partitions = sorted(one_partition_per_leader(leaders).values())
    transactional_id, coordinator = serving_transactional_id(cluster, "spread")
    p = txn_producer(cluster, transactional_id)
    print(f"partition leaders {leaders}; transaction coordinator: {coordinator}")

    expected = defaultdict(list)
    everything = defaultdict(list)
    started = time.monotonic()
    for i, finish in enumerate(["commit", "abort", "commit", "commit", "abort", "commit"]):
        messages = [(topic, partition, f"txn{i}-p{partition}-{j}".encode()) for partition in partitions for j in range(3)]
        produce_txn(p, messages, finish)
        for t, partition, value in messages:
            everything[(t, partition)].append(value)
            if finish == "commit":
                expected[(t, partition)].append(value)
    print(f"6 transactions over partitions led by 3 brokers in {time.monotonic() - started:.2f}s")

    tps = [(topic, partition) for partition in partitions]
    hw, _ = wait_stable(cluster, tps), None
    print(f"high watermarks once stable: {hw}")
    committed = read(cluster, tps, "read_committed", sum(len(v) for v in expected.values()))
    assert committed == dict(expected), "read_committed must see exactly the committed transactions, in order"
    uncommitted = read(cluster, tps, "read_uncommitted", sum(len(v) for v in everything.values()))
    assert uncommitted == dict(everything), "read_uncommitted sees every record, aborted ones included"
    # Every record and one marker per transaction on each partition.
    assert all(hw[tp] == 6 * 3 + 6 for tp in tps), f"each partition holds 18 records and 6 markers: {hw}"
    # The coordinator sent the markers of the partitions led elsewhere; their leaders
    # asked it to verify each transaction's first batch.
    others = [n for n in cluster.nodes if n.node_id != coordinator]
    assert sent_ok(cluster.node(coordinator), "WriteTxnMarkers") > 0
    assert all(sent_ok(n, "AddPartitionsToTxn") >= 6 for n in others), \
        {n.node_id: sent_ok(n, "AddPartitionsToTxn") for n in others}


def test_offsets_sent_to_a_transaction_follow_it_across_brokers(three):
    cluster = three
    topic = "txn-offsets-out"
    source = "txn-offsets-in"
    leaders = create(cluster, topic, 3)
    create(cluster, source, 1)
    partitions = sorted(one_partition_per_leader(leaders).values())
    transactional_id, txn_coordinator = serving_transactional_id(cluster, "offsets")
    # A group coordinated by another broker than the transaction: TxnOffsetCommit is
    # checked with the transaction coordinator over there, and the transaction's marker
    # for the group's __consumer_offsets partition goes there too.
    group = next(g for g in (f"txn-cluster-group-{i}" for i in range(64))
                 if coordinator_of(cluster, g, 0) != txn_coordinator)
    p = txn_producer(cluster, transactional_id)
    print(f"transaction coordinator {coordinator_of(cluster, transactional_id, 1)}, "
          f"group coordinator {coordinator_of(cluster, group, 0)}, leaders {leaders}")
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": cluster.bootstrap()}))

    def committed_offset():
        result = admin.list_consumer_group_offsets([_group_request(group, source)])[group].result(timeout=20)
        return result.topic_partitions[0].offset

    consumer = clients.consumer(Bootstrap(cluster), group_id=group, isolation_level="read_committed")
    try:
        for offset, finish in [(5, "commit"), (9, "abort"), (12, "commit")]:
            p.begin_transaction()
            for partition in partitions:
                p.produce(topic, value=f"{finish}-{offset}".encode(), partition=partition)
            p.send_offsets_to_transaction([TopicPartition(source, 0, offset)], consumer.consumer_group_metadata(), 60)
            if finish == "commit":
                p.commit_transaction(60)
                cluster.wait_for(f"offset {offset} committed for {group}", lambda: committed_offset() == offset)
            else:
                p.abort_transaction(60)
            assert committed_offset() == (12 if offset == 12 else 5), "an aborted transaction moved the offset"
    finally:
        consumer.close()
    tps = [(topic, partition) for partition in partitions]
    wait_stable(cluster, tps)
    committed = read(cluster, tps, "read_committed", 2 * len(partitions))
    assert committed == {tp: [b"commit-5", b"commit-12"] for tp in tps}


def test_kafkas_transactional_message_copier_copies_exactly_once_across_brokers(three):
    """Kafka's TransactionalMessageCopier (the Java client, transaction version 2: the
    partition leaders add output partitions to the transaction themselves, with
    AddPartitionsToTxn v5 to a coordinator on another broker, and TxnOffsetCommit v5 adds
    the group's offsets partition) copies each input partition to the same output
    partition, aborting a third of its transactions at random: the read_committed output
    is the input, exactly once and in order, on partitions led by every broker."""
    cluster = three
    source, sink = "copier-in", "copier-out"
    create(cluster, source, 3)
    leaders = create(cluster, sink, 3)
    one_partition_per_leader(leaders)
    per_partition = 300
    p = clients.producer(Bootstrap(cluster), acks="all")
    for partition in range(3):
        for i in range(per_partition):
            p.produce(source, value=f"p{partition}-{i:04d}".encode(), partition=partition)
    assert p.flush(60) == 0
    # Each copier's transaction is coordinated by another broker than its output
    # partition's leader, which adds the partition to the transaction over there.
    chosen = [serving_transactional_id(cluster, f"copier-{partition}", not_on=leaders[partition])
              for partition in range(3)]
    started = time.monotonic()
    copiers = []
    for partition, (transactional_id, coordinator) in enumerate(chosen):
        print(f"copier of partition {partition} (output led by {leaders[partition]}): coordinator {coordinator}")
        copiers.append(subprocess.Popen(
            ["java", "-cp", f"{KAFKA_LIB}/*", "org.apache.kafka.tools.TransactionalMessageCopier",
             "--broker-list", cluster.bootstrap(), "--input-topic", source, "--input-partition", str(partition),
             "--output-topic", sink, "--consumer-group", f"copier-group-{partition}",
             "--transactional-id", transactional_id, "--transaction-size", "50", "--enable-random-aborts"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for copier in copiers:
        try:
            out, _ = copier.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            copier.kill()
            out, _ = copier.communicate()
            raise AssertionError(f"the copier did not finish:\n{out[-3000:]}")
        assert copier.returncode == 0, f"the copier failed:\n{out[-3000:]}"
    print(f"3 copiers done in {time.monotonic() - started:.1f}s")
    for n in cluster.nodes:
        assert sent_ok(n, "AddPartitionsToTxn") > 0, f"node {n.node_id} never asked a coordinator on another broker"
    tps = [(sink, partition) for partition in range(3)]
    wait_stable(cluster, tps)
    copied = read(cluster, tps, "read_committed", 3 * per_partition)
    assert copied == {(sink, partition): [f"p{partition}-{i:04d}".encode() for i in range(per_partition)]
                      for partition in range(3)}, "the committed output must be the input, exactly once"


def test_a_marker_stays_pending_across_a_leader_move_until_written(three):
    """The leader of some of the transaction's partitions is killed (kill -9) between the
    last batch and the commit: the coordinator's markers for them fail, are retried with
    back-off, and go to the new leader once the controller moves leadership, so the
    commit becomes visible there too."""
    cluster = three
    topic = "txn-moves"
    leaders = create(cluster, topic, 6)
    transactional_id, coordinator = serving_transactional_id(cluster, "moves")
    victim = next(n for n in (1, 2, 3) if n != coordinator)
    moved = sorted(p for p, leader in leaders.items() if leader == victim)
    print(f"coordinator {coordinator}; killing {victim}, leader of {moved}; leaders {leaders}")
    p = txn_producer(cluster, transactional_id)
    messages = [(topic, partition, f"moves-p{partition}-{j}".encode()) for partition in sorted(leaders) for j in range(3)]
    p.begin_transaction()
    for t, partition, value in messages:
        p.produce(t, value=value, partition=partition)
    assert p.flush(60) == 0
    cluster.node(victim).kill9()
    started = time.monotonic()
    p.commit_transaction(60)
    print(f"commit answered {time.monotonic() - started:.2f}s after the kill")
    survivors = [n for n in cluster.nodes if n.proc is not None]
    cluster.wait_for(f"{topic}'s partitions led by the survivors", lambda: all(
        (states := partition_states(n, topic)) and all(l not in (victim, -1) for l, _, _ in states.values())
        for n in survivors))
    tps = [(topic, partition) for partition in sorted(leaders)]
    survivor = Bootstrap(cluster)
    survivor.bootstrap = ",".join(n.bootstrap for n in survivors)
    hw = cluster.wait_for("every marker written, on the new leaders too", lambda: (
        lambda hw: hw if hw == watermarks(survivor, tps, "read_committed") else None)(
            watermarks(survivor, tps, "read_uncommitted")))
    print(f"stable {time.monotonic() - started:.2f}s after the kill: {hw}")
    committed = read(survivor, tps, "read_committed", len(messages))
    assert committed == {(t, partition): [v for tt, pp, v in messages if (tt, pp) == (t, partition)] for t, partition in tps}
    cluster.node(victim).start()
    cluster.wait_for(f"node {victim} back", lambda: all(listed_brokers(n) == {1, 2, 3} for n in cluster.nodes))


def _group_request(group: str, topic: str):
    from confluent_kafka import ConsumerGroupTopicPartitions
    return ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])


def test_a_leader_on_another_broker_asks_the_coordinator_before_a_first_transactional_batch(three):
    cluster = three
    topic = "txn-raw"
    leaders = create(cluster, topic, 6)
    transactional_id, coordinator = serving_transactional_id(cluster, "raw-remote-verify")
    partition, leader = next((p, l) for p, l in sorted(leaders.items()) if l != coordinator)
    print(f"coordinator {coordinator}; partition {partition} led by {leader}")
    coordinator_node = cluster.node(coordinator)
    leader_node = cluster.node(leader)

    with kw.Conn("127.0.0.1", coordinator_node.port) as conn:
        producer_id, epoch = init_transactional_producer(conn, transactional_id)

    batch = kw.record_batch([(b"k", b"v")], attributes=TXN_ATTRIBUTE, producer=(producer_id, epoch, 0))
    with kw.Conn("127.0.0.1", leader_node.port) as conn:
        frame = kw.produce_v3(1, topic, partition, batch, transactional_id=transactional_id, acks=-1)
        _, [(_, _, error, _)] = kw.parse_produce_v3(conn.roundtrip(frame))
        # The coordinator answered that the partition is not in the transaction; Produce
        # v3 predates TRANSACTION_ABORTABLE, so INVALID_TXN_STATE.
        assert error == INVALID_TXN_STATE, f"error {error}"

    with kw.Conn("127.0.0.1", coordinator_node.port) as conn:
        _, results = kw.parse_add_partitions_to_txn_v0(
            conn.roundtrip(kw.add_partitions_to_txn_v0(2, transactional_id, producer_id, epoch, topic, [partition])))
        assert results == [(topic, partition, 0)]

    with kw.Conn("127.0.0.1", leader_node.port) as conn:
        frame = kw.produce_v3(3, topic, partition, batch, transactional_id=transactional_id, acks=-1)
        _, [(_, _, error, base_offset)] = kw.parse_produce_v3(conn.roundtrip(frame))
        assert (error, base_offset) == (0, 0), "the coordinator on another broker verified the partition"
