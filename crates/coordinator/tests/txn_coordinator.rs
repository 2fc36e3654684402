//! The transaction coordinator's request paths: commit and abort with their markers,
//! fencing, concurrent completion, timeouts and the error codes Kafka answers with.

mod txn_support;

use osprey_coordinator::group::partition_for;
use osprey_coordinator::txn::{Response, TxnConfig, TxnState, GROUP_METADATA_TOPIC_NAME};
use osprey_protocol::messages::InitProducerIdRequest;
use osprey_protocol::ErrorCode;
use txn_support::{init_result, Harness, FIRST_PRODUCER_ID};

const T: &str = "txn-a";

fn tp(topic: &str, partition: i32) -> (String, i32) {
    (topic.to_string(), partition)
}

#[test]
fn new_transactional_id_gets_a_producer_id_at_epoch_zero() {
    let mut h = Harness::new();
    let reply = h.init(T, 60_000);
    assert!(h.answer(reply).is_none(), "answered only once Empty is durable");
    assert_eq!(h.persists.len(), 1);
    assert_eq!(h.persists[0].1, h.c.partition_for(T));
    h.persist_one();
    assert_eq!(init_result(&h.answer(reply).unwrap()), (ErrorCode::NONE, FIRST_PRODUCER_ID, 0));
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_epoch, view.txn_timeout_ms), (TxnState::Empty, 0, 60_000));
}

#[test]
fn commit_persists_prepare_answers_writes_markers_then_completes() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    assert_eq!(h.add_settled(T, (pid, epoch), &[("orders", 0), ("orders", 1)]), ErrorCode::NONE);
    let offsets = h.add_offsets(T, (pid, epoch), "billing");
    h.persist_all();
    assert_eq!(txn_support::add_result(&h.answer(offsets).unwrap()), ErrorCode::NONE);
    let group_partition = partition_for("billing", 50);
    let view = h.c.transaction(T).unwrap();
    assert_eq!(view.state, TxnState::Ongoing);
    assert_eq!(view.partitions.len(), 3);

    let end = h.end(T, (pid, epoch), true, 3);
    assert!(h.answer(end).is_none() && h.markers.is_empty(), "nothing before PrepareCommit is durable");
    h.persist_one();
    assert_eq!(h.end_error(end), Some(ErrorCode::NONE));
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::PrepareCommit);
    let (id, marker) = h.markers.front().cloned().unwrap();
    assert_eq!(id, T);
    assert!(marker.committed);
    assert_eq!((marker.producer_id, marker.producer_epoch, marker.coordinator_epoch), (pid, epoch, 0));
    assert_eq!(
        marker.partitions,
        vec![tp(GROUP_METADATA_TOPIC_NAME, group_partition), tp("orders", 0), tp("orders", 1)]
    );
    h.write_markers();
    assert_eq!(h.persists.len(), 1, "CompleteCommit is persisted once every marker is written");
    h.persist_one();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.pending_state, view.partitions.len()), (TxnState::CompleteCommit, None, 0));
}

#[test]
fn abort_writes_abort_markers_and_completes() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add_settled(T, (pid, epoch), &[("orders", 2)]);
    let end = h.end(T, (pid, epoch), false, 3);
    h.persist_one();
    assert_eq!(h.end_error(end), Some(ErrorCode::NONE));
    let written = h.write_markers();
    assert_eq!(written.len(), 1);
    assert!(!written[0].1.committed);
    h.persist_all();
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteAbort);
    // The next transaction starts from CompleteAbort.
    assert_eq!(h.add_settled(T, (pid, epoch), &[("orders", 3)]), ErrorCode::NONE);
}

#[test]
fn empty_transaction_completes_without_markers() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add_settled(T, (pid, epoch), &[("orders", 0)]);
    let end = h.end(T, (pid, epoch), true, 3);
    h.persist_one();
    assert_eq!(h.end_error(end), Some(ErrorCode::NONE));
    // A marker failure the producer could not have caused drops the partition.
    let (id, marker) = h.markers.pop_front().unwrap();
    h.c.marker_written(
        &id,
        marker.coordinator_epoch,
        &marker.partitions[0],
        ErrorCode::UNSUPPORTED_FOR_MESSAGE_FORMAT,
        h.now,
    );
    h.drain();
    h.persist_all();
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteCommit);
}

