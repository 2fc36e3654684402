"""Share groups (KIP-932) on a cluster of three real combined broker+controller `osprey`
processes, through librdkafka's share consumer (confluent-kafka `ShareConsumer`, explicit
acknowledgement, each poll's acknowledgements committed with `commit_sync`):

- a topic of three partitions, replication factor 3, led by the three brokers: three
  consumers of a group with `share.auto.offset.reset=earliest` are delivered every record
  and accept each exactly once. The group's name is chosen so that the share coordinator
  of at least one of its share partitions (the leader of the `__share_group_state`
  partition the share partition hashes to) is another broker than the partition's
  leader, so that acknowledgements cross brokers (WriteShareGroupState); the test checks
  those `__share_group_state` partitions hold the group's state afterwards;
- failover: while the consumers accept records, the broker that is both the leader of one
  of the topic's partitions and the share coordinator of a share partition led by
  another broker is killed with SIGKILL, more records are produced, and it is restarted.
  Every record produced (acks=all) is delivered and accepted; a record whose acceptance
  commit_sync confirmed is never confirmed again nor, once the consumers of the failover
  closed, delivered again (a new consumer is given nothing but what was left before a
  sentinel produced to each partition); records acquired but not acknowledged when their
  leader died may be delivered again;
- a Metadata request naming `__share_group_state` before it exists creates it as the
  share coordinators need it (50 partitions of 3 replicas, as Kafka's
  AutoTopicCreationManager does), and a share group then works.

"Never delivered again" is checked without a clock, as in share_clients.py: a share
partition hands out what is available from its lowest offset up, so a record wrongly
available again comes before the sentinel produced after it.

The share coordinator of a share partition is computed as Kafka does
(`ShareGroupHeartbeat`'s `SharePartitionKey.asCoordinatorKey()`:
`group:topicId:partition`, the topic id in URL-safe base64; Java's String.hashCode,
Utils.abs, mod the partitions of `__share_group_state`) and looked up in the metadata.

With `COMPAT_CLUSTER=kafka` the same tests run against three Kafka 4.4 nodes formatted
with `share.version=2` (kafka_cluster.combined_kafka), which shows that what they assert
is what Kafka does. Every wait polls against a deadline; no test asserts how long
anything took.
"""

import base64
import gc
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer, TopicCollection, TopicPartition

import clients
import kafkawire
from cluster import WAIT_S, listed_brokers, partition_states, skip_without_kafka_tools
from kafka_cluster import KafkaNode, against_kafka
from test_coordinator_failover import CLUSTER_CONFIG, admin, bootstrap, create, leaders, start_three, three_nodes, \
    wait_in_sync
from share_clients import check_deadline, commit, set_group_configs, share_consumer, until_every_record_and_consumer

# Kafka's three JVMs take minutes to start and stop on a small machine.
pytestmark = pytest.mark.timeout(900 if against_kafka() else 300)

SHARE_STATE_TOPIC = "__share_group_state"
PARTITIONS = 3
# How long a test waits for deliveries that must come.
DELIVERY_WAIT_S = 2 * WAIT_S
# How long the last consumer keeps polling after the sentinels, for anything extra.
SETTLE_S = 1.0
POLL_S = 0.2
SENTINEL = b"sentinel"


# ----- the cluster under test -------------------------------------------------------------


@pytest.fixture
def three(tmp_path, request):
    """Three combined osprey nodes with test_coordinator_failover's fast fencing; with
    COMPAT_CLUSTER=kafka, three Kafka 4.4 nodes formatted with share.version=2."""
    if against_kafka():
        skip_without_kafka_tools()
    cluster = three_nodes(tmp_path, CLUSTER_CONFIG, against_kafka())
    for node in cluster.nodes:
        if isinstance(node, KafkaNode):
            # Share groups as osprey serves them, Kafka 4.4's default level.
            node.features = {"share.version": 2}
    request.node._osprey_brokers = cluster.nodes  # their logs in a failure's report
    try:
        start_three(cluster)
        yield cluster
        gc.collect()  # clients left to the cycle collector would go on reconnecting
        if not against_kafka():  # osprey must stop cleanly; Kafka is not under test
            cluster.stop()
    finally:
        cluster.kill_all()


