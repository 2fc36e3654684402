//! The share-partition state machine, behaviour by behaviour, against Kafka's
//! `SharePartition`.

mod share_support;

use osprey_coordinator::share::{
    AbortedTransaction, AcknowledgeError, AcknowledgeType, AcknowledgementBatch, AcquireRequest, AcquiredRecords,
    ControlMarker, Isolation, LoadError, LogBatch, ReadState, RecordState, ShareAcquireMode, ShareAutoOffsetReset,
    ShareConfig, SharePartition, StateBatch,
};
use osprey_protocol::ErrorCode;
use share_support::*;
use AcknowledgeType::{Accept, Gap, Reject, Release, Renew};
use RecordState::{Acknowledged, Acquired, Archived, Available};

fn records(first: i64, last: i64, delivery_count: i16) -> AcquiredRecords {
    AcquiredRecords { first_offset: first, last_offset: last, delivery_count }
}

#[test]
fn acquire_locks_new_records_for_the_member_until_the_lock_duration() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    let got = fetch(&mut sp, "a", 1_000, &log, 500);
    assert_eq!(got.records, vec![records(0, 9, 1)]);
    assert_eq!((got.count, got.next_fetch_offset), (10, 10));
    let view = sp.record_state(3).unwrap();
    assert_eq!((view.state, view.delivery_count, view.owner), (Acquired, 1, Some("a")));
    assert_eq!(view.lock_deadline_ms, Some(1_000 + LOCK_MS));
    assert_eq!((sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()), (0, 10, 10));
    assert_eq!(sp.next_deadline(), Some(1_000 + LOCK_MS));
    // Nothing more to acquire until the log grows.
    assert_eq!(fetch(&mut sp, "b", 1_000, &log, 500).count, 0);
    sp.check_invariants().unwrap();
}

#[test]
fn released_records_are_redelivered_with_a_higher_delivery_count() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    ack_durably(&mut sp, "a", 1, 0, 9, Release);
    assert_eq!(state(&sp, 0), (Available, 1));
    assert_eq!(sp.next_fetch_offset(), 0);
    let again = fetch(&mut sp, "b", 2, &log, 500);
    assert_eq!(again.records, vec![records(0, 9, 2)]);
    assert_eq!(sp.record_state(5).unwrap().owner, Some("b"));
}

#[test]
fn expired_locks_make_records_available_and_redelivered_with_a_higher_delivery_count() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    assert!(sp.tick(LOCK_MS - 1).is_none());
    let write = sp.tick(LOCK_MS).expect("the expiry is persisted");
    assert_eq!(
        write.state.batches,
        vec![StateBatch { first_offset: 0, last_offset: 9, delivery_state: 0, delivery_count: 1 }]
    );
    assert_eq!(state(&sp, 0), (Available, 1));
    assert_eq!(sp.next_deadline(), None);
    let again = fetch(&mut sp, "b", LOCK_MS, &log, 500);
    assert_eq!(again.records, vec![records(0, 9, 2)]);
    // The late member's acknowledgement is refused.
    assert_eq!(ack(&mut sp, "a", LOCK_MS, 0, 9, Accept).unwrap_err().error_code(), ErrorCode::INVALID_RECORD_STATE);
    sp.check_invariants().unwrap();
}

