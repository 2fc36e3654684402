"""Consumer groups and transactions on a cluster of three real combined broker+controller
`osprey` processes (issue 16), driven by confluent-kafka (librdkafka):

- the broker coordinating a consumer group (classic and KIP-848) is killed with SIGKILL
  while two members consume with auto-commit off, committing each message after
  processing it: the members find the new coordinator, a committed offset once read never
  goes backwards and never falls behind a commit already acknowledged, and every message
  is consumed at least once;
- the broker coordinating a transactional producer is killed with SIGKILL in the middle
  of its commits and aborts over partitions led by all three brokers: the producer
  recovers as librdkafka requires (abort after an abortable error, a new producer and
  init_transactions after a fatal one), and a read_committed consumer sees every
  transaction whose commit returned, each transaction whole or not at all, and nothing of
  an aborted one;
- the consumer practices of the reference articles, on the cluster: auto-commit off and a
  commit only after processing (a member that stops takes nothing unprocessed with it); a
  rebalance listener that commits on revocation while a second member joins (nothing
  processed twice); per-key order through the rebalances of a member joining and another
  leaving while a producer writes.

The internal topics are left at Kafka's defaults (offsets.topic.replication.factor=3,
transaction.state.log.replication.factor=3, transaction.state.log.min.isr=2), which the
first test checks. Every wait polls until true (up to cluster.WAIT_S); times are printed,
never asserted.
"""

import gc
import threading
import time
from collections import Counter, defaultdict
from types import SimpleNamespace

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

import clients
import kafkawire
from cluster import WAIT_S, combined, listed_brokers, partition_states, skip_without_kafka_tools
from kafka_cluster import KafkaNode, against_kafka, combined_kafka

# Kafka's three JVMs take minutes to start and stop on a small machine.
pytestmark = pytest.mark.timeout(900 if against_kafka() else 300)

# A dead broker is fenced 3 s after its last heartbeat (Kafka: 9 s), so its partitions,
# the coordinator partitions among them, move within a test's time. Leadership stays
# where the controller put it: a restarted node takes nothing back during a test. A new
# classic group forms at once rather than after Kafka's 3 s initial delay, and a KIP-848
# member heartbeats every second rather than every 5 s, so that it learns of a
# revocation or an assignment sooner.
CLUSTER_CONFIG = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "auto.leader.rebalance.enable": "false",
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.min.heartbeat.interval.ms": 1000,
    "group.consumer.heartbeat.interval.ms": 1000,
}
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
PROTOCOLS = ["classic", "consumer"]


@pytest.fixture
def three(tmp_path, request):
    """Three combined osprey nodes; with COMPAT_CLUSTER=kafka, three Kafka 4.4 nodes
    (kafka_cluster.py), to check the test against Kafka itself."""
    if against_kafka():
        skip_without_kafka_tools()
    cluster = three_nodes(tmp_path, CLUSTER_CONFIG, against_kafka())
    request.node._osprey_brokers = cluster.nodes  # their logs in a failure's report
    try:
        start_three(cluster)
        yield cluster
        gc.collect()  # clients left to the cycle collector would go on reconnecting
        if not against_kafka():  # osprey must stop cleanly; Kafka is not under test
            cluster.stop()
    finally:
        cluster.kill_all()


def three_nodes(workdir, config, kafka: bool):
    """Three combined nodes in `workdir` with `config` on top of each one's listeners and
    quorum: Kafka 4.4 nodes when `kafka`, else osprey nodes. Also what
    bench/coordinators.py runs its rounds on."""
    return combined_kafka(workdir, config) if kafka else combined(workdir, config)


def start_three(cluster):
    """Starts the three nodes and waits until every one lists all three brokers and, on
    osprey, every controller is a voter (Kafka's static quorum has every voter from the
    start)."""
    cluster.start()
    want = {n.node_id for n in cluster.nodes}
    cluster.wait_for("every broker lists all three", lambda: all(listed_brokers(n) == want for n in cluster.nodes),
                     timeout=3 * WAIT_S)
    if not isinstance(cluster.nodes[0], KafkaNode):
        cluster.wait_for_all_voters()


# ----- helpers ----------------------------------------------------------------------------


def live(cluster):
    return [n for n in cluster.nodes if n.proc is not None]


def bootstrap(cluster):
    """Something clients.py takes: every node, dead or alive, as a client is configured."""
    return SimpleNamespace(bootstrap=cluster.bootstrap())


def admin(cluster) -> AdminClient:
    return AdminClient(dict(clients.COMMON, **{"bootstrap.servers": cluster.bootstrap()}))


