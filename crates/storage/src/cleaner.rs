//! Log compaction (`cleanup.policy=compact`), after Kafka's `LogCleaner`: the pieces that
//! run without the log's lock. [`crate::PartitionLog::clean`] plans a pass under the lock,
//! calls these to build the key → offset map and write cleaned copies of sealed segments,
//! and swaps them in under the lock again.
//!
//! Rules (Kafka's, with the choices it leaves open stated):
//!
//! * A record is kept if its key is not in the offset map or its offset is at least the
//!   map's offset for the key (the latest value wins). Records without a key are dropped,
//!   as Kafka's `shouldRetainRecord` does (the broker rejects them on compacted topics).
//! * Tombstones (null value) follow Kafka's legacy delete-horizon rule, not KIP-534's
//!   per-batch horizon bit: the horizon is the newest timestamp of the last segment that
//!   was already clean before the pass, minus `delete.retention.ms`; tombstones in a
//!   segment whose newest timestamp is below the horizon are dropped (only below the end
//!   of the pass's offset map, so every older value of the key is gone first). A
//!   tombstone thus lives at least `delete.retention.ms` after it was first cleaned.
//! * A rewritten batch keeps its base offset, lastOffsetDelta (so its last offset and,
//!   for idempotent producers, its last sequence), timestamps, producer fields and
//!   leader epoch; only recordsCount, the records, batchLength and the CRC change (and,
//!   for a marker given its delete horizon, baseTimestamp and the attributes). Empty
//!   batches have recordsCount 0 and no compression.
//! * Consecutive segments whose sizes together fit `segment.bytes` (and the index and
//!   relative-offset limits) are cleaned into one, named by the first one's base offset,
//!   as Kafka's `groupSegmentsBySize` does; the swap deletes the others after its commit
//!   point, and recovery of a committed swap deletes those its range covers.
//! * Transactions, as Kafka's `Cleaner.cleanSegments` with `CleanedTransactionMetadata`:
//!   - Only data below the last stable offset is cleaned (with the high watermark, the
//!     active segment and `min.compaction.lag.ms`, by whole segments, Kafka's
//!     `firstUncleanableOffset`): an open transaction's fate is not known yet.
//!   - The aborted transactions overlapping the pass come from the `.txnindex` of every
//!     segment; a transactional batch of a producer with such a transaction under way is
//!     aborted data. It adds no key to the offset map (an aborted value never shadows an
//!     older committed one) and loses all its records.
//!   - A marker stays while data of its transaction was read in the pass (an ABORT then
//!     also keeps its `.txnindex` entry, so a read_committed consumer that fetched the
//!     data before the swap still learns of the abort). The first pass finding no data
//!     stamps its delete horizon, KIP-534 style: attributes bit 6, baseTimestamp =
//!     now + `delete.retention.ms`, record timestampDeltas moved so timestamps are
//!     unchanged. The first pass at or after that horizon removes it. An abort's index
//!     entry is dropped by the first pass finding none of its data (Kafka rewrites the
//!     cleaned segment's index the same way), so a read_committed fetch never misses an
//!     abort with data left, and the index does not grow with long-gone aborts.
//!   - Deviation: a data batch an earlier pass emptied does not count as data of its
//!     transaction (Kafka counts it, which pins the marker while the producer is idle).
//!   - Tombstones of committed transactional data follow the rule above, as any other.
//! * An emptied batch (no records left, aborted data included) is dropped unless it is
//!   the newest batch of a producer still in the producer state (its newest data batch,
//!   or the marker of its current epoch when that marker bumped the epoch: Kafka's
//!   `isBatchLastRecordOfProducer`), or the last batch of its group of segments (which
//!   keeps the offset range); those are kept as empty batches (Kafka's `RETAIN_EMPTY`).
//!   A marker is emptied, not removed, in the same cases. A control record that is not
//!   a transaction marker is kept whole.
//! * A batch whose records cannot be decoded (impossible for data the broker accepted)
//!   is kept whole and logged, never dropped.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use osprey_protocol::records::{compress, Compression, RecordBatch};

use crate::batch::{self, BatchHeader, ATTR_DELETE_HORIZON, CRC_START, HEADER_LEN, LOG_OVERHEAD};
use crate::error::{Result, StorageError};
use crate::fs::{Storage, StorageFile};
use crate::producer::LastBatch;
use crate::segment::{self, Segment};
use crate::txn_index::{self, AbortedTxn};

