//! What opening a log found damaged, and how it is kept from spreading.
//!
//! Osprey fsyncs a batch before acknowledging it, so every sealed segment after a
//! damaged one holds durable, acknowledged data. Recovery therefore never deletes a
//! segment because an earlier one is damaged. It keeps every intact segment, cuts a
//! damaged sealed segment after its last valid batch (the bytes cut are copied aside
//! first, to a `.damaged` file, never deleted) and reports each offset range the log no
//! longer holds. The partition stays online: a fetch at an offset inside a lost range
//! gets the next batch the log holds, as a fetch inside a compaction gap does, so
//! consumers move on instead of resetting their position.

use std::path::{Path, PathBuf};

use crate::error::{Result, StorageError};
use crate::fs::{Storage, StorageFile};
use crate::segment;

/// Suffix of the copy of bytes cut from a damaged sealed segment.
pub(crate) const DAMAGED_SUFFIX: &str = ".damaged";
/// Suffix a segment is renamed to when it overlaps the one before it.
pub(crate) const OVERLAPPING_SUFFIX: &str = ".overlapping";
/// Copy chunk for quarantining a segment's tail (bounds the memory used).
const COPY_CHUNK: u64 = 1 << 20;

/// Everything an open found damaged, in offset order. Empty for a healthy log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Offset ranges the log no longer holds.
    pub damaged: Vec<DamagedRange>,
}

/// An offset range lost to damage found at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRange {
    /// What was wrong.
    pub kind: DamageKind,
    /// The segment file concerned (for a missing one, the path it should have).
    pub file: PathBuf,
    /// First offset no longer in the log.
    pub first_offset: i64,
    /// First offset after the range that the log holds again (exclusive end); equal to
    /// `first_offset` when the size of the loss is unknown (a missing last segment with
    /// no checkpoint beyond it) or when only bytes, no offsets, were lost.
    pub end_offset: i64,
    /// Bytes cut from the segment (0 for a missing segment).
    pub bytes: u64,
    /// Where the cut bytes (or the overlapping segment) were moved to.
    pub quarantined: Option<PathBuf>,
}

/// The kinds of damage recovery reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// A sealed segment ends in a torn or corrupt batch: cut after its last valid batch.
    CutShort,
    /// A segment's `.log` file is gone: its index files remain, or the checkpointed log
    /// start offset lies below the first segment.
    MissingSegment,
    /// Offsets missing between two segments of a log that is not compacted (compaction
    /// leaves such gaps on purpose): a segment file lost without a trace, or a range
    /// cut by an earlier recovery (reported at every open, since the log still lacks it).
    Gap,
    /// A segment starts below the end of the one before it: renamed aside, and what it
    /// held beyond the previous segment's end (up to the next segment) is not served.
    Overlapping,
}

impl DamageKind {
    /// Lower-case name, for log lines and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            DamageKind::CutShort => "cut_short",
            DamageKind::MissingSegment => "missing_segment",
            DamageKind::Gap => "gap",
            DamageKind::Overlapping => "overlapping",
        }
    }
}

impl DamagedRange {
    /// Offsets lost (0 when unknown).
    pub fn offsets(&self) -> i64 {
        self.end_offset - self.first_offset
    }

    /// The loud line an operator must see.
    pub(crate) fn log(&self, dir: &Path) {
        tracing::error!(
            dir = %dir.display(),
            file = %self.file.display(),
            kind = self.kind.name(),
            first_offset = self.first_offset,
            end_offset = self.end_offset,
            bytes = self.bytes,
            quarantined = %self.quarantined.as_ref().map_or(String::from("-"), |p| p.display().to_string()),
            "log damaged: offsets [{}, {}) are lost; every intact segment is kept and fetches in the range get the next batch held",
            self.first_offset,
            self.end_offset,
        );
    }
}

/// `<stem>.log.<position>.damaged`: the bytes from `position` on, cut from a segment.
pub(crate) fn damaged_path(dir: &Path, base_offset: i64, position: u64) -> PathBuf {
    dir.join(format!("{}.log.{position}{DAMAGED_SUFFIX}", segment::file_stem(base_offset)))
}

/// Copies `[from, len)` of `file` to `to` and makes the copy durable, before the caller
/// cuts those bytes from the segment.
pub(crate) fn copy_tail<S: Storage>(storage: &S, file: &S::File, from: u64, len: u64, to: &Path) -> Result<()> {
    let out = storage.open(to, true).map_err(|e| StorageError::io("create", to, e))?;
    out.set_len(0).map_err(|e| StorageError::io("truncate", to, e))?;
    let mut buf = Vec::new();
    let mut position = from;
    while position < len {
        let n = (len - position).min(COPY_CHUNK);
        buf.resize(n as usize, 0);
        file.read_exact_at(&mut buf, position).map_err(|e| StorageError::io("read", to, e))?;
        out.write_all_at(&buf, position - from).map_err(|e| StorageError::io("write", to, e))?;
        position += n;
    }
    out.sync_data().map_err(|e| StorageError::io("fsync", to, e))?;
    let dir = to.parent().unwrap_or(Path::new("."));
    storage.sync_dir(dir).map_err(|e| StorageError::io("fsync dir", dir, e))
}

