//! Log compaction: the latest value per key survives at its original offset, tombstones
//! expire after `delete.retention.ms`, the offset map's byte budget is respected, producer
//! state survives, and a crash in the middle of a segment swap is finished or undone.
//! Ends with a model property test: random keyed appends, cleaning passes (with tiny and
//! large map budgets), reopens and power losses against a list of every record.

use std::collections::HashMap;
use std::path::Path;

use osprey_protocol::records::{BatchBuilder, Batches, Compression};
use osprey_storage::{CleanupPolicy, CrashMode, LogConfig, PartitionLog, SimStorage, Storage};
use proptest::prelude::*;

const DIR: &str = "/data/compacted-0";
const BIG_MAP: usize = 64 << 20;

/// (offset, key, value); `None` value is a tombstone.
type Rec = (i64, Vec<u8>, Option<Vec<u8>>);

fn compact_config() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 100,
        cleanup_policy: CleanupPolicy { delete: false, compact: true },
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: i64::MAX / 4,
        ..LogConfig::default()
    }
}

/// A batch of keyed records, all with timestamp `ts`.
fn keyed(records: &[(&[u8], Option<&[u8]>)], ts: i64, compression: Compression) -> Vec<u8> {
    let mut b = BatchBuilder::new(compression);
    for (k, v) in records {
        b.append(ts, Some(k), *v, &[]).unwrap();
    }
    b.build().unwrap().into_bytes().to_vec()
}

fn append<S: Storage>(log: &PartitionLog<S>, records: &[(&[u8], Option<&[u8]>)], ts: i64) -> i64 {
    let info = log.append(&keyed(records, ts, Compression::None), 0, ts).unwrap();
    log.wait_for_ack(&info).unwrap();
    log.update_high_watermark(info.last_offset + 1).unwrap();
    info.base_offset
}

/// Every record readable from the log start, decoded; checks every batch's CRC.
fn read_records<S: Storage>(log: &PartitionLog<S>) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let slice = log.read(offset, 4096).unwrap();
        assert!(!slice.records.is_empty(), "no batch at {offset} below the log end");
        for batch in Batches::new(slice.records.clone()) {
            let batch = batch.unwrap();
            assert!(batch.validate_crc(), "batch at {} has a bad CRC", batch.base_offset());
            for r in batch.records(1 << 20).unwrap() {
                let r = r.unwrap();
                let key = r.key.map(|k| k.to_vec()).unwrap_or_default();
                out.push((r.offset, key, r.value.map(|v| v.to_vec())));
            }
        }
        offset = slice.next_offset;
    }
    out
}

/// The latest record of each key among those below `offset`, in offset order: what a
/// log compacted up to `offset` keeps there.
fn latest_below(all: &[Rec], offset: i64) -> Vec<Rec> {
    let below: Vec<Rec> = all.iter().filter(|r| r.0 < offset).cloned().collect();
    latest_per_key(&below)
}

/// The latest record of each key, in offset order.
fn latest_per_key(all: &[Rec]) -> Vec<Rec> {
    let mut latest: HashMap<&[u8], &Rec> = HashMap::new();
    for r in all {
        latest.insert(&r.1, r);
    }
    let mut out: Vec<Rec> = latest.into_values().cloned().collect();
    out.sort_by_key(|r| r.0);
    out
}

fn k(i: usize) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// Appends `rounds` values for each of `keys` keys, one record per batch, and one last
/// batch so the segments holding them are sealed.
fn fill<S: Storage>(log: &PartitionLog<S>, keys: usize, rounds: usize) -> Vec<Rec> {
    let mut all = Vec::new();
    for round in 0..rounds {
        for i in 0..keys {
            let value = format!("v{round}-{i}").into_bytes();
            let offset = append(log, &[(&k(i), Some(&value))], 1000 + round as i64);
            all.push((offset, k(i), Some(value)));
        }
    }
    all
}

