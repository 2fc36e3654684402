//! The partition side of transactions: ongoing transactions, the last stable offset, the
//! aborted-transaction index, and their recovery, truncation and retention.

mod common;

use osprey_protocol::records::{BatchBuilder, Compression};
use osprey_storage::{CrashMode, LogConfig, PartitionLog, SequenceError, SimStorage, StorageError};

const DIR: &str = "/data/topic-0";

fn open(storage: &SimStorage, config: LogConfig) -> PartitionLog<SimStorage> {
    PartitionLog::open(storage.clone(), DIR, config, 0).unwrap()
}

/// A transactional batch of `records` records from producer `pid`.
fn txn_batch(pid: i64, epoch: i16, seq: i32, records: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None).producer(pid, epoch, seq).transactional(true);
    for i in 0..records {
        b.append(0, Some(format!("k{i}").as_bytes()), Some(&[7u8; 64]), &[]).unwrap();
    }
    b.build().unwrap().as_bytes().to_vec()
}

/// Appends a transactional batch and moves the high watermark to the log end.
fn produce(log: &PartitionLog<SimStorage>, pid: i64, seq: i32, records: i32) -> i64 {
    let info = log.append(&txn_batch(pid, 0, seq, records), 0, 0).unwrap();
    log.update_high_watermark(log.log_end_offset()).unwrap();
    info.base_offset
}

fn end_txn(log: &PartitionLog<SimStorage>, pid: i64, commit: bool) -> i64 {
    let info = log.append_marker(pid, 0, 3, commit, 0, 0).unwrap();
    log.update_high_watermark(log.log_end_offset()).unwrap();
    info.base_offset
}

#[test]
fn committed_transaction_holds_the_lso_at_its_first_offset_until_the_marker() {
    let log = open(&SimStorage::new(), LogConfig::default());
    log.append(&common::batch(0, 2, 16), 0, 0).unwrap();
    log.update_high_watermark(2).unwrap();
    assert_eq!(log.last_stable_offset(), 2, "no transaction: LSO is the HW");
    let first = produce(&log, 7, 0, 3);
    produce(&log, 7, 3, 2);
    produce(&log, 7, 5, 1);
    assert_eq!(first, 2);
    assert_eq!(log.high_watermark(), 8);
    assert_eq!(log.last_stable_offset(), 2);
    let bounded = log.read_bounded(0, 1 << 20, log.last_stable_offset()).unwrap();
    assert_eq!(bounded.next_offset, 2, "read_committed stops before the open transaction");
    let marker = end_txn(&log, 7, true);
    assert_eq!(marker, 8);
    assert_eq!(log.last_stable_offset(), log.high_watermark());
    assert_eq!(log.last_stable_offset(), 9);
    assert!(log.aborted_transactions(0, 9).is_empty(), "a commit is not indexed");
}

#[test]
fn lso_never_passes_the_high_watermark() {
    let log = open(&SimStorage::new(), LogConfig::default());
    log.append(&common::batch(0, 4, 16), 0, 0).unwrap();
    log.append(&txn_batch(7, 0, 0, 1), 0, 0).unwrap();
    log.update_high_watermark(1).unwrap();
    assert_eq!(log.last_stable_offset(), 1);
    assert_eq!(log.first_unstable_offset(), Some(4));
    log.update_high_watermark(5).unwrap();
    assert_eq!(log.last_stable_offset(), 4);
}

#[test]
fn lso_is_held_at_the_log_start_when_an_open_transaction_start_was_deleted() {
    let log = open(&SimStorage::new(), LogConfig::default());
    produce(&log, 7, 0, 1); // 0, stays open
    log.append(&common::batch(0, 4, 16), 0, 0).unwrap(); // 1..=4
    log.update_high_watermark(5).unwrap();
    assert_eq!(log.last_stable_offset(), 0);
    log.delete_records_before(3).unwrap();
    assert_eq!(log.last_stable_offset(), 3);
}