/// The extent of one opened segment, for [`missing_ranges`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extent {
    pub base_offset: i64,
    pub next_offset: i64,
    /// A loss starting at `next_offset` is already reported (the segment was cut short,
    /// or the one after it set aside).
    pub loss_reported: bool,
}

/// Offset ranges whose segment file is missing, from three kinds of evidence:
/// index files whose `.log` is gone (`orphans`), a gap between one segment's end and the
/// next one's base in a log that is not compacted (compaction leaves such gaps on
/// purpose), and a checkpointed log start offset below the first segment.
///
/// Orphans below `log_start` are leftovers of a retention pass, not losses.
pub(crate) fn missing_ranges(
    dir: &Path,
    extents: &[Extent],
    orphans: &[i64],
    log_start: Option<i64>,
    high_watermark: Option<i64>,
    compacted: bool,
) -> Vec<DamagedRange> {
    let range = |kind: DamageKind, first: i64, end: i64, base: i64| DamagedRange {
        kind,
        file: segment::log_path(dir, base),
        first_offset: first,
        end_offset: end.max(first),
        bytes: 0,
        quarantined: None,
    };
    let orphans: Vec<i64> = orphans.iter().copied().filter(|&b| log_start.is_none_or(|s| b >= s)).collect();
    let mut out = Vec::new();
    if let Some(first) = extents.first() {
        let start = log_start.into_iter().chain(orphans.iter().copied()).min();
        if let Some(start) = start.filter(|&s| s < first.base_offset) {
            out.push(range(DamageKind::MissingSegment, start, first.base_offset, start));
        }
    }
    for pair in extents.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        if prev.loss_reported || prev.next_offset >= next.base_offset {
            continue;
        }
        let (first, end) = (prev.next_offset, next.base_offset);
        match orphans.iter().copied().find(|&b| b > prev.base_offset && b < end) {
            Some(base) => out.push(range(DamageKind::MissingSegment, first, end, base)),
            None if !compacted => out.push(range(DamageKind::Gap, first, end, first)),
            None => {}
        }
    }
    let end = extents.last().map_or(log_start.unwrap_or(0), |e| e.next_offset);
    let last_base = extents.last().map(|e| e.base_offset);
    if let Some(&base) = orphans.iter().filter(|&&b| last_base.is_none_or(|l| b > l)).min() {
        // The newest segment is gone: what it held is known only up to the checkpointed
        // high watermark.
        let first = end.min(base).max(log_start.unwrap_or(i64::MIN));
        out.push(range(DamageKind::MissingSegment, first, high_watermark.unwrap_or(first), base));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(base_offset: i64, next_offset: i64) -> Extent {
        Extent { base_offset, next_offset, loss_reported: false }
    }

    #[test]
    fn compaction_gaps_are_not_damage_but_orphaned_indexes_are() {
        let dir = Path::new("/p");
        let extents = [extent(0, 7), extent(10, 15), extent(20, 25)];
        assert_eq!(missing_ranges(dir, &extents, &[], Some(0), Some(25), true), vec![]);
        let found = missing_ranges(dir, &extents, &[15], Some(0), Some(25), true);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].kind, found[0].first_offset, found[0].end_offset), (DamageKind::MissingSegment, 15, 20));
        // Without compaction every gap is a loss.
        let found = missing_ranges(dir, &extents, &[], Some(0), Some(25), false);
        let ranges: Vec<_> = found.iter().map(|d| (d.kind, d.first_offset, d.end_offset)).collect();
        assert_eq!(ranges, vec![(DamageKind::Gap, 7, 10), (DamageKind::Gap, 15, 20)]);
    }

    #[test]
    fn retention_leftovers_are_not_damage_and_a_lost_newest_segment_is_bounded_by_the_high_watermark() {
        let dir = Path::new("/p");
        let extents = [extent(10, 20), extent(20, 30)];
        assert_eq!(missing_ranges(dir, &extents, &[0], Some(10), None, false), vec![]);
        let found = missing_ranges(dir, &extents, &[30], Some(10), Some(42), false);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].kind, found[0].first_offset, found[0].end_offset), (DamageKind::MissingSegment, 30, 42));
    }
}
