"""KIP-890 part 1 on a raw socket: a transactional batch is stored on a partition only
after the partition joined the producer's transaction. Real clients always call
AddPartitionsToTxn first, so only raw frames can show that the broker refuses a batch
that skipped it (a client bug, or a late retry after the transaction ended), which is
what keeps a transaction from hanging on a partition the coordinator never marks."""

import time

import clients
import kafkawire as kw

TXN_ATTRIBUTE = 0x10
INVALID_TXN_STATE = 48
RETRIABLE_COORDINATOR = {14, 15, 16, 51}  # load in progress, not available, not coordinator, concurrent


def init_transactional_producer(conn, transactional_id):
    """FindCoordinator (creates __transaction_state) then InitProducerId, retried while
    the coordinator is loading."""
    deadline = time.monotonic() + 20
    correlation = 100
    while True:
        correlation += 1
        _, error, _node = kw.parse_find_coordinator_v1(
            conn.roundtrip(kw.find_coordinator_v1(correlation, transactional_id, 1)))
        if error == 0:
            correlation += 1
            _, error, producer_id, epoch = kw.parse_init_producer_id_v0(
                conn.roundtrip(kw.init_producer_id_v0(correlation, transactional_id)))
            if error == 0:
                return producer_id, epoch
        assert error in RETRIABLE_COORDINATOR, f"unexpected error {error}"
        assert time.monotonic() < deadline, f"no producer id after 20 s (last error {error})"
        time.sleep(0.2)


def produce(conn, correlation, topic, batch, transactional_id):
    frame = kw.produce_v3(correlation, topic, 0, batch, transactional_id=transactional_id)
    _, [(_, _, error, base_offset)] = kw.parse_produce_v3(conn.roundtrip(frame))
    return error, base_offset


def test_a_transactional_batch_needs_its_partition_in_the_transaction(broker):
    topic = "txn-verify"
    clients.create_topic(broker, topic, partitions=1)
    transactional_id = "raw-verify"
    with kw.Conn(broker.host, broker.port) as conn:
        producer_id, epoch = init_transactional_producer(conn, transactional_id)
        batch = kw.record_batch([(b"k", b"v")], attributes=TXN_ATTRIBUTE, producer=(producer_id, epoch, 0))

        # Not added to the transaction: refused (Produce v3 predates TRANSACTION_ABORTABLE).
        error, _ = produce(conn, 1, topic, batch, transactional_id)
        assert error == INVALID_TXN_STATE
        fetched = kw.parse_fetch_v4(conn.roundtrip(kw.fetch_v4(2, topic, 0, 0)))
        assert b"".join(p[-1] for p in fetched[1] if p[-1]) == b"", "a refused batch was stored"

        _, results = kw.parse_add_partitions_to_txn_v0(
            conn.roundtrip(kw.add_partitions_to_txn_v0(3, transactional_id, producer_id, epoch, topic, [0])))
        assert results == [(topic, 0, 0)]

        # In the transaction now: stored at offset 0.
        error, base_offset = produce(conn, 4, topic, batch, transactional_id)
        assert (error, base_offset) == (0, 0)


def test_a_fenced_epoch_cannot_start_a_transaction_on_a_partition(broker):
    topic = "txn-verify-fenced"
    clients.create_topic(broker, topic, partitions=1)
    transactional_id = "raw-verify-fenced"
    with kw.Conn(broker.host, broker.port) as conn:
        producer_id, old_epoch = init_transactional_producer(conn, transactional_id)
        _, new_epoch = init_transactional_producer(conn, transactional_id)
        assert new_epoch == old_epoch + 1
        batch = kw.record_batch([(b"k", b"v")], attributes=TXN_ATTRIBUTE, producer=(producer_id, old_epoch, 0))
        error, _ = produce(conn, 1, topic, batch, transactional_id)
        assert error == 47  # INVALID_PRODUCER_EPOCH: what Produce carries for a fenced producer
