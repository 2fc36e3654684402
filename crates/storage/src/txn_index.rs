//! The aborted-transaction index (`.txnindex`), one per segment, in Kafka's format:
//! 34-byte entries of version i16 (0), producerId i64, firstOffset i64, lastOffset i64
//! (the ABORT marker's offset) and lastStableOffset i64 (the LSO just after the marker),
//! big-endian, in marker order. An entry lives in the segment holding its marker.
//!
//! Like the offset and time indexes, the active segment's entries are kept in memory and
//! written (and fsynced with the log) when the segment is sealed or the log is closed;
//! after a crash they are rebuilt from the control batches of the log, which are
//! themselves the durable record of every abort. So the index is exactly as durable as
//! the data it describes.
//!
//! read_committed fetches use it to learn which transactions in the fetched range
//! aborted (Fetch's AbortedTransactions), as Kafka's `collectAbortedTransactions`.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use osprey_protocol::records::{EndTxnMarker, RecordBatch};

use crate::batch::BatchHeader;

/// Bytes per entry.
pub const ENTRY_BYTES: usize = 34;
const ENTRY_VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the transaction in this partition.
    pub first_offset: i64,
    /// Offset of its ABORT marker.
    pub last_offset: i64,
    /// Last stable offset right after the marker: no transaction starting below it was
    /// still open, which lets a lookup stop early.
    pub last_stable_offset: i64,
}

/// `<20 digits>.txnindex`.
pub(crate) fn txn_index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{}.txnindex", crate::segment::file_stem(base_offset)))
}

/// Serialises entries in Kafka's layout.
pub(crate) fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_BYTES);
    for e in entries {
        out.extend_from_slice(&ENTRY_VERSION.to_be_bytes());
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.first_offset.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.last_stable_offset.to_be_bytes());
    }
    out
}

/// Parses an index file; `None` if its length, a version or the order of markers is
/// wrong (the caller then rebuilds it from the log or treats it as untrusted).
pub(crate) fn decode(raw: &[u8]) -> Option<Vec<AbortedTxn>> {
    if !raw.len().is_multiple_of(ENTRY_BYTES) {
        return None;
    }
    let mut out: Vec<AbortedTxn> = Vec::with_capacity(raw.len() / ENTRY_BYTES);
    for c in raw.chunks_exact(ENTRY_BYTES) {
        let i64_at = |at: usize| c[at..at + 8].try_into().ok().map(i64::from_be_bytes);
        if i16::from_be_bytes([c[0], c[1]]) != ENTRY_VERSION {
            return None;
        }
        let e = AbortedTxn {
            producer_id: i64_at(2)?,
            first_offset: i64_at(10)?,
            last_offset: i64_at(18)?,
            last_stable_offset: i64_at(26)?,
        };
        if e.first_offset > e.last_offset || out.last().is_some_and(|p| p.last_offset >= e.last_offset) {
            return None;
        }
        out.push(e);
    }
    Some(out)
}

/// Adds `entry` to a segment's list unless it is already there (recovery and truncation
/// replay markers that may already be indexed); entries stay in marker order.
pub(crate) fn insert(entries: &mut Vec<AbortedTxn>, entry: AbortedTxn) {
    if entries.last().is_none_or(|last| last.last_offset < entry.last_offset) {
        entries.push(entry);
    }
}

/// Whether a control batch is a transaction marker, and which (commit or abort, and
/// its coordinator epoch); `None` for any other control record (or an unreadable one,
/// which Kafka's consumers also skip). `batch` is the whole batch.
pub(crate) fn marker_of(header: &BatchHeader, batch: &[u8]) -> Option<EndTxnMarker> {
    if !header.is_control() {
        return None;
    }
    let batch = RecordBatch::new(Bytes::copy_from_slice(batch)).ok()?;
    // A marker batch is uncompressed and tiny; the bound only guards a corrupt one.
    let record = batch.records(1 << 20).ok()?.next()?.ok()?;
    EndTxnMarker::from_record(&record).ok()
}

/// Aborted transactions overlapping `[fetch_offset, upper_offset)`, from the per-segment
/// lists of the segments holding `fetch_offset` and after, as Kafka's
/// `collectAbortedTransactions`: stops after a segment with an entry whose last stable
/// offset reaches `upper_offset`, since every transaction starting below that had ended.
pub(crate) fn collect<'a>(
    segments: impl Iterator<Item = &'a [AbortedTxn]>,
    fetch_offset: i64,
    upper_offset: i64,
) -> Vec<AbortedTxn> {
    let mut out = Vec::new();
    for entries in segments {
        let mut complete = false;
        for e in entries {
            if e.last_offset >= fetch_offset && e.first_offset < upper_offset {
                out.push(*e);
            }
            complete |= e.last_stable_offset >= upper_offset;
        }
        if complete {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_in_kafka_layout_and_bad_files_are_refused() {
        let entries = vec![
            AbortedTxn { producer_id: 7, first_offset: 3, last_offset: 9, last_stable_offset: 10 },
            AbortedTxn { producer_id: 8, first_offset: 5, last_offset: 12, last_stable_offset: 13 },
        ];
        let raw = encode(&entries);
        assert_eq!(raw.len(), 2 * ENTRY_BYTES);
        assert_eq!(&raw[0..2], &[0, 0]);
        assert_eq!(raw[2..10], 7i64.to_be_bytes());
        assert_eq!(decode(&raw), Some(entries.clone()));
        assert_eq!(decode(&raw[..ENTRY_BYTES + 1]), None);
        let mut reordered = encode(&[entries[1]]);
        reordered.extend(encode(&[entries[0]]));
        assert_eq!(decode(&reordered), None);
    }

    #[test]
    fn collect_stops_at_an_entry_whose_lso_covers_the_range() {
        let a = [AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 4, last_stable_offset: 5 }];
        let b = [AbortedTxn { producer_id: 2, first_offset: 6, last_offset: 20, last_stable_offset: 21 }];
        let found = collect([&a[..], &b[..]].into_iter(), 0, 3);
        assert_eq!(found.iter().map(|t| t.producer_id).collect::<Vec<_>>(), vec![1], "a's LSO 5 >= 3 ends the search");
        let found = collect([&a[..], &b[..]].into_iter(), 0, 10);
        assert_eq!(found.len(), 2);
        assert!(collect([&a[..], &b[..]].into_iter(), 21, 30).is_empty());
    }
}