#[test]
fn compaction_keeps_the_latest_value_per_key_at_its_original_offset() {
    let log = PartitionLog::open(SimStorage::new(), DIR, compact_config(), 0).unwrap();
    let all = fill(&log, 10, 8);
    let leo = log.log_end_offset();
    let before_bytes = log.size_bytes();
    let outcome = log.clean(10_000, BIG_MAP).unwrap();
    assert!(outcome.cleaned_segments > 0, "{outcome:?}");
    assert!(outcome.records_removed > 0);
    assert!(log.size_bytes() < before_bytes);
    assert_eq!(log.log_end_offset(), leo, "the log end never moves");
    let read = read_records(&log);
    // The active segment is never cleaned: superseded records may remain only there.
    let cleaned_up_to = outcome.first_dirty_offset;
    assert!(cleaned_up_to > 0);
    let latest = latest_per_key(&all);
    let compacted = latest_below(&all, cleaned_up_to);
    for r in &read {
        assert!(all.contains(r), "{r:?} was never appended (offsets must be preserved)");
        assert!(r.0 >= cleaned_up_to || compacted.contains(r), "{r:?} is superseded but survived cleaning");
    }
    for r in &latest {
        assert!(read.contains(r), "latest {r:?} lost");
    }
}

#[test]
fn compacted_log_reads_the_same_after_reopen_and_after_a_crash() {
    let storage = SimStorage::new();
    let log = PartitionLog::open(storage.clone(), DIR, compact_config(), 0).unwrap();
    fill(&log, 6, 6);
    log.clean(10_000, BIG_MAP).unwrap();
    let read = read_records(&log);
    let crashed = storage.crash(CrashMode::LoseUnsynced);
    log.close().unwrap();
    drop(log);
    let log = PartitionLog::open(storage, DIR, compact_config(), 0).unwrap();
    assert_eq!(read_records(&log), read);
    let log = PartitionLog::open(crashed, DIR, compact_config(), 0).unwrap();
    assert_eq!(read_records(&log), read);
}

#[test]
fn tombstones_are_removed_only_delete_retention_ms_after_the_cleaning_point() {
    let config = LogConfig { delete_retention_ms: 1000, ..compact_config() };
    let log = PartitionLog::open(SimStorage::new(), DIR, config, 0).unwrap();
    let mut all = fill(&log, 4, 4);
    let tombstone = append(&log, &[(&k(0), None)], 2000);
    all.push((tombstone, k(0), None));
    // Enough later data to seal the segment holding the tombstone.
    for i in 0..12 {
        append(&log, &[(&k(1 + i % 3), Some(b"later"))], 2000);
    }
    log.clean(10_000, BIG_MAP).unwrap();
    assert!(read_records(&log).iter().any(|r| r.0 == tombstone), "kept by the first pass (no clean section yet)");
    assert_eq!(read_records(&log).iter().filter(|r| r.1 == k(0)).count(), 1, "the values it deletes are gone");

    // Newer data, once cleaned, moves the delete horizon (newest clean timestamp - 1000)
    // past 2000: the pass after that drops the tombstone.
    for i in 0..20 {
        append(&log, &[(&k(1 + i % 3), Some(b"much later"))], 5000);
    }
    log.clean(10_000, BIG_MAP).unwrap();
    assert!(read_records(&log).iter().any(|r| r.0 == tombstone), "horizon still at 1000");
    for i in 0..20 {
        append(&log, &[(&k(1 + i % 3), Some(b"even later"))], 5000);
    }
    log.clean(10_000, BIG_MAP).unwrap();
    let read = read_records(&log);
    assert!(!read.iter().any(|r| r.1 == k(0)), "tombstone and the values it deletes are gone: {read:?}");
}