def create(cluster, name: str, partitions: int):
    """Replication factor 3, min.insync.replicas=2; waits until every partition has a
    leader and all three replicas in sync on every node."""
    a = admin(cluster)
    topic = NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})
    a.create_topics([topic], operation_timeout=10)[name].result(timeout=60)
    wait_in_sync(cluster, name, partitions)


def wait_in_sync(cluster, topic: str, partitions: int):
    def in_sync(states):
        return bool(states) and len(states) == partitions and all(
            leader >= 0 and sorted(isr) == [1, 2, 3] for leader, _, isr in states.values())

    cluster.wait_for(f"{topic}: a leader and 3 in-sync replicas on every live node",
                     lambda: all(in_sync(partition_states(n, topic)) for n in live(cluster)))


def leaders(cluster, topic: str):
    """{partition: leader} from the first live node that knows the topic."""
    for n in live(cluster):
        states = partition_states(n, topic)
        if states:
            return {p: s[0] for p, s in states.items()}
    return None


def find_coordinator(cluster, key: str, key_type: int):
    """The coordinator's node id as a live node answers FindCoordinator v1, or None while
    it answers an error (COORDINATOR_NOT_AVAILABLE while the internal topic is created or
    its partition has no leader)."""
    for n in live(cluster):
        try:
            with kafkawire.Conn("127.0.0.1", n.port, timeout=5) as c:
                _, error, node_id = kafkawire.parse_find_coordinator_v1(
                    c.roundtrip(kafkawire.find_coordinator_v1(3, key, key_type)))
        except (OSError, kafkawire.Closed):
            continue
        return node_id if error == 0 else None
    return None


def high_watermarks(cluster, topic: str, partitions: int):
    c = clients.consumer(bootstrap(cluster))
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=clients.TIMEOUT_S, cached=False)[1]
                for p in range(partitions)}
    finally:
        c.close()


def offsets_reader(cluster, group: str):
    """A consumer of `group` that never joins it: it only reads the committed offsets
    (OffsetFetch). Not the admin client's list_consumer_group_offsets: librdkafka's admin
    client crashes on an OffsetFetch answered NOT_COORDINATOR (confluentinc/librdkafka#5040),
    which is what a coordinator that moved answers."""
    return clients.consumer(bootstrap(cluster), **{"group.id": group, "log_level": 0})


def committed_offsets(reader, topic: str, partitions: int):
    """{partition: committed offset, -1 for none} through OffsetFetch, or None when the
    coordinator does not answer in time (it is being moved or loaded)."""
    try:
        result = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=5)
    except KafkaException:
        return None
    if any(tp.error for tp in result):
        return None
    return {tp.partition: max(tp.offset, -1) for tp in result}


def produce_keyed(cluster, topic: str, count: int, keys: int):
    """`count` messages, key k<i> carrying values "<i>:0", "<i>:1", ... in order, with an
    idempotent acks=all producer; every delivery must succeed."""
    p = clients.producer(bootstrap(cluster), acks="all", enable_idempotence=True)
    messages = [{"key": f"k{i % keys}".encode(), "value": f"{i % keys}:{i // keys}".encode()} for i in range(count)]
    reports = clients.produce_all(p, topic, messages)
    assert [r.error for r in reports if r.error] == []


def group_member(cluster, group: str, protocol: str, **config):
    conf = {"group.id": group, "group.protocol": protocol, "auto.offset.reset": "earliest", "log_level": 0}
    conf.update(config)
    return clients.consumer(bootstrap(cluster), **conf)


def sequence_of(value: bytes):
    """("3", 17) for b"3:17": the key number and the key's sequence."""
    key, n = value.decode().split(":")
    return key, int(n)


# ----- internal topics --------------------------------------------------------------------


def test_internal_topics_are_replicated_with_kafkas_defaults(three):
    """With no configuration, `__consumer_offsets` and `__transaction_state` get Kafka's
    replication factor 3 on a 3-broker cluster, and the transaction log Kafka's min ISR 2."""
    group, transactional_id = "defaults-group", "defaults-txn"
    three.wait_for("a group coordinator", lambda: find_coordinator(three, group, KEY_TYPE_GROUP) is not None)
    three.wait_for("a transaction coordinator",
                   lambda: find_coordinator(three, transactional_id, KEY_TYPE_TRANSACTION) is not None)
    for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        states = three.wait_for(f"{topic} in the metadata", lambda: partition_states(three.nodes[0], topic))
        replicas = Counter(len(r) for _, r, _ in states.values())
        assert replicas == Counter({3: len(states)}), f"{topic}: replicas per partition {replicas}"
    a = admin(three)
    resource = ConfigResource(ConfigResource.Type.TOPIC, TRANSACTION_STATE_TOPIC)
    configs = a.describe_configs([resource], request_timeout=20)[resource].result(timeout=30)
    assert configs["min.insync.replicas"].value == "2", configs["min.insync.replicas"]


