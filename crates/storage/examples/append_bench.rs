//! Append throughput with the default policy (fsync before ack, group commit).
//!
//! `cargo run --release -p osprey-storage --example append_bench -- [dir] [threads] [batches-per-thread] [batch-bytes]`
//! Appends from `threads` threads, each waiting for its ack before the next append, and
//! prints MB/s, acks/s and fsync statistics.

use std::sync::Arc;
use std::time::Instant;

use osprey_storage::batch::testing::{build, BatchSpec};
use osprey_storage::{LogConfig, PartitionLog, StdStorage};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir =
        args.first().cloned().unwrap_or_else(|| std::env::temp_dir().join("osprey-append-bench").display().to_string());
    let threads: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8);
    let per_thread: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(500);
    let batch_bytes: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(16 * 1024);
    let _ = std::fs::remove_dir_all(&dir);
    let log = Arc::new(PartitionLog::open(StdStorage, &dir, LogConfig::default(), 0).expect("open"));
    let template = build(BatchSpec { records: 10, body_len: batch_bytes - 61, ..Default::default() });
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let log = log.clone();
            let template = template.clone();
            std::thread::spawn(move || {
                for _ in 0..per_thread {
                    let info = log.append(&template, 0, 0).expect("append");
                    log.wait_for_ack(&info).expect("ack");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("appender thread");
    }
    let secs = started.elapsed().as_secs_f64();
    let total = threads * per_thread;
    let bytes = total as f64 * batch_bytes as f64;
    let stats = log.fsync_stats();
    println!(
        "{threads} threads x {per_thread} acked appends of {batch_bytes} B: {:.1} MB/s, {:.0} acks/s, {} fsyncs ({:.1} appends/fsync), fsync mean {:?} max {:?}",
        bytes / secs / 1e6,
        total as f64 / secs,
        stats.count,
        total as f64 / stats.count.max(1) as f64,
        stats.total / stats.count.max(1) as u32,
        stats.max,
    );
    let _ = std::fs::remove_dir_all(&dir);
}
