//! Thousands of partition logs sharing one `FdBudget` stay under it: counted with the
//! process's real descriptors (/proc/self/fd), on the real disk. One test per binary, so
//! no other test opens files meanwhile.

mod common;

use common::{batch, split, TempDir};
use osprey_storage::{FdBudget, FdLimited, LogConfig, PartitionLog, StdStorage};

const PARTITIONS: usize = 3000;
const BUDGET: usize = 256;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

#[test]
fn three_thousand_logs_read_and_written_stay_under_the_descriptor_budget() {
    let tmp = TempDir::new("fd-budget");
    let budget = FdBudget::new(BUDGET);
    let storage = FdLimited::new(StdStorage, budget.clone());
    // flush.messages: appends are acknowledged without waiting for an fsync, so 3000
    // partitions do not cost 3000 fsyncs here; the descriptor behaviour is the same.
    let config = LogConfig { segment_bytes: 4096, flush_messages: Some(u64::MAX), ..LogConfig::default() };
    let baseline = open_fds();
    let mut logs = Vec::with_capacity(PARTITIONS);
    let mut peak = 0;
    for p in 0..PARTITIONS {
        let log = PartitionLog::open(storage.clone(), tmp.path().join(format!("t-{p}")), config.clone(), 0).unwrap();
        // Two sealed segments and an active one per partition.
        for seed in 0..3 {
            log.append(&batch(seed, 1, 3000), 0, 0).unwrap();
        }
        logs.push(log);
        peak = peak.max(open_fds());
    }
    for round in 0..2 {
        for log in &logs {
            for offset in 0..3 {
                let slice = log.read(offset, 8192).unwrap();
                assert_eq!(split(&slice.records)[0].0, offset, "round {round}");
            }
            peak = peak.max(open_fds());
        }
    }
    assert!(logs.iter().map(|l| l.segment_count()).sum::<usize>() >= 3 * PARTITIONS);
    assert!(budget.open_count() <= BUDGET);
    // Slack for descriptors in flight (one operation at a time here) and the test
    // harness's own.
    assert!(peak <= baseline + BUDGET + 8, "peak {peak} descriptors, baseline {baseline}, budget {BUDGET}");
    for log in &logs {
        log.close().unwrap();
    }
}