#[test]
fn dirty_ratio_below_the_minimum_skips_the_pass() {
    let config = LogConfig { min_cleanable_dirty_ratio: 0.9, ..compact_config() };
    let log = PartitionLog::open(SimStorage::new(), DIR, config, 0).unwrap();
    fill(&log, 5, 6);
    let first = log.clean(10_000, BIG_MAP).unwrap();
    assert!(first.cleaned_segments > 0, "all dirty: ratio 1.0");
    append(&log, &[(&k(0), Some(b"x"))], 3000);
    let second = log.clean(10_000, BIG_MAP).unwrap();
    assert_eq!(second.cleaned_segments, 0);
    assert!(second.dirty_ratio < 0.9, "{second:?}");
}

#[test]
fn delete_only_policy_never_compacts() {
    let config = LogConfig { cleanup_policy: CleanupPolicy { delete: true, compact: false }, ..compact_config() };
    let log = PartitionLog::open(SimStorage::new(), DIR, config, 0).unwrap();
    let all = fill(&log, 3, 5);
    assert_eq!(log.clean(10_000, BIG_MAP).unwrap().cleaned_segments, 0);
    assert_eq!(read_records(&log), all);
}

#[test]
fn data_above_the_high_watermark_and_the_active_segment_are_not_cleaned() {
    let log = PartitionLog::open(SimStorage::new(), DIR, compact_config(), 0).unwrap();
    for _ in 0..30 {
        let info = log.append(&keyed(&[(b"same", Some(b"value"))], 1000, Compression::None), 0, 0).unwrap();
        log.wait_for_ack(&info).unwrap();
    }
    let outcome = log.clean(10_000, BIG_MAP).unwrap();
    assert_eq!(outcome.cleaned_segments, 0, "high watermark is 0: nothing committed to clean");
    assert_eq!(read_records(&log).len(), 30);
}

#[test]
fn tiny_offset_map_budget_converges_over_several_passes() {
    let storage = SimStorage::new();
    let log = PartitionLog::open(storage, DIR, compact_config(), 0).unwrap();
    let all = fill(&log, 12, 5);
    // Room for about two keys per pass.
    let budget = 2 * (k(0).len() + 48);
    let mut passes = 0;
    let mut saw_full = false;
    loop {
        let outcome = log.clean(10_000, budget).unwrap();
        saw_full |= outcome.map_full;
        passes += 1;
        if !outcome.map_full || passes > 200 {
            break;
        }
    }
    assert!(saw_full && passes > 2, "the budget must have cut passes short ({passes} passes)");
    // A final pass with the whole dirty section cleaned: same result as one big pass.
    let reference = PartitionLog::open(SimStorage::new(), DIR, compact_config(), 0).unwrap();
    fill(&reference, 12, 5);
    reference.clean(10_000, BIG_MAP).unwrap();
    let expected: Vec<Rec> = read_records(&reference);
    let read = read_records(&log);
    let latest = latest_per_key(&all);
    for r in &latest {
        assert!(read.contains(r), "latest {r:?} lost");
    }
    let first_dirty = log.clean(10_000, budget).unwrap().first_dirty_offset;
    let compacted = latest_below(&all, first_dirty);
    for r in read.iter().filter(|r| r.0 < first_dirty) {
        assert!(compacted.contains(r), "{r:?} superseded but kept");
    }
    assert_eq!(read.len(), expected.len(), "converged to the single-pass result");
}

#[test]
fn compressed_batches_are_rewritten_compressed_with_a_valid_crc() {
    let log = PartitionLog::open(SimStorage::new(), DIR, compact_config(), 0).unwrap();
    for round in 0..6 {
        let v = format!("value-{round}").into_bytes();
        let batch = [(&b"a"[..], Some(&v[..])), (&b"b"[..], Some(&v[..])), (&b"c"[..], Some(&v[..]))];
        let raw = keyed(&batch, 1000, Compression::Lz4);
        let info = log.append(&raw, 0, 0).unwrap();
        log.update_high_watermark(info.last_offset + 1).unwrap();
    }
    log.clean(10_000, BIG_MAP).unwrap();
    let slice = log.read(0, 1 << 20).unwrap();
    for batch in Batches::new(slice.records) {
        let batch = batch.unwrap();
        assert!(batch.validate_crc());
        assert_eq!(
            batch.compression().unwrap(),
            if batch.records_count() > 0 { Compression::Lz4 } else { Compression::None }
        );
    }
    let read = read_records(&log);
    assert!(read.iter().filter(|r| r.1 == b"a").count() < 6);
}

