//! `read_located` returns what `read_limited` returns: on real files as a chunk of the
//! segment file once the batches reach the caller's threshold, on the simulated disk as
//! bytes. And it finds the chunk's end from headers and the offset index, without
//! reading the batches.

mod common;

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{batch, stamped, TempDir};
use osprey_storage::{
    FdBudget, FdLimited, LogConfig, PartitionLog, ReadSlice, SimStorage, StdStorage, Storage, StorageFile,
};
use proptest::prelude::*;

/// A log to build: batches, how they are appended, and its layout.
#[derive(Debug, Clone)]
struct LogCase {
    /// (records, body bytes, offsets skipped before it) per batch.
    batches: Vec<(i32, usize, i64)>,
    /// Appended as a follower copies a compacted leader's log, with the gaps between
    /// batches; otherwise as leader, without gaps.
    follower: bool,
    segment_bytes: u64,
    index_interval_bytes: u64,
    /// The high watermark and log start offset, as fractions (of 1000) of the log end
    /// and the high watermark.
    high_watermark_permille: u64,
    log_start_permille: u64,
    reads: Vec<ReadCase>,
}

#[derive(Debug, Clone)]
struct ReadCase {
    /// A segment's base offset (or the log end, or just outside the log) if `at_boundary`,
    /// else any offset from one below the log start to one above the log end.
    at_boundary: bool,
    at: u16,
    max_bytes: usize,
    /// 0: no bound, 1: the high watermark, 2: the log end, else an offset from `end`.
    end_kind: u8,
    end: u16,
    min_one_batch: bool,
    min_located_bytes: usize,
}

fn log_case() -> impl Strategy<Value = LogCase> {
    let body = prop_oneof![6 => 0..300usize, 2 => 300..2500usize, 1 => 2500..9000usize];
    let one = (1..5i32, body, prop_oneof![4 => Just(0i64), 1 => 1..4i64]);
    (
        prop::collection::vec(one, 0..60),
        any::<bool>(),
        prop_oneof![Just(1024u64), 1024..8192u64],
        prop_oneof![Just(0u64), 1..600u64, Just(4096u64)],
        prop_oneof![Just(1000u64), 0..1000u64],
        prop_oneof![2 => Just(0u64), 1 => 0..1000u64],
        prop::collection::vec(read_case(), 1..25),
    )
        .prop_map(|(batches, follower, segment_bytes, index_interval_bytes, hw, start, reads)| LogCase {
            batches,
            follower,
            segment_bytes,
            index_interval_bytes,
            high_watermark_permille: hw,
            log_start_permille: start,
            reads,
        })
}

fn read_case() -> impl Strategy<Value = ReadCase> {
    let max_bytes = prop_oneof![Just(0usize), 1..80usize, 80..6000usize, Just(1usize << 20), Just(usize::MAX)];
    let min_located_bytes = prop_oneof![Just(0usize), Just(1usize), 1..6000usize, Just(usize::MAX)];
    (any::<bool>(), any::<u16>(), max_bytes, 0..5u8, any::<u16>(), any::<bool>(), min_located_bytes).prop_map(
        |(at_boundary, at, max_bytes, end_kind, end, min_one_batch, min_located_bytes)| ReadCase {
            at_boundary,
            at,
            max_bytes,
            end_kind,
            end,
            min_one_batch,
            min_located_bytes,
        },
    )
}

fn build_log<S: Storage>(storage: S, dir: &Path, case: &LogCase) -> PartitionLog<S> {
    let config = LogConfig {
        segment_bytes: case.segment_bytes,
        index_interval_bytes: case.index_interval_bytes,
        // Acknowledged without an fsync each: what is read is the same.
        flush_messages: Some(u64::MAX),
        ..LogConfig::default()
    };
    let log = PartitionLog::open(storage, dir, config, 0).unwrap();
    for (seed, &(records, body, gap)) in case.batches.iter().enumerate() {
        let b = batch(seed as u64, records, body);
        if case.follower {
            log.append_as_follower(&stamped(b, log.log_end_offset() + gap, 0), 0).unwrap();
        } else {
            log.append(&b, 0, 0).unwrap();
        }
    }
    let leo = log.log_end_offset();
    let hw = leo * case.high_watermark_permille as i64 / 1000;
    log.update_high_watermark(hw).unwrap();
    log.delete_records_before(hw * case.log_start_permille as i64 / 1000).unwrap();
    log
}