#[test]
fn release_at_the_delivery_limit_archives() {
    let cfg = ShareConfig { delivery_count_limit: 2, ..config() };
    let mut sp = fresh(cfg, 0);
    let log = log(0, 5, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    ack_durably(&mut sp, "a", 0, 0, 4, Release);
    assert_eq!(fetch(&mut sp, "a", 0, &log, 500).records, vec![records(0, 4, 2)]);
    let write = ack(&mut sp, "a", 0, 0, 4, Release).unwrap().unwrap();
    assert_eq!(write.state.batches[0].delivery_state, Archived.id());
    sp.write_completed(write.id, true);
    // All archived: the start offset moves past them and the cache is empty.
    assert_eq!((sp.start_offset(), sp.end_offset()), (5, 5));
    assert_eq!(fetch(&mut sp, "a", 0, &log, 500).count, 0);
}

#[test]
fn lock_expiry_at_the_delivery_limit_archives() {
    let cfg = ShareConfig { delivery_count_limit: 2, ..config() };
    let mut sp = fresh(cfg, 0);
    let log = log(0, 5, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    sp.tick(LOCK_MS);
    fetch(&mut sp, "a", LOCK_MS, &log, 500);
    let write = sp.tick(2 * LOCK_MS).unwrap();
    assert_eq!(write.state.batches[0].delivery_state, Archived.id());
    // The expiry's archive takes effect without waiting for the write (as in Kafka).
    assert_eq!(sp.start_offset(), 5);
    assert_eq!(write.state.start_offset, 5);
}

/// A group config change applies to the loaded partition at once, as Kafka's
/// `SharePartition` reads the group's config at each use: a lowered delivery count limit
/// archives at the next release; a record AVAILABLE at the new limit is delivered once
/// more and archived after (Kafka's `InFlightState.tryUpdateState` archives only on the
/// way to AVAILABLE); a lowered window stops new acquisitions.
#[test]
fn a_group_config_change_applies_to_the_loaded_partition() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    for delivery in 1..=2 {
        fetch(&mut sp, "a", 0, &log, 500);
        assert_eq!(state(&sp, 9), (Acquired, delivery));
        ack_durably(&mut sp, "a", 0, 0, 9, Release);
    }
    sp.set_config(ShareConfig { delivery_count_limit: 2, partition_max_record_locks: 5, ..config() });
    assert_eq!(state(&sp, 0), (Available, 2), "nothing changes until the records are used");
    // Often-delivered records go one batch at a time (throttled as the new limit says).
    for (first, last) in [(0, 4), (5, 9)] {
        fetch(&mut sp, "a", 0, &log, 500);
        assert_eq!(state(&sp, first), (Acquired, 3), "delivered once more");
        let write = ack(&mut sp, "a", 0, first, last, Release).unwrap().unwrap();
        assert_eq!(write.state.batches[0].delivery_state, Archived.id(), "released at the lowered limit");
        sp.write_completed(write.id, true);
        sp.check_invariants().unwrap();
    }
    let more = self::log(10, 20, 5);
    assert_eq!(fetch(&mut sp, "a", 0, &more, 500).records, vec![records(10, 14, 1)], "the lowered window");
    assert!(!sp.can_acquire_records());
    sp.check_invariants().unwrap();
}

/// `share.renew.acknowledge.enable` false: RENEW is refused with INVALID_RECORD_STATE
/// (Kafka: "Renewing acquisition locks is not enabled for the group.") and the lock is not
/// extended.
#[test]
fn renew_is_refused_while_the_group_disables_it() {
    let mut sp = fresh(ShareConfig { renew_acknowledge_enabled: false, ..config() }, 0);
    let log = log(0, 10, 10);
    fetch(&mut sp, "a", 0, &log, 500);
    let err = ack(&mut sp, "a", 20_000, 0, 9, Renew).unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::INVALID_RECORD_STATE);
    assert_eq!(sp.record_state(0).unwrap().lock_deadline_ms, Some(LOCK_MS));
    sp.set_config(config());
    assert_eq!(ack(&mut sp, "a", 20_000, 0, 9, Renew).unwrap(), None);
}

#[test]
fn reject_archives_and_the_start_offset_moves_past_it() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    ack_durably(&mut sp, "a", 0, 0, 4, Reject);
    assert_eq!(sp.start_offset(), 5);
    assert_eq!(state(&sp, 5), (Acquired, 1));
}

#[test]
fn gap_archives_offsets_without_records() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 4, 4);
    fetch(&mut sp, "a", 0, &log, 500);
    let types = vec![Accept.id(), Gap.id(), Accept.id(), Gap.id()];
    let write =
        sp.acknowledge("a", 0, &[AcknowledgementBatch { first_offset: 0, last_offset: 3, acknowledge_types: types }]);
    let write = write.unwrap().unwrap();
    let states: Vec<i8> = write.state.batches.iter().map(|b| b.delivery_state).collect();
    assert_eq!(states, vec![2, 4, 2, 4]);
    sp.write_completed(write.id, true);
    assert_eq!(sp.start_offset(), 4);
}

