//! Behaviour of `PartitionLog` on the real file system and on the simulated disk.

mod common;

use std::path::Path;
use std::sync::{mpsc, Arc};

use common::{batch, batch_at, idempotent, read_all, split, stamped, TempDir};
use osprey_storage::producer::SequenceError;
use osprey_storage::{CrashMode, Flusher, LogConfig, PartitionLog, SimStorage, StdStorage, StorageError};

fn small_segments() -> LogConfig {
    LogConfig { segment_bytes: 4096, index_interval_bytes: 256, ..LogConfig::default() }
}

fn sim_log(storage: &SimStorage, config: LogConfig) -> PartitionLog<SimStorage> {
    PartitionLog::open(storage.clone(), "/data/topic-0", config, 0).unwrap()
}

#[test]
fn append_assigns_offsets_and_read_returns_the_stamped_bytes() {
    let tmp = TempDir::new("append");
    let log = PartitionLog::open(StdStorage, tmp.path(), LogConfig::default(), 0).unwrap();
    let a = batch(1, 3, 100);
    let info = log.append(&a, 5, 10).unwrap();
    assert_eq!((info.base_offset, info.last_offset, info.records), (0, 2, 3));
    log.wait_for_ack(&info).unwrap();
    let b = batch(2, 2, 50);
    let info = log.append(&b, 5, 10).unwrap();
    assert_eq!((info.base_offset, info.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);

    let all = read_all(&log);
    assert_eq!(all, vec![(0, stamped(batch(1, 3, 100), 0, 5)), (3, stamped(batch(2, 2, 50), 3, 5))]);
    // A fetch in the middle of a batch returns that whole batch.
    let slice = log.read(4, 1 << 20).unwrap();
    assert_eq!(split(&slice.records)[0].0, 3);
    assert!(log.read(5, 100).unwrap().records.is_empty());
    assert!(matches!(log.read(6, 100), Err(StorageError::OffsetOutOfRange { .. })));
}

/// A leader's append writes each batch with its offset and epoch stamped, and does not
/// stamp them in the caller's buffer: the produce path hands the log the request's own
/// bytes, which it does not copy.
#[test]
fn a_leader_append_stamps_what_it_writes_and_leaves_the_callers_bytes_alone() {
    fn check<S: osprey_storage::Storage>(log: &PartitionLog<S>) {
        log.append(&batch(9, 2, 10), 1, 10).unwrap();
        let batches = [batch(1, 3, 100), batch(2, 1, 0), batch(3, 5, 4000)];
        let sent = batches.concat();
        let info = log.append(&sent, 7, 10).unwrap();
        assert_eq!((info.base_offset, info.last_offset, info.batches), (2, 10, 3));
        assert_eq!(sent, batches.concat(), "the caller's bytes are as they were");
        let all = read_all(log);
        let expected = vec![
            (0, stamped(batch(9, 2, 10), 0, 1)),
            (2, stamped(batches[0].clone(), 2, 7)),
            (5, stamped(batches[1].clone(), 5, 7)),
            (6, stamped(batches[2].clone(), 6, 7)),
        ];
        assert_eq!(all, expected);
    }
    let tmp = TempDir::new("append-unstamped");
    check(&PartitionLog::open(StdStorage, tmp.path(), LogConfig::default(), 0).unwrap());
    check(&sim_log(&SimStorage::new(), LogConfig::default()));
}

#[test]
fn read_returns_whole_batches_within_max_bytes_but_at_least_one() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig::default());
    for seed in 0..5 {
        log.append(&batch(seed, 1, 939), 0, 0).unwrap(); // 1000 bytes each
    }
    assert_eq!(split(&log.read(0, 2500).unwrap().records).len(), 2);
    let one = log.read(0, 10).unwrap();
    assert_eq!(split(&one.records).len(), 1);
    assert_eq!(one.next_offset, 1);
    assert_eq!(split(&log.read(0, 1 << 20).unwrap().records).len(), 5);
    let bounded = log.read_bounded(0, 1 << 20, 3).unwrap();
    assert_eq!(split(&bounded.records).len(), 3);
}

#[test]
fn read_limited_without_min_one_batch_never_exceeds_max_bytes() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig::default());
    for seed in 0..3 {
        log.append(&batch(seed, 1, 939), 0, 0).unwrap(); // 1000 bytes each
    }
    // A fetch's later partitions: what fits, and nothing when the first batch does not.
    assert_eq!(split(&log.read_limited(0, 2500, i64::MAX, false).unwrap().records).len(), 2);
    let none = log.read_limited(1, 999, i64::MAX, false).unwrap();
    assert!(none.records.is_empty());
    assert_eq!(none.next_offset, 1);
    assert!(log.read_limited(0, 0, i64::MAX, false).unwrap().records.is_empty());
    // Its first partition with data: one batch whatever the limit (KIP-74).
    assert_eq!(split(&log.read_limited(1, 0, i64::MAX, true).unwrap().records).len(), 1);
    // The offset is still checked when nothing is to be read.
    assert!(matches!(log.read_limited(9, 0, i64::MAX, false), Err(StorageError::OffsetOutOfRange { .. })));
}

