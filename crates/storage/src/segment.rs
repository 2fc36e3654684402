//! One segment: a `.log` file of batches named by its base offset, with a sparse offset
//! index (`.index`) and time index (`.timeindex`).
//!
//! Index entries are kept in memory and written to their files only when the segment
//! is sealed after it stops being active (the group commit after a roll, or the roll
//! itself off the append path) or at a clean close, and then fsynced. So the index files of the
//! active segment are trusted only after a clean shutdown; after a crash recovery
//! rebuilds them from the log, which is why nothing on the append path writes them.
//! The aborted-transaction index (`.txnindex`, see [`crate::txn_index`]) follows the same
//! rule; the log rebuilds it with the producer state, which it needs for each entry's LSO.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{self, BatchError, BatchHeader, HEADER_LEN};
use crate::error::{Result, StorageError};
use crate::fs::{Storage, StorageFile};
use crate::recovery;
use crate::txn_index::{self, AbortedTxn};

/// Bytes per offset index entry: relative offset u32 + position u32 (big-endian).
pub(crate) const OFFSET_ENTRY: u64 = 8;
/// Bytes per time index entry: timestamp i64 + relative offset u32 (big-endian).
pub(crate) const TIME_ENTRY: u64 = 12;
/// Chunk read while scanning a segment during recovery.
const SCAN_CHUNK: usize = 1 << 20;

/// `00000000000000000042` for base offset 42, as Kafka names segment files.
pub(crate) fn file_stem(base_offset: i64) -> String {
    format!("{base_offset:020}")
}

pub(crate) fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{}.log", file_stem(base_offset)))
}

pub(crate) fn index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{}.index", file_stem(base_offset)))
}

pub(crate) fn time_index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{}.timeindex", file_stem(base_offset)))
}

/// A segment and its in-memory indexes.
#[derive(Debug)]
pub(crate) struct Segment<F> {
    pub base_offset: i64,
    /// The open `.log` file; `None` for a sealed segment whose file was closed to bound
    /// open descriptors (reopened on demand). The active segment's is always open.
    pub file: Option<Arc<F>>,
    pub path: PathBuf,
    /// Bytes of valid batches; the file is never longer once the segment is open.
    pub size: u64,
    /// Offset after the last batch (base_offset when empty).
    pub next_offset: i64,
    /// (relative offset, position), both strictly increasing.
    pub offset_index: Vec<(u32, u32)>,
    /// (max timestamp so far, relative offset), both strictly increasing.
    pub time_index: Vec<(i64, u32)>,
    pub bytes_since_index: u64,
    /// Largest batch max timestamp, and the first offset of the batch holding it.
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    /// maxTimestamp of the first batch, which `segment.ms` counts from (as Kafka).
    pub first_batch_timestamp: Option<i64>,
    /// Transactions aborted by markers in this segment, in marker order.
    pub aborted_txns: Vec<AbortedTxn>,
    /// The segment's shape when its index files last matched memory (written, or loaded
    /// after a clean shutdown); `None` if they never did or it was cut since. A clean
    /// close rewrites (and fsyncs) the indexes only if the shape changed.
    pub persisted: Option<IndexShape>,
}

/// What the index files of a segment depend on: its size and its entry counts. Indexes
/// only grow with the log between persists; a cut (`truncate_at`) forgets the shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexShape {
    size: u64,
    offset_entries: usize,
    time_entries: usize,
    aborted: usize,
}

/// Bytes cut from the end of a segment by recovery.
#[derive(Debug, Clone)]
pub(crate) struct Cut {
    pub bytes: u64,
    /// The copy of the cut bytes (sealed segments only).
    pub quarantined: Option<PathBuf>,
}

/// One batch found by walking a segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Located {
    pub position: u64,
    pub header: BatchHeader,
}