#[test]
fn records_without_a_key_are_dropped_as_kafka_does() {
    let log = PartitionLog::open(SimStorage::new(), DIR, compact_config(), 0).unwrap();
    let mut b = BatchBuilder::new(Compression::None);
    b.append(1000, None, Some(b"no key"), &[]).unwrap();
    b.append(1000, Some(b"k"), Some(b"v"), &[]).unwrap();
    let info = log.append(&b.build().unwrap().into_bytes(), 0, 0).unwrap();
    log.update_high_watermark(info.last_offset + 1).unwrap();
    fill(&log, 2, 10);
    log.clean(10_000, BIG_MAP).unwrap();
    assert!(read_records(&log).iter().all(|r| !r.1.is_empty()));
}

#[test]
fn producer_state_survives_when_its_last_batch_is_compacted_away() {
    let storage = SimStorage::new();
    let log = PartitionLog::open(storage.clone(), DIR, compact_config(), 0).unwrap();
    let mut b = BatchBuilder::new(Compression::None).producer(42, 3, 0);
    b.append(1000, Some(b"k"), Some(b"old"), &[]).unwrap();
    let info = log.append(&b.build().unwrap().into_bytes(), 0, 0).unwrap();
    log.update_high_watermark(info.last_offset + 1).unwrap();
    fill(&log, 1, 1); // key-0, not k
    for _ in 0..10 {
        append(&log, &[(b"k", Some(b"new"))], 1000);
    }
    log.clean(10_000, BIG_MAP).unwrap();
    let read = read_records(&log);
    assert!(!read.iter().any(|r| r.0 == info.base_offset), "the superseded record is gone");
    let first = Batches::new(log.read(0, 1 << 20).unwrap().records).next().unwrap().unwrap();
    assert_eq!((first.base_offset(), first.producer_id(), first.records_count()), (0, 42, 0), "kept empty");
    assert_eq!(first.base_sequence(), 0);
    // The emptied batch stays, so a reload still knows producer 42's sequence.
    log.close().unwrap();
    drop(log);
    let log = PartitionLog::open(storage, DIR, compact_config(), 0).unwrap();
    let state = log.producer_state(42).expect("producer state survives compaction");
    assert_eq!(state.batches.back().map(|b| (b.last_seq, b.last_offset)), Some((0, info.base_offset)));
    let mut retry = BatchBuilder::new(Compression::None).producer(42, 3, 0);
    retry.append(1000, Some(b"k"), Some(b"old"), &[]).unwrap();
    let again = log.append(&retry.build().unwrap().into_bytes(), 0, 0).unwrap();
    assert!(again.duplicate, "a retry of the compacted batch is still recognised");
}

/// Files of the segment at `base` in `dir`.
fn segment_file(base: i64, ext: &str) -> std::path::PathBuf {
    Path::new(DIR).join(format!("{base:020}.{ext}"))
}

/// A log with one cleanable sealed segment at base 0, the disk before cleaning, the disk
/// after, and the records read before and after.
fn cleaned_pair() -> (SimStorage, SimStorage, Vec<Rec>, Vec<Rec>) {
    let storage = SimStorage::new();
    let config = LogConfig { segment_bytes: 2000, ..compact_config() };
    let log = PartitionLog::open(storage.clone(), DIR, config, 0).unwrap();
    fill(&log, 3, 12);
    let before_read = read_records(&log);
    let before = storage.crash(CrashMode::LoseUnsynced);
    assert!(log.clean(10_000, BIG_MAP).unwrap().cleaned_segments >= 1);
    let after_read = read_records(&log);
    assert_ne!(before_read, after_read);
    let after = storage.crash(CrashMode::LoseUnsynced);
    (before, after, before_read, after_read)
}

