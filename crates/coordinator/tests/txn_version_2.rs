//! Transaction version 2 (KIP-890 part 2) in the transaction coordinator, as Kafka 4.x:
//! AddPartitionsToTxn v5 / EndTxn v5 make a transaction TV2, every EndTxn bumps the
//! producer epoch (rotating the producer id when it runs out) and answers with it, retries
//! come at the epoch before the bump, and transaction-version-1 transactions are unchanged.

mod txn_support;

use bytes::{Buf, Bytes, BytesMut};
use osprey_coordinator::group::Record;
use osprey_coordinator::txn::{TxnState, MAX_WAITING_ADDS, TRANSACTION_VERSION_1, TRANSACTION_VERSION_2};
use osprey_protocol::messages::{TransactionLogKey, TransactionLogValue};
use osprey_protocol::{ErrorCode, Message};
use txn_support::{init_result, Harness, FIRST_PRODUCER_ID};

const T: &str = "txn-a";

/// The version and value of a `__transaction_state` record.
fn decode_value(record: &Record) -> (i16, TransactionLogValue) {
    let mut value = record.value.clone().expect("not a tombstone");
    let version = value.get_i16();
    (version, TransactionLogValue::decode(&mut value, version).unwrap())
}

fn key(id: &str) -> Bytes {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&0i16.to_be_bytes());
    TransactionLogKey { transactional_id: id.into() }.encode(&mut buf, 0).unwrap();
    buf.freeze()
}

/// A TV2 Empty value (version 1) for producer `pid` at `epoch`.
fn empty_tv2_record(id: &str, pid: i64, epoch: i16) -> Record {
    let value = TransactionLogValue {
        producer_id: pid,
        producer_epoch: epoch,
        transaction_timeout_ms: 60_000,
        transaction_status: TxnState::Empty.id(),
        transaction_partitions: None,
        transaction_last_update_timestamp_ms: 10,
        transaction_start_timestamp_ms: -1,
        client_transaction_version: TRANSACTION_VERSION_2,
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&1i16.to_be_bytes());
    value.encode(&mut buf, 1).unwrap();
    Record { key: key(id), value: Some(buf.freeze()) }
}

/// A TV2 transaction open on `orders-0` at the producer's first epoch.
fn open_tv2(h: &mut Harness) -> (i64, i16) {
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    assert_eq!(h.add_v2_settled(T, (pid, epoch), &[("orders", 0)]), ErrorCode::NONE);
    (pid, epoch)
}

#[test]
fn add_partitions_v5_makes_the_transaction_version_2_in_its_record() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    assert_eq!(h.c.transaction(T).unwrap().client_transaction_version, TRANSACTION_VERSION_1);
    let reply = h.add(T, (pid, epoch), &[("orders", 0)], 5);
    let record = h.persist_one().unwrap();
    assert_eq!(txn_support::add_result(&h.answer(reply).unwrap()), ErrorCode::NONE);
    let (version, value) = decode_value(&record);
    assert_eq!((version, value.client_transaction_version), (1, TRANSACTION_VERSION_2));
    assert_eq!(value.transaction_status, TxnState::Ongoing.id());
    assert_eq!(h.c.transaction(T).unwrap().client_transaction_version, TRANSACTION_VERSION_2);
}

#[test]
fn commit_v5_bumps_the_epoch_answers_with_it_and_marks_at_it() {
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    let end = h.end(T, (pid, epoch), true, 5);
    assert!(h.answer(end).is_none(), "answered once PrepareCommit is durable");
    let record = h.persist_one().unwrap();
    let (version, value) = decode_value(&record);
    assert_eq!((version, value.transaction_status), (1, TxnState::PrepareCommit.id()));
    assert_eq!((value.producer_id, value.producer_epoch, value.client_transaction_version), (pid, epoch + 1, 2));
    assert_eq!(value.next_producer_id, -1, "no rotation, nothing to carry");
    assert_eq!(h.end_answer(end), Some((ErrorCode::NONE, pid, epoch + 1)));

    let (_, marker) = h.markers.front().cloned().unwrap();
    assert!(marker.committed);
    assert_eq!((marker.producer_id, marker.producer_epoch, marker.transaction_version), (pid, epoch + 1, 2));
    h.settle();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_id, view.producer_epoch), (TxnState::CompleteCommit, pid, epoch + 1));
}