impl<F: StorageFile> Segment<F> {
    /// Creates a new empty segment file (truncating leftovers of the same name).
    pub fn create<S: Storage<File = F>>(storage: &S, dir: &Path, base_offset: i64) -> Result<Self> {
        let path = log_path(dir, base_offset);
        let file = storage.open(&path, true).map_err(|e| StorageError::io("create", &path, e))?;
        file.set_len(0).map_err(|e| StorageError::io("truncate", &path, e))?;
        for p in [
            index_path(dir, base_offset),
            time_index_path(dir, base_offset),
            txn_index::txn_index_path(dir, base_offset),
        ] {
            if storage.exists(&p) {
                storage.remove(&p).map_err(|e| StorageError::io("remove", &p, e))?;
            }
        }
        let mut seg = Segment::empty(base_offset, Some(Arc::new(file)), path);
        // No index files, and none needed: an open rebuilds an empty segment's for free.
        seg.persisted = Some(seg.index_shape());
        Ok(seg)
    }

    /// Creates an empty segment for `base_offset` in a file at `path` (the compactor's
    /// `.cleaned` output, renamed into place later).
    pub fn create_at<S: Storage<File = F>>(storage: &S, path: PathBuf, base_offset: i64) -> Result<Self> {
        let file = storage.open(&path, true).map_err(|e| StorageError::io("create", &path, e))?;
        file.set_len(0).map_err(|e| StorageError::io("truncate", &path, e))?;
        Ok(Segment::empty(base_offset, Some(Arc::new(file)), path))
    }

    fn empty(base_offset: i64, file: Option<Arc<F>>, path: PathBuf) -> Self {
        Segment {
            base_offset,
            file,
            path,
            size: 0,
            next_offset: base_offset,
            offset_index: Vec::new(),
            time_index: Vec::new(),
            bytes_since_index: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            first_batch_timestamp: None,
            aborted_txns: Vec::new(),
            persisted: None,
        }
    }

    fn index_shape(&self) -> IndexShape {
        IndexShape {
            size: self.size,
            offset_entries: self.offset_index.len(),
            time_entries: self.time_index.len(),
            aborted: self.aborted_txns.len(),
        }
    }

    /// Whether the index files on disk (and the data, fsynced with them) match memory.
    pub fn indexes_persisted(&self) -> bool {
        self.persisted == Some(self.index_shape())
    }

    /// Opens an existing segment. A `sealed` segment (one before the recovery point) was
    /// fsynced with its indexes, and after a clean shutdown so was the newest:
    /// then (`trust_indexes`) the index files are loaded and only the batches after the
    /// last index entry are walked. Otherwise, or if the indexes are missing or do not
    /// match the log, the whole file is scanned checking every CRC and the indexes are
    /// rebuilt (they are derived data; a sealed segment's are written back).
    ///
    /// Either way the file is cut after the last valid batch. The newest segment's cut
    /// is a write torn by the crash; a sealed segment's is damage, and the bytes cut are
    /// first copied aside (see [`crate::recovery`]) and returned as a [`Cut`].
    pub fn open<S: Storage<File = F>>(
        storage: &S,
        dir: &Path,
        base_offset: i64,
        trust_indexes: bool,
        sealed: bool,
        index_interval_bytes: u64,
    ) -> Result<(Self, Option<Cut>)> {
        let path = log_path(dir, base_offset);
        let file = storage.open(&path, false).map_err(|e| StorageError::io("open", &path, e))?;
        let len = file.len().map_err(|e| StorageError::io("stat", &path, e))?;
        let file = Arc::new(file);
        let mut seg = Segment::empty(base_offset, Some(file.clone()), path);
        if trust_indexes {
            if let Some(()) = seg.load_indexes(storage, dir, len) {
                let from = seg.offset_index.last().map_or(0, |e| u64::from(e.1));
                if from > 0 {
                    // segment.ms counts from the first batch, which the walk skips.
                    let first = seg.find_batch_by(0, len, |_| true).ok().flatten();
                    seg.first_batch_timestamp = first.map(|b| b.header.max_timestamp);
                }
                let loaded = (seg.offset_index.len(), seg.time_index.len(), seg.aborted_txns.len());
                let end = seg.walk_and_index(from, len, false, index_interval_bytes)?;
                if end == len {
                    // The walk adds no entry to indexes written at a clean close.
                    let shape = seg.index_shape();
                    if (shape.offset_entries, shape.time_entries, shape.aborted) == loaded {
                        seg.persisted = Some(shape);
                    }
                    return Ok((seg, None));
                }
                // Not "after a clean shutdown": sealed segments are trusted after a crash
                // too, since they were fsynced with their indexes when they were sealed.
                tracing::warn!(file = %seg.path.display(), position = end, "segment does not match its index files; rescanning it and rebuilding them");
            }
            seg = Segment::empty(base_offset, seg.file, seg.path);
        }
        let end = seg.walk_and_index(0, len, true, index_interval_bytes)?;
        let mut cut = None;
        if end < len {
            let quarantined = if sealed {
                let to = recovery::damaged_path(dir, base_offset, end);
                recovery::copy_tail(storage, &file, end, len, &to)?;
                Some(to)
            } else {
                None
            };
            file.set_len(end).map_err(|e| StorageError::io("truncate", &seg.path, e))?;
            file.sync_data().map_err(|e| StorageError::io("fsync", &seg.path, e))?;
            cut = Some(Cut { bytes: len - end, quarantined });
        }
        if sealed {
            seg.rewrite_indexes_after_scan(storage, dir)?;
        }
        let index_files = [
            index_path(dir, base_offset),
            time_index_path(dir, base_offset),
            txn_index::txn_index_path(dir, base_offset),
        ];
        if seg.size == 0 && !index_files.iter().any(|p| storage.exists(p)) {
            // As a new segment: an empty one without index files reopens the same.
            seg.persisted = Some(seg.index_shape());
        }
        Ok((seg, cut))
    }