fn open_and_read(storage: SimStorage) -> (Vec<Rec>, Vec<String>) {
    let config = LogConfig { segment_bytes: 2000, ..compact_config() };
    let log = PartitionLog::open(storage.clone(), DIR, config, 0).unwrap();
    let read = read_records(&log);
    let names = storage.list(Path::new(DIR)).unwrap();
    (read, names)
}

/// Copies the cleaned disk's segment-0 files into the original disk under the names a
/// crash at some point of the swap leaves: (cleaned file extension, name planted).
fn plant(before: &SimStorage, after: &SimStorage, files: &[(&str, &str)]) {
    for (ext, planted) in files {
        before.put(&segment_file(0, planted), after.contents(&segment_file(0, ext)).unwrap());
    }
}

fn assert_no_swap_files(names: &[String]) {
    assert!(!names.iter().any(|n| n.ends_with(".swap") || n.ends_with(".cleaned")), "{names:?}");
}

#[test]
fn crash_before_the_swap_commit_point_keeps_the_original_segment() {
    let (before, after, before_read, _) = cleaned_pair();
    // Cleaned files written, the indexes already renamed to .swap, the log not yet.
    plant(&before, &after, &[("log", "log.cleaned"), ("index", "index.swap"), ("timeindex", "timeindex.swap")]);
    let (read, names) = open_and_read(before);
    assert_eq!(read, before_read);
    assert_no_swap_files(&names);
}

#[test]
fn crash_after_the_swap_commit_point_finishes_the_swap() {
    let (before, after, _, after_read) = cleaned_pair();
    // Committed (.log.swap exists); the offset index was already moved into place, the
    // time index was not.
    plant(&before, &after, &[("log", "log.swap"), ("index", "index"), ("timeindex", "timeindex.swap")]);
    let (read, names) = open_and_read(before);
    assert_eq!(read, after_read);
    assert_no_swap_files(&names);
}

#[test]
fn crash_at_every_rename_of_a_swap_leaves_the_segment_original_or_cleaned() {
    let (_, _, before_read, after_read) = cleaned_pair();
    let config = LogConfig { segment_bytes: 2000, ..compact_config() };
    let mut outcomes = Vec::new();
    for renames_before_crash in 0..20 {
        let storage = SimStorage::new();
        let log = PartitionLog::open(storage.clone(), DIR, config.clone(), 0).unwrap();
        fill(&log, 3, 12);
        storage.set_renames_left(Some(renames_before_crash));
        let result = log.clean(10_000, BIG_MAP);
        // Power loss right after the failed rename.
        let crashed = storage.crash(CrashMode::LoseUnsynced);
        let (read, names) = open_and_read(crashed);
        assert!(
            read == before_read || read == after_read,
            "crash after {renames_before_crash} renames: neither the original nor the cleaned log"
        );
        assert_no_swap_files(&names);
        outcomes.push(read == after_read);
        if result.is_ok() {
            break;
        }
    }
    assert!(
        outcomes.contains(&false) && outcomes.contains(&true),
        "both sides of the commit point were hit: {outcomes:?}"
    );
}

/// A log whose first pass shrank its segments, ready for a second pass that merges
/// them: the disk before that pass, the disk after, the reads before and after, and the
/// segment counts before and after.
fn merged_pair() -> (SimStorage, SimStorage, Vec<Rec>, Vec<Rec>, usize, usize) {
    let storage = SimStorage::new();
    let log = PartitionLog::open(storage.clone(), DIR, compact_config(), 0).unwrap();
    fill(&log, 2, 30);
    let first = log.clean(10_000, BIG_MAP).unwrap();
    assert_eq!(first.segments_after, first.cleaned_segments, "full segments are not merged");
    fill(&log, 2, 10);
    let (before, before_read, segments_before) =
        (storage.crash(CrashMode::LoseUnsynced), read_records(&log), log.segment_count());
    let second = log.clean(10_000, BIG_MAP).unwrap();
    assert!(second.segments_after < second.cleaned_segments, "small cleaned segments are merged: {second:?}");
    let after_read = read_records(&log);
    let segments_after = log.segment_count();
    assert!(segments_after < segments_before);
    (before, storage.crash(CrashMode::LoseUnsynced), before_read, after_read, segments_before, segments_after)
}