#[test]
fn next_transaction_runs_at_the_bumped_epoch_and_the_old_one_is_fenced() {
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    let (_, _, bumped) = h.end_v2_settled(T, (pid, epoch), true);
    assert_eq!(bumped, epoch + 1);
    assert_eq!(h.add_v2_settled(T, (pid, epoch), &[("orders", 1)]), ErrorCode::PRODUCER_FENCED);
    assert_eq!(h.add_v2_settled(T, (pid, bumped), &[("orders", 1)]), ErrorCode::NONE);
    assert_eq!(h.end_v2_settled(T, (pid, bumped), false), (ErrorCode::NONE, pid, bumped + 1));
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_epoch), (TxnState::CompleteAbort, bumped + 1));
}

#[test]
fn end_txn_retry_at_the_previous_epoch_answers_with_the_current_producer() {
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    let end = h.end(T, (pid, epoch), true, 5);
    h.persist_one();
    assert_eq!(h.end_answer(end), Some((ErrorCode::NONE, pid, epoch + 1)));
    // Markers still being written: the retry waits.
    let retry = h.end(T, (pid, epoch), true, 5);
    assert_eq!(h.end_error(retry), Some(ErrorCode::CONCURRENT_TRANSACTIONS));
    h.settle();
    let retry = h.end(T, (pid, epoch), true, 5);
    assert!(h.persists.is_empty(), "a retry persists nothing");
    assert_eq!(h.end_answer(retry), Some((ErrorCode::NONE, pid, epoch + 1)));
    // Two epochs back is not a retry.
    let stale = h.end(T, (pid, epoch - 1), true, 5);
    assert_eq!(h.end_error(stale), Some(ErrorCode::PRODUCER_FENCED));
}

#[test]
fn abort_right_after_a_commit_waits_instead_of_being_fenced() {
    // KAFKA-18464: the pending completion is checked before the epoch.
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    let end = h.end(T, (pid, epoch), true, 5);
    h.persist_one();
    let (_, _, bumped) = h.end_answer(end).unwrap();
    let abort = h.end(T, (pid, bumped), false, 5);
    assert_eq!(h.end_error(abort), Some(ErrorCode::CONCURRENT_TRANSACTIONS));
    h.settle();
    // Once complete, the abort with no transaction open is a new PrepareAbort with a bump.
    assert_eq!(h.end_v2_settled(T, (pid, bumped), false), (ErrorCode::NONE, pid, bumped + 1));
}