# ----- where share partitions live ----------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def share_state_partition(group: str, topic_id: str, partition: int, state_partitions: int) -> int:
    """The `__share_group_state` partition of a share partition: Kafka's
    Utils.abs(("group:topicId:partition").hashCode()) % partitions."""
    h = java_string_hash(f"{group}:{topic_id}:{partition}")
    return (0 if h == -(1 << 31) else abs(h)) % state_partitions


def topic_id(cluster, topic: str) -> str:
    """The topic's id as Kafka prints it: URL-safe base64 of its 16 bytes, no padding."""
    a = admin(cluster)
    described = a.describe_topics(TopicCollection([topic]), request_timeout=clients.TIMEOUT_S)[topic]
    uuid = described.result(timeout=clients.TIMEOUT_S).topic_id
    raw = ((uuid.get_most_significant_bits() & (2**64 - 1)).to_bytes(8, "big")
           + (uuid.get_least_significant_bits() & (2**64 - 1)).to_bytes(8, "big"))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def create_share_state_topic(cluster, topic: str) -> dict:
    """A throwaway share group's consumer polls `topic` until the brokers created
    `__share_group_state` (osprey at a share partition's first fetch, Kafka at the group's
    first assignment); waits until each of its partitions has three replicas in sync.
    Returns {state partition: leader}."""
    c = share_consumer(bootstrap(cluster), "share-warm-up", topic)
    try:
        def state_topic_led():
            c.poll(POLL_S)  # latest (the default): nothing to acknowledge
            led = listed_partitions(cluster.nodes[0], SHARE_STATE_TOPIC)
            return led if led and all(leader >= 0 for leader in led.values()) else None

        led = cluster.wait_for(f"{SHARE_STATE_TOPIC} created, with leaders", state_topic_led, every=0.1)
    finally:
        c.close()
    wait_in_sync(cluster, SHARE_STATE_TOPIC, len(led))
    return leaders(cluster, SHARE_STATE_TOPIC)


def listed_partitions(node, topic: str):
    """{partition: leader} of `topic` as `node` lists it among every topic, or None while
    it lists no such topic. Not a Metadata request naming the topic: that one lets the
    broker create a missing topic (auto.create.topics.enable), with the broker's defaults
    on osprey."""
    try:
        with kafkawire.Conn(node.host, node.port, timeout=5) as conn:
            _, _, _, topics = kafkawire.parse_metadata_v1(conn.roundtrip(kafkawire.metadata_v1(12, None)))
    except (OSError, kafkawire.Closed):
        return None
    error, partitions = topics.get(topic, (None, {}))
    if error != 0 or not partitions:
        return None
    return {p: leader for p, (_, leader, _, _) in partitions.items()}


def place_group(cluster, prefix: str, topic: str) -> SimpleNamespace:
    """The first group named `prefix-N` whose share coordinator of some partition of
    `topic` is another broker than the partition's leader. Returns the group, the
    topic's leaders and, per partition, its `__share_group_state` partition and that
    partition's leader (the share coordinator)."""
    state_leaders = create_share_state_topic(cluster, topic)
    led_by = leaders(cluster, topic)
    tid = topic_id(cluster, topic)
    for n in range(1000):
        group = f"{prefix}-{n}"
        state_partition = {p: share_state_partition(group, tid, p, len(state_leaders)) for p in led_by}
        coordinator = {p: state_leaders[s] for p, s in state_partition.items()}
        remote = [p for p in led_by if coordinator[p] != led_by[p]]
        if remote:
            return SimpleNamespace(group=group, topic_id=tid, leaders=led_by, state_partition=state_partition,
                                   coordinator=coordinator, remote=remote)
    raise AssertionError(f"no group name puts a share coordinator away from its partition's leader: {led_by}")


def state_high_watermarks(cluster, state_partitions) -> dict:
    """{partition: high watermark} of these `__share_group_state` partitions."""
    c = clients.consumer(bootstrap(cluster))
    try:
        return {s: c.get_watermark_offsets(TopicPartition(SHARE_STATE_TOPIC, s), timeout=clients.TIMEOUT_S,
                                           cached=False)[1] for s in state_partitions}
    finally:
        c.close()


