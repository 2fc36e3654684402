//! Transaction-aware compaction, after Kafka's `LogCleaner`: nothing at or past the last
//! stable offset is cleaned, aborted data is removed and never shadows committed data,
//! markers stay while their transaction may have data and then until their KIP-534
//! delete horizon, each producer's newest batch survives (emptied), and the
//! read_committed view of the log is the same before and after any pass (property test).

use std::collections::{BTreeMap, HashSet};

use osprey_protocol::records::{BatchBuilder, Batches, Compression, RecordBatch};
use osprey_storage::{CleanupPolicy, CrashMode, LogConfig, PartitionLog, SimStorage};
use proptest::prelude::*;

const DIR: &str = "/data/txn-compacted-0";
const BIG_MAP: usize = 64 << 20;
const DELETE_RETENTION_MS: i64 = 1_000;

type Log = PartitionLog<SimStorage>;

fn config(delete_retention_ms: i64) -> LogConfig {
    LogConfig {
        segment_bytes: 500,
        index_interval_bytes: 100,
        cleanup_policy: CleanupPolicy { delete: false, compact: true },
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms,
        ..LogConfig::default()
    }
}

fn open(storage: &SimStorage) -> Log {
    PartitionLog::open(storage.clone(), DIR, config(DELETE_RETENTION_MS), 0).unwrap()
}

fn append_and_commit(log: &Log, builder: BatchBuilder, ts: i64) -> i64 {
    let info = log.append(&builder.build().unwrap().into_bytes(), 0, ts).unwrap();
    log.update_high_watermark(log.log_end_offset()).unwrap();
    info.base_offset
}

/// A non-transactional batch of one record; returns its offset.
fn plain(log: &Log, key: &[u8], value: Option<&[u8]>, ts: i64) -> i64 {
    let mut b = BatchBuilder::new(Compression::None);
    b.append(ts, Some(key), value, &[]).unwrap();
    append_and_commit(log, b, ts)
}

/// A transactional batch of producer `pid` (epoch 0) starting at sequence `seq`.
fn txn(log: &Log, pid: i64, seq: i32, records: &[(&[u8], Option<&[u8]>)], ts: i64) -> i64 {
    let mut b = BatchBuilder::new(Compression::None).producer(pid, 0, seq).transactional(true);
    for (k, v) in records {
        b.append(ts, Some(k), *v, &[]).unwrap();
    }
    append_and_commit(log, b, ts)
}

fn marker(log: &Log, pid: i64, epoch: i16, commit: bool, ts: i64) -> i64 {
    let info = log.append_marker(pid, epoch, 0, commit, 0, ts).unwrap();
    log.update_high_watermark(log.log_end_offset()).unwrap();
    info.base_offset
}

/// Plain records of fresh keys until a new segment is sealed, so the next pass has
/// dirty bytes to clean.
fn seal_more(log: &Log, tag: &str, ts: i64) {
    let segments = log.segment_count();
    let mut i = 0;
    while log.segment_count() < segments + 2 {
        plain(log, format!("{tag}-{i}").as_bytes(), Some(b"filler"), ts);
        i += 1;
    }
}

/// Every batch from the log start to the log end, each CRC checked.
fn batches(log: &Log) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let slice = log.read(offset, 1 << 20).unwrap();
        assert!(!slice.records.is_empty(), "no batch at {offset} below the log end");
        for batch in Batches::new(slice.records.clone()) {
            let batch = batch.unwrap();
            assert!(batch.validate_crc(), "batch at {} has a bad CRC", batch.base_offset());
            out.push(batch);
        }
        offset = slice.next_offset;
    }
    out
}

fn batch_at(log: &Log, offset: i64) -> Option<RecordBatch> {
    batches(log).into_iter().find(|b| b.base_offset() == offset)
}

/// (offset, key) of every data record.
fn data_records(log: &Log) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    for batch in batches(log).iter().filter(|b| !b.is_control()) {
        for r in batch.records(1 << 20).unwrap() {
            let r = r.unwrap();
            out.push((r.offset, r.key.map(|k| k.to_vec()).unwrap_or_default()));
        }
    }
    out
}