NOT_COORDINATOR = 16


def test_offset_fetch_v1_from_another_broker_than_the_coordinator_puts_the_error_on_every_partition(three):
    """OffsetFetch v0-1 have no group-level error code: a broker that does not coordinate
    the group answers NOT_COORDINATOR on each requested partition, with no offset, as
    Kafka does (OffsetFetchRequest.getErrorResponse). An empty answer would tell an old
    client that nothing was ever committed, and it would reset its position."""
    group, topic = "v1-group", "v1-topic"
    create(three, topic, 2)
    coordinator = three.wait_for("the group coordinator", lambda: find_coordinator(three, group, KEY_TYPE_GROUP))
    other = next(n for n in three.nodes if n.node_id != coordinator)
    with kafkawire.Conn("127.0.0.1", other.port, timeout=10) as c:
        _, answers = kafkawire.parse_offset_fetch_v1(c.roundtrip(kafkawire.offset_fetch_v1(7, group, topic, [0, 1])))
    assert answers == [(topic, 0, -1, "", NOT_COORDINATOR), (topic, 1, -1, "", NOT_COORDINATOR)], answers


# ----- group coordinator loss -------------------------------------------------------------


class CommitWatch(clients.Background):
    """Reads the group's committed offsets (OffsetFetch, by a consumer outside the group) in a
    thread, as often as the coordinator answers, and notes every reading that goes back
    from an earlier reading, or falls behind a commit acknowledged before it was asked."""

    def __init__(self, cluster, group: str, topic: str, partitions: int, acked):
        self.reader = offsets_reader(cluster, group)
        self.group, self.topic, self.partitions = group, topic, partitions
        self.acked = acked  # {partition: highest offset whose commit returned}, shared
        self.last = {}
        self.readings = 0
        self.violations = []
        super().__init__()

    def _run(self):
        while not self.stop.is_set():
            acked_before = dict(self.acked)
            now = committed_offsets(self.reader, self.topic, self.partitions)
            if now is not None:
                self.readings += 1
                for p, offset in now.items():
                    if offset < self.last.get(p, -1):
                        self.violations.append(f"partition {p}: committed {offset} after {self.last[p]} was read")
                    if offset < acked_before.get(p, -1):
                        self.violations.append(
                            f"partition {p}: committed {offset} after a commit of {acked_before[p]} returned")
                    self.last[p] = max(offset, self.last.get(p, -1))
            self.stop.wait(0.2)

    def __exit__(self, *_):
        super().__exit__()
        self.reader.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_kill9_of_the_group_coordinator_keeps_commits_and_consumes_everything(three, protocol):
    run = kill9_of_the_group_coordinator(three, protocol)
    hw = run.high_watermarks
    assert sum(hw.values()) == run.count, hw
    assert run.new_coordinator != run.killed.node_id, f"{run.killed} still named the coordinator"
    assert run.violations == [], run.violations[:10]
    assert run.final == hw, f"committed {run.final} after the restart, high watermarks {hw}"
    print(f"{protocol}: coordinator {run.killed} killed at {run.commits_at_kill} of {run.count} messages committed; "
          f"first commit {run.first_commit_s}s after the kill, everything consumed {run.all_consumed_s}s, commits "
          f"at the log end {run.commits_at_end_s}s; new coordinator {run.new_coordinator}; {run.readings} readings "
          f"of the committed offsets; commit errors {run.commit_errors}; poll errors {run.poll_errors}")
    missing = {p: hw[p] - len(run.consumed[p]) for p in hw if len(run.consumed[p]) != hw[p]}
    assert missing == {}, f"messages never consumed, per partition: {missing}"


