//! The commit journal (`osprey_storage::journal`): several logs on the simulated disk
//! acknowledged through one journal, then power losses. Every acknowledged batch must
//! come back (from the segments or the journal), nothing truncated may come back, and
//! what a log holds after recovery is always a prefix of what was appended to it.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::{batch, split, stamped};
use osprey_storage::{CrashMode, Flusher, Journal, LogConfig, PartitionLog, SimStorage, Storage};
use proptest::prelude::*;

const DATA: &str = "/data";
const LOGS: usize = 3;

fn config() -> LogConfig {
    LogConfig { segment_bytes: 2048, index_interval_bytes: 128, ..LogConfig::default() }
}

fn dir(i: usize) -> String {
    format!("{DATA}/t-{i}")
}

/// One broker process: its disk, journal, logs and flusher threads (joined on drop, so a
/// restart on the same disk never overlaps the previous process's I/O).
struct Node {
    storage: SimStorage,
    journal: Option<Arc<Journal<SimStorage>>>,
    logs: Vec<Arc<PartitionLog<SimStorage>>>,
    flusher: Flusher,
}

/// Opens the logs (recovering them) and, with `journal`, the journal, attaching each log.
fn open(storage: &SimStorage, journal: bool, max_file_bytes: u64) -> Node {
    let j = journal.then(|| Journal::open(storage.clone(), DATA.as_ref(), max_file_bytes).unwrap());
    let mut logs = Vec::new();
    for i in 0..LOGS {
        let log = Arc::new(PartitionLog::open(storage.clone(), dir(i), config(), 0).unwrap());
        if let Some(j) = &j {
            j.attach(&log).unwrap();
        }
        logs.push(log);
    }
    if let Some(j) = &j {
        j.recovered();
    }
    Node { storage: storage.clone(), journal: j, logs, flusher: Flusher::new(2).unwrap() }
}

/// Waits for `offset` of `log` to be durable, as the server's acks=all path does.
fn ack(log: &Arc<PartitionLog<SimStorage>>, offset: i64, flusher: &Flusher) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    log.on_durable(offset, flusher, Box::new(move |r| tx.send(r.map_err(|e| e.to_string())).unwrap()));
    rx.recv_timeout(Duration::from_secs(20)).map_err(|_| "no acknowledgement within 20 s".to_string())?
}

fn read_all(log: &PartitionLog<SimStorage>) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let slice = log.read(offset, 1 << 20).unwrap();
        assert!(!slice.records.is_empty());
        out.extend(split(&slice.records));
        offset = slice.next_offset;
    }
    out
}

#[test]
fn acknowledged_appends_survive_a_power_loss_through_the_journal_and_not_without_it() {
    let storage = SimStorage::new();
    let node = open(&storage, true, 1 << 20);
    let flusher = &node.flusher;
    let mut expected = vec![Vec::new(); LOGS];
    for round in 0..10u64 {
        for (i, log) in node.logs.iter().enumerate() {
            let b = batch(round * 10 + i as u64, 2, 60);
            let info = log.append(&b, 0, 0).unwrap();
            ack(log, info.last_offset, flusher).unwrap();
            expected[i].push((info.base_offset, stamped(b, info.base_offset, 0)));
        }
    }
    let fsyncs: u64 = node.logs.iter().map(|l| l.fsync_stats().count).sum();
    let journal_fsyncs = node.journal.as_ref().unwrap().stats().fsyncs.count;
    assert!(journal_fsyncs > 0);
    assert_eq!(fsyncs, 0, "the logs' own segments were fsynced on the ack path");

    let crashed = storage.crash(CrashMode::LoseUnsynced);
    // Without the journal the acknowledged batches are gone: they were only in its file.
    let without = open(&crashed.crash(CrashMode::LoseUnsynced), false, 1 << 20);
    assert!(without.logs.iter().all(|l| l.log_end_offset() == 0), "segments held data nobody fsynced");
    let with = open(&crashed, true, 1 << 20);
    for (i, log) in with.logs.iter().enumerate() {
        assert_eq!(read_all(log), expected[i], "log {i}");
    }
    assert_eq!(with.journal.as_ref().unwrap().stats().replayed, 30);
    // Replayed once: the next recovery finds everything in the segments.
    let again = open(&with.storage.crash(CrashMode::LoseUnsynced), true, 1 << 20);
    assert_eq!(again.journal.as_ref().unwrap().stats().replayed, 0);
    for (i, log) in again.logs.iter().enumerate() {
        assert_eq!(read_all(log), expected[i], "log {i}");
    }
}