#[test]
fn segments_roll_on_size_and_are_named_by_base_offset() {
    let tmp = TempDir::new("roll");
    let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
    for seed in 0..20 {
        log.append(&batch(seed, 2, 939), 0, 0).unwrap();
    }
    assert!(log.segment_count() >= 5);
    let mut names: Vec<String> =
        std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert!(names.contains(&"00000000000000000000.log".to_string()));
    assert!(names.contains(&"00000000000000000008.log".to_string()), "{names:?}");
    assert!(names.contains(&"00000000000000000000.index".to_string()));
    assert!(names.contains(&"00000000000000000000.timeindex".to_string()));
    assert_eq!(read_all(&log).len(), 20);
}

#[test]
fn segment_rolls_when_older_than_segment_ms() {
    let storage = SimStorage::new();
    let config = LogConfig { segment_ms: 1000, ..LogConfig::default() };
    let log = PartitionLog::open(storage.clone(), "/p", config, 0).unwrap();
    log.append(&batch_at(1, 1, 10, 0), 0, 0).unwrap();
    log.append(&batch_at(2, 1, 10, 500), 0, 500).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append(&batch_at(3, 1, 10, 1500), 0, 1500).unwrap();
    assert_eq!(log.segment_count(), 2);
}

#[test]
fn offset_for_timestamp_finds_first_batch_at_or_after_it() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, small_segments());
    for i in 0..30i64 {
        log.append(&batch_at(i as u64, 2, 300, 1000 + i * 10), 0, 0).unwrap();
    }
    let found = log.offset_for_timestamp(1095).unwrap().unwrap();
    assert_eq!((found.offset, found.timestamp), (20, 1100));
    let found = log.offset_for_timestamp(0).unwrap().unwrap();
    assert_eq!(found.offset, 0);
    assert!(log.offset_for_timestamp(5000).unwrap().is_none());
    assert_eq!(log.max_timestamp_and_offset(), Some((1290, 58)));
}

#[test]
fn clean_reopen_keeps_everything_and_skips_the_scan() {
    let tmp = TempDir::new("clean");
    let mut expected = Vec::new();
    {
        let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
        for seed in 0..15 {
            let info = log.append(&batch(seed, 1, 700), 3, 0).unwrap();
            expected.push((info.base_offset, stamped(batch(seed, 1, 700), info.base_offset, 3)));
        }
        log.update_high_watermark(10).unwrap();
        log.close().unwrap();
        assert!(log.append(&batch(98, 1, 10), 3, 0).is_err(), "nothing may follow the clean-shutdown marker");
    }
    assert!(tmp.path().join(".clean-shutdown").exists());
    let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
    assert!(!tmp.path().join(".clean-shutdown").exists(), "the marker must go before any append");
    assert_eq!(read_all(&log), expected);
    assert_eq!(log.high_watermark(), 10);
    assert_eq!(log.leader_epochs(), vec![(3, 0)]);
    let info = log.append(&batch(99, 1, 10), 3, 0).unwrap();
    assert_eq!(info.base_offset, 15);
}

#[test]
fn torn_unsynced_tail_is_cut_and_every_durable_batch_survives() {
    for seed in 1..60u64 {
        let storage = SimStorage::new();
        let mut durable = Vec::new();
        {
            let log = sim_log(&storage, small_segments());
            for i in 0..12u64 {
                let info = log.append(&batch(i, 1, 500), 0, 0).unwrap();
                if i < 8 {
                    log.wait_durable(info.last_offset).unwrap();
                    durable.push((info.base_offset, stamped(batch(i, 1, 500), info.base_offset, 0)));
                }
            }
            // Dropped without close: a power loss now.
        }
        let mode = if seed % 2 == 0 { CrashMode::TearAndGarble { seed } } else { CrashMode::TearUnsynced { seed } };
        let after = storage.crash(mode);
        let log = sim_log(&after, small_segments());
        let all = read_all(&log);
        assert!(all.len() >= durable.len(), "seed {seed}: lost acknowledged batches");
        assert_eq!(&all[..durable.len()], &durable[..], "seed {seed}");
        for (i, (offset, bytes)) in all.iter().enumerate() {
            assert_eq!(bytes, &stamped(batch(i as u64, 1, 500), *offset, 0), "seed {seed}: garbage kept");
        }
        // The recovered log takes appends at its end.
        let info = log.append(&batch(100, 1, 10), 0, 0).unwrap();
        assert_eq!(info.base_offset, all.len() as i64);
    }
}

#[test]
fn garbage_in_the_last_segment_is_truncated_without_panic() {
    let storage = SimStorage::new();
    {
        let log = sim_log(&storage, LogConfig::default());
        for i in 0..5 {
            log.append(&batch(i, 1, 100), 0, 0).unwrap();
        }
        log.flush().unwrap();
    }
    let path = Path::new("/data/topic-0/00000000000000000000.log");
    let mut bytes = storage.contents(path).unwrap();
    let batch_len = bytes.len() / 5;
    bytes[batch_len * 3 + 30] ^= 0xff; // corrupt the 4th batch's body
    bytes.extend_from_slice(&[0xAB; 1000]);
    storage.put(path, bytes);
    let log = sim_log(&storage, LogConfig::default());
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(read_all(&log).len(), 3);
    // Lengths that point far past the end are garbage too.
    let mut bytes = storage.contents(path).unwrap();
    let mut header = vec![0u8; 61];
    header[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    header[16] = 2;
    bytes.extend_from_slice(&header);
    storage.put(path, bytes);
    drop(log);
    let log = sim_log(&storage, LogConfig::default());
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn full_disk_fails_the_append_and_leaves_the_log_usable() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig::default());
    let info = log.append(&batch(1, 1, 100), 0, 0).unwrap();
    log.wait_for_ack(&info).unwrap();
    storage.set_space_left(Some(50));
    let err = log.append(&batch(2, 1, 100), 0, 0).unwrap_err();
    assert!(err.is_kafka_storage_error(), "{err}");
    storage.set_space_left(None);
    let info = log.append(&batch(3, 1, 100), 0, 0).unwrap();
    assert_eq!(info.base_offset, 1);
    log.wait_for_ack(&info).unwrap();
    assert_eq!(read_all(&log), vec![(0, stamped(batch(1, 1, 100), 0, 0)), (1, stamped(batch(3, 1, 100), 1, 0))]);
}