#[test]
fn wrong_outcome_and_state_answers_follow_kafkas_table() {
    let mut h = Harness::new();
    let (pid, e0) = open_tv2(&mut h);
    let (_, _, e1) = h.end_v2_settled(T, (pid, e0), true);

    // CompleteCommit: abort at the retry epoch, commit at the current one.
    let r = h.end(T, (pid, e0), false, 5);
    assert_eq!(h.end_error(r), Some(ErrorCode::INVALID_TXN_STATE));
    let r = h.end(T, (pid, e1), true, 5);
    assert_eq!(h.end_error(r), Some(ErrorCode::INVALID_TXN_STATE));
    assert!(h.persists.is_empty());
    // Abort at the current epoch: nothing open, aborted anyway with a bump, no markers.
    let r = h.end(T, (pid, e1), false, 5);
    let record = h.persist_one().unwrap();
    assert_eq!(decode_value(&record).1.transaction_status, TxnState::PrepareAbort.id());
    assert_eq!(h.end_answer(r), Some((ErrorCode::NONE, pid, e1 + 1)));
    assert!(h.markers.is_empty(), "no partitions, no markers");
    h.settle();
    let e2 = e1 + 1;
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteAbort);

    // CompleteAbort: abort retry succeeds; commit retry is fenced (KAFKA-20785); commit
    // at the current epoch is an invalid transition.
    let r = h.end(T, (pid, e1), false, 5);
    assert_eq!(h.end_answer(r), Some((ErrorCode::NONE, pid, e2)));
    let r = h.end(T, (pid, e1), true, 5);
    assert_eq!(h.end_error(r), Some(ErrorCode::PRODUCER_FENCED));
    let r = h.end(T, (pid, e2), true, 5);
    assert_eq!(h.end_error(r), Some(ErrorCode::INVALID_TXN_STATE));
    assert!(h.persists.is_empty());

    // Empty (after InitProducerId): a retry epoch is fenced, commit is invalid, abort bumps.
    let (_, pid, e) = h.init_settled(T, 60_000);
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::Empty);
    let r = h.end(T, (pid, e - 1), false, 5);
    assert_eq!(h.end_error(r), Some(ErrorCode::PRODUCER_FENCED));
    let r = h.end(T, (pid, e), true, 5);
    assert_eq!(h.end_error(r), Some(ErrorCode::INVALID_TXN_STATE));
    assert_eq!(h.end_v2_settled(T, (pid, e), false), (ErrorCode::NONE, pid, e + 1));

    // Prepared: the same outcome waits, the other is invalid.
    assert_eq!(h.add_v2_settled(T, (pid, e + 1), &[("orders", 0)]), ErrorCode::NONE);
    let end = h.end(T, (pid, e + 1), true, 5);
    h.persist_one();
    assert_eq!(h.end_error(end), Some(ErrorCode::NONE));
    let r = h.end(T, (pid, e + 1), false, 5);
    assert_eq!(h.end_error(r), Some(ErrorCode::CONCURRENT_TRANSACTIONS), "pending completion first");
    // A wrong producer id is named first.
    let r = h.end(T, (pid + 50, e + 1), true, 5);
    assert_eq!(h.end_error(r), Some(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
    h.settle();
}

#[test]
fn exhausted_epoch_rotates_the_producer_id_across_a_coordinator_move() {
    let mut h = Harness::new();
    let partition = h.c.partition_for(T);
    let last = i16::MAX - 1;
    h.log.entry(partition).or_default().push(empty_tv2_record(T, 7, last));
    h.reload();
    assert_eq!(h.c.transaction(T).unwrap().client_transaction_version, TRANSACTION_VERSION_2);
    assert_eq!(h.add_v2_settled(T, (7, last), &[("orders", 0), ("orders", 1)]), ErrorCode::NONE);

    let end = h.end(T, (7, last), true, 5);
    let record = h.persist_one().unwrap();
    let (_, value) = decode_value(&record);
    assert_eq!((value.producer_id, value.producer_epoch), (7, i16::MAX));
    assert_eq!(value.next_producer_id, FIRST_PRODUCER_ID, "the rotation is durable with the prepare");
    // The client goes on with the new producer id at epoch 0.
    assert_eq!(h.end_answer(end), Some((ErrorCode::NONE, FIRST_PRODUCER_ID, 0)));
    let (_, marker) = h.markers.front().cloned().unwrap();
    assert_eq!((marker.producer_id, marker.producer_epoch), (7, i16::MAX), "markers at the old producer");

    // The coordinator moves before any marker is written: the new one rotates too.
    h.reload();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.next_producer_id), (TxnState::PrepareCommit, FIRST_PRODUCER_ID));
    let (_, marker) = h.markers.front().cloned().unwrap();
    assert_eq!((marker.producer_id, marker.producer_epoch, marker.coordinator_epoch), (7, i16::MAX, 2));
    h.settle();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_id, view.producer_epoch), (TxnState::CompleteCommit, FIRST_PRODUCER_ID, 0));
    assert_eq!(view.next_producer_id, -1);

    // A retry from the old producer at its last epoch is recognized (retry on overflow).
    let retry = h.end(T, (7, last), true, 5);
    assert_eq!(h.end_answer(retry), Some((ErrorCode::NONE, FIRST_PRODUCER_ID, 0)));
    // The new producer carries on; the old one is unknown.
    assert_eq!(h.add_v2_settled(T, (7, i16::MAX), &[("orders", 2)]), ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    assert_eq!(h.add_v2_settled(T, (FIRST_PRODUCER_ID, 0), &[("orders", 2)]), ErrorCode::NONE);
    assert_eq!(h.end_v2_settled(T, (FIRST_PRODUCER_ID, 0), true), (ErrorCode::NONE, FIRST_PRODUCER_ID, 1));
}

