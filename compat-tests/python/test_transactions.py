"""Transactions with librdkafka (confluent-kafka), end to end: what a transactional
producer and a read_committed consumer are promised. Committed transactions are visible
whole and aborted ones not at all, over several partitions of two topics, in order;
offsets sent with send_offsets_to_transaction move only on commit; a second producer
with the same transactional.id fences the first; a kill -9 in the middle of many
transactions leaves each one wholly visible or wholly invisible, with every acknowledged
commit visible; a stalled transaction is aborted when its timeout passes, so the last
stable offset moves on; and the broker counts all of this on its Prometheus endpoint.

The idempotent producer under connection faults is test_idempotence.py.
"""

import gc
import random
import threading
import time
from collections import Counter, defaultdict

import pytest

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

import clients
from test_metrics import scrape

# What librdkafka reports when a newer producer with the same transactional.id took over:
# its own _FENCED for a fencing answer to a transactional request, or the broker's code.
FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}

# A short transaction timeout with a frequent check for timed-out transactions, so that a
# broker-side abort happens within a test's time.
FAST_TIMEOUT_OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


@pytest.fixture(autouse=True)
def destroy_clients():
    """Collects each test's clients when it ends: a client left to the cycle collector
    would keep reconnecting to a stopped broker, and logging so, in the tests that follow."""
    yield
    gc.collect()


def txn_producer(broker, transactional_id: str, **config):
    """A transactional producer, initialised (InitProducerId done)."""
    conf = {"transactional_id": transactional_id}
    conf.update(config)
    p = clients.producer(broker, **conf)
    p.init_transactions(clients.TIMEOUT_S)
    return p


def produce_txn(p, messages, finish: str):
    """One transaction of `messages` ((topic, partition, value) tuples), ended with
    `finish` ("commit" or "abort"); every delivery report must be a success."""
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append((msg.topic(), msg.partition(), msg.value(), err))

    p.begin_transaction()
    for topic, partition, value in messages:
        p.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
    assert p.flush(clients.TIMEOUT_S) == 0, "transactional messages undelivered"
    assert not errors, f"delivery errors inside a transaction: {errors}"
    if finish == "commit":
        p.commit_transaction(clients.TIMEOUT_S)
    else:
        p.abort_transaction(clients.TIMEOUT_S)


def read_all(broker, tps, count: int, isolation: str):
    """Exactly `count` messages of the (topic, partition) pairs from the beginning."""
    c = clients.consumer(broker, isolation_level=isolation)
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
        return clients.consume_exactly(c, count)
    finally:
        c.close()


def by_partition(msgs):
    """{(topic, partition): [value, ...] in offset order}."""
    out = defaultdict(list)
    for m in sorted(msgs, key=lambda m: (m.topic(), m.partition(), m.offset())):
        out[(m.topic(), m.partition())].append(m.value())
    return dict(out)


def expected_by_partition(messages):
    out = defaultdict(list)
    for topic, partition, value in messages:
        out[(topic, partition)].append(value)
    return dict(out)


def watermarks(broker, tps, isolation: str):
    """{(topic, partition): high offset} as ListOffsets answers for `isolation`: the high
    watermark for read_uncommitted, the last stable offset for read_committed."""
    c = clients.consumer(broker, isolation_level=isolation)
    try:
        return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=clients.TIMEOUT_S, cached=False)[1] for t, p in tps}
    finally:
        c.close()


def wait_stable(broker, tps, timeout: float):
    """Until the last stable offset equals the high watermark on every partition (no open
    transaction left); returns the high watermarks and how long it took."""
    started = time.monotonic()
    while True:
        hw = watermarks(broker, tps, "read_uncommitted")
        lso = watermarks(broker, tps, "read_committed")
        if hw == lso:
            return hw, time.monotonic() - started
        assert time.monotonic() - started < timeout, f"last stable offsets {lso} still behind high watermarks {hw} after {timeout}s"
        time.sleep(0.2)


def raised_error(callable_, *args):
    """Calls `callable_`, which must raise KafkaException; returns its KafkaError. (Not
    pytest.raises: its traceback would keep the client alive, reconnecting to a stopped
    broker through the tests that follow.)"""
    try:
        callable_(*args)
    except KafkaException as e:
        return e.args[0]
    raise AssertionError(f"{callable_.__name__} succeeded; it must fail")