/// A producer pipelines batches (librdkafka sends up to five in flight). When one fails on
/// a full disk, the next ones do not follow the producer's last written sequence; they
/// must get the retriable storage error, not OUT_OF_ORDER_SEQUENCE_NUMBER, on which
/// librdkafka bumps its epoch and renumbers every unacknowledged message, so a batch
/// written but not yet acknowledged (waiting for acks=all) is written a second time.
/// Found by the chaos runner's `fulldisk` fault (issue 17).
#[test]
fn batches_after_a_write_that_failed_on_a_full_disk_wait_for_its_retry() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig::default());
    log.append(&idempotent(7, 0, 0, 2), 0, 0).unwrap();
    storage.set_space_left(Some(10));
    let err = log.append(&idempotent(7, 0, 2, 2), 0, 0).unwrap_err();
    assert!(matches!(err, StorageError::Io { .. }), "{err}");
    storage.set_space_left(None);

    // The next batch in flight, and another producer's, while the failed one is retried.
    let err = log.append(&idempotent(7, 0, 4, 2), 0, 0).unwrap_err();
    assert!(
        matches!(err, StorageError::EarlierWriteFailed { producer_id: 7, first_seq: 4, failed_seq: 2 })
            && err.is_kafka_storage_error(),
        "{err}"
    );
    assert_eq!(log.append(&idempotent(8, 0, 0, 1), 0, 0).unwrap().base_offset, 2);
    // A duplicate of a written batch is still recognised meanwhile.
    assert!(log.append(&idempotent(7, 0, 0, 2), 0, 0).unwrap().duplicate);

    // The retry is written, and then the rest, once each.
    assert_eq!(log.append(&idempotent(7, 0, 2, 2), 0, 0).unwrap().base_offset, 3);
    assert_eq!(log.append(&idempotent(7, 0, 4, 2), 0, 0).unwrap().base_offset, 5);
    // Once the gap is filled, a real gap is out of order again.
    let err = log.append(&idempotent(7, 0, 9, 1), 0, 0).unwrap_err();
    assert!(matches!(err, StorageError::Sequence(SequenceError::OutOfOrderSequence { .. })), "{err}");

    // A new producer epoch starts afresh: the failure of an older epoch explains nothing.
    storage.set_space_left(Some(10));
    assert!(log.append(&idempotent(7, 0, 6, 1), 0, 0).is_err());
    storage.set_space_left(None);
    assert_eq!(log.append(&idempotent(7, 1, 0, 1), 0, 0).unwrap().base_offset, 7);
}

#[test]
fn failed_fsync_takes_the_log_offline_until_reopened() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig::default());
    let info = log.append(&batch(1, 1, 100), 0, 0).unwrap();
    log.wait_for_ack(&info).unwrap();
    assert!(!log.is_offline());
    storage.set_fail_sync(true);
    let info = log.append(&batch(2, 1, 100), 0, 0).unwrap();
    let err = log.wait_for_ack(&info).unwrap_err();
    assert!(matches!(err, StorageError::LogOffline { .. }) && err.is_kafka_storage_error());
    assert!(log.is_offline(), "the broker reports it in osprey_offline_partition_logs");
    assert!(log.append(&batch(3, 1, 100), 0, 0).is_err());
    storage.set_fail_sync(false);
    drop(log);
    let log = sim_log(&storage.crash(CrashMode::LoseUnsynced), LogConfig::default());
    assert_eq!(read_all(&log), vec![(0, stamped(batch(1, 1, 100), 0, 0))]);
}

#[test]
fn invalid_batches_and_stale_epochs_are_rejected_without_writing() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig { max_message_bytes: 1000, ..LogConfig::default() });
    let mut bad = batch(1, 1, 100);
    bad[100] ^= 1;
    assert!(matches!(log.append(&bad, 0, 0), Err(StorageError::InvalidBatch { .. })));
    assert!(matches!(log.append(&[], 0, 0), Err(StorageError::InvalidBatch { .. })));
    let mut two = batch(1, 1, 100);
    two.extend_from_slice(&batch(2, 1, 100)[..50]);
    assert!(matches!(log.append(&two, 0, 0), Err(StorageError::InvalidBatch { position: 161, .. })));
    assert!(matches!(log.append(&batch(1, 1, 2000), 0, 0), Err(StorageError::RecordBatchTooLarge { .. })));
    log.append(&batch(1, 1, 10), 5, 0).unwrap();
    assert!(matches!(log.append(&batch(1, 1, 10), 4, 0), Err(StorageError::StaleLeaderEpoch { epoch: 4, latest: 5 })));
    assert_eq!(log.log_end_offset(), 1);
}