#[test]
fn second_init_producer_id_fences_the_first_producer() {
    let mut h = Harness::new();
    let (_, pid, first) = h.init_settled(T, 60_000);
    let (error, pid2, second) = h.init_settled(T, 60_000);
    assert_eq!((error, pid2, second), (ErrorCode::NONE, pid, first + 1));
    // The old producer is fenced everywhere; old clients hear INVALID_PRODUCER_EPOCH.
    let add = h.add(T, (pid, first), &[("orders", 0)], 3);
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::PRODUCER_FENCED);
    let add_v1 = h.add(T, (pid, first), &[("orders", 0)], 1);
    assert_eq!(txn_support::add_result(&h.answer(add_v1).unwrap()), ErrorCode::INVALID_PRODUCER_EPOCH);
    let end = h.end(T, (pid, first), true, 3);
    assert_eq!(h.end_error(end), Some(ErrorCode::PRODUCER_FENCED));
    let end_v1 = h.end(T, (pid, first), true, 1);
    assert_eq!(h.end_error(end_v1), Some(ErrorCode::INVALID_PRODUCER_EPOCH));
    assert_eq!(h.verify(T, (pid, first), &[("orders", 0)]), vec![ErrorCode::PRODUCER_FENCED]);
    assert_eq!(h.add_settled(T, (pid, second), &[("orders", 0)]), ErrorCode::NONE);
}

#[test]
fn init_producer_id_during_an_ongoing_transaction_aborts_it_and_answers_concurrent_transactions() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add_settled(T, (pid, epoch), &[("orders", 0)]);
    let init = h.init(T, 60_000);
    assert_eq!(h.c.transaction(T).unwrap().producer_epoch, epoch + 1, "the fence bumps the epoch at once");
    h.persist_one(); // PrepareAbort at the bumped epoch
    assert_eq!(init_result(&h.answer(init).unwrap()).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    let (_, marker) = h.markers.front().cloned().unwrap();
    assert!(!marker.committed);
    assert_eq!(marker.producer_epoch, epoch + 1, "the abort marker fences the old producer on the partitions");
    // The old producer cannot commit any more.
    let end = h.end(T, (pid, epoch), true, 3);
    assert_eq!(h.end_error(end), Some(ErrorCode::PRODUCER_FENCED));
    // Retries while the abort completes: CONCURRENT_TRANSACTIONS.
    let retry = h.init(T, 60_000);
    assert_eq!(init_result(&h.answer(retry).unwrap()).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    h.write_markers();
    let retry = h.init(T, 60_000);
    assert_eq!(
        init_result(&h.answer(retry).unwrap()).0,
        ErrorCode::CONCURRENT_TRANSACTIONS,
        "CompleteAbort not durable yet"
    );
    h.persist_one();
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteAbort);
    assert_eq!(h.init_settled(T, 60_000), (ErrorCode::NONE, pid, epoch + 2));
    // One producer fenced, though it took two bumps and three retries; one abort.
    let stats = h.c.stats();
    assert_eq!((stats.fenced_producers, stats.aborts, stats.commits), (1, 1, 0));
    // A later new instance fences again.
    h.init_settled(T, 60_000);
    assert_eq!(h.c.stats().fenced_producers, 2);
}

