//! `__transaction_state` records in Kafka's exact bytes, load after a restart (prepared
//! transactions completed, ongoing ones left to time out), and Describe/ListTransactions.

mod txn_support;

use bytes::{BufMut, Bytes, BytesMut};
use osprey_coordinator::group::{partition_for, Record};
use osprey_coordinator::txn::{TransactionCoordinator, TxnConfig, TxnState};
use osprey_protocol::messages::{InitProducerIdRequest, ListTransactionsRequest};
use osprey_protocol::ErrorCode;
use txn_support::Harness;

const T: &str = "txn-a";

fn put_str(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

/// A TransactionLogValue v0, byte by byte as Kafka lays it out.
fn value_v0(
    pid: i64,
    epoch: i16,
    timeout: i32,
    status: i8,
    partitions: Option<&[(&str, &[i32])]>,
    update: i64,
    start: i64,
) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i64(pid);
    b.put_i16(epoch);
    b.put_i32(timeout);
    b.put_i8(status);
    match partitions {
        None => b.put_i32(-1),
        Some(topics) => {
            b.put_i32(topics.len() as i32);
            for (topic, ps) in topics {
                put_str(&mut b, topic);
                b.put_i32(ps.len() as i32);
                for p in *ps {
                    b.put_i32(*p);
                }
            }
        }
    }
    b.put_i64(update);
    b.put_i64(start);
    b.freeze()
}

fn key_v0(id: &str) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    put_str(&mut b, id);
    b.freeze()
}

#[test]
fn records_are_kafkas_version_0_key_and_value_bytes() {
    let mut h = Harness::new();
    let start = h.now;
    let init = h.init(T, 60_000);
    let empty = h.persist_one().unwrap();
    assert_eq!(empty.key, key_v0(T));
    assert_eq!(empty.value.unwrap(), value_v0(1000, 0, 60_000, 0, None, start, -1), "Empty has null partitions");
    assert!(h.answer(init).is_some());
    h.now += 5;
    h.add(T, (1000, 0), &[("orders", 1), ("orders", 0), ("audit", 3)], 3);
    let ongoing = h.persist_one().unwrap();
    let partitions: &[(&str, &[i32])] = &[("audit", &[3]), ("orders", &[0, 1])];
    assert_eq!(ongoing.value.unwrap(), value_v0(1000, 0, 60_000, 1, Some(partitions), start + 5, start + 5));
}

#[test]
fn transaction_partition_is_java_hash_code_modulo_partition_count() {
    let h = Harness::new();
    // "txn-a".hashCode() computed as Java does: s[0]*31^(n-1) + ... + s[n-1].
    let java = "txn-a".encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
    assert_eq!(h.c.partition_for(T), java.abs() % 50);
    assert_eq!(h.c.partition_for(T), partition_for(T, 50));
    // Utils.abs(Integer.MIN_VALUE) is 0: "polygenelubricants".hashCode() == Integer.MIN_VALUE.
    assert_eq!(partition_for("polygenelubricants", 50), 0);
}

#[test]
fn load_completes_a_prepared_commit_and_leaves_ongoing_transactions_to_time_out() {
    let mut h = Harness::new();
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add_settled(T, (pid, epoch), &[("orders", 0), ("orders", 1)]);
    let end = h.end(T, (pid, epoch), true, 3);
    h.persist_one();
    assert_eq!(h.end_error(end), Some(ErrorCode::NONE));
    // Crash before any marker is written. Another id stays Ongoing.
    let other = "txn-b";
    let (_, pid_b, epoch_b) = h.init_settled(other, 20_000);
    h.add_settled(other, (pid_b, epoch_b), &[("orders", 5)]);

    let mut restarted = TransactionCoordinator::new(TxnConfig::default());
    let mut completing = 0;
    for (partition, records) in &h.log {
        let summary = restarted.load(*partition, 1, records.clone(), h.now).unwrap();
        completing += summary.completing;
    }
    restarted.check_invariants().unwrap();
    assert_eq!(completing, 1);
    h.c = restarted;
    h.markers.clear();
    h.persists.clear();
    h.drain();
    let (id, marker) = h.markers.front().cloned().unwrap();
    assert_eq!(id, T);
    assert!(marker.committed);
    assert_eq!((marker.producer_id, marker.producer_epoch, marker.coordinator_epoch), (pid, epoch, 1));
    assert_eq!(marker.partitions.len(), 2);
    h.write_markers();
    h.persist_one();
    assert_eq!(h.c.transaction(T).unwrap().state, TxnState::CompleteCommit);

    // The ongoing one is aborted once its timeout passes, fencing its producer.
    assert_eq!(h.c.transaction(other).unwrap().state, TxnState::Ongoing);
    h.tick(1);
    h.tick(20_000);
    h.settle();
    let view = h.c.transaction(other).unwrap();
    assert_eq!((view.state, view.producer_epoch), (TxnState::CompleteAbort, epoch_b + 1));
}