#[test]
fn leader_epoch_cache_is_persisted_and_answers_offset_for_leader_epoch() {
    let tmp = TempDir::new("epochs");
    {
        let log = PartitionLog::open(StdStorage, tmp.path(), LogConfig::default(), 0).unwrap();
        log.append(&batch(1, 2, 10), 1, 0).unwrap();
        log.append(&batch(2, 3, 10), 3, 0).unwrap();
        log.append(&batch(3, 1, 10), 3, 0).unwrap();
        log.append(&batch(4, 4, 10), 6, 0).unwrap();
        log.flush().unwrap();
    }
    let text = std::fs::read_to_string(tmp.path().join("leader-epoch-checkpoint")).unwrap();
    assert_eq!(text, "0\n3\n1 0\n3 2\n6 6\n");
    let log = PartitionLog::open(StdStorage, tmp.path(), LogConfig::default(), 0).unwrap();
    assert_eq!(log.leader_epochs(), vec![(1, 0), (3, 2), (6, 6)]);
    assert_eq!(log.end_offset_for_epoch(3), (3, 6));
    assert_eq!(log.end_offset_for_epoch(5), (3, 6));
    assert_eq!(log.end_offset_for_epoch(6), (6, 10));
    assert_eq!(log.end_offset_for_epoch(7), (-1, -1));
}

#[test]
fn truncate_to_removes_later_segments_and_fixes_epochs_and_high_watermark() {
    let tmp = TempDir::new("truncate");
    let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
    for i in 0..20u64 {
        log.append(&batch(i, 2, 900), (i / 10) as i32, 0).unwrap();
    }
    log.update_high_watermark(40).unwrap();
    let segments = log.segment_count();
    assert_eq!(log.truncate_to(9).unwrap(), 8, "an offset inside a batch removes that whole batch");
    assert!(log.segment_count() < segments);
    assert_eq!(log.high_watermark(), 8);
    assert_eq!(log.leader_epochs(), vec![(0, 0)]);
    assert_eq!(read_all(&log).len(), 4);
    let info = log.append(&batch(50, 1, 10), 2, 0).unwrap();
    assert_eq!(info.base_offset, 8);
    log.wait_for_ack(&info).unwrap();
    drop(log);
    let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
    assert_eq!(log.log_end_offset(), 9);
    assert_eq!(log.leader_epochs(), vec![(0, 0), (2, 8)]);
    assert_eq!(read_all(&log).last().unwrap().1, stamped(batch(50, 1, 10), 8, 2));
}

#[test]
fn truncating_at_the_log_end_drops_an_epoch_that_holds_no_record() {
    // A leader stamped epoch 1's start at its log end and appended nothing before it
    // lost leadership (the chaos tool's power-loss seed 1): as a follower it truncates to
    // the new leader's end offset, which is its own log end.
    let tmp = TempDir::new("truncate-empty-epoch");
    let log = PartitionLog::open(StdStorage, tmp.path(), LogConfig::default(), 0).unwrap();
    for i in 0..3u64 {
        log.append(&batch(i, 2, 10), 0, 0).unwrap();
    }
    log.assign_epoch_start(1).unwrap();
    assert_eq!(log.leader_epochs(), vec![(0, 0), (1, 6)]);
    assert_eq!(log.truncate_to(6).unwrap(), 6);
    assert_eq!(log.leader_epochs(), vec![(0, 0)]);
    drop(log);
    let log = PartitionLog::open(StdStorage, tmp.path(), LogConfig::default(), 0).unwrap();
    assert_eq!(log.leader_epochs(), vec![(0, 0)], "the checkpoint was rewritten");
    assert_eq!(log.log_end_offset(), 6);
}

#[test]
fn truncate_below_log_start_empties_the_log_and_restarts_there() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, small_segments());
    for i in 0..10 {
        log.append(&batch(i, 1, 900), 0, 0).unwrap();
    }
    log.update_high_watermark(10).unwrap();
    log.delete_records_before(6).unwrap();
    assert_eq!(log.truncate_to(3).unwrap(), 3);
    assert_eq!((log.log_start_offset(), log.log_end_offset(), log.segment_count()), (3, 3, 1));
    assert_eq!(log.append(&batch(1, 1, 10), 0, 0).unwrap().base_offset, 3);
}

#[test]
fn truncate_fully_starts_an_empty_log_past_the_old_end_and_survives_a_reopen() {
    let tmp = TempDir::new("truncate-fully");
    let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
    for i in 0..6u64 {
        let info = log.append(&batch(i, 2, 900), 1, 0).unwrap();
        log.wait_for_ack(&info).unwrap();
    }
    log.update_high_watermark(12).unwrap();
    // A follower whose log ends at 12 while the leader's starts at 40.
    assert_eq!(log.truncate_fully_and_start_at(40).unwrap(), 40);
    assert_eq!((log.log_start_offset(), log.log_end_offset(), log.high_watermark()), (40, 40, 40));
    assert_eq!(log.segment_count(), 1);
    assert!(log.leader_epochs().is_empty(), "the old epochs describe data that is gone");
    assert!(log.durable_end_offset() >= 40, "the empty log is durable where it starts");
    assert!(read_all(&log).is_empty());
    // Replicated batches from the leader land at 40 on.
    let replicated = stamped(batch(7, 3, 10), 40, 5);
    let info = log.append_as_follower(&replicated, 0).unwrap();
    assert_eq!((info.base_offset, info.last_offset), (40, 42));
    log.wait_for_ack(&info).unwrap();
    drop(log);
    let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (40, 43));
    assert_eq!(log.leader_epochs(), vec![(5, 40)]);
    assert_eq!(read_all(&log).len(), 1);
}

