//! The share partition's dead-letter queue (KIP-1191, `share.version` 2), against Kafka
//! 4.4's `SharePartition`: REJECT, and the delivery count limit, move records through
//! ARCHIVING to the group's DLQ topic and then to ARCHIVED.

mod share_support;

use osprey_coordinator::share::AcknowledgeType::{Accept, Reject, Release};
use osprey_coordinator::share::{DlqCause, DlqWrite, ReadState, RecordState, ShareConfig, SharePartition, StateBatch};
use share_support::*;
use RecordState::{Archived, Archiving};

fn with_dlq() -> ShareConfig {
    ShareConfig { dlq_enabled: true, delivery_count_limit: 2, ..config() }
}

fn dlq_write(first: i64, last: i64, delivery_count: i16, cause: DlqCause) -> DlqWrite {
    DlqWrite { first_offset: first, last_offset: last, delivery_count, cause }
}

#[test]
fn rejected_records_go_to_the_dead_letter_queue_once_their_archiving_is_durable() {
    let mut sp = fresh(with_dlq(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    let write = ack(&mut sp, "a", 0, 0, 4, Reject).unwrap().unwrap();
    assert_eq!(write.state.batches[0].delivery_state, 3, "persisted as Kafka's ARCHIVING");
    assert_eq!(sp.take_dlq_writes(), vec![], "not before the write is durable");
    sp.write_completed(write.id, true);
    assert_eq!(sp.take_dlq_writes(), vec![dlq_write(0, 4, 1, DlqCause::ClientReject)]);
    assert_eq!(sp.take_dlq_writes(), vec![], "handed out once");
    assert_eq!(state(&sp, 0), (Archiving, 1));
    assert_eq!(sp.start_offset(), 0, "the start offset waits for the dead-letter queue");
    ack_durably(&mut sp, "a", 0, 5, 9, Accept);
    assert_eq!(sp.start_offset(), 0);
    assert_eq!(fetch(&mut sp, "b", 0, &log, 500).count, 0, "ARCHIVING records are never delivered");

    let archived = sp.dlq_write_done(0, 4).expect("ARCHIVED is persisted");
    assert_eq!(
        archived.state.batches,
        vec![StateBatch { first_offset: 0, last_offset: 4, delivery_state: Archived.id(), delivery_count: 1 }]
    );
    assert_eq!((sp.start_offset(), sp.end_offset()), (10, 10));
    assert_eq!(archived.state.start_offset, 10);
    sp.write_completed(archived.id, true);
    sp.check_invariants().unwrap();
}

#[test]
fn a_rolled_back_reject_never_reaches_the_dead_letter_queue() {
    let mut sp = fresh(with_dlq(), 0);
    let log = log(0, 5, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    let write = ack(&mut sp, "a", 0, 0, 4, Reject).unwrap().unwrap();
    sp.write_completed(write.id, false);
    assert_eq!(state(&sp, 0), (RecordState::Acquired, 1));
    assert_eq!(sp.take_dlq_writes(), vec![]);
    sp.check_invariants().unwrap();
    // The member can acknowledge again, and this time it holds.
    ack_durably(&mut sp, "a", 0, 0, 4, Reject);
    assert_eq!(sp.take_dlq_writes(), vec![dlq_write(0, 4, 1, DlqCause::ClientReject)]);
}

#[test]
fn release_and_lock_expiry_at_the_delivery_limit_go_to_the_dead_letter_queue() {
    let mut sp = fresh(with_dlq(), 0);
    let log = log(0, 10, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    ack_durably(&mut sp, "a", 0, 0, 9, Release);
    fetch(&mut sp, "a", 0, &log, 500);
    assert_eq!(state(&sp, 0), (RecordState::Acquired, 2));
    ack_durably(&mut sp, "a", 0, 0, 4, Release);
    assert_eq!(sp.take_dlq_writes(), vec![dlq_write(0, 4, 2, DlqCause::DeliveryCountExceeded)]);
    // The lock of 5..9 expires at the limit: ARCHIVING at once, handed out at once.
    let expiry = sp.tick(LOCK_MS).expect("the expiry is persisted");
    assert_eq!(expiry.state.batches[0].delivery_state, 3);
    assert_eq!(sp.take_dlq_writes(), vec![dlq_write(5, 9, 2, DlqCause::DeliveryCountExceeded)]);
    sp.write_completed(expiry.id, true);
    let first = sp.dlq_write_done(5, 9).unwrap();
    assert_eq!(sp.start_offset(), 0, "0..4 still waits");
    let second = sp.dlq_write_done(0, 4).unwrap();
    assert_eq!(sp.start_offset(), 10);
    sp.write_completed(first.id, true);
    sp.write_completed(second.id, true);
    sp.check_invariants().unwrap();
}

#[test]
fn without_a_dead_letter_queue_rejected_records_are_archived_at_once() {
    let mut sp = fresh(ShareConfig { dlq_enabled: false, ..with_dlq() }, 0);
    let log = log(0, 5, 5);
    fetch(&mut sp, "a", 0, &log, 500);
    let write = ack(&mut sp, "a", 0, 0, 4, Reject).unwrap().unwrap();
    assert_eq!(write.state.batches[0].delivery_state, Archived.id());
    sp.write_completed(write.id, true);
    assert_eq!(sp.take_dlq_writes(), vec![]);
    assert_eq!(sp.start_offset(), 5);
}

/// Kafka's `maybeResumeDlqArchiving`: a new leader writes the persisted ARCHIVING records
/// to the dead-letter queue, the cause told by the delivery count; records AVAILABLE at a
/// lowered limit go there too.
#[test]
fn a_loaded_partition_resumes_the_dead_letter_queue_writes_it_finds() {
    let read = ReadState {
        state_epoch: 0,
        start_offset: 0,
        batches: vec![
            StateBatch { first_offset: 0, last_offset: 1, delivery_state: 3, delivery_count: 1 },
            StateBatch { first_offset: 2, last_offset: 3, delivery_state: 3, delivery_count: 2 },
            StateBatch { first_offset: 4, last_offset: 4, delivery_state: 0, delivery_count: 2 },
        ],
    };
    let mut sp = SharePartition::load(with_dlq(), 3, &read, None).unwrap();
    sp.check_invariants().unwrap();
    assert_eq!(sp.to_persisted().batches[0].delivery_state, 3, "still ARCHIVING until written");
    assert_eq!(
        sp.take_dlq_writes(),
        vec![dlq_write(0, 1, 1, DlqCause::ClientReject), dlq_write(2, 4, 2, DlqCause::DeliveryCountExceeded),]
    );
    sp.dlq_write_done(0, 4).unwrap();
    assert_eq!(sp.start_offset(), 5);
    sp.check_invariants().unwrap();
}