/// What a compaction pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanOutcome {
    /// Dirty bytes / cleanable bytes when the pass started (0 if nothing was dirty).
    pub dirty_ratio: f64,
    /// Segments rewritten and swapped in.
    pub cleaned_segments: usize,
    /// Segments they became (fewer when small cleaned segments were merged).
    pub segments_after: usize,
    /// Their bytes before the pass.
    pub bytes_before: u64,
    /// Their bytes after it.
    pub bytes_after: u64,
    /// Records removed (superseded values, expired tombstones, records without a key).
    pub records_removed: u64,
    /// The cleaner checkpoint after the pass: every offset below it has been compacted
    /// against a map that covered it.
    pub first_dirty_offset: i64,
    /// The offset map reached its byte budget before the end of the dirty section: only
    /// a prefix was compacted and the next pass continues from `first_dirty_offset`.
    pub map_full: bool,
}

/// Bytes charged to the offset map per key besides the key itself: its offset and the
/// hash table's own per-entry cost (pointer, length, capacity, hash slot).
const MAP_ENTRY_OVERHEAD: usize = 48;
/// Largest decompressed records section the cleaner inflates, so a hostile batch cannot
/// make it allocate without bound.
const MAX_DECOMPRESSED_BATCH_BYTES: usize = 64 << 20;
/// Output is written in chunks of about this size.
const WRITE_CHUNK: usize = 1 << 20;
/// Attribute bits holding the compression codec.
const COMPRESSION_MASK: i16 = 0x07;

/// Suffix of a cleaned segment's files while they are being written.
pub(crate) const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment's files once complete and fsynced; a `.log.swap` is the
/// commit point of the swap, which recovery then completes.
pub(crate) const SWAP_SUFFIX: &str = ".swap";

/// A sealed segment the cleaner reads. Its file is the log's open handle if it had one,
/// else opened for the duration of one scan, so a pass holds at most one extra
/// descriptor whatever the number of segments.
#[derive(Debug)]
pub(crate) struct SourceSegment<F> {
    pub base_offset: i64,
    pub file: Option<Arc<F>>,
    pub path: PathBuf,
    pub size: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    /// Offset index entries (bounds what a merged segment's indexes hold).
    pub index_entries: usize,
    /// Its aborted-transaction index entries; those still describing aborted data are
    /// carried into the cleaned segment.
    pub aborted_txns: Vec<AbortedTxn>,
}

/// Which transaction each batch read so far belongs to, for one pass in offset order
/// (Kafka's `CleanedTransactionMetadata`). Fed the aborted transactions overlapping the
/// section read (from the `.txnindex`); a transactional batch of a producer with an
/// aborted transaction begun at or before it is aborted data, any other transactional
/// batch is committed data (only data below the LSO is read, so every transaction there
/// has ended).
#[derive(Debug, Default)]
pub(crate) struct TxnTracker {
    /// Aborted transactions not reached yet, by first offset, the next one last.
    pending: Vec<AbortedTxn>,
    /// Producer → its aborted transaction under way at the read position, and whether a
    /// batch of it was read in this pass (Kafka's `lastObservedBatchOffset`).
    aborted: HashMap<i64, (AbortedTxn, bool)>,
    /// Producers whose committed transactional data was read and whose marker was not.
    committed: HashSet<i64>,
}

/// What a control batch is, for [`TxnTracker::on_control_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ControlKind {
    /// No records: a marker an earlier pass emptied.
    Empty,
    Commit,
    Abort,
    /// Another control record type, or one that does not decode: kept.
    Other,
}

/// What the tracker says of a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ControlRead {
    /// No data of its transaction was read in this pass: once its delete horizon has
    /// passed, the marker may go.
    discardable: bool,
    /// Its `.txnindex` entry stays (an ABORT whose data was read, being removed now).
    keeps_index_entry: bool,
}

impl TxnTracker {
    /// A tracker for a pass reading from an offset at or below the first offset of every
    /// transaction in `aborted` that it may reach (entries ended before the read start
    /// must be left out, or they would mark later data of their producer aborted).
    pub(crate) fn new(mut aborted: Vec<AbortedTxn>) -> TxnTracker {
        aborted.sort_unstable_by_key(|t| std::cmp::Reverse(t.first_offset));
        TxnTracker { pending: aborted, ..TxnTracker::default() }
    }

    /// Kafka's `consumeAbortedTxnsUpTo`.
    fn consume_up_to(&mut self, offset: i64) {
        while let Some(txn) = self.pending.pop_if(|t| t.first_offset <= offset) {
            self.aborted.entry(txn.producer_id).or_insert((txn, false));
        }
    }

    /// A data batch (Kafka's `onBatchRead`): whether it is aborted data, to be discarded.
    /// Unlike Kafka, a batch an earlier pass emptied (kept only for producer state or a
    /// segment's offset range) does not count as data of its transaction: it has nothing
    /// to hide or deliver, and counting it would pin the marker for as long as the
    /// producer stays idle.
    fn on_data_batch(&mut self, h: &BatchHeader) -> bool {
        self.consume_up_to(h.last_offset());
        if !h.is_transactional() {
            return false;
        }
        let has_data = h.records_count > 0;
        match self.aborted.get_mut(&h.producer_id) {
            Some((_, seen)) => {
                *seen |= has_data;
                true
            }
            None => {
                if has_data {
                    self.committed.insert(h.producer_id);
                }
                false
            }
        }
    }

