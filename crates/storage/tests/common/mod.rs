//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use osprey_storage::batch::testing::{build, BatchSpec};
use osprey_storage::PartitionLog;

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let p = std::env::temp_dir().join(format!("osprey-storage-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A valid batch of `records` records with a `body`-byte body, seeded for regeneration.
pub fn batch(seed: u64, records: i32, body: usize) -> Vec<u8> {
    build(BatchSpec { records, body_len: body, seed, ..Default::default() })
}

/// Like `batch` with a max timestamp.
pub fn batch_at(seed: u64, records: i32, body: usize, ts: i64) -> Vec<u8> {
    build(BatchSpec { records, body_len: body, seed, base_timestamp: ts, max_timestamp: ts, ..Default::default() })
}

/// Splits raw log bytes into batches (offset, bytes), checking each CRC.
pub fn split(mut bytes: &[u8]) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let h = osprey_storage::batch::validate(bytes, u64::MAX).expect("served batch must be valid");
        let n = h.total_size() as usize;
        out.push((h.base_offset, bytes[..n].to_vec()));
        bytes = &bytes[n..];
    }
    out
}

/// The stored form of an appended batch: offset and epoch stamped.
pub fn stamped(mut b: Vec<u8>, offset: i64, epoch: i32) -> Vec<u8> {
    osprey_storage::batch::stamp(&mut b, offset, epoch);
    b
}

/// An idempotent batch from producer `pid` in `epoch` starting at sequence `seq`.
pub fn idempotent(pid: i64, epoch: i16, seq: i32, records: i32) -> Vec<u8> {
    build(BatchSpec {
        records,
        body_len: 20,
        seed: pid as u64 * 1000 + seq as u64,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        ..Default::default()
    })
}

/// Every batch from the log start to the log end, following each read's `next_offset`
/// (as a consumer does, so offsets missing from the log are skipped).
pub fn read_all<S: osprey_storage::Storage>(log: &PartitionLog<S>) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let slice = log.read(offset, 1 << 20).unwrap();
        assert!(!slice.records.is_empty(), "read at {offset} returned nothing before the log end");
        out.extend(split(&slice.records));
        offset = slice.next_offset;
    }
    out
}