#[test]
fn aborted_transaction_is_listed_for_overlapping_ranges_only() {
    let log = open(&SimStorage::new(), LogConfig::default());
    log.append(&common::batch(0, 2, 16), 0, 0).unwrap();
    let first = produce(&log, 7, 0, 3); // 2..=4
    let marker = end_txn(&log, 7, false); // 5
    log.append(&common::batch(1, 4, 16), 0, 0).unwrap(); // 6..=9
    log.update_high_watermark(10).unwrap();
    assert_eq!((first, marker), (2, 5));
    assert_eq!(log.last_stable_offset(), 10);
    assert_eq!(log.aborted_transactions(0, 10), vec![(7, 2)]);
    assert_eq!(log.aborted_transactions(3, 4), vec![(7, 2)]);
    assert_eq!(log.aborted_transactions(5, 6), vec![(7, 2)], "the marker itself is in range");
    assert!(log.aborted_transactions(0, 2).is_empty(), "range ends before the transaction");
    assert!(log.aborted_transactions(6, 10).is_empty(), "range starts after the marker");
    let entry = log.aborted_transaction_entries(0, 10)[0];
    assert_eq!((entry.last_offset, entry.last_stable_offset), (5, 6));
}

#[test]
fn interleaved_transactions_of_two_producers() {
    let log = open(&SimStorage::new(), LogConfig::default());
    let a0 = produce(&log, 1, 0, 2); // 0..=1
    let b0 = produce(&log, 2, 0, 2); // 2..=3
    produce(&log, 1, 2, 1); // 4
    assert_eq!(log.last_stable_offset(), a0);
    let a_marker = end_txn(&log, 1, true); // 5
    assert_eq!(log.last_stable_offset(), b0, "b's transaction still holds the LSO");
    produce(&log, 2, 2, 1); // 6
    let b_marker = end_txn(&log, 2, false); // 7
    assert_eq!((a_marker, b_marker), (5, 7));
    assert_eq!(log.last_stable_offset(), 8);
    assert_eq!(log.aborted_transactions(0, 8), vec![(2, 2)]);
    assert!(log.aborted_transactions(0, 2).is_empty());
    let entry = log.aborted_transaction_entries(0, 8)[0];
    assert_eq!(entry.last_stable_offset, 8);
    // A later transaction of a starts a new ongoing transaction.
    let a1 = produce(&log, 1, 3, 1);
    assert_eq!(log.last_stable_offset(), a1);
}

#[test]
fn abort_entry_records_the_lso_left_by_other_open_transactions() {
    let log = open(&SimStorage::new(), LogConfig::default());
    produce(&log, 1, 0, 1); // 0, stays open
    produce(&log, 2, 0, 1); // 1
    end_txn(&log, 2, false); // 2
    let entry = log.aborted_transaction_entries(0, 3)[0];
    assert_eq!((entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset), (2, 1, 2, 0));
}

#[test]
fn marker_from_a_fenced_epoch_is_refused() {
    let log = open(&SimStorage::new(), LogConfig::default());
    log.append(&txn_batch(7, 2, 0, 1), 0, 0).unwrap();
    let err = log.append_marker(7, 1, 0, false, 0, 0).unwrap_err();
    assert!(matches!(err, StorageError::Sequence(SequenceError::InvalidProducerEpoch { .. })), "{err:?}");
    assert_eq!(log.first_unstable_offset(), Some(0));
}

/// Two transactions: producer 1 aborted at 2..=5, producer 2 still open from 6.
fn log_with_abort_and_open_txn(storage: &SimStorage, config: LogConfig) -> PartitionLog<SimStorage> {
    let log = open(storage, config);
    log.append(&common::batch(0, 2, 16), 0, 0).unwrap();
    produce(&log, 1, 0, 3); // 2..=4
    end_txn(&log, 1, false); // 5
    produce(&log, 2, 0, 2); // 6..=7
    log.flush().unwrap();
    log
}

fn assert_txn_state(log: &PartitionLog<SimStorage>) {
    assert_eq!(log.first_unstable_offset(), Some(6));
    assert_eq!(log.last_stable_offset(), 6.min(log.high_watermark()));
    assert_eq!(log.aborted_transactions(0, 8), vec![(1, 2)]);
    let entry = log.aborted_transaction_entries(0, 8)[0];
    assert_eq!((entry.last_offset, entry.last_stable_offset), (5, 6));
}