    /// A control batch (Kafka's `onControlBatchRead`). A marker is kept while data of its
    /// transaction was read in this pass: for an ABORT that data is being removed right
    /// now, and the marker (and its index entry) stay one more pass so a read_committed
    /// consumer that fetched the data before the swap still learns of the abort.
    fn on_control_batch(&mut self, h: &BatchHeader, kind: ControlKind) -> ControlRead {
        self.consume_up_to(h.last_offset());
        let (discardable, keeps_index_entry) = match kind {
            ControlKind::Empty => (true, false),
            ControlKind::Other => (false, true),
            ControlKind::Commit => (!self.committed.remove(&h.producer_id), false),
            ControlKind::Abort => match self.aborted.remove(&h.producer_id) {
                Some((_, true)) => (false, true),
                _ => (true, false),
            },
        };
        ControlRead { discardable, keeps_index_entry }
    }
}

/// Latest offset per key within a byte budget (Kafka's `SkimpyOffsetMap`, but exact:
/// full keys, no hash collisions).
#[derive(Debug, Default)]
pub(crate) struct OffsetMap {
    offsets: HashMap<Bytes, i64>,
    bytes: usize,
}

impl OffsetMap {
    fn get(&self, key: &[u8]) -> Option<i64> {
        self.offsets.get(key).copied()
    }

    fn cost(key: &[u8]) -> usize {
        key.len() + MAP_ENTRY_OVERHEAD
    }
}

/// Builds the offset map of the dirty section `[first_dirty, end)` of `sources`. Stops
/// before the first batch whose new keys would exceed `budget_bytes` (after at least one
/// batch, so every pass makes progress); returns the map and the offset it covers up to.
///
/// Control batches and aborted data (per `aborted`, the aborted transactions overlapping
/// the section) add no key, as in Kafka's `buildOffsetMapForSegment`: an aborted value
/// must never shadow an older committed one.
pub(crate) fn build_offset_map<S: Storage>(
    storage: &S,
    sources: &[SourceSegment<S::File>],
    first_dirty: i64,
    end: i64,
    aborted: Vec<AbortedTxn>,
    budget_bytes: usize,
) -> Result<(OffsetMap, i64)> {
    let mut map = OffsetMap::default();
    let mut txns = TxnTracker::new(aborted);
    let mut batches_done = 0usize;
    for src in sources.iter().filter(|s| s.next_offset > first_dirty) {
        let mut stop = None;
        for_each_batch(storage, src, |raw, header| {
            if header.last_offset() < first_dirty || header.base_offset >= end {
                return Ok(true);
            }
            if header.is_control() {
                txns.on_control_batch(header, control_kind(header, raw));
                return Ok(true);
            }
            if txns.on_data_batch(header) {
                return Ok(true);
            }
            let Some(records) = decode_records(src, raw, header) else { return Ok(true) };
            let mut new_keys: Vec<(Bytes, i64)> = Vec::new();
            let mut cost = 0;
            for (record, _) in records.iter().filter(|(r, _)| r.offset >= first_dirty) {
                let Some(key) = &record.key else { continue };
                if !map.offsets.contains_key(key) && !new_keys.iter().any(|(k, _)| k == key) {
                    cost += OffsetMap::cost(key);
                }
                new_keys.push((key.clone(), record.offset));
            }
            if batches_done > 0 && map.bytes + cost > budget_bytes {
                stop = Some(header.base_offset);
                return Ok(false);
            }
            for (key, offset) in new_keys {
                map.offsets.insert(key, offset);
            }
            map.bytes += cost;
            batches_done += 1;
            Ok(true)
        })?;
        if let Some(stop) = stop {
            return Ok((map, stop));
        }
    }
    Ok((map, end))
}

/// How one segment is cleaned.
#[derive(Debug)]
pub(crate) struct CleanRules<'a> {
    pub map: &'a OffsetMap,
    /// Tombstones in segments whose newest timestamp is below this are dropped.
    pub delete_horizon_ms: i64,
    /// End of the offset map's coverage: a tombstone at or after it is always kept, since
    /// older values of its key may not have been removed yet.
    pub map_end: i64,
    /// Producer id → its newest batch (kept even when emptied).
    pub producer_last_batches: &'a HashMap<i64, LastBatch>,
    pub index_interval_bytes: u64,
    /// The pass's clock: a marker whose delete horizon is at or before it may go.
    pub now_ms: i64,
    /// `delete.retention.ms`: a marker whose transaction's data is gone gets the delete
    /// horizon `now_ms + delete_retention_ms`.
    pub delete_retention_ms: i64,
}