#[test]
fn delete_records_moves_log_start_durably_and_retention_deletes_segments() {
    let tmp = TempDir::new("delete-records");
    {
        let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
        for i in 0..20u64 {
            log.append(&batch(i, 1, 900), 0, 0).unwrap();
        }
        assert!(log.delete_records_before(5).is_err(), "beyond the high watermark");
        log.update_high_watermark(20).unwrap();
        assert_eq!(log.delete_records_before(9).unwrap(), 9);
        assert!(matches!(log.read(8, 100), Err(StorageError::OffsetOutOfRange { .. })));
        let before = log.segment_count();
        let outcome = log.retention_pass(0).unwrap();
        assert!(outcome.deleted_segments >= 1 && log.segment_count() == before - outcome.deleted_segments);
        assert_eq!(outcome.log_start_offset, 9);
        assert_eq!(split(&log.read(9, 10).unwrap().records)[0].0, 9);
    }
    let log = PartitionLog::open(StdStorage, tmp.path(), small_segments(), 0).unwrap();
    assert_eq!(log.log_start_offset(), 9);
    assert!(!std::fs::read_dir(tmp.path()).unwrap().any(|e| e.unwrap().file_name() == "00000000000000000000.log"));
}

#[test]
fn retention_by_bytes_and_time_keeps_unreplicated_data() {
    let storage = SimStorage::new();
    let config = LogConfig { retention_bytes: 8192, retention_ms: 1000, ..small_segments() };
    let log = sim_log(&storage, config);
    for i in 0..40i64 {
        log.append(&batch_at(i as u64, 1, 900, i * 100), 0, 0).unwrap();
    }
    assert_eq!(log.retention_pass(0).unwrap().deleted_segments, 0, "nothing below the high watermark");
    log.update_high_watermark(40).unwrap();
    let size_before = log.size_bytes();
    log.retention_pass(0).unwrap();
    assert!(log.size_bytes() <= 8192 + 4096 && log.size_bytes() < size_before);
    let outcome = log.retention_pass(1_000_000).unwrap();
    assert!(outcome.deleted_segments >= 1);
    // Everything expired, so the active segment was rolled and deleted too.
    assert_eq!(log.segment_count(), 1);
    assert_eq!((outcome.log_start_offset, log.log_start_offset(), log.log_end_offset()), (40, 40, 40));
    assert!(log.read(40, 100).unwrap().records.is_empty());
}

#[test]
fn high_watermark_only_moves_forward_within_the_log() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig::default());
    log.append(&batch(1, 5, 10), 0, 0).unwrap();
    log.update_high_watermark(3).unwrap();
    assert!(matches!(log.update_high_watermark(2), Err(StorageError::InvalidHighWatermark { .. })));
    assert!(matches!(log.update_high_watermark(6), Err(StorageError::InvalidHighWatermark { .. })));
    assert_eq!(log.high_watermark(), 3);
}

#[test]
fn concurrent_appenders_share_fsyncs() {
    let tmp = TempDir::new("group-commit");
    let log = Arc::new(PartitionLog::open(StdStorage, tmp.path(), LogConfig::default(), 0).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    let info = log.append(&batch(t * 1000 + i, 1, 1000), 0, 0).unwrap();
                    log.wait_for_ack(&info).unwrap();
                    assert!(log.durable_end_offset() > info.last_offset);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let stats = log.fsync_stats();
    assert_eq!(log.log_end_offset(), 320);
    assert!(stats.count < 320, "every append had its own fsync: {stats:?}");
    assert!(stats.count > 0 && stats.total >= stats.max);
}

#[test]
fn on_durable_calls_back_from_the_flusher_thread() {
    let storage = SimStorage::new();
    let log = Arc::new(sim_log(&storage, LogConfig::default()));
    let flusher = Flusher::new(2).unwrap();
    let (tx, rx) = mpsc::channel();
    for i in 0..10 {
        let info = log.append(&batch(i, 1, 10), 0, 0).unwrap();
        let tx = tx.clone();
        log.on_durable(info.last_offset, &flusher, Box::new(move |r| tx.send((info.last_offset, r.is_ok())).unwrap()));
    }
    let mut got: Vec<_> = (0..10).map(|_| rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap()).collect();
    got.sort();
    assert_eq!(got, (0..10).map(|o| (o, true)).collect::<Vec<_>>());
    assert!(log.durable_end_offset() >= 10);
    let after = storage.crash(CrashMode::LoseUnsynced);
    assert_eq!(sim_log(&after, LogConfig::default()).log_end_offset(), 10);
}

#[test]
fn waiting_for_an_offset_not_yet_appended_is_an_error_not_a_hang() {
    let storage = SimStorage::new();
    let log = Arc::new(sim_log(&storage, LogConfig::default()));
    log.append(&batch(1, 1, 10), 0, 0).unwrap();
    assert!(matches!(log.wait_durable(5), Err(StorageError::OffsetOutOfRange { .. })));
    let flusher = Flusher::new(1).unwrap();
    let (tx, rx) = mpsc::channel();
    log.on_durable(5, &flusher, Box::new(move |r| tx.send(r.is_err()).unwrap()));
    assert!(rx.recv().unwrap());
}

#[test]
fn truncation_discards_durability_of_removed_offsets() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig::default());
    log.append(&batch(1, 1, 10), 0, 0).unwrap();
    let info = log.append(&batch(2, 1, 10), 0, 0).unwrap();
    log.wait_for_ack(&info).unwrap();
    assert_eq!(log.durable_end_offset(), 2);
    log.truncate_to(1).unwrap();
    assert_eq!(log.durable_end_offset(), 1);
    // Offset 1 now holds a different, not yet durable batch; waiting for it fsyncs again.
    let info = log.append(&batch(3, 1, 10), 0, 0).unwrap();
    assert_eq!(info.base_offset, 1);
    log.wait_durable(1).unwrap();
    let after = storage.crash(CrashMode::LoseUnsynced);
    assert_eq!(read_all(&sim_log(&after, LogConfig::default()))[1].1, stamped(batch(3, 1, 10), 1, 0));
}