    /// A sealed segment rescanned at open: keeps the aborted transactions of its
    /// `.txnindex` (the scan does not rebuild them; only the newest segment's are
    /// replayed with the producer state) up to where the segment now ends, and writes
    /// the rebuilt indexes back so the next open need not rescan.
    fn rewrite_indexes_after_scan<S: Storage<File = F>>(&mut self, storage: &S, dir: &Path) -> Result<()> {
        let txn_path = txn_index::txn_index_path(dir, self.base_offset);
        if storage.exists(&txn_path) {
            let aborted = read_small(storage, &txn_path).and_then(|raw| txn_index::decode(&raw)).unwrap_or_default();
            self.aborted_txns = aborted.into_iter().filter(|t| t.last_offset < self.next_offset).collect();
        }
        self.persist_indexes(storage, dir)
    }

    /// Loads and checks index files; `None` if they are missing or inconsistent.
    fn load_indexes<S: Storage<File = F>>(&mut self, storage: &S, dir: &Path, log_len: u64) -> Option<()> {
        let raw = read_small(storage, &index_path(dir, self.base_offset))?;
        let mut last: Option<(u32, u32)> = None;
        for chunk in raw.chunks_exact(OFFSET_ENTRY as usize) {
            let rel = u32::from_be_bytes(chunk[0..4].try_into().ok()?);
            let pos = u32::from_be_bytes(chunk[4..8].try_into().ok()?);
            if u64::from(pos) >= log_len || last.is_some_and(|(r, p)| rel <= r || pos <= p) {
                return None;
            }
            last = Some((rel, pos));
            self.offset_index.push((rel, pos));
        }
        // A sealed segment written before transactions were supported has no file.
        let txn_path = txn_index::txn_index_path(dir, self.base_offset);
        if storage.exists(&txn_path) {
            self.aborted_txns = txn_index::decode(&read_small(storage, &txn_path)?)?;
        }
        let raw = read_small(storage, &time_index_path(dir, self.base_offset))?;
        let mut last: Option<(i64, u32)> = None;
        for chunk in raw.chunks_exact(TIME_ENTRY as usize) {
            let ts = i64::from_be_bytes(chunk[0..8].try_into().ok()?);
            let rel = u32::from_be_bytes(chunk[8..12].try_into().ok()?);
            if last.is_some_and(|(t, r)| ts <= t || rel < r) {
                return None;
            }
            last = Some((ts, rel));
            self.time_index.push((ts, rel));
        }
        if let Some(&(ts, rel)) = self.time_index.last() {
            self.max_timestamp = ts;
            self.offset_of_max_timestamp = self.base_offset + i64::from(rel);
        }
        Some(())
    }