impl CleanRules<'_> {
    /// Whether the batch is the newest of a producer still in the producer state.
    fn is_producer_last(&self, h: &BatchHeader) -> bool {
        h.producer_id >= 0 && self.producer_last_batches.get(&h.producer_id).is_some_and(|last| last.is(h))
    }
}

/// A cleaned copy of one segment, its files complete and fsynced under `.cleaned` names.
pub(crate) struct CleanedSegment<F> {
    pub segment: Segment<F>,
    pub records_removed: u64,
}

/// Writes the cleaned copy of a group of consecutive segments (one segment, or several
/// merged as Kafka's cleaner does) to `<first base>.log.cleaned` (with its indexes as
/// `.index.cleaned` / `.timeindex.cleaned`), everything fsynced, streaming: memory holds
/// one batch and one write chunk. `None` if nothing changed (the files are removed).
///
/// `txns` is the pass's tracker, fed every batch from the first cleaned segment on, so
/// groups must be cleaned in offset order with the same tracker.
pub(crate) fn clean_segment<S: Storage>(
    storage: &S,
    dir: &Path,
    group: &[SourceSegment<S::File>],
    rules: &CleanRules<'_>,
    txns: &mut TxnTracker,
) -> Result<Option<CleanedSegment<S::File>>> {
    let (Some(first), Some(last)) = (group.first(), group.last()) else { return Ok(None) };
    let paths = SwapPaths::new(dir, first.base_offset);
    let mut seg = Segment::create_at(storage, with_suffix(&paths.log, CLEANED_SUFFIX), first.base_offset)?;
    let file = seg.handle()?.clone();
    let mut removed = 0u64;
    let mut changed = group.len() > 1;
    let mut chunk: Vec<u8> = Vec::with_capacity(WRITE_CHUNK);
    let mut chunk_at = 0u64;
    let mut result = Ok(());
    // Markers whose `.txnindex` entries stay.
    let mut indexed_markers = HashSet::new();
    for src in group {
        let retain_deletes = src.max_timestamp >= rules.delete_horizon_ms;
        result = for_each_batch(storage, src, |raw, header| {
            // Keeping the group's last batch keeps its offset range (see module docs).
            let last_in_group = header.last_offset() + 1 >= last.next_offset;
            let (out, n_removed) = if header.is_control() {
                let (out, keeps_index_entry) = filter_control_batch(raw, header, rules, txns, last_in_group)?;
                if keeps_index_entry {
                    indexed_markers.insert(header.base_offset);
                }
                // A marker loses all its records or none (a delete horizon keeps them).
                let emptied = match &out {
                    Filtered::Keep => false,
                    Filtered::Drop => true,
                    Filtered::Rewritten(bytes) => bytes[57..61] == [0; 4],
                };
                (out, if emptied { header.records_count.max(0) as u64 } else { 0 })
            } else {
                filter_data_batch(src, raw, header, rules, txns, retain_deletes, last_in_group)?
            };
            removed += n_removed;
            let bytes: &[u8] = match &out {
                Filtered::Keep => raw,
                Filtered::Rewritten(bytes) => bytes,
                Filtered::Drop => &[],
            };
            changed |= !matches!(out, Filtered::Keep);
            if !bytes.is_empty() {
                // Checked again after rewriting, before it reaches the disk.
                let h = batch::validate(bytes, u64::MAX)
                    .map_err(|reason| StorageError::InvalidBatch { position: 0, reason })?;
                debug_assert_eq!((h.base_offset, h.last_offset()), (header.base_offset, header.last_offset()));
                seg.note_batch(&h, seg.size, rules.index_interval_bytes);
                seg.size += bytes.len() as u64;
                chunk.extend_from_slice(bytes);
            }
            if chunk.len() >= WRITE_CHUNK {
                file.write_all_at(&chunk, chunk_at).map_err(|e| StorageError::io("write", &seg.path, e))?;
                chunk_at += chunk.len() as u64;
                chunk.clear();
            }
            Ok(true)
        });
        if result.is_err() {
            break;
        }
    }
    let result =
        result.and_then(|()| file.write_all_at(&chunk, chunk_at).map_err(|e| StorageError::io("write", &seg.path, e)));
    if result.is_err() || !changed {
        drop(file);
        drop(seg);
        discard_cleaned(storage, dir, first.base_offset);
        return result.map(|()| None);
    }
    // An abort stays indexed while its data may still be read (Kafka appends to the
    // cleaned index only aborts whose marker was kept for the data read in the pass).
    seg.aborted_txns = group
        .iter()
        .flat_map(|src| src.aborted_txns.iter().copied())
        .filter(|t| indexed_markers.contains(&t.last_offset))
        .collect();
    // Writes the indexes and fsyncs them and the log.
    let (index, time_index) =
        (with_suffix(&paths.index, CLEANED_SUFFIX), with_suffix(&paths.time_index, CLEANED_SUFFIX));
    let written = seg
        .persist_txn_index_to(storage, &with_suffix(&paths.txn_index, CLEANED_SUFFIX))
        .and_then(|()| seg.persist_indexes_to(storage, &index, &time_index));
    if let Err(e) = written {
        discard_cleaned(storage, dir, first.base_offset);
        return Err(e);
    }
    Ok(Some(CleanedSegment { segment: seg, records_removed: removed }))
}