# ----- producing and consuming ----------------------------------------------------------------


def produce(cluster, topic: str, values, partition=None) -> dict:
    """One acks=all record per value (key and value its text; spread over the partitions
    by key unless `partition` is given), in batches of at most 20 records; every delivery
    must succeed. Returns {(partition, offset): value}."""
    p = clients.producer(bootstrap(cluster), acks="all", batch_num_messages=20, message_timeout_ms=60000)
    where = {} if partition is None else {"partition": partition}
    messages = [{"key": str(v).encode(), "value": str(v).encode(), **where} for v in values]
    reports = clients.produce_all(p, topic, messages)
    failed = [str(r.error) for r in reports if r.error is not None]
    assert failed == [], f"{len(failed)} records not produced: {Counter(failed)}"
    return {(r.partition, r.offset): r.value for r in reports}


def produce_sentinels(cluster, topic: str) -> set:
    """One sentinel per partition, produced after everything the test checks."""
    placed = {}
    for p in range(PARTITIONS):
        placed.update(produce(cluster, topic, [SENTINEL.decode()], partition=p))
    return set(placed)


class Ledger:
    """What a test's consumers were given and what became of it: every delivery (consumer,
    partition, offset, delivery count, value) in order; the records whose ACCEPT
    commit_sync confirmed (`accepted`, the consumer that did); those whose ACCEPT was sent
    but not confirmed (`unknown`: refused, timed out, or the leader died; durable or not);
    and any record confirmed twice."""

    def __init__(self):
        self.log = []
        self.accepted = {}
        self.unknown = set()
        self.accepted_twice = []
        self.delivered_after_accepted = []
        self.commit_errors = Counter()
        self.poll_errors = Counter()

    def delivered(self, who, m):
        where = (m.partition(), m.offset())
        count = m.delivery_count()
        assert count is not None and count >= 1, f"{where}: delivery count {count}"
        if where in self.accepted:
            self.delivered_after_accepted.append((who, where, count))
        self.log.append((who, where, count, m.value()))

    def confirmed(self, who, where):
        if where in self.accepted:
            self.accepted_twice.append((where, self.accepted[where], who))
        self.accepted[where] = who
        self.unknown.discard(where)

    def unconfirmed(self, where):
        if where not in self.accepted:
            self.unknown.add(where)

    def offsets(self) -> Counter:
        return Counter(where for _, where, _, _ in self.log)

    def settled(self) -> set:
        """Records whose ACCEPT was sent, confirmed or not."""
        return set(self.accepted) | self.unknown


def take(c: ShareConsumer, who, ledger: Ledger) -> list:
    """One poll of `c`, each record acknowledged ACCEPT (locally: sent by `commit_taken`).
    Returns where the records are; errors are counted, not failed on (a leader may be
    dead)."""
    try:
        batch = list(c.poll(POLL_S))
    except KafkaException as e:
        ledger.poll_errors[e.args[0].name()] += 1
        return []
    records = []
    for m in batch:
        if m.error() is not None:
            ledger.poll_errors[m.error().name()] += 1
            continue
        ledger.delivered(who, m)
        c.acknowledge(m, AcknowledgeType.ACCEPT)
        records.append((m.partition(), m.offset()))
    return records


def commit_taken(c: ShareConsumer, who, records: list, ledger: Ledger):
    """commit_sync of the acknowledgements of `records`; each partition's result recorded
    (a failure, or no answer, leaves its records unconfirmed)."""
    if not records:
        return
    try:
        results = c.commit_sync(clients.TIMEOUT_S)
    except KafkaException as e:
        ledger.commit_errors[e.args[0].name()] += 1
        results = {}
    ok = {tp.partition for tp, e in results.items() if e is None}
    for tp, e in results.items():
        if e is not None:
            ledger.commit_errors[e.args[0].name() if e.args else str(e)] += 1
    for where in records:
        if where[0] in ok:
            ledger.confirmed(who, where)
        else:
            ledger.unconfirmed(where)