#[test]
fn timed_out_tv2_transaction_is_aborted_with_one_epoch_bump() {
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    h.tick(1);
    h.tick(60_001);
    h.persist_one();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_epoch), (TxnState::PrepareAbort, epoch + 1));
    let (_, marker) = h.markers.front().cloned().unwrap();
    assert!(!marker.committed);
    assert_eq!((marker.producer_epoch, marker.transaction_version), (epoch + 1, 2));
    h.settle();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_epoch), (TxnState::CompleteAbort, epoch + 1));
    assert_eq!(h.c.stats().fenced_producers, 1);
    // The producer's late commit is fenced (KAFKA-20785); its late abort is a retry.
    let commit = h.end(T, (pid, epoch), true, 5);
    assert_eq!(h.end_error(commit), Some(ErrorCode::PRODUCER_FENCED));
    let abort = h.end(T, (pid, epoch), false, 5);
    assert_eq!(h.end_answer(abort), Some((ErrorCode::NONE, pid, epoch + 1)));
}

#[test]
fn init_producer_id_fences_an_open_tv2_transaction_with_one_bump() {
    // KAFKA-19367: the fencing abort does not bump twice.
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    let reply = h.init(T, 60_000);
    h.persist_one();
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    let (_, marker) = h.markers.front().cloned().unwrap();
    assert_eq!((marker.producer_epoch, marker.committed), (epoch + 1, false));
    h.settle();
    assert_eq!(h.c.transaction(T).unwrap().producer_epoch, epoch + 1);
    assert_eq!(h.init_settled(T, 60_000), (ErrorCode::NONE, pid, epoch + 2));
}

#[test]
fn failed_fence_append_of_a_tv2_transaction_bumps_once_on_the_next_try() {
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    let reply = h.init(T, 60_000);
    h.fail_persist(ErrorCode::NOT_ENOUGH_REPLICAS);
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::COORDINATOR_NOT_AVAILABLE);
    assert_eq!(h.c.transaction(T).unwrap().producer_epoch, epoch, "nothing applied");
    let reply = h.init(T, 60_000);
    h.settle();
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert_eq!(h.c.transaction(T).unwrap().producer_epoch, epoch + 1);
    assert_eq!(h.init_settled(T, 60_000), (ErrorCode::NONE, pid, epoch + 2));
}

#[test]
fn load_restores_the_client_transaction_version() {
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    h.reload();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.client_transaction_version), (TxnState::Ongoing, TRANSACTION_VERSION_2));
    assert_eq!(h.end_v2_settled(T, (pid, epoch), true), (ErrorCode::NONE, pid, epoch + 1));
    h.reload();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_epoch), (TxnState::CompleteCommit, epoch + 1));
    assert_eq!(view.client_transaction_version, TRANSACTION_VERSION_2);
    // The retry epoch still works after the move.
    let retry = h.end(T, (pid, epoch), true, 5);
    assert_eq!(h.end_answer(retry), Some((ErrorCode::NONE, pid, epoch + 1)));
}