# ----- 1. commit and abort over several partitions of two topics ---------------------------


@pytest.mark.timeout(60)
def test_read_committed_sees_exactly_committed_transactions_and_read_uncommitted_sees_all(broker):
    layout = {"txn-exact-a": 3, "txn-exact-b": 2}
    for topic, partitions in layout.items():
        clients.create_topic(broker, topic, partitions=partitions)
    tps = [(t, p) for t, n in layout.items() for p in range(n)]

    p = txn_producer(broker, "txn-exact")
    finishes = ["commit", "abort", "commit", "abort", "abort", "commit"]
    committed, everything = [], []
    for k, finish in enumerate(finishes):
        # Each transaction writes 3 messages to every partition of both topics.
        messages = [(t, part, f"{finish}-{k}-{t}-{part}-{i}".encode()) for t, part in tps for i in range(3)]
        produce_txn(p, messages, finish)
        everything += messages
        if finish == "commit":
            committed += messages

    got = read_all(broker, tps, len(committed), "read_committed")
    assert Counter(m.value() for m in got) == Counter(v for _, _, v in committed)
    assert by_partition(got) == expected_by_partition(committed), "read_committed: per-partition order"

    got = read_all(broker, tps, len(everything), "read_uncommitted")
    assert Counter(m.value() for m in got) == Counter(v for _, _, v in everything)
    assert by_partition(got) == expected_by_partition(everything), "read_uncommitted: per-partition order"

    # The last transaction was committed, so nothing holds the last stable offset back.
    hw = watermarks(broker, tps, "read_uncommitted")
    assert watermarks(broker, tps, "read_committed") == hw
    # Every transaction left one control record (its marker) on every partition it wrote.
    assert hw == {tp: len(finishes) * (3 + 1) for tp in tps}


# ----- 2. consume-transform-produce with a consumer group -----------------------------------