#[test]
fn flush_messages_relaxes_ack_and_flushes_every_n_records() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig { flush_messages: Some(3), ..LogConfig::default() });
    for i in 0..2 {
        let info = log.append(&batch(i, 1, 10), 0, 0).unwrap();
        log.wait_for_ack(&info).unwrap();
    }
    assert_eq!(log.durable_end_offset(), 0);
    log.append(&batch(2, 1, 10), 0, 0).unwrap();
    assert_eq!(log.durable_end_offset(), 3);
}

#[test]
fn flush_ms_flushes_when_due() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig { flush_ms: Some(100), ..LogConfig::default() });
    log.append(&batch(1, 1, 10), 0, 1000).unwrap();
    assert!(!log.flush_if_due(1050).unwrap());
    assert!(log.flush_if_due(1100).unwrap());
    assert_eq!(log.durable_end_offset(), 1);
}

#[test]
fn log_append_time_stamps_the_broker_clock() {
    let storage = SimStorage::new();
    let config =
        LogConfig { message_timestamp_type: osprey_storage::TimestampType::LogAppendTime, ..LogConfig::default() };
    let log = sim_log(&storage, config);
    let info = log.append(&batch_at(1, 1, 10, 5), 0, 777).unwrap();
    assert_eq!((info.log_append_time, info.max_timestamp), (777, 777));
    let stored = split(&log.read(0, 1000).unwrap().records);
    let h = osprey_storage::batch::validate(&stored[0].1, u64::MAX).unwrap();
    assert_eq!(h.max_timestamp, 777);
}

#[test]
fn retried_idempotent_batch_returns_its_original_offsets_and_appends_nothing() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig::default());
    log.append(&batch(1, 2, 10), 0, 0).unwrap();
    let first = log.append(&idempotent(7, 1, 0, 3), 0, 0).unwrap();
    log.append(&idempotent(7, 1, 3, 1), 0, 0).unwrap();
    let retry = log.append(&idempotent(7, 1, 0, 3), 0, 0).unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.base_offset, retry.last_offset), (first.base_offset, first.last_offset));
    assert_eq!(log.log_end_offset(), 6);
    assert!(matches!(
        log.append(&idempotent(7, 1, 9, 1), 0, 0),
        Err(StorageError::Sequence(osprey_storage::SequenceError::OutOfOrderSequence { .. }))
    ));
    assert!(matches!(
        log.append(&idempotent(7, 0, 4, 1), 0, 0),
        Err(StorageError::Sequence(osprey_storage::SequenceError::InvalidProducerEpoch { .. }))
    ));
    assert_eq!(log.log_end_offset(), 6);
}

#[test]
fn producer_state_survives_roll_clean_close_crash_and_truncation() {
    let storage = SimStorage::new();
    let config = LogConfig { segment_bytes: 1024, ..LogConfig::default() };
    {
        let log = sim_log(&storage, config.clone());
        for seq in 0..30 {
            let info = log.append(&idempotent(seq as i64 % 3, 1, seq / 3, 1), 0, 0).unwrap();
            log.wait_for_ack(&info).unwrap();
        }
        assert!(log.segment_count() > 2);
        log.close().unwrap();
    }
    let snapshots = storage.crash(CrashMode::LoseUnsynced);
    let log = sim_log(&snapshots, config.clone());
    let state = log.producer_state(2).unwrap();
    assert_eq!((state.epoch, state.batches.len(), state.batches.back().unwrap().last_seq), (1, 5, 9));
    // A retry of producer 0's last batch after reopen is still recognised.
    assert!(log.append(&idempotent(0, 1, 9, 1), 0, 0).unwrap().duplicate);
    let info = log.append(&idempotent(0, 1, 10, 1), 0, 0).unwrap();
    log.wait_for_ack(&info).unwrap();
    drop(log);
    // Unclean: rebuilt from the newest snapshot plus the log tail after it.
    let log = sim_log(&snapshots.crash(CrashMode::LoseUnsynced), config.clone());
    assert_eq!(log.producer_state(0).unwrap().batches.back().unwrap().last_seq, 10);
    assert!(log.append(&idempotent(0, 1, 10, 1), 0, 0).unwrap().duplicate);
    // Truncation forgets the removed batches: the removed sequence is accepted again.
    log.truncate_to(20).unwrap();
    assert_eq!(log.producer_state(2).unwrap().batches.back().unwrap().last_seq, 5);
    assert!(!log.append(&idempotent(2, 1, 6, 1), 0, 0).unwrap().duplicate);
}