def consume_until(consumers, ledger: Ledger, until, what: str, between=lambda: None):
    """Rounds of a poll of each consumer, then `between()` (the consumers hold what they
    were given, acknowledged but not committed), then a commit of each, until `until()`;
    fails after DELIVERY_WAIT_S."""
    deadline = time.monotonic() + DELIVERY_WAIT_S
    while not until():
        check_deadline(deadline, lambda: (
            f"not within {DELIVERY_WAIT_S}s: {what}; {len(ledger.log)} deliveries, {len(ledger.accepted)} "
            f"accepted, {len(ledger.unknown)} unconfirmed; commit errors {dict(ledger.commit_errors)}, poll "
            f"errors {dict(ledger.poll_errors)}"))
        taken = [take(c, who, ledger) for who, c in enumerate(consumers)]
        between()
        for who, c in enumerate(consumers):
            commit_taken(c, who, taken[who], ledger)


def accept_strictly(c: ShareConsumer, who, ledger: Ledger) -> int:
    """One poll of `c` on a healthy cluster: each record accepted and committed, every
    record and every partition's result a success. Returns the records delivered."""
    batch = list(c.poll(POLL_S))
    errors = [m.error() for m in batch if m.error() is not None]
    assert not errors, f"share consumer errors: {errors}"
    for m in batch:
        ledger.delivered(who, m)
        c.acknowledge(m, AcknowledgeType.ACCEPT)
    if batch:
        commit(c)
        for m in batch:
            ledger.confirmed(who, (m.partition(), m.offset()))
    return len(batch)


def assert_only_sentinels_left(cluster, group: str, topic: str, ledger: Ledger) -> list:
    """Produces a sentinel to each partition, and a new member of `group` polls until it
    has all of them and SETTLE_S more, accepting (strictly: every commit must succeed)
    what it gets. Nothing accepted before may come (the test checks what else came against
    `ledger`). Returns the deliveries other than the sentinels."""
    sentinels = produce_sentinels(cluster, topic)
    c = share_consumer(bootstrap(cluster), group, topic)
    got = []
    try:
        deadline = time.monotonic() + DELIVERY_WAIT_S
        settle_until = None
        while settle_until is None or time.monotonic() < settle_until:
            check_deadline(deadline, lambda: (
                f"sentinels {sorted(sentinels - {w for w, _, _ in got})} not delivered within {DELIVERY_WAIT_S}s"))
            batch = list(c.poll(POLL_S))
            errors = [m.error() for m in batch if m.error() is not None]
            assert not errors, f"share consumer errors after the cluster healed: {errors}"
            for m in batch:
                got.append(((m.partition(), m.offset()), m.delivery_count(), m.value()))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if batch:
                commit(c)
            if settle_until is None and sentinels <= {w for w, _, _ in got}:
                settle_until = time.monotonic() + SETTLE_S
    finally:
        c.close()
    again = Counter(w for w, _, _ in got)
    assert {w: n for w, n in again.items() if n > 1} == {}, "records delivered twice to the last consumer"
    assert sorted((w, n) for w, n, _ in got if w in sentinels) == [(w, 1) for w in sorted(sentinels)]
    already = [w for w, _, _ in got if w in ledger.accepted]
    assert already == [], f"records whose acceptance was confirmed delivered again: {sorted(already)}"
    rest = [(w, n, v) for w, n, v in got if w not in sentinels]
    for w, _, _ in rest:
        ledger.confirmed("last", w)
    return rest


# ----- tests ------------------------------------------------------------------------------------


