//! Property test: `PartitionLog` on the simulated disk against a plain in-memory model
//! (a list of batches), through random appends, reads, rolls, truncations, DeleteRecords
//! with retention, clean reopens and power losses that tear unsynced writes.

mod common;

use common::{batch, idempotent, split, stamped};
use osprey_storage::{CrashMode, LogConfig, PartitionLog, SimStorage, StorageError};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Append a batch and wait for its ack (so it is durable).
    Append {
        records: i32,
        body: usize,
        new_epoch: bool,
    },
    /// Append without waiting: may be lost (as a suffix) by a crash.
    AppendUnacked {
        records: i32,
        body: usize,
    },
    /// An idempotent producer's next batch (acked), or a retry of its last one.
    Idempotent {
        pid: i64,
        records: i32,
        retry: bool,
    },
    Read {
        at: u16,
        max_bytes: usize,
    },
    Truncate {
        at: u16,
    },
    DeleteRecords {
        at: u16,
    },
    Retention,
    Reopen,
    Crash {
        seed: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1..5i32, 0..700usize, any::<bool>()).prop_map(|(records, body, e)| Op::Append { records, body, new_epoch: e && body % 7 == 0 }),
        3 => (1..5i32, 0..700usize).prop_map(|(records, body)| Op::AppendUnacked { records, body }),
        3 => (0..3i64, 1..4i32, any::<bool>()).prop_map(|(pid, records, retry)| Op::Idempotent { pid, records, retry }),
        3 => (any::<u16>(), 1..3000usize).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => any::<u16>().prop_map(|at| Op::Truncate { at }),
        1 => any::<u16>().prop_map(|at| Op::DeleteRecords { at }),
        1 => Just(Op::Retention),
        1 => Just(Op::Reopen),
        1 => any::<u64>().prop_map(|seed| Op::Crash { seed }),
    ]
}

/// Producer id, first sequence, records.
type Idempotence = (i64, i32, i32);
/// Base offset, last offset, stored bytes, idempotence.
type ModelBatch = (i64, i64, Vec<u8>, Option<Idempotence>);

struct Model {
    /// (base offset, last offset, stored bytes, for idempotent batches (producer id, first
    /// sequence, records)), in order.
    batches: Vec<ModelBatch>,
    log_start: i64,
    /// Batches known durable (acknowledged, or present after a crash and reopen).
    durable: usize,
    epoch: i32,
    next_seed: u64,
}

impl Model {
    fn leo(&self) -> i64 {
        self.batches.last().map_or(self.log_start, |b| b.1 + 1).max(self.log_start)
    }

    fn visible(&self) -> Vec<(i64, Vec<u8>)> {
        self.batches.iter().filter(|b| b.1 >= self.log_start).map(|b| (b.0, b.2.clone())).collect()
    }

    /// An offset in `[log_start, leo]` chosen by `at`.
    fn pick(&self, at: u16) -> i64 {
        let span = self.leo() - self.log_start + 1;
        self.log_start + i64::from(at) % span
    }
}

fn config() -> LogConfig {
    LogConfig { segment_bytes: 2048, index_interval_bytes: 128, ..LogConfig::default() }
}

const DIR: &str = "/data/t-0";

