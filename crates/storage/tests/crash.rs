//! Crash test: a child process appends with the default policy and reports each
//! acknowledged offset; it is SIGKILLed at a random moment; the log is reopened
//! (recovery) and every acknowledged batch must be there byte for byte, and every batch
//! in the log must be one the child wrote, whole and CRC-valid.
//!
//! `OSPREY_CRASH_ROUNDS` sets the rounds (default 200); `OSPREY_CRASH_SEED` replays one
//! run's kill delays.

mod common;

use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{split, TempDir};
use osprey_storage::batch::testing::{build, BatchSpec};
use osprey_storage::{LogConfig, PartitionLog, StdStorage};

const RECORDS: i32 = 4;
const BATCH_BYTES: usize = 16 * 1024;
/// Rounds that reuse one directory, so recovery also runs on already-recovered logs.
const ROUNDS_PER_DIR: u32 = 10;

fn expected_batch(id: u64, offset: i64) -> Vec<u8> {
    let spec = BatchSpec {
        records: RECORDS,
        body_len: BATCH_BYTES - osprey_storage::batch::HEADER_LEN,
        seed: id,
        producer_id: id as i64,
        ..Default::default()
    };
    let mut b = build(spec);
    osprey_storage::batch::stamp(&mut b, offset, 0);
    b
}

#[test]
fn sigkilled_appender_loses_no_acknowledged_batch_and_leaves_no_garbage() {
    let rounds: u32 = std::env::var("OSPREY_CRASH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let seed: u64 = std::env::var("OSPREY_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("crash test: {rounds} rounds, OSPREY_CRASH_SEED={seed}");
    let mut rng = seed | 1;
    let started = Instant::now();
    let mut tmp = TempDir::new("crash");
    let mut acked: HashMap<i64, u64> = HashMap::new();
    let mut next_id = 0u64;
    let mut total_acked = 0usize;
    for round in 0..rounds {
        if round % ROUNDS_PER_DIR == 0 {
            tmp = TempDir::new("crash");
            acked.clear();
        }
        let dir = tmp.path().join("topic-0");
        let mut child = Command::new(env!("CARGO_BIN_EXE_osprey-storage-crash-appender"))
            .arg(&dir)
            .arg(next_id.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn crash appender");
        next_id += 1 << 32;
        let delay_ms = 5 + xorshift(&mut rng) % 95;
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().expect("SIGKILL the appender");
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let _ = child.wait();
        // Only whole lines count: the kill can land mid-line.
        let complete = out.rfind('\n').map_or("", |i| &out[..=i]);
        for line in complete.lines() {
            let mut it = line.split(' ');
            let offset: i64 = it.next().unwrap().parse().unwrap();
            let id: u64 = it.next().unwrap().parse().unwrap();
            assert!(acked.insert(offset, id).is_none_or(|old| old == id), "offset {offset} acknowledged twice");
            total_acked += 1;
        }

        let log = PartitionLog::open(StdStorage, &dir, LogConfig::default(), 0).unwrap();
        let mut found = HashMap::new();
        let mut offset = log.log_start_offset();
        while offset < log.log_end_offset() {
            let slice = log.read(offset, 1 << 20).unwrap();
            for (base, bytes) in split(&slice.records) {
                let header = osprey_storage::batch::validate(&bytes, u64::MAX).unwrap();
                let id = header.producer_id as u64;
                assert_eq!(
                    bytes,
                    expected_batch(id, base),
                    "round {round}: batch at {base} is not one the child wrote"
                );
                found.insert(base, id);
            }
            offset = slice.next_offset;
        }
        for (offset, id) in &acked {
            assert_eq!(found.get(offset), Some(id), "round {round} (seed {seed}): acknowledged offset {offset} lost");
        }
    }
    eprintln!("crash test: {rounds} rounds, {total_acked} acknowledged batches checked, {:?}", started.elapsed());
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}