#[test]
fn renew_extends_the_lock_without_a_state_change_or_a_write() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 10);
    fetch(&mut sp, "a", 0, &log, 500);
    assert_eq!(ack(&mut sp, "a", 20_000, 0, 9, Renew).unwrap(), None);
    assert_eq!(sp.record_state(0).unwrap().lock_deadline_ms, Some(20_000 + LOCK_MS));
    assert!(sp.tick(LOCK_MS).is_none(), "the first lock no longer expires");
    assert_eq!(state(&sp, 9), (Acquired, 1));
    // Renewing part of the batch renews those offsets only.
    assert_eq!(ack(&mut sp, "a", 40_000, 2, 3, Renew).unwrap(), None);
    sp.tick(20_000 + LOCK_MS);
    assert_eq!(state(&sp, 2), (Acquired, 1));
    assert_eq!(state(&sp, 4), (Available, 1));
    sp.check_invariants().unwrap();
}

#[test]
fn another_members_acknowledgement_gets_invalid_record_state() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    let err = ack(&mut sp, "b", 0, 0, 4, Accept).unwrap_err();
    assert!(matches!(err, AcknowledgeError::InvalidRecordState(_)));
    assert_eq!(err.error_code(), ErrorCode::INVALID_RECORD_STATE);
    // Per offset too, after a split.
    let err = ack(&mut sp, "b", 0, 2, 3, Accept).unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::INVALID_RECORD_STATE);
    assert_eq!(state(&sp, 2), (Acquired, 1));
}

#[test]
fn a_refused_acknowledgement_changes_nothing() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 5);
    fetch(&mut sp, "b", 0, &log, 5);
    // The first batch is a's, the second b's: a's acknowledgement of both fails whole.
    let err = sp.acknowledge("a", 0, &[ack_batch(0, 4, Accept), ack_batch(5, 9, Accept)]).unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::INVALID_RECORD_STATE);
    assert_eq!(state(&sp, 0), (Acquired, 1));
    assert!(!sp.record_state(0).unwrap().in_transition);
    ack_durably(&mut sp, "a", 0, 0, 4, Accept);
    assert_eq!(sp.start_offset(), 5);
}

#[test]
fn malformed_or_out_of_range_acknowledgements_are_refused_as_kafka_does() {
    let mut sp = fresh(config(), 10);
    let log = log(10, 20, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    let bad = |first, last, types: Vec<i8>| AcknowledgementBatch {
        first_offset: first,
        last_offset: last,
        acknowledge_types: types,
    };
    let code = |sp: &mut SharePartition, batches: &[AcknowledgementBatch]| {
        sp.acknowledge("a", 0, batches).unwrap_err().error_code()
    };
    assert_eq!(code(&mut sp, &[bad(12, 11, vec![1])]), ErrorCode::INVALID_REQUEST);
    assert_eq!(code(&mut sp, &[bad(10, 12, vec![1, 1])]), ErrorCode::INVALID_REQUEST);
    assert_eq!(code(&mut sp, &[bad(10, 12, vec![])]), ErrorCode::INVALID_REQUEST);
    assert_eq!(code(&mut sp, &[bad(10, 12, vec![9])]), ErrorCode::INVALID_REQUEST);
    assert_eq!(code(&mut sp, &[bad(10, 12, vec![1]), bad(12, 13, vec![1])]), ErrorCode::INVALID_REQUEST);
    // Past the records in flight: INVALID_REQUEST; Kafka answers the same.
    assert_eq!(code(&mut sp, &[bad(15, 25, vec![1])]), ErrorCode::INVALID_REQUEST);
    assert_eq!(code(&mut sp, &[bad(20, 25, vec![1])]), ErrorCode::INVALID_REQUEST);
    // Not in flight at all, at or past the start offset: INVALID_RECORD_STATE, as Kafka's
    // "batch record not found".
    let mut empty = fresh(config(), 10);
    assert_eq!(code(&mut empty, &[bad(12, 13, vec![1])]), ErrorCode::INVALID_RECORD_STATE);
    // Wholly below the start offset: nothing to do.
    ack_durably(&mut sp, "a", 0, 10, 14, Accept);
    assert_eq!(sp.acknowledge("a", 0, &[bad(3, 14, vec![1])]).unwrap(), None);
    sp.check_invariants().unwrap();
}

#[test]
fn partial_acknowledgement_splits_the_batch_per_offset() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 10);
    fetch(&mut sp, "a", 0, &log, 500);
    ack_durably(&mut sp, "a", 0, 3, 5, Accept);
    ack_durably(&mut sp, "a", 0, 6, 6, Release);
    assert_eq!(state(&sp, 2), (Acquired, 1));
    assert_eq!(state(&sp, 4), (Acknowledged, 1));
    assert_eq!(state(&sp, 6), (Available, 1));
    assert_eq!(sp.start_offset(), 0);
    // The released offset is what the next fetch redelivers, alone.
    assert_eq!(sp.next_fetch_offset(), 6);
    assert_eq!(fetch(&mut sp, "b", 0, &log, 500).records, vec![records(6, 6, 2)]);
    ack_durably(&mut sp, "a", 0, 0, 2, Accept);
    assert_eq!(sp.start_offset(), 6);
}