#[test]
fn end_txn_retries_and_wrong_outcomes_get_kafkas_answers() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    let p = (pid, epoch);
    let end = h.end(T, p, true, 3);
    assert_eq!(h.end_error(end), Some(ErrorCode::INVALID_TXN_STATE), "nothing to end in Empty");
    h.add_settled(T, p, &[("orders", 0)]);
    let end = h.end(T, p, true, 3);
    h.persist_one();
    assert_eq!(h.end_error(end), Some(ErrorCode::NONE));
    for (committed, expected) in
        [(true, ErrorCode::CONCURRENT_TRANSACTIONS), (false, ErrorCode::CONCURRENT_TRANSACTIONS)]
    {
        let again = h.end(T, p, committed, 3);
        assert_eq!(h.end_error(again), Some(expected), "a transition is pending while markers are written");
    }
    let add = h.add(T, p, &[("orders", 1)], 3);
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::CONCURRENT_TRANSACTIONS);
    assert_eq!(h.verify(T, p, &[("orders", 0)]), vec![ErrorCode::CONCURRENT_TRANSACTIONS]);
    h.write_markers();
    h.persist_all();
    let retry = h.end(T, p, true, 3);
    assert_eq!(h.end_error(retry), Some(ErrorCode::NONE), "a retried commit after completion succeeds");
    match h.answer(retry).unwrap() {
        Response::EndTxn(r) => assert_eq!((r.producer_id, r.producer_epoch), (pid, epoch)),
        other => panic!("{other:?}"),
    }
    let wrong = h.end(T, p, false, 3);
    assert_eq!(h.end_error(wrong), Some(ErrorCode::INVALID_TXN_STATE), "abort after a commit");
}

/// librdkafka counts an AddPartitionsToTxn that failed (CONCURRENT_TRANSACTIONS, or
/// NOT_COORDINATOR and lost connections while the coordinator moves) as one that may have
/// taken effect; an abort then drops its retry but still sends EndTxn, which finds the
/// previous transaction completed at the same epoch. Kafka's `endTransactionWithTV1`
/// answers an abort after a commit INVALID_TXN_STATE (fatal to the producer) and one after
/// an abort NONE; so does Osprey.
#[test]
fn abort_whose_add_failed_meets_the_moved_commit_with_kafkas_invalid_txn_state() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 20_000);
    let p = (pid, epoch);
    h.add_settled(T, p, &[("orders", 0)]);
    let commit = h.end(T, p, true, 3);
    h.persist_one();
    assert_eq!(h.end_error(commit), Some(ErrorCode::NONE));
    // The coordinator moves before the markers are out: the new one loads PrepareCommit
    // and completes it.
    h.reload();
    assert_eq!(h.c.transaction(T).unwrap().pending_state, Some(TxnState::CompleteCommit));
    let add = h.add(T, p, &[("orders", 1)], 3);
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::CONCURRENT_TRANSACTIONS);
    let abort = h.end(T, p, false, 3);
    assert_eq!(h.end_error(abort), Some(ErrorCode::CONCURRENT_TRANSACTIONS), "retried by the client");
    h.settle();
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteCommit);
    let abort = h.end(T, p, false, 3);
    assert_eq!(h.end_error(abort), Some(ErrorCode::INVALID_TXN_STATE), "nothing open, the last one committed");

    // After an abort the same EndTxn reads as a retry of it.
    h.add_settled(T, p, &[("orders", 2)]);
    let abort = h.end(T, p, false, 3);
    h.settle();
    assert_eq!(h.end_error(abort), Some(ErrorCode::NONE));
    let again = h.end(T, p, false, 3);
    assert_eq!(h.end_error(again), Some(ErrorCode::NONE), "nothing open, the last one aborted");
}

#[test]
fn fenced_marker_write_stops_and_leaves_the_transaction_prepared() {
    // A newer coordinator (or producer epoch) exists: this coordinator stops sending
    // markers and leaves completion to the new one, as Kafka.
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add_settled(T, (pid, epoch), &[("orders", 0)]);
    h.end(T, (pid, epoch), true, 3);
    h.persist_one();
    let (id, marker) = h.markers.pop_front().unwrap();
    h.c.marker_written(
        &id,
        marker.coordinator_epoch,
        &marker.partitions[0],
        ErrorCode::TRANSACTION_COORDINATOR_FENCED,
        h.now,
    );
    h.drain();
    assert!(h.persists.is_empty() && h.markers.is_empty());
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::PrepareCommit);
}