#[test]
fn small_cleaned_segments_are_merged_up_to_segment_bytes() {
    let (_, after, _, after_read, _, segments_after) = merged_pair();
    let log = PartitionLog::open(after, DIR, compact_config(), 0).unwrap();
    assert_eq!(read_records(&log), after_read, "the merged log reads the same after a crash");
    assert_eq!(log.segment_count(), segments_after);
    let mut keys: Vec<&Vec<u8>> = after_read.iter().map(|r| &r.1).collect();
    keys.dedup();
    assert!(keys.len() >= 2);
}

#[test]
fn crash_after_a_merge_commit_deletes_the_merged_segments_on_recovery() {
    let (before, after, before_read, after_read, segments_before, segments_after) = merged_pair();
    // Committed (.log.swap exists), none of the merged segments deleted yet.
    plant(&before, &after, &[("log", "log.swap"), ("index", "index.swap"), ("timeindex", "timeindex.swap")]);
    let log = PartitionLog::open(before.clone(), DIR, compact_config(), 0).unwrap();
    let read = read_records(&log);
    // The pass merged several groups; only the first one's swap was planted, so the log
    // is cleaned below that group's end and original from there on.
    let split_ok = |end: i64| {
        let expected: Vec<Rec> =
            after_read.iter().filter(|r| r.0 < end).chain(before_read.iter().filter(|r| r.0 >= end)).cloned().collect();
        read == expected
    };
    assert!((1..=log.log_end_offset()).any(split_ok), "neither side of a group boundary: {read:?}");
    assert_ne!(read, before_read);
    assert!(log.segment_count() < segments_before, "the merged segments were deleted");
    assert!(log.segment_count() >= segments_after);
    assert_no_swap_files(&before.list(Path::new(DIR)).unwrap());
}

#[test]
fn failed_fsync_while_writing_the_cleaned_segment_leaves_the_log_intact() {
    let storage = SimStorage::new();
    let log = PartitionLog::open(storage.clone(), DIR, compact_config(), 0).unwrap();
    fill(&log, 4, 8);
    let before = read_records(&log);
    storage.set_fail_sync(true);
    assert!(log.clean(10_000, BIG_MAP).is_err());
    storage.set_fail_sync(false);
    assert_eq!(read_records(&log), before, "still readable, unchanged");
    assert_no_swap_files(&storage.list(Path::new(DIR)).unwrap());
    let crashed = storage.crash(CrashMode::LoseUnsynced);
    let log = PartitionLog::open(crashed, DIR, compact_config(), 0).unwrap();
    assert_eq!(read_records(&log), before);
}

#[test]
fn appends_and_reads_continue_while_a_pass_runs() {
    let log = std::sync::Arc::new(PartitionLog::open(SimStorage::new(), DIR, compact_config(), 0).unwrap());
    fill(&log, 20, 10);
    let writer = {
        let log = log.clone();
        std::thread::spawn(move || {
            for i in 0..300 {
                append(&log, &[(&k(i % 20), Some(b"concurrent"))], 4000);
            }
        })
    };
    for _ in 0..20 {
        log.clean(10_000, 4096).unwrap();
        read_records(&log);
    }
    writer.join().unwrap();
    let read = read_records(&log);
    for i in 0..20 {
        assert_eq!(read.iter().rev().find(|r| r.1 == k(i)).and_then(|r| r.2.clone()), Some(b"concurrent".to_vec()));
    }
}