/// Splits consecutive segments into groups to be cleaned into one segment each, as
/// Kafka's `groupSegmentsBySize`: a group's source segments together stay within
/// `segment.bytes`, the index limit (`segment.index.bytes`), and 2^31 offsets from its
/// base (relative offsets are 32-bit), so the merged segment is one the log could have
/// written itself.
pub(crate) fn group_by_size<F>(
    sources: &[SourceSegment<F>],
    max_bytes: u64,
    max_index_bytes: u64,
) -> Vec<std::ops::Range<usize>> {
    let max_bytes = max_bytes.min(u64::from(u32::MAX));
    let mut groups = Vec::new();
    let mut start = 0;
    while start < sources.len() {
        let first = &sources[start];
        let (mut bytes, mut entries) = (first.size, first.index_entries);
        let mut end = start + 1;
        while let Some(next) = sources.get(end) {
            let fits = bytes + next.size <= max_bytes
                && (entries + next.index_entries + 1) as u64 * segment::TIME_ENTRY <= max_index_bytes
                && next.next_offset - first.base_offset <= i64::from(i32::MAX);
            if !fits {
                break;
            }
            bytes += next.size;
            entries += next.index_entries;
            end += 1;
        }
        groups.push(start..end);
        start = end;
    }
    groups
}

enum Filtered {
    Keep,
    Drop,
    Rewritten(Vec<u8>),
}

/// Decides one data batch: kept as is, dropped, or rewritten with the surviving records
/// (Kafka's `checkBatchRetention` and `shouldRetainRecord` for data). Aborted data loses
/// every record. Returns the decision and the number of records removed.
fn filter_data_batch<F: StorageFile>(
    src: &SourceSegment<F>,
    raw: &[u8],
    header: &BatchHeader,
    rules: &CleanRules<'_>,
    txns: &mut TxnTracker,
    retain_deletes: bool,
    last_in_group: bool,
) -> Result<(Filtered, u64)> {
    let aborted = txns.on_data_batch(header);
    let retain_empty = rules.is_producer_last(header) || last_in_group;
    if aborted {
        return Ok((emptied(raw, header, retain_empty)?, header.records_count.max(0) as u64));
    }
    let Some(records) = decode_records(src, raw, header) else { return Ok((Filtered::Keep, 0)) };
    let mut spans: Vec<(usize, usize)> = Vec::with_capacity(records.len());
    for (record, span) in &records {
        let retain = match &record.key {
            None => false,
            Some(key) => {
                let latest = rules.map.get(key).is_none_or(|o| record.offset >= o);
                latest && (record.value.is_some() || retain_deletes || record.offset >= rules.map_end)
            }
        };
        if retain {
            spans.push(*span);
        }
    }
    let removed = (records.len() - spans.len()) as u64;
    // Also drops batches emptied by an earlier pass once nothing needs them any more.
    if spans.is_empty() && !retain_empty {
        return Ok((Filtered::Drop, removed));
    }
    if removed == 0 {
        return Ok((Filtered::Keep, 0));
    }
    let Some(data) = records_section(raw, header) else { return Ok((Filtered::Keep, 0)) };
    Ok((Filtered::Rewritten(rebuild_batch(raw, header, &data, &spans)?), removed))
}

/// Decides one control batch (Kafka's `checkBatchRetention` for markers, KIP-534): a
/// marker whose transaction has no data left in the pass is stamped with the delete
/// horizon `now + delete.retention.ms` on the first pass that finds it so, and removed by
/// the first pass after that horizon; until then it is kept whole. The newest batch of a
/// producer (and the group's last batch) is kept empty instead of removed. Returns the
/// decision and whether the marker's `.txnindex` entry stays.
fn filter_control_batch(
    raw: &[u8],
    header: &BatchHeader,
    rules: &CleanRules<'_>,
    txns: &mut TxnTracker,
    last_in_group: bool,
) -> Result<(Filtered, bool)> {
    let read = txns.on_control_batch(header, control_kind(header, raw));
    let horizon = header.delete_horizon_ms();
    let expired = read.discardable && horizon.is_some_and(|h| h <= rules.now_ms);
    let retain_empty = rules.is_producer_last(header) || last_in_group;
    let out = if expired || header.records_count == 0 {
        emptied(raw, header, retain_empty)?
    } else if read.discardable && horizon.is_none() {
        let horizon = rules.now_ms.saturating_add(rules.delete_retention_ms);
        match records_section(raw, header).and_then(|data| stamp_delete_horizon(raw, header, &data, horizon)) {
            Some(rewritten) => Filtered::Rewritten(rewritten),
            None => Filtered::Keep,
        }
    } else {
        Filtered::Keep
    };
    Ok((out, read.keeps_index_entry))
}