def test_three_consumers_accept_every_record_once_with_share_coordinators_on_other_brokers(three):
    topic = "share-spread"
    create(three, topic, PARTITIONS)
    placed = place_group(three, "share-spread", topic)
    group = placed.group
    assert set(placed.leaders.values()) == {1, 2, 3}, f"partition leaders not spread: {placed.leaders}"
    print(f"group {group}: leaders {placed.leaders}, share coordinators {placed.coordinator} "
          f"({SHARE_STATE_TOPIC} partitions {placed.state_partition}); remote for {placed.remote}")
    set_group_configs(bootstrap(three), group, {"share.auto.offset.reset": "earliest"})
    produced = produce(three, topic, range(3000))
    assert {p for p, _ in produced} == set(range(PARTITIONS))
    consumers = [share_consumer(bootstrap(three), group, topic) for _ in range(3)]
    ledger = Ledger()
    try:
        more = lambda n: produce(three, topic, range(n, n + 300))
        accept = lambda who, c: accept_strictly(c, who, ledger)
        until_every_record_and_consumer(produced, consumers, ledger, more, accept, DELIVERY_WAIT_S)
    finally:
        for c in consumers:
            c.close()

    twice = {w: n for w, n in ledger.offsets().items() if n > 1}
    assert twice == {}, f"records delivered more than once: {sorted(twice.items())[:20]}"
    assert {w: v for _, w, _, v in ledger.log} == produced, "delivered records are not the produced ones"
    assert {count for _, _, count, _ in ledger.log} == {1}
    assert set(ledger.accepted) == set(produced)
    per_consumer = Counter(who for who, _, _, _ in ledger.log)
    per_partition = Counter(p for _, (p, _), _, _ in ledger.log)
    print(f"{len(produced)} records, per consumer {sorted(per_consumer.items())}, per partition "
          f"{sorted(per_partition.items())}")
    # Closing gave back whatever a member still held: a record whose acceptance the
    # broker lost would be delivered to the next member, before the sentinels.
    rest = assert_only_sentinels_left(three, group, topic, ledger)
    assert rest == [], f"records delivered again after every one was accepted: {rest[:20]}"
    # The group's state is where the hash says, on the share coordinators computed above
    # (on Kafka and osprey alike): those partitions of the state topic hold records.
    hw = state_high_watermarks(three, set(placed.state_partition.values()))
    assert all(n > 0 for n in hw.values()), f"{SHARE_STATE_TOPIC} partitions of {group} empty: {hw}"
    # And their leaders were the share coordinators throughout (nothing moved them).
    state_leaders = leaders(three, SHARE_STATE_TOPIC)
    assert {p: state_leaders[s] for p, s in placed.state_partition.items()} == placed.coordinator