#[test]
fn load_applies_tombstones_and_rejects_malformed_records() {
    let mut log = vec![
        Record { key: key_v0(T), value: Some(value_v0(7, 3, 1_000, 4, Some(&[]), 10, 5)) },
        Record { key: key_v0(T), value: None },
    ];
    let partition = partition_for(T, 50);
    let mut c = TransactionCoordinator::new(TxnConfig::default());
    let summary = c.load(partition, 0, log.clone(), 0).unwrap();
    assert_eq!(summary.transactional_ids, 0);
    assert!(c.transaction(T).is_none());
    log.push(Record { key: key_v0(T), value: Some(value_v0(7, 3, 1_000, 9, Some(&[]), 10, 5)) });
    assert!(c.load(partition, 0, log, 0).is_err(), "status 9 is no state");
    let wrong_partition = vec![Record { key: key_v0(T), value: Some(value_v0(7, 3, 1_000, 0, None, 10, -1)) }];
    assert!(c.load((partition + 1) % 50, 0, wrong_partition, 0).is_err());
}

#[test]
fn exhausted_epoch_rotates_to_a_new_producer_id() {
    let partition = partition_for(T, 50);
    let mut h = Harness::new();
    let exhausted = i16::MAX - 1;
    let record = Record { key: key_v0(T), value: Some(value_v0(7, exhausted, 1_000, 4, Some(&[]), 10, 5)) };
    h.c.load(partition, 0, vec![record], h.now).unwrap();
    // A producer naming another epoch of the exhausted id is fenced, not bumped.
    let stale = InitProducerIdRequest {
        transactional_id: Some(T.into()),
        transaction_timeout_ms: 1_000,
        producer_id: 7,
        producer_epoch: 3,
        ..Default::default()
    };
    let reply = h.init_request(&stale, 4);
    assert_eq!(txn_support::init_result(&h.answer(reply).unwrap()).0, ErrorCode::PRODUCER_FENCED);
    // The producer at the exhausted epoch asks for a bump (KIP-360): a new producer id.
    let bump = InitProducerIdRequest { producer_epoch: exhausted, ..stale };
    let reply = h.init_request(&bump, 4);
    h.persist_all();
    let (error, pid, epoch) = txn_support::init_result(&h.answer(reply).unwrap());
    assert_eq!((error, pid, epoch), (ErrorCode::NONE, txn_support::FIRST_PRODUCER_ID, 0));
    // Its answer was lost: the retry names the old id and exhausted epoch again and gets
    // the same producer back, not PRODUCER_FENCED.
    let reply = h.init_request(&bump, 4);
    h.persist_all();
    let (error, pid2, epoch2) = txn_support::init_result(&h.answer(reply).unwrap());
    assert_eq!((error, pid2, epoch2), (ErrorCode::NONE, pid, 0));
    // Without an expected epoch, an exhausted id simply rotates.
    let record = Record { key: key_v0("txn-z"), value: Some(value_v0(8, exhausted, 1_000, 0, None, 10, -1)) };
    h.c.load(partition_for("txn-z", 50), 0, vec![record], h.now).unwrap();
    assert_eq!(h.init_settled("txn-z", 1_000), (ErrorCode::NONE, txn_support::FIRST_PRODUCER_ID + 1, 0));
}

#[test]
fn describe_and_list_show_kafkas_state_names_and_apply_filters() {
    let mut h = Harness::new();
    let started = h.now;
    let (_, pid, epoch) = h.init_settled(T, 60_000);
    h.add_settled(T, (pid, epoch), &[("orders", 0), ("orders", 2), ("audit", 1)]);
    let (_, pid_b, _) = h.init_settled("txn-b", 60_000);

    let described = h.c.describe(T);
    assert_eq!(described.error_code, 0);
    assert_eq!(described.transaction_state, "Ongoing");
    assert_eq!((described.producer_id, described.producer_epoch), (pid, epoch));
    assert_eq!(described.transaction_start_time_ms, started);
    let topics: Vec<(String, Vec<i32>)> =
        described.topics.iter().map(|t| (t.topic.clone(), t.partitions.clone())).collect();
    assert_eq!(topics, vec![("audit".to_string(), vec![1]), ("orders".to_string(), vec![0, 2])]);
    assert_eq!(h.c.describe("nobody").error_code, ErrorCode::TRANSACTIONAL_ID_NOT_FOUND.code());
    assert_eq!(h.c.describe("").error_code, ErrorCode::INVALID_REQUEST.code());

    let list = |h: &Harness, states: &[&str], pids: &[i64], duration: i64| {
        let request = ListTransactionsRequest {
            state_filters: states.iter().map(|s| s.to_string()).collect(),
            producer_id_filters: pids.to_vec(),
            duration_filter: duration,
            ..Default::default()
        };
        h.c.list(&request, h.now + 1_000)
    };
    let ids = |r: &osprey_protocol::messages::ListTransactionsResponse| {
        r.transaction_states
            .iter()
            .map(|s| (s.transactional_id.clone(), s.transaction_state.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&list(&h, &[], &[], -1)), vec![(T.into(), "Ongoing".into()), ("txn-b".into(), "Empty".into())]);
    let ongoing = list(&h, &["Ongoing", "Bogus"], &[], -1);
    assert_eq!(ids(&ongoing), vec![(T.into(), "Ongoing".into())]);
    assert_eq!(ongoing.unknown_state_filters, vec!["Bogus".to_string()]);
    assert_eq!(ids(&list(&h, &[], &[pid_b], -1)), vec![("txn-b".into(), "Empty".into())]);
    // Running longer than 500 ms: the ongoing one (started 1 s before "now"), and the
    // Empty one, whose start time is -1 as in Kafka.
    assert_eq!(list(&h, &["Ongoing"], &[], 500).transaction_states.len(), 1);
    assert_eq!(list(&h, &["Ongoing"], &[], 5_000).transaction_states.len(), 0);
}