#[test]
fn retriable_marker_errors_send_the_marker_again() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add_settled(T, (pid, epoch), &[("orders", 0), ("orders", 1)]);
    h.end(T, (pid, epoch), true, 3);
    h.persist_one();
    let (id, marker) = h.markers.pop_front().unwrap();
    h.c.marker_written(&id, 0, &tp("orders", 0), ErrorCode::NOT_LEADER_OR_FOLLOWER, h.now);
    h.c.marker_written(&id, 0, &tp("orders", 1), ErrorCode::NONE, h.now);
    h.drain();
    assert_eq!(h.markers.len(), 1);
    assert_eq!(h.markers[0].1.partitions, vec![tp("orders", 0)]);
    assert_eq!(h.markers[0].1.producer_epoch, marker.producer_epoch);
    assert!(h.persists.is_empty());
    // A stale report (another coordinator epoch) changes nothing.
    h.c.marker_written(&id, 7, &tp("orders", 0), ErrorCode::NONE, h.now);
    h.drain();
    assert!(h.persists.is_empty());
    h.write_markers();
    h.persist_all();
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteCommit);
}

#[test]
fn transaction_open_longer_than_its_timeout_is_aborted_and_its_producer_fenced() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 5_000);
    h.add_settled(T, (pid, epoch), &[("orders", 0)]);
    h.tick(4_000);
    h.tick(6_001); // the first abort check runs 10 s after the first tick
    assert!(h.persists.is_empty(), "not yet: the check runs every 10 s");
    h.tick(4_000);
    assert_eq!(h.persists.len(), 1);
    h.persist_one();
    let view = h.c.transaction(T).unwrap();
    assert_eq!((view.state, view.producer_epoch), (TxnState::PrepareAbort, epoch + 1));
    let (_, marker) = h.markers.front().cloned().unwrap();
    assert!(!marker.committed);
    assert_eq!(marker.producer_epoch, epoch + 1);
    let end = h.end(T, (pid, epoch), true, 3);
    assert_eq!(h.end_error(end), Some(ErrorCode::PRODUCER_FENCED));
    h.settle();
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteAbort);
    let add = h.add(T, (pid, epoch), &[("orders", 0)], 3);
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::PRODUCER_FENCED);
    assert_eq!(h.init_settled(T, 5_000), (ErrorCode::NONE, pid, epoch + 2));
}

#[test]
fn failed_fence_append_reuses_the_bumped_epoch() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add_settled(T, (pid, epoch), &[("orders", 0)]);
    let init = h.init(T, 60_000);
    h.fail_persist(ErrorCode::NOT_ENOUGH_REPLICAS);
    assert_eq!(init_result(&h.answer(init).unwrap()).0, ErrorCode::COORDINATOR_NOT_AVAILABLE);
    assert_eq!(h.c.transaction(T).unwrap().producer_epoch, epoch + 1);
    let init = h.init(T, 60_000);
    h.persist_one();
    assert_eq!(init_result(&h.answer(init).unwrap()).0, ErrorCode::CONCURRENT_TRANSACTIONS);
    assert_eq!(h.c.transaction(T).unwrap().producer_epoch, epoch + 1, "the failed fence's epoch was reused");
}

#[test]
fn failed_append_answers_the_mapped_error_and_releases_the_id() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    let add = h.add(T, (pid, epoch), &[("orders", 0)], 3);
    h.fail_persist(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::NOT_COORDINATOR);
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::Empty);
    assert_eq!(h.add_settled(T, (pid, epoch), &[("orders", 0)]), ErrorCode::NONE);
}

#[test]
fn completion_append_that_finds_the_log_unavailable_is_retried_by_tick() {
    // The acks=all wait failing because the ISR fell below min.insync.replicas is one of
    // them (Kafka's `appendTransactionToLog` maps all these to COORDINATOR_NOT_AVAILABLE).
    for error in
        [ErrorCode::NOT_ENOUGH_REPLICAS, ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode::REQUEST_TIMED_OUT]
    {
        let mut h = Harness::new();
        let (_, pid, epoch) = h.init_settled(T, 60_000);
        h.add_settled(T, (pid, epoch), &[("orders", 0)]);
        h.end(T, (pid, epoch), true, 3);
        h.persist_one();
        h.write_markers();
        h.fail_persist(error);
        assert_eq!(h.c.transaction(T).unwrap().pending_state, Some(TxnState::CompleteCommit), "{error:?}");
        h.tick(1);
        assert_eq!(h.persists.len(), 1, "{error:?}");
        h.persist_one();
        assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteCommit, "{error:?}");
    }
}