#[test]
fn transaction_version_1_keeps_the_epoch_and_version_0_records() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    assert_eq!(h.add_settled(T, (pid, epoch), &[("orders", 0)]), ErrorCode::NONE);
    let end = h.end(T, (pid, epoch), true, 4);
    let record = h.persist_one().unwrap();
    assert_eq!(decode_value(&record).0, 0, "version 0 values for transaction version 1");
    assert_eq!(txn_support::end_result(&h.answer(end).unwrap()), ErrorCode::NONE);
    let (_, marker) = h.markers.front().cloned().unwrap();
    assert_eq!((marker.producer_epoch, marker.transaction_version), (epoch, 0));
    h.settle();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_epoch), (TxnState::CompleteCommit, epoch));
    assert_eq!(view.client_transaction_version, TRANSACTION_VERSION_1);
    // No abort without a transaction, and no retry epochs, in version 1.
    let r = h.end(T, (pid, epoch), false, 4);
    assert_eq!(h.end_error(r), Some(ErrorCode::INVALID_TXN_STATE));
    let r = h.end(T, (pid, epoch - 1), true, 4);
    assert_eq!(h.end_error(r), Some(ErrorCode::PRODUCER_FENCED));
}

#[test]
fn end_txn_version_decides_the_transaction_version() {
    // As KafkaApis: EndTxn v4 on a transaction added at v5 keeps the epoch...
    let mut h = Harness::new();
    let (pid, epoch) = open_tv2(&mut h);
    let end = h.end(T, (pid, epoch), true, 4);
    h.settle();
    assert_eq!(txn_support::end_result(&h.answer(end).unwrap()), ErrorCode::NONE);
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.producer_epoch, view.client_transaction_version), (epoch, TRANSACTION_VERSION_1));
    // ...and EndTxn v5 on one added at v3 bumps it.
    assert_eq!(h.add_settled(T, (pid, epoch), &[("orders", 1)]), ErrorCode::NONE);
    assert_eq!(h.end_v2_settled(T, (pid, epoch), false), (ErrorCode::NONE, pid, epoch + 1));
}

#[test]
fn timeout_at_an_exhausted_epoch_stops_at_the_last_epoch_and_the_next_end_txn_rotates() {
    // The timer has no producer-id source: its abort bumps to i16::MAX without rotating.
    let mut h = Harness::new();
    let partition = h.c.partition_for(T);
    let last = i16::MAX - 1;
    h.log.entry(partition).or_default().push(empty_tv2_record(T, 7, last));
    h.reload();
    assert_eq!(h.add_v2_settled(T, (7, last), &[("orders", 0)]), ErrorCode::NONE);
    h.tick(1);
    h.tick(60_001);
    h.settle();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_id, view.producer_epoch), (TxnState::CompleteAbort, 7, i16::MAX));
    // The producer's own abort is a retry and moves it to the last epoch...
    let abort = h.end(T, (7, last), false, 5);
    assert_eq!(h.end_answer(abort), Some((ErrorCode::NONE, 7, i16::MAX)));
    // ...where its next transaction ends on a new producer id.
    assert_eq!(h.add_v2_settled(T, (7, i16::MAX), &[("orders", 1)]), ErrorCode::NONE);
    assert_eq!(h.end_v2_settled(T, (7, i16::MAX), true), (ErrorCode::NONE, FIRST_PRODUCER_ID, 0));
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_id, view.producer_epoch), (TxnState::CompleteCommit, FIRST_PRODUCER_ID, 0));
}