#[test]
fn reopen_after_clean_close_keeps_lso_and_aborted_index() {
    let storage = SimStorage::new();
    let log = log_with_abort_and_open_txn(&storage, LogConfig::default());
    assert_txn_state(&log);
    log.close().unwrap();
    drop(log);
    let log = open(&storage, LogConfig::default());
    assert!(log.opened_clean());
    assert_eq!(log.high_watermark(), 8);
    assert_txn_state(&log);
    let txnindex = storage.contents(std::path::Path::new(&format!("{DIR}/00000000000000000000.txnindex"))).unwrap();
    assert_eq!(txnindex.len(), 34, "one entry in Kafka's 34-byte format");
    // The producer of the open transaction can still commit it after the restart.
    end_txn(&log, 2, true);
    assert_eq!(log.last_stable_offset(), 9);
}

#[test]
fn reopen_after_crash_rebuilds_lso_and_aborted_index() {
    for mode in [CrashMode::LoseUnsynced, CrashMode::TearUnsynced { seed: 5 }] {
        let storage = SimStorage::new();
        let log = log_with_abort_and_open_txn(&storage, LogConfig::default());
        let after = storage.crash(mode);
        drop(log);
        let log = open(&after, LogConfig::default());
        assert!(!log.opened_clean());
        log.update_high_watermark(8).unwrap();
        assert_txn_state(&log);
    }
}

#[test]
fn crash_after_a_roll_rebuilds_from_the_snapshot_and_the_sealed_index() {
    let config = LogConfig { segment_bytes: 400, ..LogConfig::default() };
    let storage = SimStorage::new();
    let log = open(&storage, config.clone());
    produce(&log, 1, 0, 2); // 0..=1, segment 0
    produce(&log, 2, 0, 2);
    end_txn(&log, 1, false);
    for seq in 0..6 {
        produce(&log, 3, seq * 2, 2); // producer 3's open transaction spans a roll
        end_txn(&log, 3, false);
    }
    produce(&log, 4, 0, 1);
    log.flush().unwrap();
    assert!(log.segment_count() > 2, "the test needs rolled segments");
    let before = log.aborted_transaction_entries(0, log.log_end_offset());
    let lso_before = log.first_unstable_offset();
    let after = storage.crash(CrashMode::LoseUnsynced);
    drop(log);
    let log = open(&after, config);
    assert_eq!(log.aborted_transaction_entries(0, log.log_end_offset()), before);
    assert_eq!(log.first_unstable_offset(), lso_before);
    assert_eq!(lso_before, Some(2), "producer 2's transaction is still open");
}

#[test]
fn truncation_below_a_marker_reopens_the_transaction() {
    let storage = SimStorage::new();
    let log = open(&storage, LogConfig::default());
    produce(&log, 1, 0, 2); // 0..=1
    let marker = end_txn(&log, 1, false); // 2
    produce(&log, 2, 0, 1); // 3
    let marker2 = end_txn(&log, 2, true); // 4
    assert_eq!((marker, marker2), (2, 4));
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.truncate_to(3).unwrap(), 3);
    assert_eq!(log.first_unstable_offset(), None, "producer 1's abort survived");
    assert_eq!(log.aborted_transactions(0, 3), vec![(1, 0)]);
    assert_eq!(log.truncate_to(2).unwrap(), 2);
    assert_eq!(log.first_unstable_offset(), Some(0), "the cut marker no longer ends it");
    assert!(log.aborted_transactions(0, 2).is_empty());
    assert_eq!(log.truncate_to(0).unwrap(), 0);
    assert_eq!(log.first_unstable_offset(), None, "the transaction's data is gone too");
    // And it stays so after a crash.
    produce(&log, 1, 0, 1);
    end_txn(&log, 1, false);
    log.flush().unwrap();
    let after = storage.crash(CrashMode::LoseUnsynced);
    drop(log);
    let log = open(&after, LogConfig::default());
    assert_eq!(log.aborted_transactions(0, 2), vec![(1, 0)]);
}