#[test]
fn follower_append_keeps_leader_offsets_and_learns_epochs() {
    let leader = sim_log(&SimStorage::new(), LogConfig::default());
    leader.append(&batch(1, 2, 10), 1, 0).unwrap();
    leader.append(&batch(2, 3, 10), 3, 0).unwrap();
    leader.append(&idempotent(9, 0, 0, 2), 3, 0).unwrap();
    let fetched = leader.read(0, 1 << 20).unwrap().records;

    let follower = PartitionLog::open(SimStorage::new(), "/f", LogConfig::default(), 0).unwrap();
    let info = follower.append_as_follower(&fetched, 0).unwrap();
    assert_eq!((info.base_offset, info.last_offset), (0, 6));
    assert_eq!(follower.read(0, 1 << 20).unwrap().records, fetched);
    assert_eq!(follower.leader_epochs(), leader.leader_epochs());
    assert_eq!(follower.producer_state(9).unwrap().batches.len(), 1);
    assert!(matches!(follower.append_as_follower(&fetched, 0), Err(StorageError::UnexpectedAppendOffset { .. })));

    // Divergence: the follower truncates to the leader's end offset for its epoch.
    let (epoch, end) = leader.end_offset_for_epoch(1);
    assert_eq!((epoch, end), (1, 2));
    assert_eq!(follower.truncate_to(end).unwrap(), 2);
    assert_eq!(follower.leader_epochs(), vec![(1, 0)]);
}

/// A follower's log can have a gap (compaction on the leader, or an answer to a fetch
/// made at an older log end: chaos seed 1066). Truncating to an offset inside the gap
/// ends the log at that offset, as Kafka's `truncateTo` does: it used to end at the base
/// of the cut batch, above the offset, so the follower fetched from there, the leader
/// found it diverging again, and it truncated to the same offset in a loop.
#[test]
fn truncating_into_a_gap_ends_the_log_at_the_truncation_offset() {
    let follower = PartitionLog::open(SimStorage::new(), "/f", LogConfig::default(), 0).unwrap();
    follower.append_as_follower(&stamped(batch(1, 5, 10), 0, 0), 0).unwrap();
    follower.append_as_follower(&stamped(batch(2, 1, 10), 8, 0), 0).unwrap();
    assert_eq!(follower.log_end_offset(), 9);
    assert_eq!(follower.truncate_to(6).unwrap(), 6, "the log ends where it was truncated, not at the cut batch");
    assert_eq!(follower.log_end_offset(), 6);
    assert_eq!(split(&follower.read(0, 1 << 20).unwrap().records).len(), 1, "the batch at 8 is gone");
    let info = follower.append_as_follower(&stamped(batch(3, 2, 10), 6, 1), 0).unwrap();
    assert_eq!((info.base_offset, info.last_offset), (6, 7));
    assert_eq!(follower.leader_epochs(), vec![(0, 0), (1, 6)]);
}

#[test]
fn retention_by_time_rolls_and_deletes_an_expired_active_segment() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig { retention_ms: 1000, ..LogConfig::default() });
    log.append(&batch_at(1, 1, 10, 0), 0, 0).unwrap();
    log.update_high_watermark(1).unwrap();
    let outcome = log.retention_pass(5000).unwrap();
    assert_eq!(outcome.deleted_segments, 1);
    assert_eq!((log.log_start_offset(), log.log_end_offset(), log.segment_count()), (1, 1, 1));
}

#[test]
fn failed_fsync_while_sealing_a_segment_takes_the_log_offline() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, LogConfig { segment_bytes: 1000, ..LogConfig::default() });
    // The first roll of a new log seals inline (it has no recovery point yet).
    for seed in [1, 2] {
        let info = log.append(&batch(seed, 1, 800), 0, 0).unwrap();
        log.wait_for_ack(&info).unwrap();
    }
    log.append(&batch(3, 1, 100), 0, 0).unwrap(); // written, not yet durable
    storage.set_fail_sync(true);
    // The roll does no fsync on the append path; the group commit that seals it fails.
    let info = log.append(&batch(4, 1, 800), 0, 0).unwrap();
    assert!(log.segment_count() >= 3);
    let err = log.wait_for_ack(&info).unwrap_err();
    assert!(matches!(err, StorageError::LogOffline { .. }) && err.is_kafka_storage_error(), "{err}");
    storage.set_fail_sync(false);
    // Without going offline the next group commit (new segment only) would vouch for
    // the unsynced batch 3 and the unsealed segment.
    assert!(matches!(log.append(&batch(5, 1, 10), 0, 0), Err(StorageError::LogOffline { .. })));
    assert!(log.wait_durable(2).is_err());
}

#[test]
fn open_files_stay_bounded_however_many_segments_are_read() {
    let storage = SimStorage::new();
    let open_logs = |storage: &SimStorage| {
        storage.open_handles().iter().filter(|(p, _)| p.extension().is_some_and(|e| e == "log")).count()
    };
    {
        let log = sim_log(&storage, small_segments());
        for i in 0..60 {
            log.append(&batch(i, 1, 900), 0, 0).unwrap();
        }
        assert!(log.segment_count() >= 15);
        assert!(open_logs(&storage) <= 1 + osprey_storage::log::MAX_OPEN_SEALED_SEGMENTS);
        log.close().unwrap();
    }
    let log = sim_log(&storage, small_segments());
    assert_eq!(open_logs(&storage), 1, "only the active segment is open after open");
    assert_eq!(read_all(&log).len(), 60);
    assert!(log.offset_for_timestamp(0).unwrap().is_some());
    assert!(open_logs(&storage) <= 1 + osprey_storage::log::MAX_OPEN_SEALED_SEGMENTS);
    // Truncating into a closed sealed segment reopens it as the active one.
    log.truncate_to(3).unwrap();
    assert_eq!(log.append(&batch(100, 1, 10), 0, 0).unwrap().base_offset, 3);
    assert_eq!(read_all(&log).len(), 4);
}

