//! The storage engine's figures against the raw disk, measured in the same run:
//!
//! * raw: sequential 16 KiB `pwrite` + `fdatasync` each (1 writer), and 8 writers
//!   sharing fsyncs (group commit: each waits for an fsync that started after its
//!   write);
//! * `PartitionLog::append` + `wait_for_ack` with the default durability (fsync before
//!   ack, group commit), 16 KiB batches, 1 and 8 appenders, and the ratio to raw;
//! * the latency the group-committed fsync adds to an append (append returned → ack),
//!   p50/p99/max;
//! * sequential read throughput (`read` in 1 MiB slices, page cache as the run left it);
//! * recovery scan speed: reopen after an unclean stop, the last segment's batches all
//!   CRC-checked, in MB/s.
//!
//! `cargo run --release -p osprey-storage --example storage_figures -- [dir] [seconds-per-figure] [rounds]`
//! (default dir: a fresh directory under /tmp, removed at the end).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use osprey_storage::batch::testing::{build, BatchSpec};
use osprey_storage::{LogConfig, PartitionLog, StdStorage};

const BATCH_BYTES: usize = 16 * 1024;
const MB: f64 = 1_000_000.0;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let given = args.first().filter(|d| !d.is_empty());
    let root = given.map_or_else(|| PathBuf::from(format!("/tmp/osprey-figures-{nanos}")), PathBuf::from);
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5).max(1);
    let window = Duration::from_secs_f64(secs);
    std::fs::create_dir_all(&root).expect("create dir");
    println!("dir {}, {secs} s per figure, {rounds} rounds, {BATCH_BYTES} B batches", root.display());

    // The disk's speed drifts a lot from second to second (shared cloud volume), so raw
    // and log runs are interleaved and the per-round ratios' median is reported.
    let mut rows: Vec<[Rate; 4]> = Vec::new();
    let (mut lat1, mut lat8) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let raw1 = raw_disk(&root.join(format!("raw1-{round}")), 1, window);
        let (log1, l1) = log_appends(&root.join(format!("log1-{round}")), 1, window);
        let raw8 = raw_disk(&root.join(format!("raw8-{round}")), 8, window);
        let (log8, l8) = log_appends(&root.join(format!("log8-{round}")), 8, window);
        println!(
            "round {round}: raw1 {:6.1} log1 {:6.1} ({:.2})  raw8 {:6.1} log8 {:6.1} ({:.2}) MB/s",
            raw1.mb_s,
            log1.mb_s,
            log1.mb_s / raw1.mb_s,
            raw8.mb_s,
            log8.mb_s,
            log8.mb_s / raw8.mb_s
        );
        lat1.extend(l1);
        lat8.extend(l8);
        rows.push([raw1, log1, raw8, log8]);
        for name in ["raw1", "log1", "raw8"] {
            let _ = std::fs::remove_dir_all(root.join(format!("{name}-{round}")));
        }
        if round + 1 < rounds {
            let _ = std::fs::remove_dir_all(root.join(format!("log8-{round}")));
        }
    }
    let med = |f: &dyn Fn(&[Rate; 4]) -> f64| median(rows.iter().map(f).collect());
    println!("medians over {rounds} interleaved rounds:");
    println!("raw disk, 1 writer, fdatasync per write : {:8.1} MB/s", med(&|r| r[0].mb_s));
    println!("raw disk, 8 writers sharing fdatasyncs  : {:8.1} MB/s", med(&|r| r[2].mb_s));
    println!(
        "PartitionLog, 1 appender (ack = fsync)  : {:8.1} MB/s {:7.0} acks/s  ratio to raw {:.2}",
        med(&|r| r[1].mb_s),
        med(&|r| r[1].ops_s),
        med(&|r| r[1].mb_s / r[0].mb_s)
    );
    println!(
        "PartitionLog, 8 appenders (group commit): {:8.1} MB/s {:7.0} acks/s  ratio to raw {:.2}",
        med(&|r| r[3].mb_s),
        med(&|r| r[3].ops_s),
        med(&|r| r[3].mb_s / r[2].mb_s)
    );
    for (name, lat) in [("1 appender ", lat1), ("8 appenders", lat8)] {
        let (p50, p99, max) = percentiles(lat);
        println!("fsync latency added to an append, {name}: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms");
    }

    let last_log8 = root.join(format!("log8-{}", rounds - 1));
    let read = sequential_read(&last_log8);
    println!("sequential read, 1 MiB slices            : {:8.1} MB/s ({:.0} MB read)", read.mb_s, read.bytes / MB);
    let (scan_mb_s, scanned) = recovery_scan(&root.join("recovery"));
    println!("recovery scan (CRC-checked)              : {scan_mb_s:8.1} MB/s ({:.0} MB scanned)", scanned / MB);
    if given.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
}