fn read_all(log: &PartitionLog<SimStorage>) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let slice = log.read(offset, 4096).unwrap();
        assert!(!slice.records.is_empty());
        out.extend(split(&slice.records));
        offset = slice.next_offset;
    }
    out
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut storage = SimStorage::new();
    let mut log = PartitionLog::open(storage.clone(), DIR, config(), 0).unwrap();
    let mut m = Model { batches: Vec::new(), log_start: 0, durable: 0, epoch: 0, next_seed: 0 };
    for op in ops {
        match op {
            Op::Append { records, body, .. } | Op::AppendUnacked { records, body } if records > 0 => {
                let acked = matches!(op, Op::Append { .. });
                if let Op::Append { new_epoch: true, .. } = op {
                    m.epoch += 1;
                }
                let seed = m.next_seed;
                m.next_seed += 1;
                let info = log.append(&batch(seed, records, body), m.epoch, 0).unwrap();
                prop_assert_eq!(info.base_offset, m.leo());
                m.batches.push((
                    info.base_offset,
                    info.last_offset,
                    stamped(batch(seed, records, body), info.base_offset, m.epoch),
                    None,
                ));
                if acked {
                    log.wait_for_ack(&info).unwrap();
                    m.durable = m.batches.len();
                }
            }
            Op::Append { .. } | Op::AppendUnacked { .. } => {}
            Op::Idempotent { pid, records, retry } => {
                // The producer's last batch still in the model (the log may have lost the
                // rest to truncation or a crash, and then forgets them too).
                let last =
                    m.batches.iter().rev().find_map(|b| b.3.filter(|x| x.0 == pid).map(|x| (b.0, b.1, x.1, x.2)));
                match (retry, last) {
                    (true, Some((base, last_offset, seq, n))) if base >= m.log_start => {
                        let info = log.append(&idempotent(pid, 0, seq, n), m.epoch, 0).unwrap();
                        prop_assert!(info.duplicate, "retry of {}/{} not recognised", pid, seq);
                        prop_assert_eq!((info.base_offset, info.last_offset), (base, last_offset));
                    }
                    _ => {
                        let seq = last.map_or(0, |l| l.2 + l.3);
                        let info = log.append(&idempotent(pid, 0, seq, records), m.epoch, 0).unwrap();
                        prop_assert!(!info.duplicate);
                        prop_assert_eq!(info.base_offset, m.leo());
                        log.wait_for_ack(&info).unwrap();
                        let bytes = stamped(idempotent(pid, 0, seq, records), info.base_offset, m.epoch);
                        m.batches.push((info.base_offset, info.last_offset, bytes, Some((pid, seq, records))));
                        m.durable = m.batches.len();
                    }
                }
            }
            Op::Read { at, max_bytes } => {
                let offset = m.pick(at);
                let slice = log.read(offset, max_bytes).unwrap();
                let got = split(&slice.records);
                let want: Vec<_> = m
                    .visible()
                    .into_iter()
                    .filter(|b| {
                        let last = m.batches.iter().find(|x| x.0 == b.0).unwrap().1;
                        last >= offset
                    })
                    .collect();
                if want.is_empty() {
                    prop_assert!(got.is_empty());
                } else {
                    prop_assert!(!got.is_empty(), "read at {} returned nothing", offset);
                    prop_assert_eq!(&got[..], &want[..got.len()]);
                    let bytes: usize = got.iter().map(|b| b.1.len()).sum();
                    prop_assert!(got.len() == 1 || bytes <= max_bytes);
                }
            }
            Op::Truncate { at } => {
                let offset = m.pick(at);
                let leo = log.truncate_to(offset).unwrap();
                m.batches.retain(|b| b.1 < offset);
                prop_assert_eq!(leo, m.leo());
                m.durable = m.durable.min(m.batches.len());
                m.epoch = log.leader_epochs().last().map_or(m.epoch, |e| e.0.max(m.epoch));
            }
            Op::DeleteRecords { at } => {
                // The broker only moves the high watermark over durable data.
                log.flush().unwrap();
                m.durable = m.batches.len();
                log.update_high_watermark(log.log_end_offset()).unwrap();
                let offset = m.pick(at);
                prop_assert_eq!(log.delete_records_before(offset).unwrap(), offset.max(m.log_start));
                m.log_start = m.log_start.max(offset);
                if offset > m.log_start {
                    let below = log.read(offset - 1, 10);
                    prop_assert!(matches!(below, Err(StorageError::OffsetOutOfRange { .. })), "read below log start");
                }
            }
            Op::Retention => {
                log.retention_pass(0).unwrap();
                prop_assert_eq!(log.log_start_offset(), m.log_start);
            }
            Op::Reopen => {
                log.close().unwrap();
                log = PartitionLog::open(storage.clone(), DIR, config(), 0).unwrap();
                m.durable = m.batches.len();
            }
            Op::Crash { seed } => {
                drop(log);
                storage = storage.crash(CrashMode::TearAndGarble { seed });
                log = PartitionLog::open(storage.clone(), DIR, config(), 0).unwrap();
                let got = read_all(&log);
                let visible = m.visible();
                let durable_visible = m.batches[..m.durable].iter().filter(|b| b.1 >= m.log_start).count();
                prop_assert!(got.len() >= durable_visible, "lost acknowledged batches");
                prop_assert!(got.len() <= visible.len());
                prop_assert_eq!(&got[..], &visible[..got.len()]);
                let lost = visible.len() - got.len();
                m.batches.truncate(m.batches.len() - lost);
                m.durable = m.batches.len();
                m.log_start = log.log_start_offset();
            }
        }
        prop_assert_eq!(log.log_end_offset(), m.leo());
        prop_assert_eq!(log.log_start_offset(), m.log_start);
    }
    log.close().unwrap();
    let log = PartitionLog::open(storage, DIR, config(), 0).unwrap();
    prop_assert_eq!(read_all(&log), m.visible());
    Ok(())
}

proptest! {
    // 256 cases by default; PROPTEST_CASES raises it for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn log_matches_in_memory_model(ops in prop::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