#[test]
fn start_offset_moves_past_the_acknowledged_prefix_once_the_write_is_durable() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 15, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    // The middle first: the start offset cannot pass the first batch.
    ack_durably(&mut sp, "a", 0, 5, 9, Accept);
    assert_eq!(sp.start_offset(), 0);
    let write = ack(&mut sp, "a", 0, 0, 4, Accept).unwrap().unwrap();
    assert_eq!(write.state.start_offset, 0);
    assert_eq!(state(&sp, 0), (Acknowledged, 1));
    assert!(sp.record_state(0).unwrap().in_transition);
    assert_eq!(sp.start_offset(), 0, "not before the write is durable");
    sp.write_completed(write.id, true);
    assert_eq!(sp.start_offset(), 10);
    assert_eq!(sp.record_state(4), None, "below the start offset: no longer in flight");
    assert_eq!(sp.in_flight_records(), 5);
}

#[test]
fn acquisition_stops_at_the_in_flight_window() {
    let cfg = ShareConfig { partition_max_record_locks: 10, ..config() };
    let mut sp = fresh(cfg, 0);
    let log = log(0, 30, 4);
    let got = fetch(&mut sp, "a", 0, &log, 500);
    // 0-9: two whole batches and the first half of 8-11 (the window is strict here).
    assert_eq!(got.records, vec![records(0, 9, 1)]);
    assert!(!sp.can_acquire_records());
    assert_eq!(fetch(&mut sp, "b", 0, &log, 500).count, 0);
    // Released records inside the window are still redelivered.
    ack_durably(&mut sp, "a", 0, 4, 5, Release);
    assert!(sp.can_acquire_records());
    assert_eq!(fetch(&mut sp, "b", 0, &log, 500).records, vec![records(4, 4, 2), records(5, 5, 2)]);
    // Acknowledging the head makes room: the rest of 8-11 comes from the middle of its batch.
    ack_durably(&mut sp, "a", 0, 0, 3, Accept);
    assert_eq!(fetch(&mut sp, "c", 0, &log, 500).records, vec![records(10, 13, 1)]);
    assert_eq!(sp.in_flight_records(), 10);
    sp.check_invariants().unwrap();
}

#[test]
fn max_records_is_soft_in_batch_optimized_mode_and_exact_in_record_limit_mode() {
    let log = log(0, 20, 5);
    let mut sp = fresh(config(), 0);
    let got = fetch_with(&mut sp, "a", 0, &log, 7, ShareAcquireMode::BatchOptimized, i32::MAX);
    assert_eq!(got.records, vec![records(0, 9, 1)], "the batch holding the 7th record, whole");
    let mut sp = fresh(config(), 0);
    let got = fetch_with(&mut sp, "a", 0, &log, 7, ShareAcquireMode::RecordLimit, i32::MAX);
    assert_eq!(got.records, vec![records(0, 6, 1)]);
    assert_eq!(got.next_fetch_offset, 7);
    assert_eq!(state(&sp, 8), (Available, 0));
    assert_eq!(sp.next_fetch_offset(), 7);
    let got = fetch_with(&mut sp, "b", 0, &log, 2, ShareAcquireMode::RecordLimit, i32::MAX);
    assert_eq!(got.records, vec![records(7, 7, 1), records(8, 8, 1)]);
    sp.check_invariants().unwrap();
}

#[test]
fn batch_size_splits_acquired_records_at_log_batch_boundaries() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 20, 3);
    let got = fetch_with(&mut sp, "a", 0, &log, 500, ShareAcquireMode::BatchOptimized, 5);
    assert_eq!(got.records, vec![records(0, 5, 1), records(6, 11, 1), records(12, 17, 1), records(18, 19, 1)]);
    ack_durably(&mut sp, "a", 0, 0, 5, Accept);
    assert_eq!(sp.start_offset(), 6);
}