/// What a read_committed consumer sees below the LSO, as the latest value per key (a
/// tombstone deletes it): data of the aborted transactions the log lists for the range
/// is skipped, as Kafka's consumer does with Fetch's AbortedTransactions.
fn committed_view(log: &Log) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let lso = log.last_stable_offset();
    let mut aborted = log.aborted_transactions(log.log_start_offset(), lso);
    aborted.sort_by_key(|&(_, first)| std::cmp::Reverse(first));
    let mut aborting = HashSet::new();
    let mut view = BTreeMap::new();
    for batch in batches(log).iter().filter(|b| b.base_offset() < lso) {
        while aborted.last().is_some_and(|&(_, first)| first <= batch.last_offset()) {
            aborting.insert(aborted.pop().unwrap().0);
        }
        if batch.is_control() {
            let is_abort = batch.records(1 << 20).unwrap().next().is_some_and(|r| r.unwrap().key.unwrap()[3] == 0);
            if is_abort {
                aborting.remove(&batch.producer_id());
            }
            continue;
        }
        if batch.is_transactional() && aborting.contains(&batch.producer_id()) {
            continue;
        }
        for r in batch.records(1 << 20).unwrap() {
            let r = r.unwrap();
            let key = r.key.unwrap().to_vec();
            match r.value {
                Some(v) => view.insert(key, v.to_vec()),
                None => view.remove(&key),
            };
        }
    }
    view
}

#[test]
fn aborted_data_is_removed_and_never_shadows_a_committed_value() {
    let log = open(&SimStorage::new());
    let committed = plain(&log, b"k", Some(b"committed"), 0);
    let aborted = txn(&log, 1, 0, &[(b"k", Some(b"aborted")), (b"j", Some(b"aborted"))], 0);
    marker(&log, 1, 0, false, 0);
    seal_more(&log, "fill", 0);
    let view = committed_view(&log);
    assert_eq!(view.get(&b"k"[..]).map(Vec::as_slice), Some(&b"committed"[..]));
    let outcome = log.clean(10_000, BIG_MAP).unwrap();
    assert!(outcome.cleaned_segments > 0, "{outcome:?}");
    let records = data_records(&log);
    assert!(records.contains(&(committed, b"k".to_vec())), "the aborted value must not shadow the committed one");
    assert!(!records.iter().any(|(o, _)| *o == aborted || *o == aborted + 1), "aborted data is removed");
    assert_eq!(committed_view(&log), view);
}

#[test]
fn data_at_or_past_the_last_stable_offset_is_not_cleaned() {
    let log = open(&SimStorage::new());
    for _ in 0..8 {
        plain(&log, b"a", Some(b"old"), 0);
    }
    let open_txn = txn(&log, 7, 0, &[(b"t", Some(b"pending"))], 0);
    let mut after = Vec::new();
    for _ in 0..20 {
        after.push(plain(&log, b"a", Some(b"new"), 0));
    }
    assert!(log.segment_count() > 3);
    assert_eq!(log.last_stable_offset(), open_txn);
    let outcome = log.clean(10_000, BIG_MAP).unwrap();
    assert!(outcome.first_dirty_offset <= open_txn, "{outcome:?}");
    let records = data_records(&log);
    // Cleaning is by whole segments: those wholly below the LSO are compacted.
    let below: Vec<_> = records.iter().filter(|(o, _)| *o < open_txn).collect();
    assert!(below.len() < 8, "segments below the LSO are compacted: {below:?}");
    assert!(records.contains(&(open_txn - 1, b"a".to_vec())));
    assert!(records.contains(&(open_txn, b"t".to_vec())), "the open transaction is untouched");
    for offset in &after {
        assert!(records.iter().any(|(o, _)| o == offset), "{offset} is past the LSO and must stay");
    }
    // Once the transaction commits, the rest of the log can be cleaned.
    marker(&log, 7, 0, true, 0);
    seal_more(&log, "fill", 0);
    log.clean(20_000, BIG_MAP).unwrap();
    let records = data_records(&log);
    assert_eq!(records.iter().filter(|(_, k)| k == b"a").count(), 1, "{records:?}");
    assert!(records.contains(&(open_txn, b"t".to_vec())), "committed data stays");
}