    /// Walks batches from `from` to `len`, adding index entries and timestamps as it
    /// goes; returns the end of the last valid batch. With `check_crc`, a bad batch is
    /// reported (file and position) as the place the log gets truncated.
    fn walk_and_index(&mut self, from: u64, len: u64, check_crc: bool, interval: u64) -> Result<u64> {
        let mut pos = from;
        let mut expected_base = None;
        if from > 0 {
            // The walk starts at an index entry: the batch there must carry that offset.
            expected_base = self.offset_index.last().map(|e| self.base_offset + i64::from(e.0));
            self.size = from;
        }
        let mut chunk: Vec<u8> = Vec::new();
        let mut chunk_pos = pos;
        while pos < len {
            let header = match self.batch_at(&mut chunk, &mut chunk_pos, pos, len, check_crc) {
                Ok(h) => h,
                Err(reason) => {
                    tracing::warn!(file = %self.path.display(), position = pos, %reason, "torn or corrupt batch; truncating the segment here");
                    break;
                }
            };
            let base_ok = expected_base.is_none_or(|b| header.base_offset == b);
            let in_order = header.base_offset >= self.next_offset && header.base_offset >= self.base_offset;
            // Index entries hold 32-bit relative offsets and positions.
            let fits = header.last_offset() - self.base_offset <= i64::from(u32::MAX) && pos <= u64::from(u32::MAX);
            if !(base_ok && in_order && fits) {
                tracing::warn!(file = %self.path.display(), position = pos, offset = header.base_offset, "batch offset out of sequence; truncating the segment here");
                break;
            }
            expected_base = None;
            if from > 0 && pos == from {
                // This batch already has its index entry (the one the walk started at).
                self.note_batch_without_index(&header);
                self.bytes_since_index = header.total_size();
            } else {
                self.note_batch(&header, pos, interval);
            }
            pos += header.total_size();
            self.size = pos;
        }
        Ok(pos)
    }

    /// Reads and checks the batch at `pos`, through a read-ahead buffer.
    fn batch_at(
        &self,
        chunk: &mut Vec<u8>,
        chunk_pos: &mut u64,
        pos: u64,
        len: u64,
        check_crc: bool,
    ) -> std::result::Result<BatchHeader, BatchError> {
        let left = len - pos;
        let need_header = (HEADER_LEN as u64).min(left) as usize;
        self.fill(chunk, chunk_pos, pos, need_header, len)?;
        let off = (pos - *chunk_pos) as usize;
        let header = BatchHeader::parse(&chunk[off..])?;
        if header.total_size() > left {
            return Err(BatchError::Truncated { needed: header.total_size(), available: left });
        }
        if check_crc {
            self.fill(chunk, chunk_pos, pos, header.total_size() as usize, len)?;
            let off = (pos - *chunk_pos) as usize;
            batch::validate(&chunk[off..off + header.total_size() as usize], u64::MAX)?;
        }
        Ok(header)
    }

    /// Ensures `chunk` holds `[pos, pos + need)`, reading ahead up to `SCAN_CHUNK`.
    fn fill(
        &self,
        chunk: &mut Vec<u8>,
        chunk_pos: &mut u64,
        pos: u64,
        need: usize,
        len: u64,
    ) -> std::result::Result<(), BatchError> {
        let have = pos >= *chunk_pos && pos + need as u64 <= *chunk_pos + chunk.len() as u64;
        if have {
            return Ok(());
        }
        let want = (need.max(SCAN_CHUNK) as u64).min(len - pos) as usize;
        chunk.resize(want, 0);
        *chunk_pos = pos;
        let truncated = BatchError::Truncated { needed: need as u64, available: 0 };
        let Some(file) = &self.file else { return Err(truncated) };
        match file.read_exact_at(chunk, pos) {
            Ok(()) if want >= need => Ok(()),
            _ => Err(truncated),
        }
    }