#[test]
fn records_delivered_often_are_throttled_and_a_last_attempt_goes_alone() {
    let cfg = ShareConfig { delivery_count_limit: 4, ..config() };
    let mut sp = fresh(cfg, 0);
    let log = log(0, 4, 4);
    let deliveries = |sp: &mut SharePartition| -> Vec<(i64, i64, i16)> {
        fetch(sp, "a", 0, &log, 500).records.iter().map(|r| (r.first_offset, r.last_offset, r.delivery_count)).collect()
    };
    assert_eq!(deliveries(&mut sp), vec![(0, 3, 1)]);
    ack_durably(&mut sp, "a", 0, 0, 3, Release);
    assert_eq!(deliveries(&mut sp), vec![(0, 3, 2)]);
    ack_durably(&mut sp, "a", 0, 0, 3, Release);
    // Delivered twice (half the limit): half the batch at a time.
    assert_eq!(deliveries(&mut sp), vec![(0, 0, 3), (1, 1, 3)]);
    ack_durably(&mut sp, "a", 0, 0, 1, Release);
    // On their last attempt, one at a time.
    assert_eq!(deliveries(&mut sp), vec![(0, 0, 4)]);
    assert_eq!(deliveries(&mut sp), vec![(1, 1, 4)]);
    assert_eq!(deliveries(&mut sp), vec![(2, 2, 3), (3, 3, 3)]);
    sp.check_invariants().unwrap();
}

#[test]
fn a_failed_write_rolls_the_acknowledgement_back() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    let write = ack(&mut sp, "a", 0, 0, 9, Accept).unwrap().unwrap();
    // Meanwhile the records are in transition: not acquirable, not acknowledgeable.
    assert_eq!(ack(&mut sp, "a", 0, 0, 4, Reject).unwrap_err().error_code(), ErrorCode::INVALID_RECORD_STATE);
    sp.write_completed(write.id, false);
    let view = sp.record_state(0).unwrap();
    assert_eq!((view.state, view.owner, view.in_transition), (Acquired, Some("a"), false));
    assert_eq!(sp.start_offset(), 0);
    ack_durably(&mut sp, "a", 0, 0, 9, Accept);
    assert_eq!(sp.start_offset(), 10);
}

#[test]
fn a_failed_release_write_rolls_back_and_an_expired_lock_then_expires() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 5, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    let write = ack(&mut sp, "a", 0, 0, 4, Release).unwrap().unwrap();
    assert_eq!(sp.next_fetch_offset(), 5, "a record in transition is not redelivered");
    assert!(sp.tick(LOCK_MS).is_none(), "nor expired");
    sp.write_completed(write.id, false);
    assert_eq!(state(&sp, 0), (Acquired, 1));
    assert_eq!(sp.next_deadline(), Some(LOCK_MS), "already due");
    sp.tick(LOCK_MS + 1).unwrap();
    assert_eq!(state(&sp, 0), (Available, 1));
}

#[test]
fn release_member_releases_what_it_holds_with_the_delivery_count_decremented() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 15, 5);
    fetch(&mut sp, "a", 0, &log, 5);
    fetch(&mut sp, "b", 0, &log, 5);
    fetch(&mut sp, "a", 0, &log, 5);
    let write = sp.release_member("a").unwrap();
    let released: Vec<(i64, i64, i16)> =
        write.state.batches.iter().map(|b| (b.first_offset, b.last_offset, b.delivery_count)).collect();
    assert_eq!(released, vec![(0, 4, 0), (10, 14, 0)]);
    sp.write_completed(write.id, true);
    assert_eq!(state(&sp, 0), (Available, 0));
    assert_eq!(state(&sp, 5), (Acquired, 1));
    assert!(sp.release_member("a").is_none());
    assert_eq!(fetch(&mut sp, "c", 0, &log, 500).records, vec![records(0, 4, 1), records(10, 14, 1)]);
    sp.check_invariants().unwrap();
}