@pytest.mark.timeout(60)
def test_send_offsets_to_transaction_moves_group_offsets_only_on_commit(broker):
    src, dst, group = "ctp-in", "ctp-out", "ctp-group"
    clients.create_topic(broker, src, partitions=2)
    clients.create_topic(broker, dst, partitions=2)
    plain = clients.producer(broker, acks="all")

    def produce_input(first: int):
        msgs = [{"value": str(i).encode(), "partition": i % 2} for i in range(first, first + 20)]
        assert [r.error for r in clients.produce_all(plain, src, msgs)] == [None] * 20

    member = clients.consumer(
        broker,
        group_id=group,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    member.subscribe([src])
    p = txn_producer(broker, "ctp-copier")
    src_tps = [TopicPartition(src, 0), TopicPartition(src, 1)]

    def committed():
        tps = member.committed(src_tps, timeout=clients.TIMEOUT_S)
        assert all(tp.error is None for tp in tps), tps
        return {tp.partition: tp.offset for tp in tps}

    def consume(count: int):
        got = []
        deadline = time.monotonic() + 30
        while len(got) < count:
            assert time.monotonic() < deadline, f"group member got {len(got)} of {count} input messages"
            m = member.poll(0.2)
            if m is None:
                continue
            assert not m.error(), m.error()
            got.append(m)
        return got

    def transform(batch, finish: str):
        """Copies `batch` (value v -> b"out-v", same partition) and sends the member's
        positions with it, in one transaction ended with `finish`."""
        positions = {}
        for m in batch:
            positions[m.partition()] = max(positions.get(m.partition(), 0), m.offset() + 1)
        p.begin_transaction()
        for m in batch:
            p.produce(dst, value=b"out-" + m.value(), partition=m.partition())
        # Delivered before the end, so that an aborted transaction's copies are stored (and
        # read_uncommitted can see them): librdkafka's abort purges what it has not sent.
        assert p.flush(clients.TIMEOUT_S) == 0
        offsets = [TopicPartition(src, part, off) for part, off in sorted(positions.items())]
        p.send_offsets_to_transaction(offsets, member.consumer_group_metadata(), clients.TIMEOUT_S)
        if finish == "commit":
            p.commit_transaction(clients.TIMEOUT_S)
        else:
            p.abort_transaction(clients.TIMEOUT_S)
        return positions

    try:
        produce_input(0)
        batch = consume(20)
        assert committed() == {0: OFFSET_INVALID, 1: OFFSET_INVALID}
        assert transform(batch, "commit") == {0: 10, 1: 10}
        assert committed() == {0: 10, 1: 10}, "offsets sent with a committed transaction"

        produce_input(20)
        batch = consume(20)
        assert transform(batch, "abort") == {0: 20, 1: 20}
        assert committed() == {0: 10, 1: 10}, "offsets sent with an aborted transaction must not move"

        # As after any abort: rewind to the committed offsets and process again.
        for tp in src_tps:
            member.seek(TopicPartition(src, tp.partition, 10))
        batch = consume(20)
        assert sorted(int(m.value()) for m in batch) == list(range(20, 40))
        assert transform(batch, "commit") == {0: 20, 1: 20}
        assert committed() == {0: 20, 1: 20}
    finally:
        member.close()

    # A fresh member of the group starts where the last commit left it: nothing to read.
    after = clients.consumer(broker, group_id=group, isolation_level="read_committed")
    try:
        tps = after.committed(src_tps, timeout=clients.TIMEOUT_S)
        assert {tp.partition: tp.offset for tp in tps} == {0: 20, 1: 20}
    finally:
        after.close()

    dst_tps = [(dst, 0), (dst, 1)]
    want = Counter(b"out-%d" % i for i in range(40))
    assert Counter(m.value() for m in read_all(broker, dst_tps, 40, "read_committed")) == want
    got = read_all(broker, dst_tps, 60, "read_uncommitted")
    assert Counter(m.value() for m in got) == want + Counter(b"out-%d" % i for i in range(20, 40))


# ----- 3. zombie fencing ------------------------------------------------------------------


def fence(broker, topic: str, transactional_id: str):
    """Producer A opens a transaction with one delivered message; producer B with the same
    transactional.id initialises, which must fence A. Returns (A, B, the error A's commit
    raised after its next produce)."""
    a = txn_producer(broker, transactional_id, message_timeout_ms=10000)
    a.begin_transaction()
    a.produce(topic, value=b"zombie-1", partition=0)
    assert a.flush(clients.TIMEOUT_S) == 0

    b = txn_producer(broker, transactional_id)

    # A's next produce goes to a partition already in its transaction, so this is the
    # partition leader checking the epoch, not the coordinator. (No delivery callback:
    # confluent-kafka raises the fatal error out of flush, and a Python callback run
    # after that fails with SystemError. Whether zombie-2 was stored, the readers check.)
    a.produce(topic, value=b"zombie-2", partition=0)
    try:
        a.flush(clients.TIMEOUT_S)
    except KafkaException as e:
        assert e.args[0].fatal(), e
    err = raised_error(a.commit_transaction, clients.TIMEOUT_S)
    return a, b, err


@pytest.mark.timeout(60)
def test_new_producer_with_same_transactional_id_fences_the_old_one(broker):
    topic = "txn-fence"
    clients.create_topic(broker, topic, partitions=2)
    a, b, err = fence(broker, topic, "txn-fence-id")
    assert err.fatal(), f"commit by a fenced producer must fail fatally, got {err}"
    assert err.code() in FENCED_CODES, f"expected a fencing error, got {err}"
    # Once fatal, the producer stays so: even abort is refused.
    assert raised_error(a.abort_transaction, clients.TIMEOUT_S).fatal()

    # B works, and the zombie's message never becomes visible.
    produce_txn(b, [(topic, 0, b"b-1"), (topic, 1, b"b-2")], "commit")
    got = read_all(broker, [(topic, 0), (topic, 1)], 2, "read_committed")
    assert sorted(m.value() for m in got) == [b"b-1", b"b-2"]
    got = read_all(broker, [(topic, 0), (topic, 1)], 3, "read_uncommitted")
    assert sorted(m.value() for m in got) == [b"b-1", b"b-2", b"zombie-1"]


# ----- 4. kill -9 in the middle of transactions -----------------------------------------------

KILL_TXN_TIMEOUT_MS = 5000


class TxnWorker(threading.Thread):
    """A producer running transactions in a loop, each a random number of messages over
    random partitions, committed or aborted at random. Each message says which
    transaction it belongs to and how many messages that transaction has. With
    `leave_open`, after a few transactions it opens one more, delivers it and then waits,
    so that the broker is killed with it open."""

    def __init__(self, broker, topic: str, partitions: int, name: str, leave_open: bool, stop: threading.Event):
        super().__init__(daemon=True, name=name)
        self.rng = random.Random(name)
        self.broker, self.topic, self.partitions, self.tid = broker, topic, partitions, name
        self.leave_open, self.stop = leave_open, stop
        self.opened = threading.Event()
        # txn id -> "committed" | "aborted" (the call returned) | "open" | "ending" (the
        # commit or abort call did not return successfully: outcome unknown)
        self.outcomes = {}
        self.error = None
        self.producer = None

    def run(self):
        try:
            self.producer = txn_producer(
                self.broker,
                self.tid,
                transaction_timeout_ms=KILL_TXN_TIMEOUT_MS,
                message_timeout_ms=KILL_TXN_TIMEOUT_MS,
                socket_timeout_ms=KILL_TXN_TIMEOUT_MS,
                linger_ms=1,
            )
            n = 0
            while not self.stop.is_set():
                self.one(f"{self.tid}.{n}", open_one=self.leave_open and n == 5)
                n += 1
        except KafkaException as e:
            self.error = e  # expected once the broker is killed
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def one(self, txn: str, open_one: bool):
        size = self.rng.randint(1, 8)
        p = self.producer
        p.begin_transaction()
        self.outcomes[txn] = "ending"
        for j in range(size):
            p.produce(
                self.topic,
                value=f"{txn}:{j}".encode(),
                partition=self.rng.randrange(self.partitions),
                headers={"txn": txn, "size": str(size)},
            )
        if open_one:
            assert p.flush(clients.TIMEOUT_S) == 0
            self.outcomes[txn] = "open"
            self.opened.set()
            self.stop.wait()
            return
        if self.rng.random() < 0.7:
            p.commit_transaction(10)
            self.outcomes[txn] = "committed"
        else:
            # Delivered first: librdkafka sends EndTxn(abort) once it has *sent* an
            # AddPartitionsToTxn, even one refused with CONCURRENT_TRANSACTIONS while the
            # previous transaction completes; the coordinator (Kafka's too) then has no
            # transaction to abort and answers INVALID_TXN_STATE, which librdkafka makes
            # fatal (confluentinc/librdkafka#4849). That client race is not under test here.
            assert p.flush(clients.TIMEOUT_S) == 0
            p.abort_transaction(10)
            self.outcomes[txn] = "aborted"


def read_committed_to_end(broker, topic: str, partitions: int, timeout: float):
    """Every read_committed message of `topic`, read until the consumer reached the high
    watermark of each partition (so no transaction is left open anywhere)."""
    tps = [(topic, p) for p in range(partitions)]
    c = clients.consumer(broker, isolation_level="read_committed", enable_partition_eof=True)
    got, eof = [], {}
    deadline = time.monotonic() + timeout
    next_check = 0.0
    hw = None
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while True:
            m = c.poll(0.2)
            if m is not None:
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    eof[m.partition()] = m.offset()
                else:
                    got.append(m)
            if time.monotonic() >= next_check:
                hw = {p: off for (_, p), off in watermarks(broker, tps, "read_uncommitted").items()}
                if eof == hw:
                    return got
                next_check = time.monotonic() + 0.5
            assert time.monotonic() < deadline, (
                f"read_committed consumer at {eof} has not reached the high watermarks {hw} within {timeout}s "
                "(the last stable offset does not advance)"
            )
    finally:
        c.close()


@pytest.mark.timeout(90)
def test_kill9_mid_transactions_leaves_each_transaction_whole_or_absent(start_broker):
    broker = start_broker(FAST_TIMEOUT_OVERRIDES)
    topic, partitions = "txn-kill9", 4
    clients.create_topic(broker, topic, partitions=partitions)

    stop = threading.Event()
    workers = [TxnWorker(broker, topic, partitions, f"kill9-{i}", leave_open=i < 2, stop=stop) for i in range(5)]
    for w in workers:
        w.start()
    for w in workers[:2]:
        assert w.opened.wait(45), f"{w.tid} did not open its transaction: {w.error}"
    # The others are in the middle of their loops: let them run a little, then kill.
    time.sleep(1.0)
    assert all(w.is_alive() for w in workers), [(w.tid, w.error) for w in workers]
    broker.kill9()
    stop.set()
    broker.start()
    for w in workers:
        w.join(30)
        assert not w.is_alive(), f"{w.tid} still running 30 s after the restart"

    outcomes = {}
    for w in workers:
        outcomes.update(w.outcomes)
    states = Counter(outcomes.values())
    assert states["committed"] >= 10 and states["aborted"] >= 2 and states["open"] == 2, states

    got = read_committed_to_end(broker, topic, partitions, timeout=45)
    print(f"transaction outcomes {dict(states)}; {len(got)} messages read_committed")  # shown on failure
    seen = defaultdict(list)
    for m in got:
        headers = dict(m.headers() or [])
        txn, size = headers["txn"].decode(), int(headers["size"])
        seen[txn].append((m.value(), size))
    for txn, msgs in seen.items():
        size = msgs[0][1]
        values = sorted(v for v, _ in msgs)
        assert values == sorted(f"{txn}:{j}".encode() for j in range(size)), (
            f"transaction {txn} ({outcomes.get(txn)}) is partly visible or duplicated: {values}"
        )
    for txn, outcome in outcomes.items():
        if outcome == "committed":
            assert txn in seen, f"transaction {txn} was committed (commit_transaction returned) but is not visible"
        elif outcome in ("aborted", "open"):
            assert txn not in seen, f"transaction {txn} ({outcome}) is visible to read_committed"
    for w in workers:
        w.producer = None  # destroy the zombie producers before the broker stops


# ----- 5. transaction timeout -------------------------------------------------------------


@pytest.mark.timeout(60)
def test_stalled_transaction_is_aborted_after_its_timeout(start_broker):
    broker = start_broker(FAST_TIMEOUT_OVERRIDES)
    topic = "txn-stall"
    clients.create_topic(broker, topic)
    tps = [(topic, 0)]
    timeout_ms = 5000

    # librdkafka wants message and socket timeouts within the transaction timeout.
    p = txn_producer(
        broker,
        "txn-stall-id",
        transaction_timeout_ms=timeout_ms,
        message_timeout_ms=timeout_ms,
        socket_timeout_ms=timeout_ms,
    )
    p.begin_transaction()
    began = time.monotonic()
    for i in range(5):
        p.produce(topic, value=b"stalled-%d" % i, partition=0)
    assert p.flush(clients.TIMEOUT_S) == 0
    # Open: the last stable offset stays at the transaction's first offset.
    assert watermarks(broker, tps, "read_committed") == {(topic, 0): 0}
    assert watermarks(broker, tps, "read_uncommitted") == {(topic, 0): 5}

    hw, _ = wait_stable(broker, tps, timeout=25)
    aborted_after = time.monotonic() - began
    assert aborted_after >= (timeout_ms - 1000) / 1000, f"aborted {aborted_after:.1f}s after it began, before its timeout"
    assert hw == {(topic, 0): 6}, "5 messages and the abort marker"
    assert read_committed_to_end(broker, topic, 1, timeout=10) == []
    assert sorted(m.value() for m in read_all(broker, tps, 5, "read_uncommitted")) == [b"stalled-%d" % i for i in range(5)]

    # The broker aborted it: committing it now must fail (Kafka: the coordinator bumped
    # the epoch, so EndTxn is answered PRODUCER_FENCED), and must not make it visible.
    err = raised_error(p.commit_transaction, clients.TIMEOUT_S)
    assert read_committed_to_end(broker, topic, 1, timeout=10) == [], f"commit after the timeout ({err}) made data visible"

    # The transactional id is usable again by a new producer.
    p2 = txn_producer(broker, "txn-stall-id")
    produce_txn(p2, [(topic, 0, b"fresh-1"), (topic, 0, b"fresh-2")], "commit")
    assert [m.value() for m in read_all(broker, tps, 2, "read_committed")] == [b"fresh-1", b"fresh-2"]


# ----- 6. metrics ---------------------------------------------------------------------------

TXN_METRICS = (
    "osprey_txn_commits_total",
    "osprey_txn_aborts_total",
    "osprey_txn_ongoing",
    "osprey_producer_ids_allocated_total",
    "osprey_txn_fenced_producers_total",
)


def txn_metrics(broker, required: bool = True) -> dict:
    """{name: value summed over labels} of TXN_METRICS; with `required`, every one must be
    exposed (a baseline before any transaction may lack them, counting as 0)."""
    samples = scrape(broker)
    out = {}
    for name in TXN_METRICS:
        values = [v for (n, _), v in samples.items() if n == name]
        assert values or not required, f"no sample {name}; have {sorted({n for n, _ in samples})}"
        out[name] = sum(values)
    return out


def wait_metrics(broker, base: dict, deltas: dict, gauges: dict, timeout: float = 10):
    """Until every counter grew by exactly its delta from `base` and the gauges have their
    values; fails with the last values seen."""
    deadline = time.monotonic() + timeout
    while True:
        now = txn_metrics(broker)
        got = {n: now[n] - base[n] for n in deltas}
        if got == deltas and all(now[n] == v for n, v in gauges.items()):
            return now
        assert time.monotonic() < deadline, f"metric increases {got} (want {deltas}), gauges { {n: now[n] for n in gauges} } (want {gauges})"
        time.sleep(0.2)


@pytest.mark.timeout(60)
def test_metrics_count_commits_aborts_ongoing_producer_ids_and_fencing(broker):
    topic = "txn-metered"
    clients.create_topic(broker, topic, partitions=2)
    base = txn_metrics(broker, required=False)

    p = txn_producer(broker, "metered-1")
    p.begin_transaction()
    p.produce(topic, value=b"m", partition=0)
    assert p.flush(clients.TIMEOUT_S) == 0
    # The coordinator knows of the transaction once a partition was added to it.
    wait_metrics(broker, base, {"osprey_producer_ids_allocated_total": 1}, {"osprey_txn_ongoing": 1})
    p.commit_transaction(clients.TIMEOUT_S)
    for finish in ("abort", "commit", "abort", "commit"):
        produce_txn(p, [(topic, 0, b"m"), (topic, 1, b"m")], finish)
    base = wait_metrics(
        broker,
        base,
        {
            "osprey_txn_commits_total": 3,
            "osprey_txn_aborts_total": 2,
            "osprey_producer_ids_allocated_total": 1,
            "osprey_txn_fenced_producers_total": 0,
        },
        {"osprey_txn_ongoing": 0},
    )

    # Fencing: A's open transaction is aborted by the coordinator when B initialises, and
    # B keeps A's producer id with a higher epoch, as Kafka does: one new producer id.
    _a, b, err = fence(broker, topic, "metered-fenced")
    assert err.fatal(), err
    base = wait_metrics(
        broker,
        base,
        {
            "osprey_txn_commits_total": 0,
            "osprey_txn_aborts_total": 1,
            "osprey_producer_ids_allocated_total": 1,
            "osprey_txn_fenced_producers_total": 1,
        },
        {"osprey_txn_ongoing": 0},
    )
    produce_txn(b, [(topic, 0, b"b")], "commit")
    wait_metrics(broker, base, {"osprey_txn_commits_total": 1, "osprey_txn_aborts_total": 0}, {"osprey_txn_ongoing": 0})


# ----- internal topics deleted under a running coordinator --------------------------------


def test_deleting_internal_topics_leaves_transactions_and_commits_working(broker):
    # Kafka 4.4's controller accepts DeleteTopics of __consumer_offsets and
    # __transaction_state (only kafka-topics.sh refuses them, client-side). The state the
    # coordinators held in them is gone (Kafka's brokers resign the deleted partitions'
    # coordinators, as Osprey's do), but the broker must go on serving: a producer that
    # starts again with the same transactional id commits a transaction, which needs the
    # state topic again, and a group commits offsets.
    topic, group = "after-internal-delete", "after-internal-delete-group"
    clients.create_topic(broker, topic)
    p = txn_producer(broker, "after-internal-delete-txn")
    produce_txn(p, [(topic, 0, b"before")], "commit")
    member = clients.consumer(broker, group_id=group, enable_auto_commit=False)
    member.assign([TopicPartition(topic, 0, 0)])
    member.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)

    a = clients.admin(broker)
    internal = ["__consumer_offsets", "__transaction_state"]
    futures = a.delete_topics(internal, operation_timeout=10, request_timeout=clients.TIMEOUT_S)
    for name in internal:
        assert futures[name].result(timeout=clients.TIMEOUT_S) is None

    p = txn_producer(broker, "after-internal-delete-txn")
    produce_txn(p, [(topic, 0, b"after")], "commit")
    member.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    tps = member.committed([TopicPartition(topic, 0)], timeout=clients.TIMEOUT_S)
    assert [(tp.offset, tp.error) for tp in tps] == [(2, None)]
    member.close()
    got = read_all(broker, [(topic, 0)], 2, "read_committed")
    assert [m.value() for m in got] == [b"before", b"after"]