// ----- model ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// Keyed records in one batch: (key, tombstone).
    Append(Vec<(u8, bool)>),
    Clean {
        tiny_map: bool,
    },
    /// A cleaning pass whose `renames`+1-th rename fails, then a power loss.
    CleanThenCrash {
        renames: u64,
    },
    Reopen,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => prop::collection::vec((0..8u8, prop::bool::weighted(0.15)), 1..4).prop_map(Op::Append),
        3 => any::<bool>().prop_map(|tiny_map| Op::Clean { tiny_map }),
        1 => (0..12u64).prop_map(|renames| Op::CleanThenCrash { renames }),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

fn run(ops: Vec<Op>, delete_retention_ms: i64) -> Result<(), TestCaseError> {
    let config = LogConfig { delete_retention_ms, ..compact_config() };
    let mut storage = SimStorage::new();
    let mut log = PartitionLog::open(storage.clone(), DIR, config.clone(), 0).unwrap();
    let mut model: Vec<Rec> = Vec::new();
    let mut first_dirty = 0;
    for (step, op) in ops.into_iter().enumerate() {
        let now = step as i64 * 10;
        match op {
            Op::Append(records) => {
                let owned: Vec<(Vec<u8>, Option<Vec<u8>>)> = records
                    .iter()
                    .map(|&(key, dead)| (vec![b'k', key], (!dead).then(|| format!("v{step}").into_bytes())))
                    .collect();
                let refs: Vec<(&[u8], Option<&[u8]>)> = owned.iter().map(|(k, v)| (&k[..], v.as_deref())).collect();
                let base = append(&log, &refs, now);
                for (i, (key, value)) in owned.into_iter().enumerate() {
                    model.push((base + i as i64, key, value));
                }
            }
            Op::Clean { tiny_map } => {
                let outcome = log.clean(now, if tiny_map { 60 } else { BIG_MAP }).unwrap();
                first_dirty = outcome.first_dirty_offset.max(first_dirty);
            }
            Op::CleanThenCrash { renames } => {
                storage.set_renames_left(Some(renames));
                if let Ok(outcome) = log.clean(now, BIG_MAP) {
                    first_dirty = outcome.first_dirty_offset.max(first_dirty);
                }
                storage = storage.crash(CrashMode::LoseUnsynced);
                log = PartitionLog::open(storage.clone(), DIR, config.clone(), now).unwrap();
                assert_no_swap_files(&storage.list(Path::new(DIR)).unwrap());
            }
            Op::Reopen => {
                log.close().unwrap();
                log = PartitionLog::open(storage.clone(), DIR, config.clone(), now).unwrap();
            }
            Op::Crash => {
                // Every append was acknowledged, so a power loss keeps it all.
                storage = storage.crash(CrashMode::TearAndGarble { seed: step as u64 });
                log = PartitionLog::open(storage.clone(), DIR, config.clone(), now).unwrap();
            }
        }
        let read = read_records(&log);
        let latest = latest_per_key(&model);
        let compacted = latest_below(&model, first_dirty);
        for r in &read {
            prop_assert!(model.contains(r), "step {}: {:?} not in the model", step, r);
            prop_assert!(
                r.0 >= first_dirty || compacted.contains(r),
                "step {}: superseded {:?} below {}",
                step,
                r,
                first_dirty
            );
        }
        let mut offsets: Vec<i64> = read.iter().map(|r| r.0).collect();
        offsets.dedup();
        prop_assert_eq!(offsets.len(), read.len(), "offsets strictly increase");
        for r in &latest {
            let may_expire = r.2.is_none() && delete_retention_ms == 0;
            prop_assert!(may_expire || read.contains(r), "step {}: latest {:?} lost", step, r);
        }
        prop_assert_eq!(log.log_end_offset(), model.last().map_or(0, |r| r.0 + 1));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn compacted_log_is_latest_value_per_key_plus_unexpired_tombstones(ops in prop::collection::vec(op(), 1..120)) {
        run(ops, i64::MAX / 4)?;
    }

    #[test]
    fn compaction_with_immediate_tombstone_expiry_keeps_every_live_key(ops in prop::collection::vec(op(), 1..120)) {
        run(ops, 0)?;
    }
}