#[test]
fn markers_stay_while_their_data_may_be_read_then_until_the_delete_horizon() {
    let log = open(&SimStorage::new());
    txn(&log, 1, 0, &[(b"a", Some(b"aborted"))], 5);
    let abort = marker(&log, 1, 0, false, 5);
    let committed = txn(&log, 1, 1, &[(b"b", Some(b"committed"))], 5);
    let commit = marker(&log, 1, 0, true, 5);
    seal_more(&log, "fill-1", 5);
    // Pass 1 removes the aborted data; the marker and its index entry stay for readers
    // that fetched the data before the swap.
    log.clean(10_000, BIG_MAP).unwrap();
    assert_eq!(log.aborted_transactions(0, log.log_end_offset()), vec![(1, 0)]);
    let kept = batch_at(&log, abort).expect("abort marker kept while its data was just removed");
    assert_eq!(kept.delete_horizon_ms(), None);
    // Pass 2 finds no data of the transaction: the index entry goes, and the marker gets
    // the delete horizon now + delete.retention.ms (KIP-534), its timestamp unchanged.
    seal_more(&log, "fill-2", 5);
    log.clean(20_000, BIG_MAP).unwrap();
    assert!(log.aborted_transactions(0, log.log_end_offset()).is_empty());
    let stamped = batch_at(&log, abort).expect("abort marker kept until its delete horizon");
    assert_eq!(stamped.delete_horizon_ms(), Some(20_000 + DELETE_RETENTION_MS));
    let record = stamped.records(1 << 20).unwrap().next().unwrap().unwrap();
    assert_eq!(record.timestamp, 5, "the marker record keeps its timestamp");
    // Before the horizon it stays; at the horizon it goes.
    seal_more(&log, "fill-3", 5);
    log.clean(20_000 + DELETE_RETENTION_MS - 1, BIG_MAP).unwrap();
    assert!(batch_at(&log, abort).is_some());
    seal_more(&log, "fill-4", 5);
    log.clean(20_000 + DELETE_RETENTION_MS, BIG_MAP).unwrap();
    assert!(batch_at(&log, abort).is_none_or(|b| b.records_count() == 0), "the expired abort marker is removed");
    // The commit marker's transaction still has data: it stays whole, without a horizon.
    assert!(data_records(&log).contains(&(committed, b"b".to_vec())));
    let commit_marker = batch_at(&log, commit).expect("commit marker of live data stays");
    assert_eq!((commit_marker.records_count(), commit_marker.delete_horizon_ms()), (1, None));
    // A reload reads the stamped and rewritten batches back (CRCs, producer state).
    log.close().unwrap();
}

#[test]
fn commit_marker_goes_after_its_horizon_once_its_data_is_superseded() {
    let log = open(&SimStorage::new());
    txn(&log, 1, 0, &[(b"a", Some(b"v1"))], 0);
    let commit = marker(&log, 1, 0, true, 0);
    plain(&log, b"tail", Some(b"x"), 0); // producer 1's newest batch is not the marker
    txn(&log, 2, 0, &[(b"z", Some(b"z"))], 0);
    marker(&log, 2, 0, true, 0);
    plain(&log, b"a", Some(b"v2"), 0);
    seal_more(&log, "fill-1", 0);
    log.clean(10_000, BIG_MAP).unwrap(); // supersedes the data; marker seen with its data
    assert_eq!(batch_at(&log, commit).map(|b| b.delete_horizon_ms()), Some(None));
    seal_more(&log, "fill-2", 0);
    log.clean(20_000, BIG_MAP).unwrap(); // no data left: stamped
    assert_eq!(batch_at(&log, commit).and_then(|b| b.delete_horizon_ms()), Some(20_000 + DELETE_RETENTION_MS));
    seal_more(&log, "fill-3", 0);
    log.clean(30_000, BIG_MAP).unwrap();
    // Producer 1's newest batch is its (emptied) data batch, not the marker; the marker
    // may only survive emptied, as the last batch of a segment.
    assert!(batch_at(&log, commit).is_none_or(|b| b.records_count() == 0));
}

#[test]
fn a_producers_newest_batch_is_kept_empty_when_its_records_go() {
    let storage = SimStorage::new();
    let log = open(&storage);
    let data = txn(&log, 9, 0, &[(b"a", Some(b"x")), (b"b", Some(b"y"))], 0);
    marker(&log, 9, 0, false, 0);
    seal_more(&log, "fill", 0);
    log.clean(10_000, BIG_MAP).unwrap();
    let kept = batch_at(&log, data).expect("producer 9's newest batch is kept");
    assert_eq!((kept.records_count(), kept.producer_id(), kept.base_sequence()), (0, 9, 0));
    assert_eq!(kept.last_offset(), data + 1, "its offset range and so its last sequence survive");
    assert!(kept.is_transactional());
    log.flush().unwrap();
    let after = storage.crash(CrashMode::LoseUnsynced);
    drop(log);
    let log = open(&after);
    let state = log.producer_state(9).expect("producer 9 survives the reload");
    assert_eq!(state.batches.back().map(|b| (b.last_seq, b.last_offset)), Some((1, data + 1)));
    assert_eq!(log.first_unstable_offset(), None);
}

#[test]
fn a_marker_that_bumped_the_epoch_is_kept_for_fencing() {
    let log = open(&SimStorage::new());
    txn(&log, 3, 0, &[(b"a", Some(b"x"))], 0);
    // A coordinator timing the transaction out aborts it with a bumped epoch.
    let abort = marker(&log, 3, 1, false, 0);
    for (i, now) in [10_000, 20_000, 30_000].into_iter().enumerate() {
        seal_more(&log, &format!("fill-{i}"), 0);
        log.clean(now, BIG_MAP).unwrap();
    }
    let kept = batch_at(&log, abort).expect("the epoch-bumping marker is producer 3's newest batch");
    assert_eq!((kept.producer_id(), kept.producer_epoch()), (3, 1));
    assert!(kept.is_control());
    assert_eq!(log.producer_state(3).map(|s| s.epoch), Some(1));
}