#[test]
fn request_errors_match_kafka() {
    let mut h = Harness::new();
    for timeout in [0, 900_001] {
        let reply = h.init(T, timeout);
        assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::INVALID_TRANSACTION_TIMEOUT);
    }
    let reply = h.init("", 1_000);
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::INVALID_REQUEST);
    let half = InitProducerIdRequest {
        transactional_id: Some(T.into()),
        transaction_timeout_ms: 1_000,
        producer_id: 5,
        producer_epoch: -1,
        ..Default::default()
    };
    let reply = h.init_request(&half, 4);
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::INVALID_REQUEST);
    // Unknown id, wrong producer id.
    let add = h.add("nobody", (1, 0), &[("orders", 0)], 3);
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    let end = h.end("nobody", (1, 0), true, 3);
    assert_eq!(h.end_error(end), Some(ErrorCode::INVALID_PRODUCER_ID_MAPPING));
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    let add = h.add(T, (pid + 1, epoch), &[("orders", 0)], 3);
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    assert_eq!(h.verify(T, (pid + 1, epoch), &[("orders", 0)]), vec![ErrorCode::INVALID_PRODUCER_ID_MAPPING]);
    // An idempotent producer gets a fresh id at epoch 0 and nothing is remembered.
    let idempotent = InitProducerIdRequest { transactional_id: None, transaction_timeout_ms: -1, ..Default::default() };
    let reply = h.init_request(&idempotent, 4);
    assert_eq!(init_result(&h.answer(reply).unwrap()), (ErrorCode::NONE, pid + 1, 0));
    // Ids of partitions this coordinator does not lead.
    let partition = h.c.partition_for(T);
    h.c.unload_partition(partition);
    let reply = h.init(T, 1_000);
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::NOT_COORDINATOR);
    let end = h.end(T, (pid, epoch), true, 3);
    assert_eq!(h.end_error(end), Some(ErrorCode::NOT_COORDINATOR));
    assert_eq!(h.c.describe(T).error_code, ErrorCode::NOT_COORDINATOR.code());
    // Leadership comes back at epoch 7: COORDINATOR_LOAD_IN_PROGRESS while its records
    // are read, then served at that epoch.
    h.c.begin_load(partition, 7);
    assert_eq!(h.c.loading_epoch(partition), Some(7));
    let reply = h.init(T, 1_000);
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
    h.c.load(partition, 7, Vec::new(), h.now).unwrap();
    assert_eq!((h.c.loading_epoch(partition), h.c.loaded_epoch(partition)), (None, Some(7)));
    let (error, _, _) = h.init_settled(T, 1_000);
    assert_eq!(error, ErrorCode::NONE);
}

#[test]
fn producer_id_allocation_failure_is_returned_to_the_client() {
    let mut h = Harness::new();
    let request =
        InitProducerIdRequest { transactional_id: Some(T.into()), transaction_timeout_ms: 1_000, ..Default::default() };
    let reply = h.reply();
    h.c.init_producer_id(&request, 4, reply, &mut || Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS), h.now);
    h.drain();
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
    assert!(h.c.transaction(T).is_none());
}