#[test]
fn reload_keeps_acknowledged_records_acknowledged_and_makes_acquired_ones_available() {
    let mut store = Store::new();
    let mut sp = fresh(config(), 0);
    let log = log(0, 20, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    for (first, last, t) in [(5, 9, Accept), (10, 12, Reject), (13, 14, Release)] {
        let write = ack(&mut sp, "a", 0, first, last, t).unwrap().unwrap();
        store.apply(&write);
        sp.write_completed(write.id, true);
    }
    // A new leader reads the state back.
    let mut reloaded = SharePartition::load(config(), 8, &store.read(), None).unwrap();
    reloaded.check_invariants().unwrap();
    assert_eq!(reloaded.leader_epoch(), 8);
    assert_eq!(state(&reloaded, 5), (Acknowledged, 1));
    assert_eq!(state(&reloaded, 11), (Archived, 1));
    assert_eq!(state(&reloaded, 13), (Available, 1));
    // 0-4 and 15-19 were acquired, never persisted: fetched again, as first deliveries.
    assert_eq!(state(&reloaded, 0), (Available, 0));
    let got = fetch(&mut reloaded, "b", 0, &log, 500);
    assert_eq!(got.records, vec![records(0, 4, 1), records(13, 14, 2), records(15, 19, 1)]);
    assert!(got.records.iter().all(|r| r.last_offset < 5 || r.first_offset > 12));
}

#[test]
fn persisted_acquired_records_load_as_available_and_limits_apply() {
    let batch = |first, last, delivery_state, delivery_count| StateBatch {
        first_offset: first,
        last_offset: last,
        delivery_state,
        delivery_count,
    };
    let read = ReadState {
        state_epoch: 3,
        start_offset: 100,
        batches: vec![batch(100, 104, 1, 2), batch(105, 109, 0, 5), batch(115, 119, 2, 1)],
    };
    let sp = SharePartition::load(config(), 1, &read, None).unwrap();
    sp.check_invariants().unwrap();
    assert_eq!(state(&sp, 100), (Available, 2));
    assert_eq!(sp.record_state(100).unwrap().owner, None);
    assert_eq!(state(&sp, 105), (Archived, 5), "at the delivery limit: never delivered again");
    assert_eq!(state(&sp, 112), (Available, 0), "the gap is fetched again");
    assert_eq!((sp.start_offset(), sp.end_offset(), sp.state_epoch()), (100, 120, 3));
    assert_eq!(sp.to_persisted().start_offset, 100);
    let below = ReadState { batches: vec![batch(90, 99, 2, 1)], ..read.clone() };
    assert!(matches!(SharePartition::load(config(), 1, &below, None), Err(LoadError::Invalid(_))));
    let unknown = ReadState { batches: vec![batch(100, 101, 5, 1)], ..read };
    assert!(matches!(SharePartition::load(config(), 1, &unknown, None), Err(LoadError::Invalid(_))));
}

#[test]
fn an_uninitialized_partition_starts_at_the_reset_offset() {
    let read = uninitialized();
    assert_eq!(SharePartition::load(config(), 1, &read, None).unwrap_err(), LoadError::NeedsResetOffset);
    let mut sp = SharePartition::load(config(), 1, &read, Some(42)).unwrap();
    assert_eq!((sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()), (42, 42, 42));
    // The log may have moved on: the partition starts at the first record read.
    let got = fetch(&mut sp, "a", 0, &log(50, 60, 5), 500);
    assert_eq!(got.records, vec![records(50, 59, 1)]);
    assert_eq!(sp.start_offset(), 50);
    assert_eq!(ShareAutoOffsetReset::parse("earliest"), Some(ShareAutoOffsetReset::Earliest));
    assert_eq!(ShareAutoOffsetReset::parse("latest"), Some(ShareAutoOffsetReset::Latest));
    assert_eq!(
        ShareAutoOffsetReset::parse("by_duration:P1DT2H3M4.5S"),
        Some(ShareAutoOffsetReset::ByDuration { duration_ms: 93_784_500 })
    );
    assert_eq!(ShareAutoOffsetReset::parse("by_duration:PT"), None);
    assert_eq!(ShareAutoOffsetReset::parse("sometime"), None);
}

#[test]
fn to_persisted_round_trips_and_records_in_transition_persist_as_before() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    ack_durably(&mut sp, "a", 0, 5, 6, Accept);
    let _in_flight = ack(&mut sp, "a", 0, 7, 7, Reject).unwrap().unwrap();
    let snapshot = sp.to_persisted();
    let states: Vec<(i64, i64, i8, i16)> =
        snapshot.batches.iter().map(|b| (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)).collect();
    assert_eq!(states, vec![(0, 4, 0, 1), (5, 6, 2, 1), (7, 9, 0, 1)]);
    let reloaded = SharePartition::load(config(), 7, &as_read(&snapshot), None).unwrap();
    assert_eq!(reloaded.to_persisted(), snapshot);
}