def kill9_of_the_group_coordinator(cluster, protocol: str) -> SimpleNamespace:
    """Two members of a `protocol` group consume 1200 keyed messages from 6 partitions,
    committing each message after processing it; once a third is committed, the group's
    coordinator is killed with SIGKILL. Runs until every message is consumed and the
    committed offsets read back at the high watermarks, then restarts the killed node and
    reads the committed offsets again.

    Returns what happened, for the test to check and bench/coordinators.py to time:
    seconds from the kill to the first commit that returned (`first_commit_s`), to every
    message consumed (`all_consumed_s`) and to the committed offsets read back at the
    high watermarks (`commits_at_end_s`). Fails only when the run cannot go on (a bound
    passed, no coordinator)."""
    topic, group, partitions, count = "orders", f"orders-{protocol}", 6, 1200
    create(cluster, topic, partitions)
    produce_keyed(cluster, topic, count, keys=24)
    hw = high_watermarks(cluster, topic, partitions)
    members = [group_member(cluster, group, protocol) for _ in range(2)]
    describer = admin(cluster)
    consumed = defaultdict(set)  # partition -> offsets processed
    acked = {}  # partition -> highest offset whose commit returned
    commit_errors, poll_errors = Counter(), Counter()
    processed = [dict(), dict()]  # per member: partition -> next offset after what it processed
    run = SimpleNamespace(count=count, high_watermarks=hw, consumed=consumed, killed=None, commits_at_kill=None,
                          first_commit_s=None, all_consumed_s=None, commits_at_end_s=None)
    killed_at = None

    def commit_returned():
        if killed_at is not None and run.first_commit_s is None:
            run.first_commit_s = time.monotonic() - killed_at

    try:
        for m in members:
            m.subscribe([topic])
        with CommitWatch(cluster, group, topic, partitions, acked) as watch:
            deadline = time.monotonic() + 2 * WAIT_S
            while True:
                assert time.monotonic() < deadline, (
                    f"consumed {sum(map(len, consumed.values()))} of {count}; committed {watch.last}, high "
                    f"watermarks {hw}; commit errors {dict(commit_errors)}, poll errors {dict(poll_errors)}")
                if run.killed is None and sum(acked.values()) >= count // 3:
                    run.killed = cluster.node(cluster.wait_for(f"the coordinator of {group}",
                                                               lambda: group_coordinator(describer, group)))
                    run.killed.kill9()
                    killed_at, run.commits_at_kill = time.monotonic(), sum(acked.values())
                all_consumed = all(len(consumed[p]) == hw[p] for p in hw)
                if killed_at is not None and all_consumed and run.all_consumed_s is None:
                    run.all_consumed_s = time.monotonic() - killed_at
                if all_consumed and watch.last == hw:
                    break
                for i, m in enumerate(members):
                    msg = m.poll(0.05)
                    if msg is None:
                        if all(len(consumed[p]) == hw[p] for p in hw):
                            if commit_processed(m, topic, processed[i], acked, commit_errors):
                                commit_returned()
                        continue
                    if msg.error():
                        poll_errors[msg.error().name()] += 1
                        continue
                    consumed[msg.partition()].add(msg.offset())
                    processed[i][msg.partition()] = msg.offset() + 1
                    try:
                        m.commit(message=msg, asynchronous=False)
                    except KafkaException as e:
                        commit_errors[e.args[0].name()] += 1
                        continue
                    acked[msg.partition()] = max(acked.get(msg.partition(), -1), msg.offset() + 1)
                    commit_returned()
            assert run.killed is not None, "the members finished before the coordinator was killed"
            run.commits_at_end_s = time.monotonic() - killed_at
            # FindCoordinator rather than the admin client while the coordinator moves (above).
            run.new_coordinator = cluster.wait_for("the group's coordinator",
                                                   lambda: find_coordinator(cluster, group, KEY_TYPE_GROUP))
            run.killed.start()
            cluster.wait_for(f"{run.killed} listed again",
                             lambda: all(listed_brokers(n) == {1, 2, 3} for n in cluster.nodes))
            run.final = cluster.wait_for("the committed offsets after the restart",
                                         lambda: committed_offsets(watch.reader, topic, partitions))
        run.violations, run.readings = watch.violations, watch.readings
        run.commit_errors, run.poll_errors = dict(commit_errors), dict(poll_errors)
        return run
    finally:
        for m in members:
            m.close()


def group_coordinator(a: AdminClient, group: str):
    """The coordinator's node id as DescribeGroups / ConsumerGroupDescribe report it, or
    None while the admin client gets no answer."""
    try:
        d = a.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10)
    except (KafkaException, TimeoutError):
        return None
    return d.coordinator.id if d.coordinator is not None else None