#[test]
fn kip360_bump_with_the_current_epoch_and_retry_with_the_last_one() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    let with = |pid: i64, epoch: i16| InitProducerIdRequest {
        transactional_id: Some(T.into()),
        transaction_timeout_ms: 60_000,
        producer_id: pid,
        producer_epoch: epoch,
        ..Default::default()
    };
    let reply = h.init_request(&with(pid, epoch), 4);
    h.persist_all();
    assert_eq!(init_result(&h.answer(reply).unwrap()), (ErrorCode::NONE, pid, epoch + 1));
    // The answer was lost: the retry with the old epoch gets the same epoch back.
    let reply = h.init_request(&with(pid, epoch), 4);
    h.persist_all();
    assert_eq!(init_result(&h.answer(reply).unwrap()), (ErrorCode::NONE, pid, epoch + 1));
    // Another producer initialized since: the old epoch is fenced.
    h.init_settled(T, 60_000);
    let reply = h.init_request(&with(pid, epoch), 4);
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::PRODUCER_FENCED);
    let reply = h.init_request(&with(pid, epoch), 3);
    assert_eq!(
        init_result(&h.answer(reply).unwrap()).0,
        ErrorCode::INVALID_PRODUCER_EPOCH,
        "v3 predates PRODUCER_FENCED"
    );
    let reply = h.init_request(&with(pid + 50, 3), 4);
    assert_eq!(init_result(&h.answer(reply).unwrap()).0, ErrorCode::PRODUCER_FENCED, "an unknown producer id");
}

#[test]
fn verify_answers_whether_each_partition_is_in_the_transaction() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    assert_eq!(h.verify(T, (pid, epoch), &[("orders", 0)]), vec![ErrorCode::TRANSACTION_ABORTABLE]);
    h.add_settled(T, (pid, epoch), &[("orders", 0)]);
    assert_eq!(
        h.verify(T, (pid, epoch), &[("orders", 0), ("orders", 1)]),
        vec![ErrorCode::NONE, ErrorCode::TRANSACTION_ABORTABLE]
    );
    assert_eq!(h.verify("", (pid, epoch), &[("orders", 0)]), vec![ErrorCode::INVALID_REQUEST]);
    // Adding what is already there is answered at once, nothing persisted.
    let add = h.add(T, (pid, epoch), &[("orders", 0)], 3);
    assert!(h.persists.is_empty());
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::NONE);
}

#[test]
fn idle_transactional_ids_expire_with_a_tombstone() {
    let config = TxnConfig { transactional_id_expiration_ms: 60_000, ..TxnConfig::default() };
    let mut h = Harness::with_config(config);
    h.init_settled(T, 1_000);
    let (_, pid, epoch) = h.init_settled("busy", 1_000);
    h.add_settled("busy", (pid, epoch), &[("orders", 0)]);
    h.tick(1); // schedules the first expiration check an hour later
    h.tick(3_600_000);
    // The idle Empty id gets a tombstone; the Ongoing one is aborted (timed out), never expired.
    let tombstones = h.persists.iter().filter(|(_, _, r)| r.value.is_none()).count();
    assert_eq!(tombstones, 1);
    assert!(h.c.transaction(T).is_some(), "removed only once the tombstone is durable");
    h.persist_all();
    assert!(h.c.transaction(T).is_none());
    assert_eq!(h.c.describe(T).error_code, ErrorCode::TRANSACTIONAL_ID_NOT_FOUND.code());
    assert!(h.c.transaction("busy").is_some());
}

#[test]
fn id_whose_first_init_failed_has_no_producer_to_add_partitions_for() {
    let mut h = Harness::new();
    let init = h.init(T, 60_000);
    h.fail_persist(ErrorCode::NOT_ENOUGH_REPLICAS);
    assert_eq!(init_result(&h.answer(init).unwrap()).0, ErrorCode::COORDINATOR_NOT_AVAILABLE);
    let view = h.c.transaction(T).unwrap();
    let add = h.add(T, (view.producer_id, -1), &[("orders", 0)], 3);
    assert_eq!(txn_support::add_result(&h.answer(add).unwrap()), ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    let end = h.end(T, (view.producer_id, -1), true, 3);
    assert_eq!(h.end_error(end), Some(ErrorCode::INVALID_TXN_STATE));
    // The retry allocates no new id: the one created is used at epoch 0.
    assert_eq!(h.init_settled(T, 60_000), (ErrorCode::NONE, view.producer_id, 0));
}