#[test]
fn reopen_after_cleaning_keeps_the_lso_and_the_aborted_index() {
    let storage = SimStorage::new();
    let log = open(&storage);
    plain(&log, b"k", Some(b"v"), 0);
    txn(&log, 1, 0, &[(b"k", Some(b"aborted"))], 0);
    marker(&log, 1, 0, false, 0);
    seal_more(&log, "fill-1", 0);
    txn(&log, 2, 0, &[(b"k", Some(b"open"))], 0);
    seal_more(&log, "fill-2", 0);
    let lso = log.last_stable_offset();
    let view = committed_view(&log);
    log.clean(10_000, BIG_MAP).unwrap();
    let check = |log: &Log| {
        assert_eq!(log.last_stable_offset().min(lso), lso);
        assert_eq!(log.first_unstable_offset(), Some(lso));
        assert_eq!(log.aborted_transactions(0, log.log_end_offset()), vec![(1, 1)]);
        assert_eq!(committed_view(log), view);
    };
    check(&log);
    log.flush().unwrap();
    let crashed = storage.crash(CrashMode::LoseUnsynced);
    log.close().unwrap();
    drop(log);
    for storage in [storage, crashed] {
        let log = open(&storage);
        log.update_high_watermark(log.log_end_offset()).unwrap();
        check(&log);
    }
}

// ----- property: the read_committed view is what cleaning preserves -----------------------

#[derive(Debug, Clone)]
enum Op {
    Plain { key: u8, value: Option<u8> },
    TxnWrite { pid: i64, key: u8, value: Option<u8> },
    EndTxn { pid: i64, commit: bool },
    Clean { advance_ms: i64, tiny_map: bool },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let value = prop::option::weighted(0.85, 0u8..4);
    prop_oneof![
        4 => (0u8..6, value.clone()).prop_map(|(key, value)| Op::Plain { key, value }),
        4 => (1i64..4, 0u8..6, value).prop_map(|(pid, key, value)| Op::TxnWrite { pid, key, value }),
        2 => (1i64..4, any::<bool>()).prop_map(|(pid, commit)| Op::EndTxn { pid, commit }),
        2 => (0i64..1_500, any::<bool>()).prop_map(|(advance_ms, tiny_map)| Op::Clean { advance_ms, tiny_map }),
        1 => Just(Op::Reopen),
    ]
}

fn run(ops: Vec<Op>, delete_retention_ms: i64) -> Result<(), TestCaseError> {
    let storage = SimStorage::new();
    let open = || PartitionLog::open(storage.clone(), DIR, config(delete_retention_ms), 0).unwrap();
    let mut log = open();
    let mut now = 0i64;
    let mut seqs = [0i32; 4];
    let mut open_txns = [false; 4];
    let value_of = |v: Option<u8>| v.map(|v| vec![v; 40]);
    for op in ops {
        match op {
            Op::Plain { key, value } => {
                plain(&log, &[key], value_of(value).as_deref(), now);
            }
            Op::TxnWrite { pid, key, value } => {
                let seq = &mut seqs[pid as usize];
                txn(&log, pid, *seq, &[(&[key], value_of(value).as_deref())], now);
                *seq += 1;
                open_txns[pid as usize] = true;
            }
            Op::EndTxn { pid, commit } => {
                if std::mem::take(&mut open_txns[pid as usize]) {
                    marker(&log, pid, 0, commit, now);
                }
            }
            Op::Clean { advance_ms, tiny_map } => {
                now += advance_ms;
                let (lso, view) = (log.last_stable_offset(), committed_view(&log));
                log.clean(now, if tiny_map { 120 } else { BIG_MAP }).unwrap();
                prop_assert_eq!(log.last_stable_offset(), lso);
                prop_assert_eq!(committed_view(&log), view, "read_committed view changed by a pass at {}", now);
            }
            Op::Reopen => {
                let view = committed_view(&log);
                log.close().unwrap();
                drop(log);
                log = open();
                log.update_high_watermark(log.log_end_offset()).unwrap();
                prop_assert_eq!(committed_view(&log), view, "read_committed view changed by a reopen");
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn read_committed_view_is_unchanged_by_cleaning(ops in prop::collection::vec(op(), 1..150)) {
        run(ops, DELETE_RETENTION_MS)?;
    }

    #[test]
    fn read_committed_view_is_unchanged_by_cleaning_with_immediate_expiry(ops in prop::collection::vec(op(), 1..150)) {
        run(ops, 0)?;
    }
}
