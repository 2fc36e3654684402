//! Test helper for `tests/crash.rs`: appends 16 KiB batches from several threads with the
//! default durability policy (fsync before ack) and prints `offset id` for every
//! acknowledged append, until it is killed.
//!
//! Usage: `osprey-storage-crash-appender <partition-dir> <first-id>`. The batch with id
//! `n` is `batch::testing::build` with `seed = n` and `producer_id = n`, so the test can
//! regenerate any batch it finds in the log and compare it byte for byte.

use std::io::Write;
use std::sync::Arc;

use osprey_storage::batch::testing::{build, BatchSpec};
use osprey_storage::{LogConfig, PartitionLog, StdStorage};

/// Records per batch and bytes per batch.
pub const RECORDS: i32 = 4;
pub const BATCH_BYTES: usize = 16 * 1024;
const THREADS: u64 = 4;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(first_id)) = (args.next(), args.next().and_then(|s| s.parse::<u64>().ok())) else {
        eprintln!("usage: osprey-storage-crash-appender <dir> <first-id>");
        std::process::exit(2);
    };
    // Small segments so kills also land around rolls.
    let config = LogConfig { segment_bytes: 512 * 1024, ..LogConfig::default() };
    let log = match PartitionLog::open(StdStorage, &dir, config, 0) {
        Ok(log) => Arc::new(log),
        Err(e) => {
            eprintln!("open {dir}: {e}");
            std::process::exit(1);
        }
    };
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0.. {
                    let id = first_id + i * THREADS + t;
                    let spec = BatchSpec {
                        records: RECORDS,
                        body_len: BATCH_BYTES - osprey_storage::batch::HEADER_LEN,
                        seed: id,
                        producer_id: id as i64,
                        ..Default::default()
                    };
                    let b = build(spec);
                    let info = log.append(&b, 0, 0).expect("append");
                    log.wait_for_ack(&info).expect("fsync");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{} {id}", info.base_offset).expect("stdout");
                    out.flush().expect("stdout");
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}
