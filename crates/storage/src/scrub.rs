//! The scrubber: verifies the CRC-32C of every batch in sealed segments, in the
//! background, a bounded number of bytes per step.
//!
//! Recovery scans only the newest segment after a crash; a bit flipped later in an
//! older segment would be found by nobody until a consumer with `check.crcs` tripped
//! over it (Kafka has no scrubber). [`crate::PartitionLog::scrub`] advances a
//! [`ScrubCursor`] through a log's sealed segments; the caller decides the pace (bytes
//! per step and the sleep between steps) and reports the findings. Nothing here changes
//! the log: a finding is for an operator (and, once replication exists, for re-fetching
//! the range from the leader).
//!
//! The cursor holds the open file of the segment it is in, so a segment deleted by
//! retention or replaced by compaction is still read consistently to its end. A
//! truncation rewrites bytes in place instead, so findings are dropped (and the segment
//! skipped) when the log's truncation generation moved during the step.

use std::path::PathBuf;
use std::sync::Arc;

use crate::batch::{self, BatchHeader, HEADER_LEN};
use crate::fs::StorageFile;

/// Where a scrub of one log is: the segment being verified and the position in it.
#[derive(Debug)]
pub struct ScrubCursor<F> {
    /// Sealed segments with a base offset at or above this are still to do in this pass.
    pub(crate) next_base: i64,
    pub(crate) current: Option<ScrubTarget<F>>,
}

impl<F> Default for ScrubCursor<F> {
    fn default() -> Self {
        ScrubCursor { next_base: i64::MIN, current: None }
    }
}

/// A sealed segment being verified.
#[derive(Debug)]
pub(crate) struct ScrubTarget<F> {
    pub base_offset: i64,
    pub path: PathBuf,
    pub file: Arc<F>,
    pub size: u64,
    pub position: u64,
    /// The log's truncation generation when the segment was picked.
    pub generation: u64,
}

/// What one step did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScrubStep {
    /// Bytes read and verified (the caller paces on this).
    pub bytes: u64,
    /// Corrupt batches found.
    pub findings: Vec<ScrubFinding>,
    /// Every sealed segment has been verified; the cursor starts over on the next step.
    pub pass_done: bool,
}

/// A batch whose bytes fail verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubFinding {
    /// The segment file.
    pub file: PathBuf,
    /// Its base offset.
    pub segment_base_offset: i64,
    /// Byte position of the bad batch in the file.
    pub position: u64,
    /// The bad batch's base offset, if its header could be read.
    pub batch_base_offset: Option<i64>,
    /// What is wrong (CRC mismatch, bad length, ...).
    pub reason: String,
}

/// Verifies batches of `target` from its position, about `max_bytes` of them (at least
/// one batch). Returns the bytes read, the findings, and whether the segment is done.
/// After a batch whose length cannot be trusted, the rest of the segment cannot be
/// walked and it is done.
pub(crate) fn verify_step<F: StorageFile>(
    target: &mut ScrubTarget<F>,
    max_bytes: u64,
) -> (u64, Vec<ScrubFinding>, bool) {
    let mut findings = Vec::new();
    let mut read = 0u64;
    let mut buf = Vec::new();
    while target.position < target.size && (read == 0 || read < max_bytes) {
        let left = target.size - target.position;
        let finding = |reason: String, base: Option<i64>| ScrubFinding {
            file: target.path.clone(),
            segment_base_offset: target.base_offset,
            position: target.position,
            batch_base_offset: base,
            reason,
        };
        let mut header_buf = [0u8; HEADER_LEN];
        let header = if left < HEADER_LEN as u64 {
            Err(format!("{left} trailing bytes, shorter than a batch header"))
        } else if let Err(e) = target.file.read_exact_at(&mut header_buf, target.position) {
            Err(format!("read failed: {e}"))
        } else {
            BatchHeader::parse(&header_buf).map_err(|e| e.to_string())
        };
        let header = match header {
            Ok(h) if h.total_size() <= left => h,
            Ok(h) => {
                findings.push(finding(
                    format!("batch of {} bytes runs past the segment end", h.total_size()),
                    Some(h.base_offset),
                ));
                return (read + left, findings, true);
            }
            Err(reason) => {
                findings.push(finding(reason, None));
                return (read + left, findings, true);
            }
        };
        let size = header.total_size();
        buf.resize(size as usize, 0);
        if let Err(e) = target.file.read_exact_at(&mut buf, target.position) {
            findings.push(finding(format!("read failed: {e}"), Some(header.base_offset)));
            return (read + left, findings, true);
        }
        if let Err(e) = batch::validate(&buf, u64::MAX) {
            // The length was readable, so the walk can go on past this batch.
            findings.push(finding(e.to_string(), Some(header.base_offset)));
        }
        read += size;
        target.position += size;
    }
    (read, findings, target.position >= target.size)
}