#[test]
fn a_truncated_batch_never_comes_back_from_the_journal() {
    let storage = SimStorage::new();
    let node = open(&storage, true, 1 << 20);
    let flusher = &node.flusher;
    let log = &node.logs[0];
    let mut kept = Vec::new();
    for seed in 0..5u64 {
        let b = batch(seed, 1, 50);
        let info = log.append(&b, 0, 0).unwrap();
        ack(log, info.last_offset, flusher).unwrap();
        if seed < 2 {
            kept.push((info.base_offset, stamped(b, info.base_offset, 0)));
        }
    }
    assert_eq!(log.truncate_to(2).unwrap(), 2);
    let recovered = open(&storage.crash(CrashMode::LoseUnsynced), true, 1 << 20);
    assert_eq!(read_all(&recovered.logs[0]), kept);
}

#[test]
fn retired_journal_files_are_deleted_once_their_logs_are_fsynced() {
    let storage = SimStorage::new();
    let node = open(&storage, true, 4096);
    let flusher = &node.flusher;
    let mut expected = Vec::new();
    for seed in 0..100u64 {
        let log = &node.logs[(seed % LOGS as u64) as usize];
        let b = batch(seed, 1, 100);
        let info = log.append(&b, 0, 0).unwrap();
        ack(log, info.last_offset, flusher).unwrap();
        expected.push((seed % LOGS as u64, info.base_offset, stamped(b, info.base_offset, 0)));
    }
    let journal = node.journal.as_ref().unwrap();
    assert!(journal.stats().retired >= 2, "{:?}", journal.stats());
    let files = storage.durable_names(journal.dir());
    assert!(files.len() <= 2, "{files:?}");
    let recovered = open(&storage.crash(CrashMode::LoseUnsynced), true, 4096);
    for (i, log) in recovered.logs.iter().enumerate() {
        let want: Vec<_> = expected.iter().filter(|(l, ..)| *l == i as u64).map(|(_, o, b)| (*o, b.clone())).collect();
        assert_eq!(read_all(log), want, "log {i}");
    }
}

#[test]
fn appends_past_the_buffer_bound_are_made_durable_by_their_own_segment() {
    // 4 KiB files: the buffer holds at most 4 KiB, and nothing writes it while no one
    // waits, so the unacknowledged appends below fill it and the rest are not journaled.
    let storage = SimStorage::new();
    let node = open(&storage, true, 4096);
    let log = &node.logs[0];
    let mut expected = Vec::new();
    let mut last = 0;
    for seed in 0..12u64 {
        let b = batch(seed, 1, 1000);
        let info = log.append(&b, 0, 0).unwrap();
        expected.push((info.base_offset, stamped(b, info.base_offset, 0)));
        last = info.last_offset;
    }
    ack(log, last, &node.flusher).unwrap();
    assert!(log.fsync_stats().count > 0, "the log did not fsync its own segment");
    assert!(node.journal.as_ref().unwrap().stats().entries < 12, "every append was journaled");
    let recovered = open(&storage.crash(CrashMode::LoseUnsynced), true, 4096);
    assert_eq!(read_all(&recovered.logs[0]), expected);
}

#[test]
fn a_log_created_again_under_a_journaled_name_never_gets_the_old_ones_batches() {
    let storage = SimStorage::new();
    let node = open(&storage, true, 1 << 20);
    let journal = node.journal.as_ref().unwrap();
    for seed in 0..3u64 {
        let info = node.logs[0].append(&batch(seed, 1, 80), 0, 0).unwrap();
        ack(&node.logs[0], info.last_offset, &node.flusher).unwrap();
    }
    // The partition goes (its directory removed durably) and comes back empty under the
    // same name, while the journal still holds the old log's batches.
    node.logs[0].close().unwrap();
    storage.remove_dir_all(dir(0).as_ref()).unwrap();
    storage.sync_dir(DATA.as_ref()).unwrap();
    let again = Arc::new(PartitionLog::open(storage.clone(), dir(0), config(), 0).unwrap());
    journal.attach(&again).unwrap();
    let b = batch(100, 1, 80);
    let info = again.append(&b, 0, 0).unwrap();
    ack(&again, info.last_offset, &node.flusher).unwrap();

    let recovered = open(&storage.crash(CrashMode::LoseUnsynced), true, 1 << 20);
    assert_eq!(read_all(&recovered.logs[0]), vec![(0, stamped(b, 0, 0))]);
}