def commit_processed(member, topic: str, processed, acked, errors):
    """Commits what this member processed on the partitions it still owns: the retry of a
    commit that failed while the coordinator moved. True when a commit returned."""
    owned = {tp.partition for tp in member.assignment()}
    offsets = [TopicPartition(topic, p, o) for p, o in processed.items() if p in owned and o > acked.get(p, -1)]
    if not offsets:
        return False
    try:
        member.commit(offsets=offsets, asynchronous=False)
    except KafkaException as e:
        errors[e.args[0].name()] += 1
        return False
    for tp in offsets:
        acked[tp.partition] = max(acked.get(tp.partition, -1), tp.offset)
    return True


# ----- transaction coordinator loss -------------------------------------------------------


class TxnRunner:
    """One transactional id's transactions, numbered: transaction n writes "<n>:<j>" for j
    in 0..size-1, two to each partition, and is aborted when n % 3 == 2, else committed.
    Each outcome is what the client said: "committed" when commit_transaction returned,
    "aborted" when abort_transaction returned, "unknown" when neither did (the producer
    failed fatally, or gave up, around it)."""

    def __init__(self, cluster, topic: str, partitions: int, transactional_id: str):
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.transactional_id = transactional_id
        self.size = 2 * partitions
        self.outcomes = {}
        self.errors = Counter()
        self.producers_made = 0
        self.producer = None

    def new_producer(self):
        self.producer = None  # destroyed before its successor fences it
        p = clients.producer(bootstrap(self.cluster), transactional_id=self.transactional_id, linger_ms=5,
                             message_timeout_ms=30000, log_level=0)
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                p.init_transactions(15)
                break
            except KafkaException as e:
                err = e.args[0]
                self.errors[f"init_transactions:{err.name()}"] += 1
                assert err.retriable() and time.monotonic() < deadline, (
                    f"init_transactions: {err}; transactions so far {self.outcomes}, errors {dict(self.errors)}")
        self.producer = p
        self.producers_made += 1

    def run_one(self, n: int):
        p = self.producer
        finish = "abort" if n % 3 == 2 else "commit"
        self.outcomes[n] = "unknown"
        try:
            p.begin_transaction()
            for j in range(self.size):
                produce(p, self.topic, j % self.partitions, f"{n}:{j}".encode())
            assert p.flush(60) == 0, f"transaction {n}: messages undelivered after 60 s"
            if finish == "commit":
                self.end(n, p.commit_transaction, "committed")
            else:
                self.end(n, p.abort_transaction, "aborted")
        except KafkaException as e:
            err = e.args[0]
            self.errors[err.name()] += 1
            if err.txn_requires_abort():
                try:
                    self.end(n, p.abort_transaction, "aborted")
                except KafkaException as abort_error:
                    self.errors[f"abort:{abort_error.args[0].name()}"] += 1
                    self.new_producer()
            else:
                self.new_producer()

    def end(self, n: int, call, outcome: str):
        """Calls commit_transaction or abort_transaction until it returns, retrying what
        librdkafka says is retriable, for up to WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                call(15)
                self.outcomes[n] = outcome
                return
            except KafkaException as e:
                err = e.args[0]
                if not err.retriable() or time.monotonic() > deadline:
                    raise
                self.errors[f"retried:{err.name()}"] += 1


def produce(p: Producer, topic: str, partition: int, value: bytes):
    while True:
        try:
            p.produce(topic, value=value, partition=partition)
            return
        except BufferError:
            p.poll(0.1)


def read_committed_to_end(cluster, topic: str, partitions: int):
    """Every read_committed message of `topic` up to the high watermark of each partition:
    the last stable offset reaches it once no transaction is left open."""
    hw = high_watermarks(cluster, topic, partitions)
    c = clients.consumer(bootstrap(cluster), isolation_level="read_committed", enable_partition_eof=True)
    got, eof = [], {}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + WAIT_S
        while eof != hw:
            assert time.monotonic() < deadline, (
                f"read_committed at {eof}, not at the high watermarks {hw} within {WAIT_S}s: the last stable "
                "offset does not reach them (a transaction left open, or markers not written)")
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                eof[m.partition()] = m.offset()
            else:
                got.append(m.value())
                eof.pop(m.partition(), None)
        return got
    finally:
        c.close()


def test_kill9_of_the_transaction_coordinator_leaves_each_transaction_whole_or_absent(three):
    run = kill9_of_the_transaction_coordinator(three)
    assert len(set(run.led_by.values())) >= 2, f"partitions all led by one broker: {run.led_by}"
    runner, got = run.runner, run.read_committed
    states = Counter(runner.outcomes.values())
    print(f"coordinator {run.victim} killed in transaction {run.txn_at_kill}; new coordinator {run.new_coordinator}; "
          f"first commit {run.first_commit_s}s after the kill; the transaction at the kill took {run.txn_at_kill_s}s "
          f"({runner.outcomes.get(run.txn_at_kill)}); outcomes {dict(states)}; producers {runner.producers_made}; "
          f"errors {dict(runner.errors)}; {len(got)} messages read_committed")
    seen = defaultdict(list)
    for value in got:
        txn, j = value.decode().split(":")
        seen[int(txn)].append(int(j))
    for txn, js in sorted(seen.items()):
        assert sorted(js) == list(range(runner.size)), (
            f"transaction {txn} ({runner.outcomes.get(txn)}) partly visible or duplicated: {sorted(js)}")
    for txn, outcome in sorted(runner.outcomes.items()):
        if outcome == "committed":
            assert txn in seen, f"transaction {txn}: commit_transaction returned but read_committed does not see it"
        elif outcome == "aborted":
            assert txn not in seen, f"transaction {txn}: abort_transaction returned but read_committed sees it"
    assert run.new_coordinator != run.victim.node_id
    assert states["committed"] >= 10 and run.after_kill >= 12, states


def kill9_of_the_transaction_coordinator(cluster) -> SimpleNamespace:
    """A transactional producer runs transactions over 6 partitions one after another
    (TxnRunner); its transaction coordinator is killed with SIGKILL 50 ms after transaction
    10 begins, and 12 more transactions follow. Then the killed node is restarted and a
    read_committed consumer reads the topic to its high watermarks.

    Returns what happened, for the test to check and bench/coordinators.py to time: seconds
    from the kill to the return of the first commit_transaction of a transaction that
    ended after the kill (`first_commit_s`), and the number and duration, from its
    begin_transaction to its end (recovery included), of the transaction under way at the
    kill (`txn_at_kill`, `txn_at_kill_s`; the first one to begin after it if none was)."""
    topic, partitions, transactional_id = "payments", 6, "payments-txn"
    create(cluster, topic, partitions)
    led_by = leaders(cluster, topic)
    runner = TxnRunner(cluster, topic, partitions, transactional_id)
    runner.new_producer()
    coordinator = cluster.wait_for("the transaction coordinator",
                                   lambda: find_coordinator(cluster, transactional_id, KEY_TYPE_TRANSACTION))
    victim = cluster.node(coordinator)
    # The kill comes from another thread while transaction 10 or so is under way, at
    # whatever step it is (producing, adding partitions, committing or aborting).
    killed_at = {}
    started_kill = threading.Event()

    def kill_when_running():
        started_kill.wait()
        time.sleep(0.05)
        killed_at["t"] = time.monotonic()
        victim.kill9()

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    n, after_kill = 0, 0
    first_commit_after = None
    spans = {}  # transaction -> (began, ended), time.monotonic()
    deadline = time.monotonic() + 2 * WAIT_S
    while n < 12 or after_kill < 12:
        assert time.monotonic() < deadline, f"transactions {runner.outcomes}, errors {dict(runner.errors)}"
        if n == 10:
            started_kill.set()
        began = time.monotonic()
        runner.run_one(n)
        spans[n] = (began, time.monotonic())
        if "t" in killed_at:
            after_kill += 1
            if first_commit_after is None and runner.outcomes[n] == "committed":
                first_commit_after = time.monotonic() - killed_at["t"]
        n += 1
    killer.join()
    new_coordinator = cluster.wait_for("the transaction coordinator",
                                       lambda: find_coordinator(cluster, transactional_id, KEY_TYPE_TRANSACTION))
    runner.producer = None
    victim.start()
    cluster.wait_for(f"{victim} listed again", lambda: all(listed_brokers(n) == {1, 2, 3} for n in cluster.nodes))
    txn_at_kill = next(t for t, (_, ended) in sorted(spans.items()) if ended >= killed_at["t"])
    return SimpleNamespace(led_by=led_by, runner=runner, victim=victim, new_coordinator=new_coordinator,
                           after_kill=after_kill, first_commit_s=first_commit_after, txn_at_kill=txn_at_kill,
                           txn_at_kill_s=spans[txn_at_kill][1] - spans[txn_at_kill][0],
                           read_committed=read_committed_to_end(cluster, topic, partitions))


# ----- the reference articles' consumer practices -----------------------------------------


def test_auto_commit_off_a_member_commits_only_what_it_processed(three):
    """A member processes part of what it fetched, committing after each message it
    processed, and stops: the next member starts exactly after the last processed message
    of each partition, so nothing fetched but unprocessed is lost and nothing is done twice."""
    topic, group, partitions, count = "tasks", "tasks-group", 3, 300
    create(three, topic, partitions)
    produce_keyed(three, topic, count, keys=partitions * 4)
    first = group_member(three, group, "classic")
    done = {}  # (partition, offset) -> member
    fetched_unprocessed = []
    try:
        first.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(done) < 100:
            assert time.monotonic() < deadline, f"processed {len(done)}"
            msg = first.poll(0.1)
            if msg is None or msg.error():
                continue
            done[(msg.partition(), msg.offset())] = "first"
            first.commit(message=msg, asynchronous=False)
        # Fetched, never processed: a crash here must leave them to the next member.
        while len(fetched_unprocessed) < 20:
            assert time.monotonic() < deadline, f"fetched {len(fetched_unprocessed)} more"
            msg = first.poll(0.1)
            if msg is not None and not msg.error():
                fetched_unprocessed.append((msg.partition(), msg.offset()))
    finally:
        first.close()
    reader = offsets_reader(three, group)
    committed = committed_offsets(reader, topic, partitions)
    reader.close()
    last_done = {p: max((o for (q, o) in done if q == p), default=-1) + 1 for p in range(partitions)}
    assert committed == {p: (o if o > 0 else -1) for p, o in last_done.items()}, (
        f"committed {committed}; processed up to {last_done}")
    hw = high_watermarks(three, topic, partitions)

    second = group_member(three, group, "classic")
    first_seen = {}
    try:
        second.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(done) < count:
            assert time.monotonic() < deadline, f"processed {len(done)} of {count}"
            msg = second.poll(0.1)
            if msg is None or msg.error():
                continue
            where = (msg.partition(), msg.offset())
            assert where not in done, f"{where} processed by the first member and again by the second"
            first_seen.setdefault(msg.partition(), msg.offset())
            done[where] = "second"
            second.commit(message=msg, asynchronous=False)
    finally:
        second.close()
    assert first_seen == {p: o for p, o in last_done.items() if o < hw[p]}, (
        f"the second member started at {first_seen}; the first had committed {committed}")
    assert all(where in done for where in fetched_unprocessed)


class Tracked:
    """A member that commits what it processed in its revocation callback (and only there,
    so that a commit on revocation that does not land shows as a message processed twice),
    and records what it was assigned and revoked."""

    def __init__(self, cluster, group: str, protocol: str, topic: str, name: str, commit_each=False):
        self.name, self.topic, self.commit_each = name, topic, commit_each
        self.consumer = group_member(cluster, group, protocol)
        self.processed = {}  # partition -> next offset
        self.assigned, self.revocations, self.revoke_commits = set(), 0, 0
        self.revoke_errors = []
        self.commit_errors = Counter()

    def subscribe(self):
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _consumer, parts):
        self.assigned.update(tp.partition for tp in parts)

    def _on_revoke(self, consumer, parts):
        self.revocations += 1
        revoked = {tp.partition for tp in parts}
        offsets = [TopicPartition(self.topic, p, o) for p, o in self.processed.items() if p in revoked]
        if offsets:
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                self.revoke_commits += 1
            except KafkaException as e:
                self.revoke_errors.append(str(e))
        self.assigned -= revoked
        for p in revoked:
            self.processed.pop(p, None)

    def poll(self):
        msg = self.consumer.poll(0.05)
        if msg is None or msg.error():
            return None
        self.processed[msg.partition()] = msg.offset() + 1
        if self.commit_each:
            try:
                self.consumer.commit(message=msg, asynchronous=False)
            except KafkaException as e:
                # A KIP-848 commit racing the bump of the member's epoch gets
                # STALE_MEMBER_EPOCH, on Kafka too: the partition's next commit, or the one
                # on its revocation, covers this message.
                self.commit_errors[e.args[0].name()] += 1
        return msg


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rebalance_listener_commits_on_revocation_as_a_second_member_joins(three, protocol):
    topic, group, partitions, count = "events", f"events-{protocol}", 6, 600
    create(three, topic, partitions)
    produce_keyed(three, topic, count, keys=24)
    a = Tracked(three, group, protocol, topic, "a")
    b = None
    seen = {}  # (partition, offset) -> member name
    order = []  # values in the order they were processed, across members
    try:
        a.subscribe()
        deadline = time.monotonic() + WAIT_S
        while len(seen) < count or not (b and b.assigned):
            assert time.monotonic() < deadline, (
                f"processed {len(seen)} of {count}; a owns {a.assigned}, b owns {b and b.assigned}")
            if b is None and len(seen) >= count // 3:
                b = Tracked(three, group, protocol, topic, "b")
                b.subscribe()
            for member in (a, b) if b else (a,):
                msg = member.poll()
                if msg is None:
                    continue
                if b is not None and not b.assigned:
                    # Processing takes a while until the second member has its share, so
                    # that some partitions move with messages left to process.
                    time.sleep(0.02)
                where = (msg.partition(), msg.offset())
                assert where not in seen, (
                    f"{where} processed by {seen[where]} and again by {member.name}: the commit on revocation "
                    f"did not land before the partition moved (a: {a.revoke_errors}, b: {b.revoke_errors})")
                seen[where] = member.name
                order.append(msg.value())
        assert a.revocations >= 1 and a.revoke_commits >= 1, "the first member never committed on a revocation"
        assert a.assigned and not a.assigned & b.assigned, (a.assigned, b.assigned)
        assert "b" in seen.values(), "the second member processed nothing"
        assert_per_key_order(order)
    finally:
        for member in (a, b):
            if member is not None:
                member.consumer.close()  # revokes everything: the last commit, in the callback
    reader = offsets_reader(three, group)
    committed = committed_offsets(reader, topic, partitions)
    reader.close()
    assert committed == high_watermarks(three, topic, partitions), committed
    print(f"{protocol}: a processed {sum(1 for m in seen.values() if m == 'a')}, b "
          f"{sum(1 for m in seen.values() if m == 'b')}; a's revocations {a.revocations}")


def assert_per_key_order(values):
    """Each key's sequence numbers, in the order processed, go up by one from 0."""
    last = {}
    for value in values:
        key, n = sequence_of(value)
        assert n == last.get(key, -1) + 1, f"key {key}: {n} after {last.get(key)}"
        last[key] = n


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_per_key_order_holds_through_a_member_joining_and_another_leaving(three, protocol):
    """A producer writes keyed sequences while the first member consumes; a second joins,
    then the first leaves. Each member commits after each message it processed and in its
    revocation callback, so each key's messages are processed once each, in order, across
    the members."""
    topic, group, partitions, keys = "keyed", f"keyed-{protocol}", 4, 16
    create(three, topic, partitions)
    writer = Producer(dict(clients.COMMON, **{"bootstrap.servers": three.bootstrap(), "acks": "all",
                                               "enable.idempotence": True, "linger.ms": 5}))
    sent = 0

    def write(upto: int):
        nonlocal sent
        while sent < upto:
            produce_value(writer, topic, f"k{sent % keys}".encode(), f"{sent % keys}:{sent // keys}".encode())
            sent += 1
        writer.poll(0)

    a = Tracked(three, group, protocol, topic, "a", commit_each=True)
    b = Tracked(three, group, protocol, topic, "b", commit_each=True)
    order, by = [], Counter()
    phase, phases = "a alone", {}
    started = time.monotonic()
    try:
        a.subscribe()
        deadline = time.monotonic() + 2 * WAIT_S
        total = 800
        while len(order) < total:
            assert time.monotonic() < deadline, f"processed {len(order)} of {total} in phase {phase}; {phases}"
            write(min(total, len(order) + 100))
            if phase == "a alone" and len(order) >= 200:
                b.subscribe()
                phase, phases[phase] = "both", round(time.monotonic() - started, 1)
            elif phase == "both" and len(order) >= 450 and b.assigned:
                a.consumer.close()  # revokes a's partitions: commits in the callback
                phase, phases[phase] = "b alone", round(time.monotonic() - started, 1)
            members = {"a alone": (a,), "both": (a, b), "b alone": (b,)}[phase]
            for member in members:
                msg = member.poll()
                if msg is not None:
                    order.append(msg.value())
                    by[member.name] += 1
        phases[phase] = round(time.monotonic() - started, 1)
        assert writer.flush(30) == 0
        assert a.revoke_errors == [] and b.revoke_errors == [], (
            f"commits on revocation failed: a {a.revoke_errors}, b {b.revoke_errors}")
        assert_per_key_order(order)
        assert by["a"] > 0 and by["b"] > 0, by
    finally:
        if phase != "b alone":
            a.consumer.close()
        b.consumer.close()
    print(f"{protocol}: processed {dict(by)}; a revoked {a.revocations} times, b {b.revocations}; phases ended at "
          f"{phases} s; commit errors a {dict(a.commit_errors)}, b {dict(b.commit_errors)}")


def produce_value(p: Producer, topic: str, key: bytes, value: bytes):
    while True:
        try:
            p.produce(topic, key=key, value=value)
            return
        except BufferError:
            p.poll(0.1)