/// A batch losing all its records: kept empty (Kafka's `RETAIN_EMPTY`) if `retain_empty`,
/// else dropped.
fn emptied(raw: &[u8], header: &BatchHeader, retain_empty: bool) -> Result<Filtered> {
    Ok(match (retain_empty, header.records_count) {
        (false, _) => Filtered::Drop,
        (true, 0) => Filtered::Keep,
        (true, _) => Filtered::Rewritten(rebuild_batch(raw, header, &[], &[])?),
    })
}

/// What a control batch holds.
fn control_kind(header: &BatchHeader, raw: &[u8]) -> ControlKind {
    if header.records_count == 0 {
        return ControlKind::Empty;
    }
    match txn_index::marker_of(header, raw).map(|m| m.commit) {
        Some(true) => ControlKind::Commit,
        Some(false) => ControlKind::Abort,
        None => ControlKind::Other,
    }
}

/// The (uncompressed) batch with its delete horizon set as KIP-534 does: attributes bit 6,
/// baseTimestamp = `horizon_ms`, and every record's timestampDelta moved by the old base
/// minus the new one, so each record keeps its timestamp. `None` if a record does not
/// parse (the batch is then kept unchanged).
fn stamp_delete_horizon(raw: &[u8], header: &BatchHeader, data: &[u8], horizon_ms: i64) -> Option<Vec<u8>> {
    let shift = header.base_timestamp.checked_sub(horizon_ms)?;
    let mut records = Vec::with_capacity(data.len() + 16);
    let mut pos = 0;
    while pos < data.len() {
        let (len, prefix) = read_varint(&data[pos..])?;
        let body = data.get(pos + prefix..pos + prefix + len)?;
        let (&attributes, rest) = body.split_first()?;
        let (delta, delta_len) = read_varlong(rest)?;
        let mut record = vec![attributes];
        write_varlong(&mut record, delta.checked_add(shift)?);
        record.extend_from_slice(&rest[delta_len..]);
        write_varlong(&mut records, record.len() as i64);
        records.extend_from_slice(&record);
        pos += prefix + len;
    }
    write_batch(raw, header, &records, header.records_count, Some(horizon_ms)).ok()
}

/// Decodes a data batch's records with the byte span of each in the (decompressed)
/// records section; `None` (logged) if it does not decode.
fn decode_records<F: StorageFile>(
    src: &SourceSegment<F>,
    raw: &[u8],
    header: &BatchHeader,
) -> Option<Vec<(osprey_protocol::records::Record, (usize, usize))>> {
    let fail = |reason: String| {
        tracing::warn!(file = %src.path.display(), offset = header.base_offset, %reason, "cannot decode batch for compaction; keeping it whole");
        None
    };
    let data = records_section(raw, header)?;
    let batch = match RecordBatch::new(Bytes::copy_from_slice(raw)) {
        Ok(b) => b,
        Err(e) => return fail(e.to_string()),
    };
    let iter = match batch.records(MAX_DECOMPRESSED_BATCH_BYTES) {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    let mut out = Vec::with_capacity(header.records_count.max(0) as usize);
    let mut pos = 0usize;
    for record in iter {
        let record = match record {
            Ok(r) => r,
            Err(e) => return fail(e.to_string()),
        };
        let Some((len, prefix)) = read_varint(&data[pos.min(data.len())..]) else {
            return fail("record length".into());
        };
        let end = pos + prefix + len;
        if len > data.len() || end > data.len() {
            return fail("record length beyond the batch".into());
        }
        out.push((record, (pos, end)));
        pos = end;
    }
    Some(out)
}

/// The records section, decompressed if the batch is compressed.
fn records_section(raw: &[u8], header: &BatchHeader) -> Option<Bytes> {
    let payload = &raw[HEADER_LEN..];
    match Compression::from_id(header.attributes & COMPRESSION_MASK).ok()? {
        Compression::None => Some(Bytes::copy_from_slice(payload)),
        codec => osprey_protocol::records::decompress(codec, payload, MAX_DECOMPRESSED_BATCH_BYTES).ok(),
    }
}

/// A zigzag varint (a record's length prefix): (value, bytes read).
fn read_varint(buf: &[u8]) -> Option<(usize, usize)> {
    let mut raw: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(5) {
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let value = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
            return usize::try_from(value).ok().map(|v| (v, i + 1));
        }
    }
    None
}