#[test]
fn a_disk_failing_fsyncs_fails_the_waiters_instead_of_leaving_them_waiting() {
    let storage = SimStorage::new();
    let node = open(&storage, true, 1 << 20);
    let log = &node.logs[1];
    // The first append of an epoch writes the epoch checkpoint (fsynced): before the fault.
    let info = log.append(&batch(0, 1, 80), 0, 0).unwrap();
    ack(log, info.last_offset, &node.flusher).unwrap();
    storage.set_fail_sync(true);
    let info = log.append(&batch(1, 1, 80), 0, 0).unwrap();
    let err = ack(log, info.last_offset, &node.flusher).unwrap_err();
    assert!(!err.contains("no acknowledgement"), "the waiter was left waiting: {err}");
    assert_eq!(node.journal.as_ref().unwrap().stats().fsyncs.errors, 1);
}

#[derive(Debug, Clone)]
enum Op {
    Append { log: usize, records: i32, body: usize, acked: bool },
    Truncate { log: usize, at: u16 },
    Crash { seed: u64 },
    CleanRestart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..LOGS, 1..4i32, 10..300usize, prop::bool::weighted(0.8))
            .prop_map(|(log, records, body, acked)| Op::Append { log, records, body, acked }),
        1 => (0..LOGS, any::<u16>()).prop_map(|(log, at)| Op::Truncate { log, at }),
        1 => any::<u64>().prop_map(|seed| Op::Crash { seed }),
        1 => Just(Op::CleanRestart),
    ]
}

/// Per log: the batches appended and not truncated, and how many of them are known
/// durable (acknowledged, or found after a crash).
#[derive(Default, Clone)]
struct Model {
    batches: Vec<(i64, i64, Vec<u8>)>,
    durable: usize,
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let max_file_bytes = 4096;
    let mut node = open(&SimStorage::new(), true, max_file_bytes);
    let mut models = vec![Model::default(); LOGS];
    let mut seed = 0u64;
    for op in ops {
        match op {
            Op::Append { log, records, body, acked } => {
                seed += 1;
                let b = batch(seed, records, body);
                let l = &node.logs[log];
                let info = l.append(&b, 0, 0).unwrap();
                let m = &mut models[log];
                let leo = m.batches.last().map_or(0, |(_, last, _)| last + 1);
                prop_assert_eq!(info.base_offset, leo);
                m.batches.push((info.base_offset, info.last_offset, stamped(b, info.base_offset, 0)));
                if acked {
                    ack(l, info.last_offset, &node.flusher).map_err(TestCaseError::fail)?;
                    m.durable = m.batches.len();
                }
            }
            Op::Truncate { log, at } => {
                let m = &mut models[log];
                if m.batches.is_empty() {
                    continue;
                }
                let (base, ..) = m.batches[at as usize % m.batches.len()];
                node.logs[log].truncate_to(base).unwrap();
                m.batches.retain(|(_, last, _)| *last < base);
                m.durable = m.durable.min(m.batches.len());
            }
            Op::Crash { seed } => {
                let crashed = node.storage.crash(CrashMode::TearAndGarble { seed });
                node = open(&crashed, true, max_file_bytes);
                for (i, m) in models.iter_mut().enumerate() {
                    let got = read_all(&node.logs[i]);
                    prop_assert!(
                        got.len() >= m.durable,
                        "log {}: {} batches, {} acknowledged",
                        i,
                        got.len(),
                        m.durable
                    );
                    prop_assert!(got.len() <= m.batches.len(), "log {}: more batches than appended", i);
                    for (g, (base, _, bytes)) in got.iter().zip(&m.batches) {
                        prop_assert_eq!(g.0, *base, "log {}", i);
                        prop_assert!(&g.1 == bytes, "log {}: batch at {} differs", i, base);
                    }
                    m.batches.truncate(got.len());
                    m.durable = got.len();
                }
            }
            Op::CleanRestart => {
                for l in &node.logs {
                    l.close().unwrap();
                }
                let storage = node.storage.clone();
                drop(node);
                node = open(&storage, true, max_file_bytes);
                for (i, m) in models.iter_mut().enumerate() {
                    let want: Vec<_> = m.batches.iter().map(|(b, _, bytes)| (*b, bytes.clone())).collect();
                    prop_assert_eq!(read_all(&node.logs[i]), want, "log {}", i);
                    m.durable = m.batches.len();
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn logs_acknowledged_through_the_journal_recover_as_appended(ops in prop::collection::vec(op(), 1..80)) {
        run(ops)?;
    }
}