    /// Updates timestamps and indexes for a batch written at `position`.
    pub fn note_batch(&mut self, header: &BatchHeader, position: u64, interval: u64) {
        self.note_batch_without_index(header);
        if self.bytes_since_index > interval {
            let rel = (header.base_offset - self.base_offset) as u32;
            self.offset_index.push((rel, position as u32));
            self.maybe_append_time_entry();
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += header.total_size();
    }

    fn note_batch_without_index(&mut self, header: &BatchHeader) {
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = Some(header.max_timestamp);
        }
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.base_offset;
        }
        self.next_offset = header.last_offset() + 1;
    }

    /// Adds (max timestamp so far, its offset) if it is newer than the last entry.
    pub fn maybe_append_time_entry(&mut self) {
        if self.offset_of_max_timestamp < 0 {
            return;
        }
        if self.time_index.last().is_none_or(|e| self.max_timestamp > e.0) {
            let rel = (self.offset_of_max_timestamp - self.base_offset) as u32;
            if self.time_index.last().is_none_or(|e| rel >= e.1) {
                self.time_index.push((self.max_timestamp, rel));
            }
        }
    }

    /// The open file; an error (not a panic) if it was closed, which the log's own
    /// bookkeeping prevents for every segment it writes to.
    pub fn handle(&self) -> Result<&Arc<F>> {
        self.file
            .as_ref()
            .ok_or_else(|| StorageError::io("use", &self.path, std::io::Error::other("segment file is closed")))
    }

    /// The file, reopened (and kept) if it was closed.
    pub fn ensure_open<S: Storage<File = F>>(&mut self, storage: &S) -> Result<Arc<F>> {
        if let Some(file) = &self.file {
            return Ok(file.clone());
        }
        let file = Arc::new(storage.open(&self.path, false).map_err(|e| StorageError::io("open", &self.path, e))?);
        self.file = Some(file.clone());
        Ok(file)
    }

    /// The file if open, else a handle opened for the caller alone (not kept).
    pub fn handle_or_open<S: Storage<File = F>>(&self, storage: &S) -> Result<Arc<F>> {
        match &self.file {
            Some(file) => Ok(file.clone()),
            None => Ok(Arc::new(storage.open(&self.path, false).map_err(|e| StorageError::io("open", &self.path, e))?)),
        }
    }

    /// The three index files' contents as they are now, to be written by
    /// [`SealWork::write`] outside the log's lock (a roll on the append path).
    pub fn seal_work(&mut self, storage: &impl Storage<File = F>, dir: &Path) -> Result<SealWork<F>> {
        self.maybe_append_time_entry();
        let mut offsets = Vec::with_capacity(self.offset_index.len() * OFFSET_ENTRY as usize);
        for &(rel, pos) in &self.offset_index {
            offsets.extend_from_slice(&rel.to_be_bytes());
            offsets.extend_from_slice(&pos.to_be_bytes());
        }
        let mut times = Vec::with_capacity(self.time_index.len() * TIME_ENTRY as usize);
        for &(ts, rel) in &self.time_index {
            times.extend_from_slice(&ts.to_be_bytes());
            times.extend_from_slice(&rel.to_be_bytes());
        }
        Ok(SealWork {
            log: self.handle_or_open(storage)?,
            path: self.path.clone(),
            files: [
                (index_path(dir, self.base_offset), offsets),
                (time_index_path(dir, self.base_offset), times),
                (txn_index::txn_index_path(dir, self.base_offset), txn_index::encode(&self.aborted_txns)),
            ],
        })
    }

    /// Writes both index files from memory and fsyncs them and the log.
    pub fn persist_indexes<S: Storage<File = F>>(&mut self, storage: &S, dir: &Path) -> Result<()> {
        let (offsets, times) = (index_path(dir, self.base_offset), time_index_path(dir, self.base_offset));
        self.persist_txn_index_to(storage, &txn_index::txn_index_path(dir, self.base_offset))?;
        self.persist_indexes_to(storage, &offsets, &times)
    }

    /// Writes the aborted-transaction index to `path` and fsyncs it.
    pub fn persist_txn_index_to<S: Storage<File = F>>(&self, storage: &S, path: &Path) -> Result<()> {
        write_whole(storage, path, &txn_index::encode(&self.aborted_txns))
    }

    /// Writes the index files at the given paths and fsyncs them and the log.
    pub fn persist_indexes_to<S: Storage<File = F>>(
        &mut self,
        storage: &S,
        offset_index: &Path,
        time_index: &Path,
    ) -> Result<()> {
        self.maybe_append_time_entry();
        let mut raw = Vec::with_capacity(self.offset_index.len() * OFFSET_ENTRY as usize);
        for &(rel, pos) in &self.offset_index {
            raw.extend_from_slice(&rel.to_be_bytes());
            raw.extend_from_slice(&pos.to_be_bytes());
        }
        write_whole(storage, offset_index, &raw)?;
        raw.clear();
        for &(ts, rel) in &self.time_index {
            raw.extend_from_slice(&ts.to_be_bytes());
            raw.extend_from_slice(&rel.to_be_bytes());
        }
        write_whole(storage, time_index, &raw)?;
        self.handle()?.sync_data().map_err(|e| StorageError::io("fsync", &self.path, e))?;
        self.persisted = Some(self.index_shape());
        Ok(())
    }

    /// Deletes the segment's files (open handles held by readers stay readable).
    pub fn delete_files<S: Storage<File = F>>(storage: &S, dir: &Path, base_offset: i64) -> Result<()> {
        // The `.log` last: index files without their log are how recovery recognises a
        // segment file lost to something outside the broker.
        for p in [
            index_path(dir, base_offset),
            time_index_path(dir, base_offset),
            txn_index::txn_index_path(dir, base_offset),
            log_path(dir, base_offset),
        ] {
            match storage.remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io("remove", &p, e)),
            }
        }
        Ok(())
    }

    /// Position to start walking from to find `offset`: the last index entry at or
    /// below it (or the segment start).
    pub fn index_lookup(&self, offset: i64) -> u64 {
        let rel = (offset - self.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
        let i = self.offset_index.partition_point(|e| e.0 <= rel);
        if i == 0 {
            0
        } else {
            u64::from(self.offset_index[i - 1].1)
        }
    }

    /// For a read of whole batches of at most `max_bytes` from the first batch at or
    /// after `from`, that stops before the first batch reaching `end_offset`: the
    /// position of a batch that the read is sure to return, with every batch between
    /// the first and it, so that a walk of their headers can start there. 0 if the index
    /// knows none; a position before the read's first batch tells nothing either.
    ///
    /// Every batch before the last index entry at or below `from + max_bytes` ends
    /// within the limit, and every batch before the last entry at or below `end_offset`
    /// ends below it (entries are base offsets of batches, in order). Of the two, the
    /// earlier entry bounds the batches known to be returned; the answer is the entry
    /// before that, whose batch is one of them, so a walk from it learns the last
    /// returned batch's own last offset (offsets can have gaps, from compaction or a
    /// leader's compacted log copied by a follower, so the next entry's offset is not it).
    pub fn known_included(&self, from: u64, max_bytes: u64, end_offset: i64) -> u64 {
        let byte_limit = from.saturating_add(max_bytes);
        let by_bytes = self.offset_index.partition_point(|e| u64::from(e.1) <= byte_limit);
        let rel_end = end_offset.saturating_sub(self.base_offset);
        let by_offset = self.offset_index.partition_point(|e| i64::from(e.0) <= rel_end);
        match by_bytes.min(by_offset).checked_sub(2) {
            Some(i) => u64::from(self.offset_index[i].1),
            None => 0,
        }
    }

    /// Offset to start scanning from for the first batch with max timestamp >= `ts`:
    /// the last time index entry with a smaller timestamp, whose batches all precede it.
    pub fn time_lookup(&self, ts: i64) -> i64 {
        let i = self.time_index.partition_point(|e| e.0 < ts);
        if i == 0 {
            self.base_offset
        } else {
            self.base_offset + i64::from(self.time_index[i - 1].1)
        }
    }

    /// Finds the first batch at or after `position` (below `end`) whose last offset is
    /// at least `offset`.
    pub fn find_batch(&self, offset: i64, end: u64) -> Result<Option<Located>> {
        self.find_batch_by(self.index_lookup(offset), end, |h| h.last_offset() >= offset)
    }

    /// Walks headers from `position` until `pred` holds.
    pub fn find_batch_by(
        &self,
        mut position: u64,
        end: u64,
        pred: impl Fn(&BatchHeader) -> bool,
    ) -> Result<Option<Located>> {
        let mut buf = [0u8; HEADER_LEN];
        while position + HEADER_LEN as u64 <= end {
            self.handle()?.read_exact_at(&mut buf, position).map_err(|e| StorageError::io("read", &self.path, e))?;
            let header = BatchHeader::parse(&buf).map_err(|reason| {
                StorageError::io(
                    "parse",
                    &self.path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("batch at {position}: {reason}")),
                )
            })?;
            if pred(&header) {
                return Ok(Some(Located { position, header }));
            }
            position += header.total_size();
        }
        Ok(None)
    }

    /// Cuts the segment before the batch at `position`, fixing indexes and timestamps.
    pub fn truncate_at(&mut self, position: u64, new_next_offset: i64) -> Result<()> {
        let file = self.handle()?;
        file.set_len(position).map_err(|e| StorageError::io("truncate", &self.path, e))?;
        file.sync_data().map_err(|e| StorageError::io("fsync", &self.path, e))?;
        self.size = position;
        self.next_offset = new_next_offset;
        self.persisted = None;
        let rel_end = new_next_offset - self.base_offset;
        self.offset_index.retain(|e| i64::from(e.0) < rel_end && u64::from(e.1) < position);
        self.time_index.retain(|e| i64::from(e.1) < rel_end);
        // As Kafka's `TxnIndex.truncateTo`: aborts whose marker was cut are forgotten.
        self.aborted_txns.retain(|t| t.last_offset < new_next_offset);
        // Like Kafka: the newest surviving time index entry is the max timestamp; the
        // exact value is recomputed by a rescan if a batch after it held the max.
        match self.time_index.last() {
            Some(&(ts, rel)) => {
                self.max_timestamp = ts;
                self.offset_of_max_timestamp = self.base_offset + i64::from(rel);
            }
            None => {
                self.max_timestamp = -1;
                self.offset_of_max_timestamp = -1;
            }
        }
        if position == 0 {
            self.first_batch_timestamp = None;
        }
        self.bytes_since_index = 0;
        Ok(())
    }
}