/// The partition leaders' adds for a transaction's first batches arrive together (one per
/// partition): those that find an add of theirs being persisted wait for it and then go in
/// together, in one more persist, instead of being answered CONCURRENT_TRANSACTIONS.
#[test]
fn leaders_adds_that_meet_an_add_in_flight_wait_and_go_in_together() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    let first = h.add(T, (pid, epoch), &[("orders", 0)], 5);
    let waiting: Vec<_> = [("orders", 1), ("orders", 2), ("audit", 0), ("orders", 1)]
        .into_iter()
        .map(|tp| h.add(T, (pid, epoch), &[tp], 5))
        .collect();
    assert_eq!(h.persists.len(), 1, "one add in flight");
    assert!(waiting.iter().all(|r| h.answer(*r).is_none()), "nobody answered while it persists");

    let record = h.persist_one().unwrap();
    assert_eq!(decode_value(&record).1.transaction_partitions.unwrap().len(), 1);
    assert_eq!(txn_support::add_result(&h.answer(first).unwrap()), ErrorCode::NONE);
    assert!(waiting.iter().all(|r| h.answer(*r).is_none()), "answered once their own add is durable");
    assert_eq!(h.persists.len(), 1, "the waiting adds go in as one");

    h.persist_one();
    for reply in &waiting {
        assert_eq!(txn_support::add_result(&h.answer(*reply).unwrap()), ErrorCode::NONE);
    }
    let view = h.c.transaction(T).unwrap();
    let expected = [("audit", 0), ("orders", 0), ("orders", 1), ("orders", 2)].map(|(t, p)| (t.to_string(), p));
    assert_eq!(view.partitions, expected);
    assert!(h.persists.is_empty());
}

/// What waits is answered with the add it joined: a failed persist answers the next add's
/// requests with its mapped error, and a coordinator that moves away answers every waiting
/// request NOT_COORDINATOR. A client's own AddPartitionsToTxn (v0-3) is answered
/// CONCURRENT_TRANSACTIONS at once, as Kafka answers it.
#[test]
fn waiting_adds_get_their_own_answer_when_the_add_fails_or_the_coordinator_moves() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add(T, (pid, epoch), &[("orders", 0)], 5);
    let client = h.add(T, (pid, epoch), &[("orders", 3)], 3);
    assert_eq!(txn_support::add_result(&h.answer(client).unwrap()), ErrorCode::CONCURRENT_TRANSACTIONS);
    let waiting = h.add(T, (pid, epoch), &[("orders", 1)], 5);
    h.persist_one();
    h.fail_persist(ErrorCode::NOT_ENOUGH_REPLICAS);
    assert_eq!(txn_support::add_result(&h.answer(waiting).unwrap()), ErrorCode::COORDINATOR_NOT_AVAILABLE);

    h.add(T, (pid, epoch), &[("orders", 1)], 5);
    let stranded = h.add(T, (pid, epoch), &[("orders", 2)], 5);
    h.c.unload_partition(h.c.partition_for(T));
    h.drain();
    assert_eq!(txn_support::add_result(&h.answer(stranded).unwrap()), ErrorCode::NOT_COORDINATOR);
}

/// At most `MAX_WAITING_ADDS` requests wait per transactional id; the next is answered
/// CONCURRENT_TRANSACTIONS (its partition leader retries it).
#[test]
fn waiting_adds_are_bounded_per_transactional_id() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add(T, (pid, epoch), &[("orders", 0)], 5);
    let waiting: Vec<_> = (0..MAX_WAITING_ADDS as i32).map(|p| h.add(T, (pid, epoch), &[("wide", p)], 5)).collect();
    let over = h.add(T, (pid, epoch), &[("wide", -1)], 5);
    assert_eq!(txn_support::add_result(&h.answer(over).unwrap()), ErrorCode::CONCURRENT_TRANSACTIONS);
    h.persist_all();
    assert!(waiting.iter().all(|r| txn_support::add_result(&h.answer(*r).unwrap()) == ErrorCode::NONE));
    assert_eq!(h.c.transaction(T).unwrap().partitions.len(), MAX_WAITING_ADDS + 1);
}