def test_kill9_of_a_partition_leader_and_share_coordinator_loses_no_record_and_redelivers_no_accepted_one(three):
    topic = "share-failover"
    create(three, topic, PARTITIONS)
    placed = place_group(three, "share-failover", topic)
    group = placed.group
    assert set(placed.leaders.values()) == {1, 2, 3}, f"partition leaders not spread: {placed.leaders}"
    # The victim coordinates a share partition led by a broker that survives, and leads a
    # partition of its own (every broker leads one).
    remote_partition = placed.remote[0]
    victim = three.node(placed.coordinator[remote_partition])
    led_by_victim = [p for p, leader in placed.leaders.items() if leader == victim.node_id]
    print(f"group {group}: leaders {placed.leaders}, share coordinators {placed.coordinator}; killing {victim}: "
          f"leader of {topic}-{led_by_victim}, share coordinator of partition {remote_partition} "
          f"(led by node {placed.leaders[remote_partition]})")
    set_group_configs(bootstrap(three), group, {"share.auto.offset.reset": "earliest"})
    produced = produce(three, topic, range(2000))
    consumers = [share_consumer(bootstrap(three), group, topic) for _ in range(3)]
    ledger = Ledger()
    run = SimpleNamespace(killed_at_accepted=None, accepted_after_kill=None, held_at_kill=None)

    def kill_at_a_third():
        # Between the consumers' polls and their commits, once they hold records of the
        # victim's partition (acquired there, to be acknowledged to a dead leader) and of
        # the partition it coordinates (to be acknowledged to a live leader whose share
        # coordinator died).
        if run.killed_at_accepted is not None or len(ledger.accepted) < len(produced) // 3:
            return
        held = Counter(p for p, _ in {where for _, where, _, _ in ledger.log} - ledger.settled())
        if held[led_by_victim[0]] and held[remote_partition]:
            run.held_at_kill = dict(held)
            victim.kill9()
            run.killed_at_accepted = len(ledger.accepted)

    try:
        consume_until(consumers, ledger, lambda: run.killed_at_accepted is not None,
                      f"a third of the records accepted, and records of partitions {led_by_victim[0]} and "
                      f"{remote_partition} held", between=kill_at_a_third)
        # Produced while the victim is down: to the partitions' new leaders.
        produced.update(produce(three, topic, range(2000, 3000)))
        consume_until(consumers, ledger, lambda: ledger.settled() >= set(produced),
                      "every record accepted with the victim down")
        run.accepted_after_kill = len(ledger.accepted) - run.killed_at_accepted
        victim.start()
        three.wait_for(f"{victim} listed again", lambda: all(listed_brokers(n) == {1, 2, 3} for n in three.nodes),
                       timeout=3 * WAIT_S)
        wait_in_sync(three, topic, PARTITIONS)
        # And after the restart, with the victim a follower again.
        produced.update(produce(three, topic, range(3000, 3500)))
        consume_until(consumers, ledger, lambda: ledger.settled() >= set(produced),
                      "every record accepted after the restart")
    finally:
        for c in consumers:
            c.close()

    assert ledger.accepted_twice == [], (
        f"records whose acceptance was confirmed twice: {ledger.accepted_twice[:20]}")
    unknown_before_last = set(ledger.unknown)
    # The consumers closed: whatever they still held is available again, and comes before
    # the sentinels. Nothing accepted before may.
    rest = assert_only_sentinels_left(three, group, topic, ledger)
    lost = set(produced) - ledger.settled()
    assert lost == set(), f"records produced and never accepted: {sorted(lost)[:20]} ({len(lost)})"
    again = {w for w, n in ledger.offsets().items() if n > 1}
    print(f"{len(produced)} records; {victim} killed at {run.killed_at_accepted} accepted, the consumers holding "
          f"{run.held_at_kill} per partition, uncommitted; {run.accepted_after_kill} accepted with it down; "
          f"delivered more than once {len(again)}; delivered after a confirmed acceptance, before the consumers "
          f"closed (never confirmed again) {len(ledger.delivered_after_accepted)}; ACCEPT unconfirmed and never "
          f"delivered again (accepted, the answer lost) {len(unknown_before_last - {w for w, _, _ in rest})}; "
          f"delivered to the last consumer {len(rest)}; commit errors {dict(ledger.commit_errors)}; poll errors "
          f"{dict(ledger.poll_errors)}")


def test_a_metadata_request_naming_the_share_state_topic_creates_it_as_the_share_coordinators_need_it(three):
    """With auto.create.topics.enable (the default), a Metadata request naming a missing
    `__share_group_state` creates it, and Kafka creates it as the share coordinators need
    it (AutoTopicCreationManager: share.coordinator.state.topic.num.partitions partitions,
    default 50, of share.coordinator.state.topic.replication.factor replicas, default 3),
    not with the broker's defaults for topics (num.partitions 1): the share coordinator
    of a share partition is the leader of the partition it hashes to among 50."""
    def created_with_leaders():
        states = partition_states(three.nodes[0], SHARE_STATE_TOPIC)  # names it: creates it
        return states if states and all(leader >= 0 for leader, _, _ in states.values()) else None

    states = three.wait_for(f"{SHARE_STATE_TOPIC} created by a Metadata request naming it", created_with_leaders)
    replicas = Counter(len(r) for _, r, _ in states.values())
    assert (len(states), replicas) == (50, Counter({3: 50})), (
        f"{SHARE_STATE_TOPIC}: {len(states)} partitions, replicas per partition {dict(replicas)}")
    topic = group = "share-after-metadata"
    create(three, topic, PARTITIONS)
    set_group_configs(bootstrap(three), group, {"share.auto.offset.reset": "earliest"})
    produced = produce(three, topic, range(60))
    c = share_consumer(bootstrap(three), group, topic)
    ledger = Ledger()
    try:
        deadline = time.monotonic() + DELIVERY_WAIT_S
        while set(ledger.accepted) < set(produced):
            check_deadline(deadline, lambda: f"{len(ledger.accepted)} of {len(produced)} records accepted")
            accept_strictly(c, 0, ledger)
    finally:
        c.close()
    assert set(ledger.accepted) == set(produced)