/// A zigzag varlong (a record's timestampDelta): (value, bytes read).
fn read_varlong(buf: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
}

/// Appends `value` as a zigzag varlong.
fn write_varlong(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// The batch with only the records at `spans` of its records section: same header
/// except recordsCount, batchLength and CRC (an empty batch also loses its codec).
fn rebuild_batch(raw: &[u8], header: &BatchHeader, data: &[u8], spans: &[(usize, usize)]) -> Result<Vec<u8>> {
    let mut records = Vec::with_capacity(spans.iter().map(|(a, b)| b - a).sum());
    for &(start, end) in spans {
        records.extend_from_slice(&data[start..end]);
    }
    write_batch(raw, header, &records, spans.len() as i32, None)
}

/// The batch's header with `records` (`count` of them, uncompressed) as its records
/// section, compressed with the batch's codec (none if empty), and, with `horizon_ms`,
/// its delete horizon set; recomputes batchLength and the CRC.
fn write_batch(
    raw: &[u8],
    header: &BatchHeader,
    records: &[u8],
    count: i32,
    horizon_ms: Option<i64>,
) -> Result<Vec<u8>> {
    let mut attributes = header.attributes;
    let codec = Compression::from_id(attributes & COMPRESSION_MASK).unwrap_or(Compression::None);
    let compressed;
    let payload = if count == 0 {
        attributes &= !COMPRESSION_MASK;
        &[][..]
    } else if codec == Compression::None {
        records
    } else {
        compressed = compress(codec, records).map_err(|e| {
            StorageError::io("compress", Path::new(""), std::io::Error::other(format!("compaction: {e}")))
        })?;
        &compressed[..]
    };
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&raw[..HEADER_LEN]);
    let batch_length = (HEADER_LEN - LOG_OVERHEAD + payload.len()) as i32;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    if let Some(horizon_ms) = horizon_ms {
        attributes |= ATTR_DELETE_HORIZON;
        out[27..35].copy_from_slice(&horizon_ms.to_be_bytes());
    }
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    out[57..61].copy_from_slice(&count.to_be_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Calls `f` with each batch of the segment (bytes and header) until it returns false.
fn for_each_batch<S: Storage>(
    storage: &S,
    src: &SourceSegment<S::File>,
    mut f: impl FnMut(&[u8], &BatchHeader) -> Result<bool>,
) -> Result<()> {
    let file = match &src.file {
        Some(file) => file.clone(),
        None => Arc::new(storage.open(&src.path, false).map_err(|e| StorageError::io("open", &src.path, e))?),
    };
    let mut position = 0u64;
    let mut head = [0u8; HEADER_LEN];
    let mut buf = Vec::new();
    while position + HEADER_LEN as u64 <= src.size {
        let read =
            |buf: &mut [u8], at: u64| file.read_exact_at(buf, at).map_err(|e| StorageError::io("read", &src.path, e));
        read(&mut head, position)?;
        let corrupt = |reason: batch::BatchError| StorageError::InvalidBatch { position: position as usize, reason };
        let header = BatchHeader::parse(&head).map_err(corrupt)?;
        let size = header.total_size();
        if size > src.size - position {
            return Err(corrupt(batch::BatchError::BadLength(header.batch_length)));
        }
        buf.resize(size as usize, 0);
        read(&mut buf, position)?;
        if !f(&buf, &header)? {
            return Ok(());
        }
        position += size;
    }
    Ok(())
}

/// The four files of a segment.
pub(crate) struct SwapPaths {
    pub log: PathBuf,
    pub index: PathBuf,
    pub time_index: PathBuf,
    pub txn_index: PathBuf,
}

impl SwapPaths {
    pub fn new(dir: &Path, base: i64) -> SwapPaths {
        SwapPaths {
            log: segment::log_path(dir, base),
            index: segment::index_path(dir, base),
            time_index: segment::time_index_path(dir, base),
            txn_index: crate::txn_index::txn_index_path(dir, base),
        }
    }
}

pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", path.display()))
}

/// Replaces segment `base` (and the segments `merged` into it) by its `.cleaned` files,
/// crash-safely (Kafka's scheme): the index files are renamed to `.swap`, then the log
/// (the commit point: recovery finishes any swap whose `.log.swap` exists and discards
/// the rest), then the merged segments are deleted and each `.swap` replaces its
/// original, the log last.
pub(crate) fn commit_swap<S: Storage>(storage: &S, dir: &Path, base: i64, merged: &[i64]) -> Result<()> {
    let p = SwapPaths::new(dir, base);
    for path in [&p.index, &p.time_index, &p.txn_index, &p.log] {
        let (from, to) = (with_suffix(path, CLEANED_SUFFIX), with_suffix(path, SWAP_SUFFIX));
        storage.rename(&from, &to).map_err(|e| StorageError::io("rename", &from, e))?;
    }
    storage.sync_dir(dir).map_err(|e| StorageError::io("fsync dir", dir, e))?;
    for &other in merged {
        Segment::<S::File>::delete_files(storage, dir, other)?;
    }
    finish_swap(storage, dir, base)
}

/// The second half of a swap: every `.swap` file of `base` replaces its original, the
/// log last (so a `.log.swap` means the swap is still to be finished).
pub(crate) fn finish_swap<S: Storage>(storage: &S, dir: &Path, base: i64) -> Result<()> {
    let p = SwapPaths::new(dir, base);
    for path in [&p.index, &p.time_index, &p.txn_index, &p.log] {
        let from = with_suffix(path, SWAP_SUFFIX);
        if storage.exists(&from) {
            storage.rename(&from, path).map_err(|e| StorageError::io("rename", &from, e))?;
        }
    }
    storage.sync_dir(dir).map_err(|e| StorageError::io("fsync dir", dir, e))
}

/// Removes the `.cleaned` files of segment `base` (a pass that was abandoned).
pub(crate) fn discard_cleaned<S: Storage>(storage: &S, dir: &Path, base: i64) {
    let p = SwapPaths::new(dir, base);
    for path in [&p.index, &p.time_index, &p.txn_index, &p.log] {
        let path = with_suffix(path, CLEANED_SUFFIX);
        if storage.exists(&path) {
            if let Err(e) = storage.remove(&path) {
                tracing::warn!(file = %path.display(), error = %e, "could not remove an abandoned cleaned file");
            }
        }
    }
}

/// At open: finishes swaps that reached their commit point (a `.log.swap` exists) and
/// discards the rest (`.cleaned` files, and `.swap` index files left without a
/// `.log.swap`, i.e. renamed before the commit point).
pub(crate) fn recover_swaps<S: Storage>(storage: &S, dir: &Path, names: &[String]) -> Result<()> {
    let log_swap = format!(".log{SWAP_SUFFIX}");
    let segment_bases: Vec<i64> = names.iter().filter_map(|n| n.strip_suffix(".log")?.parse::<i64>().ok()).collect();
    for base in names.iter().filter_map(|n| n.strip_suffix(&log_swap)?.parse::<i64>().ok()) {
        tracing::info!(dir = %dir.display(), base, "finishing a compaction swap interrupted by a crash");
        // Segments merged into it that the crash left behind go first.
        let end = swap_end_offset(storage, &with_suffix(&SwapPaths::new(dir, base).log, SWAP_SUFFIX))?;
        for &other in segment_bases.iter().filter(|&&b| b > base && b < end) {
            Segment::<S::File>::delete_files(storage, dir, other)?;
        }
        finish_swap(storage, dir, base)?;
    }
    for name in names.iter().filter(|n| n.ends_with(CLEANED_SUFFIX) || n.ends_with(SWAP_SUFFIX)) {
        let path = dir.join(name);
        if storage.exists(&path) {
            tracing::info!(file = %path.display(), "removing an unfinished compaction file");
            storage.remove(&path).map_err(|e| StorageError::io("remove", &path, e))?;
        }
    }
    Ok(())
}

/// The offset after the last batch of a committed `.log.swap` (complete and fsynced
/// before the commit, so its batches are whole).
fn swap_end_offset<S: Storage>(storage: &S, path: &Path) -> Result<i64> {
    let file = storage.open(path, false).map_err(|e| StorageError::io("open", path, e))?;
    let size = file.len().map_err(|e| StorageError::io("stat", path, e))?;
    let src = SourceSegment {
        base_offset: 0,
        file: Some(Arc::new(file)),
        path: path.to_path_buf(),
        size,
        next_offset: 0,
        max_timestamp: -1,
        index_entries: 0,
        aborted_txns: Vec::new(),
    };
    let mut end = 0;
    for_each_batch(storage, &src, |_, header| {
        end = header.last_offset() + 1;
        Ok(true)
    })?;
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_reads_zigzag_lengths() {
        assert_eq!(read_varint(&[0x02]), Some((1, 1)));
        assert_eq!(read_varint(&[0xac, 0x02]), Some((150, 2)));
        assert_eq!(read_varint(&[0x01]), None, "negative lengths are not record lengths");
        assert_eq!(read_varint(&[0x80, 0x80]), None, "truncated");
    }

    #[test]
    fn varlongs_round_trip() {
        for v in [0i64, 1, -1, 63, -64, 64, 1 << 40, -(1 << 40), i64::MAX, i64::MIN] {
            let mut buf = Vec::new();
            write_varlong(&mut buf, v);
            assert_eq!(read_varlong(&buf), Some((v, buf.len())), "{v}");
        }
    }
}