#[test]
fn idle_producers_expire_after_producer_id_expiration_ms() {
    let log = PartitionLog::open(SimStorage::new(), "/p", LogConfig::default(), 0).unwrap();
    let mut old = idempotent(1, 0, 0, 1);
    osprey_storage::batch::stamp_log_append_time(&mut old, 1_000);
    log.append(&old, 0, 1_000).unwrap();
    let mut recent = idempotent(2, 0, 0, 1);
    osprey_storage::batch::stamp_log_append_time(&mut recent, 50_000);
    log.append(&recent, 0, 50_000).unwrap();
    assert_eq!(log.expire_producers(60_000, 59_001), 0, "producer 1 idle 59000 ms < 59001");
    assert_eq!(log.expire_producers(60_000, 59_000), 1);
    assert!(log.producer_state(1).is_none());
    assert!(log.producer_state(2).is_some());
    // An expired producer is unknown: any sequence is accepted again (KIP-360).
    let info = log.append(&idempotent(1, 0, 7, 1), 0, 60_000).unwrap();
    assert!(!info.duplicate);
}

/// A log written (idempotent batches across rolls), with a high watermark, then closed.
fn written_and_closed(storage: &SimStorage) -> Vec<(i64, Vec<u8>)> {
    let log = sim_log(storage, small_segments());
    let mut expected = Vec::new();
    for seq in 0..12 {
        let info = log.append(&idempotent(7, 0, seq, 1), 0, 0).unwrap();
        log.wait_durable(info.last_offset).unwrap();
        expected.push((info.base_offset, stamped(idempotent(7, 0, seq, 1), info.base_offset, 0)));
    }
    log.update_high_watermark(9).unwrap();
    log.close().unwrap();
    assert!(!log.is_offline(), "a closed log refuses appends but is not offline");
    expected
}

#[test]
fn closing_a_new_log_with_no_writes_fsyncs_at_most_once() {
    let storage = SimStorage::new();
    let log = sim_log(&storage, small_segments());
    let before = storage.sync_count();
    log.close().unwrap();
    assert!(storage.sync_count() - before <= 1, "a new, empty log fsynced {} times", storage.sync_count() - before);
    let storage = storage.crash(CrashMode::LoseUnsynced);
    // Reopened and closed again, still with no writes: as cheap.
    let log = sim_log(&storage, small_segments());
    assert!(log.opened_clean());
    let before = storage.sync_count();
    log.close().unwrap();
    assert!(storage.sync_count() - before <= 1, "a reopened empty log fsynced {} times", storage.sync_count() - before);
    let log = sim_log(&storage, small_segments());
    assert!(log.opened_clean());
    assert_eq!((log.log_end_offset(), log.high_watermark()), (0, 0));
    log.append(&batch(1, 1, 100), 0, 0).unwrap();
}

#[test]
fn closing_a_log_unchanged_since_a_clean_open_fsyncs_at_most_once() {
    let storage = SimStorage::new();
    written_and_closed(&storage);
    for round in 0..3 {
        let log = sim_log(&storage, small_segments());
        assert!(log.opened_clean(), "round {round}");
        // What the broker does at open: the high watermark to the durable end (unchanged).
        log.update_high_watermark(log.high_watermark()).unwrap();
        let before = storage.sync_count();
        log.close().unwrap();
        let fsyncs = storage.sync_count() - before;
        assert!(fsyncs <= 1, "round {round}: a clean, unchanged log fsynced {fsyncs} times on close");
    }
}

#[test]
fn a_log_written_then_closed_reopens_clean_with_its_data_producers_and_high_watermark() {
    let storage = SimStorage::new();
    let expected = written_and_closed(&storage);
    // Twice: the second close skips the unchanged files, and they must still serve.
    for round in 0..2 {
        let log = sim_log(&storage, small_segments());
        assert!(log.opened_clean(), "round {round}");
        assert!(log.recovery_report().damaged.is_empty(), "round {round}");
        assert_eq!(read_all(&log), expected, "round {round}");
        assert_eq!(log.high_watermark(), 9, "round {round}");
        assert_eq!(log.producer_state(7).and_then(|p| p.batches.back().map(|b| b.last_seq)), Some(11), "round {round}");
        log.close().unwrap();
    }
    // A high-watermark move alone is written at close.
    let log = sim_log(&storage, small_segments());
    log.update_high_watermark(12).unwrap();
    log.close().unwrap();
    let log = sim_log(&storage, small_segments());
    assert!(log.opened_clean());
    assert_eq!(log.high_watermark(), 12);
    // And an append after a clean open is closed with everything it changed.
    let info = log.append(&idempotent(7, 0, 12, 1), 0, 0).unwrap();
    log.close().unwrap();
    let log = sim_log(&storage, small_segments());
    assert!(log.opened_clean());
    assert_eq!(read_all(&log).len(), expected.len() + 1);
    assert_eq!(log.producer_state(7).and_then(|p| p.batches.back().map(|b| b.last_seq)), Some(12));
    assert_eq!(log.log_end_offset(), info.last_offset + 1);
}