#[test]
fn read_committed_archives_aborted_transactions_and_stops_at_the_last_stable_offset() {
    let mut sp = fresh(config(), 0);
    let txn = |first, last, pid| LogBatch {
        first_offset: first,
        last_offset: last,
        producer_id: pid,
        is_transactional: true,
        control: None,
    };
    let marker = |offset, pid, m| LogBatch {
        first_offset: offset,
        last_offset: offset,
        producer_id: pid,
        is_transactional: true,
        control: Some(m),
    };
    let batches = [
        LogBatch::data(0, 1),
        txn(2, 4, 7),
        marker(5, 7, ControlMarker::Abort),
        txn(6, 7, 8),
        marker(8, 8, ControlMarker::Commit),
        txn(9, 9, 9), // open: at the last stable offset
    ];
    let aborted = [AbortedTransaction { producer_id: 7, first_offset: 2 }];
    let request = AcquireRequest {
        fetch_offset: 0,
        batches: &batches,
        max_records: 500,
        batch_size: i32::MAX,
        mode: ShareAcquireMode::BatchOptimized,
        isolation: Isolation::ReadCommitted { last_stable_offset: 9, aborted_transactions: &aborted },
    };
    let got = sp.acquire("a", 0, &request);
    // The control records go out with the others (the client acknowledges them as GAP).
    assert_eq!(got.records, vec![records(0, 1, 1), records(5, 8, 1)]);
    assert_eq!(state(&sp, 3), (Archived, 1));
    assert_eq!(sp.end_offset(), 9);
    let types = vec![Accept.id(), Accept.id()];
    let write = sp.acknowledge(
        "a",
        0,
        &[
            AcknowledgementBatch { first_offset: 0, last_offset: 1, acknowledge_types: types },
            AcknowledgementBatch {
                first_offset: 5,
                last_offset: 8,
                acknowledge_types: vec![Gap.id(), Accept.id(), Accept.id(), Gap.id()],
            },
        ],
    );
    let write = write.unwrap().unwrap();
    sp.write_completed(write.id, true);
    assert_eq!(sp.start_offset(), 9);
    sp.check_invariants().unwrap();
}

#[test]
fn stale_available_records_missing_from_the_log_are_archived() {
    let mut sp = fresh(config(), 0);
    fetch(&mut sp, "a", 0, &log(0, 10, 5), 500);
    ack_durably(&mut sp, "a", 0, 0, 9, Release);
    // Compaction removed 0-4: the log read from 0 starts at 5.
    let got = fetch(&mut sp, "a", 0, &log(5, 10, 5), 500);
    // The in-flight batch 0-9 is now tracked per offset, and acquired so (as in Kafka).
    let offsets: Vec<(i64, i16)> = got.records.iter().map(|r| (r.first_offset, r.delivery_count)).collect();
    assert_eq!(offsets, vec![(5, 2), (6, 2), (7, 2), (8, 2), (9, 2)]);
    assert_eq!(sp.start_offset(), 5);
}

/// Retention (or DeleteRecords) moved the log start past records in flight: they are
/// archived whatever their state, the start offset follows, and a write carries it.
#[test]
fn a_log_start_past_records_in_flight_archives_them_and_moves_the_start_offset() {
    let mut sp = fresh(config(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    assert_eq!(sp.log_start_moved(0), None, "the log start did not pass the start offset");
    let write = sp.log_start_moved(7).expect("the start offset moved");
    assert_eq!(write.state.start_offset, 7);
    assert_eq!((sp.start_offset(), sp.end_offset()), (7, 10));
    assert_eq!(sp.record_state(6), None, "below the start offset");
    assert_eq!(state(&sp, 7), (Acquired, 1), "records past the log start keep their state");
    sp.check_invariants().unwrap();
    // An acknowledgement of records that left the log is past history: nothing to change.
    sp.write_completed(write.id, true);
    // Past everything in flight: the partition starts afresh at the log start.
    let write = sp.log_start_moved(20).expect("moved again");
    assert_eq!((sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()), (20, 20, 20));
    assert_eq!(write.state.start_offset, 20);
    sp.check_invariants().unwrap();
}