/// Where a read starts: a segment's base offset, the log end, or just outside the log,
/// where reads change segment or fail; or anywhere.
fn fetch_offset<S: Storage>(storage: &S, dir: &Path, log: &PartitionLog<S>, read: &ReadCase) -> i64 {
    let (start, leo) = (log.log_start_offset(), log.log_end_offset());
    if !read.at_boundary {
        return start - 1 + i64::from(read.at) % (leo - start + 3);
    }
    let mut boundaries: Vec<i64> =
        storage.list(dir).unwrap().iter().filter_map(|name| name.strip_suffix(".log")?.parse().ok()).collect();
    boundaries.extend([leo, leo + 1, start - 1]);
    boundaries[usize::from(read.at) % boundaries.len()]
}

fn end_offset<S: Storage>(log: &PartitionLog<S>, read: &ReadCase) -> i64 {
    match read.end_kind {
        0 => i64::MAX,
        1 => log.high_watermark(),
        2 => log.log_end_offset(),
        _ => i64::from(read.end) % (log.log_end_offset() + 2),
    }
}

/// Every read of the case, both ways: the same result, records read back from a chunk,
/// and a chunk exactly when the batches reach the threshold (and the disk is real).
fn check_reads<S: Storage + Clone>(
    storage: S,
    dir: &Path,
    case: &LogCase,
    real_files: bool,
) -> Result<(), TestCaseError> {
    let log = build_log(storage.clone(), dir, case);
    for read in &case.reads {
        let at = fetch_offset(&storage, dir, &log, read);
        let end = end_offset(&log, read);
        let expected = log.read_limited(at, read.max_bytes, end, read.min_one_batch);
        let located = log.read_located(at, read.max_bytes, end, read.min_one_batch, read.min_located_bytes);
        let (expected, (slice, chunk)) = match (expected, located) {
            (Ok(expected), Ok(located)) => (expected, located),
            (Err(expected), Err(located)) => {
                prop_assert_eq!(expected.to_string(), located.to_string(), "{:?} at {}", read, at);
                continue;
            }
            (expected, located) => {
                return Err(TestCaseError::fail(format!("{read:?} at {at}: {expected:?} but {located:?}")));
            }
        };
        let worth_a_chunk = !expected.records.is_empty() && expected.records.len() >= read.min_located_bytes;
        prop_assert_eq!(chunk.is_some(), real_files && worth_a_chunk, "{:?} at {}", read, at);
        let records = match chunk {
            Some(chunk) => {
                prop_assert!(slice.records.is_empty());
                chunk.read().unwrap()
            }
            None => slice.records.clone(),
        };
        prop_assert_eq!(ReadSlice { records, ..slice }, expected, "{:?} at {} ending {}", read, at, end);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn located_reads_return_what_reads_return_on_real_files(case in log_case()) {
        let tmp = TempDir::new("located");
        check_reads(StdStorage, &tmp.path().join("t-0"), &case, true)?;
    }

    #[test]
    fn located_reads_return_what_reads_return_through_a_tiny_descriptor_budget(case in log_case()) {
        let tmp = TempDir::new("located-fd");
        let storage = FdLimited::new(StdStorage, FdBudget::new(2));
        check_reads(storage, &tmp.path().join("t-0"), &case, true)?;
    }

    #[test]
    fn located_reads_on_the_simulated_disk_read_the_batches(case in log_case()) {
        check_reads(SimStorage::new(), Path::new("/t-0"), &case, false)?;
    }
}

#[test]
fn locating_a_megabyte_of_large_batches_reads_only_their_headers() {
    let tmp = TempDir::new("located-count");
    let storage = CountingStorage::default();
    let config = LogConfig { segment_bytes: 8 << 20, flush_messages: Some(u64::MAX), ..LogConfig::default() };
    let log = PartitionLog::open(storage.clone(), tmp.path().join("t-0"), config, 0).unwrap();
    for seed in 0..100 {
        log.append(&batch(seed, 1, 16 << 10), 0, 0).unwrap();
    }
    let batch_bytes = (16 << 10) + 61;
    for (at, end, batches) in [(0, i64::MAX, (1 << 20) / batch_bytes), (7, 40, 33)] {
        storage.read.store(0, Ordering::Relaxed);
        let (slice, chunk) = log.read_located(at, 1 << 20, end, true, 64 << 10).unwrap();
        let located_reads = storage.read.load(Ordering::Relaxed);
        let chunk = chunk.expect("a megabyte of batches is located");
        assert_eq!((chunk.len(), slice.next_offset), (batches as u64 * batch_bytes as u64, at + batches as i64));
        assert!(located_reads < 2048, "locating {} bytes read {located_reads} bytes", chunk.len());

        storage.read.store(0, Ordering::Relaxed);
        let read = log.read_limited(at, 1 << 20, end, true).unwrap();
        assert!(storage.read.load(Ordering::Relaxed) >= chunk.len(), "a plain read reads the batches");
        assert_eq!(chunk.read().unwrap(), read.records);
    }
}

#[test]
fn a_located_read_ending_before_a_gap_in_offsets_returns_the_offset_after_its_last_batch() {
    let tmp = TempDir::new("located-gap");
    // Every batch indexed, so the index could tempt a read to skip to the batch after
    // the gap and take its base offset for the next offset.
    let config = LogConfig { index_interval_bytes: 0, flush_messages: Some(u64::MAX), ..LogConfig::default() };
    let log = PartitionLog::open(StdStorage, tmp.path().join("t-0"), config, 0).unwrap();
    for (seed, offset) in [(0, 0), (1, 1), (2, 5), (3, 6)] {
        log.append_as_follower(&stamped(batch(seed, 1, 100), offset, 0), 0).unwrap();
    }
    let two_batches = 2 * (100 + 61);
    let (slice, chunk) = log.read_located(0, two_batches, i64::MAX, false, 0).unwrap();
    assert_eq!((chunk.map(|c| c.len()), slice.next_offset), (Some(two_batches as u64), 2));
    assert_eq!(log.read_limited(0, two_batches, i64::MAX, false).unwrap().next_offset, 2);
}

/// The real disk, counting the bytes the log reads through its files (not those read
/// through the OS file of a chunk).
#[derive(Debug, Clone, Default)]
struct CountingStorage {
    read: Arc<AtomicU64>,
}

#[derive(Debug)]
struct CountingFile {
    file: Arc<File>,
    read: Arc<AtomicU64>,
}

impl Storage for CountingStorage {
    type File = CountingFile;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        StdStorage.create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        StdStorage.list(dir)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<CountingFile> {
        Ok(CountingFile { file: Arc::new(StdStorage.open(path, create)?), read: self.read.clone() })
    }

    fn exists(&self, path: &Path) -> bool {
        StdStorage.exists(path)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        StdStorage.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdStorage.rename(from, to)
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdStorage.rename_dir(from, to)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        StdStorage.remove_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdStorage.sync_dir(dir)
    }
}

impl StorageFile for CountingFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let n = StorageFile::read_at(&*self.file, buf, pos)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        StorageFile::write_all_at(&*self.file, buf, pos)
    }

    fn len(&self) -> io::Result<u64> {
        StorageFile::len(&*self.file)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        StorageFile::set_len(&*self.file, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        StorageFile::sync_data(&*self.file)
    }

    fn os_file(self: &Arc<Self>) -> io::Result<Option<Arc<File>>> {
        Ok(Some(self.file.clone()))
    }
}