#[test]
fn retention_deleting_a_segment_deletes_its_aborted_entries() {
    let config = LogConfig { segment_bytes: 400, retention_bytes: 1, ..LogConfig::default() };
    let storage = SimStorage::new();
    let log = open(&storage, config);
    produce(&log, 1, 0, 2);
    end_txn(&log, 1, false); // segment 0 holds this abort
    while log.segment_count() < 3 {
        log.append(&common::batch(1, 1, 300), 0, 0).unwrap();
        log.update_high_watermark(log.log_end_offset()).unwrap();
    }
    let index = std::path::Path::new(DIR).join("00000000000000000000.txnindex");
    assert!(storage.contents(&index).is_some(), "sealed at roll");
    assert_eq!(log.aborted_transactions(0, 3), vec![(1, 0)]);
    let outcome = log.retention_pass(0).unwrap();
    assert!(outcome.deleted_segments >= 1);
    assert!(storage.contents(&index).is_none(), "the .txnindex went with its segment");
    let start = log.log_start_offset();
    assert!(log.aborted_transactions(start, log.log_end_offset()).is_empty());
}

#[test]
fn a_marker_lost_in_a_crash_leaves_the_transaction_open() {
    let storage = SimStorage::new();
    let log = open(&storage, LogConfig::default());
    produce(&log, 1, 0, 2);
    log.flush().unwrap();
    end_txn(&log, 1, false); // written, never fsynced
    assert_eq!(log.first_unstable_offset(), None);
    let after = storage.crash(CrashMode::LoseUnsynced);
    drop(log);
    let log = open(&after, LogConfig::default());
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.first_unstable_offset(), Some(0));
    assert!(log.aborted_transactions(0, 2).is_empty());
}

#[test]
fn compaction_keeps_the_aborted_index_of_merged_segments() {
    let config = LogConfig {
        segment_bytes: 600,
        cleanup_policy: osprey_storage::CleanupPolicy { delete: false, compact: true },
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: i64::MAX / 4,
        ..LogConfig::default()
    };
    let storage = SimStorage::new();
    let log = open(&storage, config.clone());
    for seq in 0..6 {
        produce(&log, 1, seq * 2, 2);
        end_txn(&log, 1, seq % 2 == 0);
    }
    assert!(log.segment_count() > 2);
    let before = log.aborted_transaction_entries(0, log.log_end_offset());
    assert_eq!(before.len(), 3);
    let outcome = log.clean(10_000, 1 << 20).unwrap();
    assert!(outcome.cleaned_segments > 0, "{outcome:?}");
    assert_eq!(log.aborted_transaction_entries(0, log.log_end_offset()), before);
    log.close().unwrap();
    drop(log);
    let log = open(&storage, config);
    assert_eq!(log.aborted_transaction_entries(0, log.log_end_offset()), before);
}

#[test]
fn one_offsets_snapshot_never_has_the_lso_above_the_high_watermark_under_concurrent_writes() {
    let log = open(&SimStorage::new(), LogConfig::default());
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Transactions opened and ended, plain batches in between, the high
            // watermark moved after each append, as produce and markers do.
            for seq in 0..3000 {
                produce(&log, 7, seq, 1);
                log.append(&common::batch(0, 1, 16), 0, 0).unwrap();
                log.update_high_watermark(log.log_end_offset()).unwrap();
                end_txn(&log, 7, seq % 2 == 0);
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut snapshots = 0u64;
        let mut last_hw = 0;
        while !done.load(std::sync::atomic::Ordering::Acquire) || snapshots == 0 {
            let o = log.offsets();
            assert!(o.log_start_offset <= o.last_stable_offset, "{o:?}");
            assert!(o.last_stable_offset <= o.high_watermark, "{o:?}");
            assert!(o.high_watermark <= o.log_end_offset, "{o:?}");
            assert!(o.high_watermark >= last_hw, "the high watermark went back: {o:?}");
            last_hw = o.high_watermark;
            snapshots += 1;
        }
    });
    let o = log.offsets();
    assert_eq!((o.last_stable_offset, o.high_watermark, o.log_end_offset), (9000, 9000, 9000));
}