/// What sealing a segment that stopped being active writes: its index files, then an
/// fsync of its data. Taken under the log's lock, written without it.
#[derive(Debug)]
pub(crate) struct SealWork<F> {
    log: Arc<F>,
    path: PathBuf,
    files: [(PathBuf, Vec<u8>); 3],
}

impl<F: StorageFile> SealWork<F> {
    /// Writes and fsyncs the index files and fsyncs the segment's data. Their names
    /// become durable with the caller's next directory fsync.
    pub fn write<S: Storage<File = F>>(&self, storage: &S) -> Result<()> {
        for (path, bytes) in &self.files {
            write_whole(storage, path, bytes)?;
        }
        self.log.sync_data().map_err(|e| StorageError::io("fsync", &self.path, e))
    }
}

fn read_small<S: Storage>(storage: &S, path: &Path) -> Option<Vec<u8>> {
    let file = storage.open(path, false).ok()?;
    let len = file.len().ok()?;
    // An index can never be larger than segment.index.bytes allows; a bigger file is
    // garbage and must not be allocated for.
    if len > (1 << 31) {
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0).ok()?;
    Some(buf)
}

fn write_whole<S: Storage>(storage: &S, path: &Path, bytes: &[u8]) -> Result<()> {
    let file = storage.open(path, true).map_err(|e| StorageError::io("create", path, e))?;
    file.set_len(0).map_err(|e| StorageError::io("truncate", path, e))?;
    file.write_all_at(bytes, 0).map_err(|e| StorageError::io("write", path, e))?;
    file.sync_data().map_err(|e| StorageError::io("fsync", path, e))
}