struct Rate {
    mb_s: f64,
    ops_s: f64,
    bytes: f64,
}

fn rate(bytes: u64, ops: u64, elapsed: Duration) -> Rate {
    let s = elapsed.as_secs_f64();
    Rate { mb_s: bytes as f64 / MB / s, ops_s: ops as f64 / s, bytes: bytes as f64 }
}

/// Raw disk: `writers` threads append 16 KiB blocks to one file at increasing positions;
/// each waits until an fdatasync that started after its write completes (with one
/// writer, simply write + fdatasync).
fn raw_disk(path: &Path, writers: usize, window: Duration) -> Rate {
    let file = Arc::new(OpenOptions::new().create(true).truncate(true).read(true).write(true).open(path).unwrap());
    let block = vec![0xa5u8; BATCH_BYTES];
    let next_pos = Arc::new(AtomicU64::new(0));
    // (writes completed, writes covered by the last finished fsync, an fsync running)
    let sync = Arc::new((Mutex::new((0u64, 0u64, false)), Condvar::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|_| {
            let (file, block, next_pos, sync, stop) =
                (file.clone(), block.clone(), next_pos.clone(), sync.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let pos = next_pos.fetch_add(BATCH_BYTES as u64, Ordering::Relaxed);
                    file.write_all_at(&block, pos).unwrap();
                    let (lock, cv) = &*sync;
                    let mut g = lock.lock().unwrap();
                    g.0 += 1;
                    let mine = g.0;
                    while g.1 < mine {
                        if g.2 {
                            g = cv.wait(g).unwrap();
                            continue;
                        }
                        g.2 = true;
                        let covers = g.0;
                        drop(g);
                        file.sync_data().unwrap();
                        g = lock.lock().unwrap();
                        g.2 = false;
                        g.1 = g.1.max(covers);
                        cv.notify_all();
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    std::thread::sleep(window);
    stop.store(true, Ordering::Relaxed);
    let ops: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    rate(ops * BATCH_BYTES as u64, ops, started.elapsed())
}

/// `appenders` threads each append a 16 KiB batch and wait for its ack, repeatedly.
/// Returns the rate and, per append, the time from `append` returning to the ack.
fn log_appends(dir: &Path, appenders: usize, window: Duration) -> (Rate, Vec<Duration>) {
    let log = Arc::new(PartitionLog::open(StdStorage, dir, LogConfig::default(), 0).expect("open"));
    let template = build(BatchSpec { records: 10, body_len: BATCH_BYTES - 61, ..Default::default() });
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..appenders)
        .map(|_| {
            let (log, template, stop) = (log.clone(), template.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let info = log.append(&template, 0, 0).expect("append");
                    let written = Instant::now();
                    log.wait_for_ack(&info).expect("ack");
                    latencies.push(written.elapsed());
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(window);
    stop.store(true, Ordering::Relaxed);
    let latencies: Vec<Duration> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let elapsed = started.elapsed();
    let n = latencies.len() as u64;
    log.close().expect("close");
    (rate(n * BATCH_BYTES as u64, n, elapsed), latencies)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentiles(mut lat: Vec<Duration>) -> (f64, f64, f64) {
    if lat.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.99), at(1.0))
}

/// Reads the whole log from offset 0 in 1 MiB slices.
fn sequential_read(dir: &Path) -> Rate {
    let log = PartitionLog::open(StdStorage, dir, LogConfig::default(), 0).expect("open");
    let end = log.log_end_offset();
    let started = Instant::now();
    let (mut offset, mut bytes, mut reads) = (0, 0u64, 0u64);
    while offset < end {
        let slice = log.read(offset, 1 << 20).expect("read");
        bytes += slice.records.len() as u64;
        reads += 1;
        offset = slice.next_offset;
    }
    rate(bytes, reads, started.elapsed())
}

/// Writes ~256 MB into one segment, stops without a clean shutdown, and times the
/// reopen, which scans and CRC-checks the whole last segment.
fn recovery_scan(dir: &Path) -> (f64, f64) {
    let config = LogConfig { flush_messages: Some(u64::MAX), ..LogConfig::default() };
    let log = PartitionLog::open(StdStorage, dir, config.clone(), 0).expect("open");
    let template = build(BatchSpec { records: 10, body_len: BATCH_BYTES - 61, ..Default::default() });
    for _ in 0..(256 * 1024 * 1024 / BATCH_BYTES) {
        log.append(&template, 0, 0).expect("append");
    }
    log.flush().expect("flush");
    let size = log.size_bytes() as f64;
    drop(log); // no close(): no clean-shutdown marker, so the reopen recovers
    let started = Instant::now();
    let log = PartitionLog::open(StdStorage, dir, config, 0).expect("reopen");
    let elapsed = started.elapsed().as_secs_f64();
    assert!(!log.opened_clean());
    (size / MB / elapsed, size)
}
