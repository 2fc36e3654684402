//! `PartitionLog`: one partition's directory of segments, the facade over its jobs
//! (Kafka's `UnifiedLog`). Here: appends (validation, offsets, sequences, rolls),
//! reads, offsets and the high watermark, transactions' bookkeeping and truncation.
//! Elsewhere, one file per job: [`loader`] opens and recovers a log, [`group_commit`]
//! makes appends durable and seals rolled segments, [`retention`] drives retention,
//! DeleteRecords, scrubbing and compaction.
//!
//! Locking: `state` (segments, offsets, epochs) is held for the short in-memory work and
//! the `pwrite` of an append, never across an fsync. `durability` (durable offset and
//! waiters) is separate so appends continue while an fsync runs; the next fsync then
//! covers all of them (group commit). Lock order is always `sealing`, then `state`, then
//! `durability`.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;

use crate::batch::{self, BatchHeader, HEADER_LEN};
use crate::checkpoint;
use crate::cleaner::{self, CleanOutcome, CleanRules, SourceSegment};
use crate::config::{FlushPolicy, LogConfig, TimestampType};
use crate::durability::{DurableCallback, Flushable, Flusher, FsyncCounters, FsyncStats};
use crate::epoch::LeaderEpochCache;
use crate::error::{Result, StorageError};
use crate::fs::{StdStorage, Storage, StorageFile};
use crate::journal::{Completions, JournalBatch, JournalLink, JournaledLog};
use crate::producer::{ProducerStateTable, SequenceCheck};
use crate::recovery::{self, DamageKind, DamagedRange, RecoveryReport};
use crate::scrub::{self, ScrubCursor, ScrubStep, ScrubTarget};
use crate::segment::{self, SealWork, Segment};
use crate::txn_index::{self, AbortedTxn};

mod group_commit;
mod loader;
mod located;
mod retention;

pub use located::FileChunk;

use loader::{insert_aborted, list_snapshots, load_producers, record_batch, remove_snapshot};

/// Present only between a clean close and the next open; its absence means recovery.
/// The same name marks a whole data directory clean (see [`crate::shutdown`]).
pub const CLEAN_SHUTDOWN_FILE: &str = ".clean-shutdown";

/// How a log was last shut down, as its opener knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriorShutdown {
    /// Clean: every log of the data directory closed before its marker was written, so
    /// the recovery scan is skipped.
    Clean,
    /// Unknown to the caller: the log's own clean-shutdown marker decides.
    SeeLogMarker,
}
/// Checkpoint of epoch → start offset.
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
/// Checkpoint of the log start offset (moved by retention and DeleteRecords).
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
/// Checkpoint of the high watermark.
pub const HIGH_WATERMARK_CHECKPOINT: &str = "high-watermark-checkpoint";
/// Checkpoint of the recovery point (Kafka's `recovery-point-offset-checkpoint`, here
/// one per partition): every segment that ends at or below it is sealed, its data and
/// indexes durable. Segments after it were rolled on the append path and sealed later by
/// the flusher; a crash may have torn them, and recovery scans them as it does the last.
pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-checkpoint";
/// Checkpoint of the compactor's first dirty offset (Kafka keeps one per log
/// directory for all partitions; here each partition has its own).
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
/// Suffix of producer state snapshots, named by the offset they cover up to.
const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// Producer snapshots kept; older ones go when a new one is written.
const SNAPSHOTS_KEPT: usize = 3;
/// Largest snapshot read back; a bigger file is garbage and is not allocated for.
const MAX_SNAPSHOT_BYTES: u64 = 256 << 20;
/// Sealed segments per log whose files stay open between reads; older ones are closed
/// and reopened on demand. With the active segment that bounds a log's descriptors to
/// 1 + this (plus reads in flight), whatever its number of segments.
pub const MAX_OPEN_SEALED_SEGMENTS: usize = 2;
/// Suffix of segment files renamed for deletion outside the lock.
const DELETED_SUFFIX: &str = ".deleted";

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset assigned to the first record.
    pub base_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// Largest batch max timestamp appended (the log append time for LogAppendTime).
    pub max_timestamp: i64,
    /// First offset of the batch holding `max_timestamp`.
    pub offset_of_max_timestamp: i64,
    /// The broker time stamped into the batches, if `message.timestamp.type` is
    /// LogAppendTime (Produce responses return it), else -1.
    pub log_append_time: i64,
    /// Batches appended.
    pub batches: u32,
    /// Records appended.
    pub records: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// The log start offset after the append.
    pub log_start_offset: i64,
    /// The batch was an exact retry of one already in the log (idempotent producer):
    /// nothing was appended and the offsets are the original ones.
    pub duplicate: bool,
}

/// A partition's offsets at one instant ([`PartitionLog::offsets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOffsets {
    pub log_start_offset: i64,
    /// min(first offset of the oldest ongoing transaction, high watermark).
    pub last_stable_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
}

/// Whole batches returned by a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadSlice {
    /// Raw batches, exactly as stored; empty at the end of the log.
    pub records: Bytes,
    /// Offset after the last returned batch (the fetch offset if nothing was returned).
    pub next_offset: i64,
    /// Log start offset when the read was done.
    pub log_start_offset: i64,
    /// Log end offset when the read was done.
    pub log_end_offset: i64,
    /// High watermark when the read was done.
    pub high_watermark: i64,
}

/// The batch a timestamp lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampOffset {
    /// Base offset of the first batch whose max timestamp is at least the target.
    /// Batch granularity: the caller refines it to a record with `batch` if it decodes
    /// records (the storage engine does not).
    pub offset: i64,
    /// That batch's max timestamp.
    pub timestamp: i64,
    /// That batch's bytes.
    pub batch: Bytes,
}

/// What a retention pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionOutcome {
    /// Whole segments deleted.
    pub deleted_segments: usize,
    /// Their bytes.
    pub deleted_bytes: u64,
    /// Log start offset after the pass.
    pub log_start_offset: i64,
}

/// One partition's log. Share it between threads with `Arc`; every method takes `&self`.
pub struct PartitionLog<S: Storage = StdStorage> {
    dir: PathBuf,
    storage: S,
    /// Changed at runtime by topic config updates (AlterConfigs).
    config: std::sync::RwLock<LogConfig>,
    state: Mutex<LogState<S::File>>,
    durability: Mutex<DurableState>,
    durable_changed: Condvar,
    fsyncs: FsyncCounters,
    queued_on_flusher: AtomicBool,
    /// Held for a whole compaction pass: one cleaner per log at a time.
    cleaning: Mutex<()>,
    /// Held while segments rolled on the append path are sealed (their files written
    /// outside the state lock), and by whatever deletes or replaces segment files
    /// (truncation, retention, compaction, close), which seal pending segments first.
    /// Lock order: `sealing`, then `state`, then `durability`.
    sealing: Mutex<()>,
    /// Whether open skipped recovery (clean-shutdown marker, or a new log).
    opened_clean: bool,
    /// What open found damaged.
    recovery: RecoveryReport,
    /// The commit journal this log is attached to, if any (see [`crate::journal`]).
    journal: std::sync::OnceLock<JournalLink>,
    /// A journal fsync covered entries this log could not count as durable (a roll not
    /// sealed yet): waiters must be served by a segment fsync until one completes.
    journal_stalled: AtomicBool,
}

struct LogState<F> {
    /// Sorted by base offset, never empty; the last is the active segment.
    segments: Vec<Segment<F>>,
    log_start_offset: i64,
    high_watermark: i64,
    epochs: LeaderEpochCache,
    producers: ProducerStateTable,
    /// Base offsets of sealed segments with open files, least recently used first.
    open_sealed: VecDeque<i64>,
    /// When the active segment began, for `segment.ms`.
    active_since_ms: i64,
    /// Compaction has covered every offset below this (the cleaner checkpoint).
    first_dirty_offset: i64,
    /// Records appended since open (for `flush.messages` accounting).
    appended_records: u64,
    /// `appended_records` covered by the last completed fsync.
    flushed_records: u64,
    /// Append time of the oldest append not yet fsynced, for `flush.ms`.
    oldest_unflushed_ms: Option<i64>,
    /// Bumped by truncation so an fsync that started before it does not mark offsets
    /// that were rewritten since as durable.
    generation: u64,
    offline: Option<String>,
    /// The high watermark the checkpoint file holds, if known: a close rewrites it only
    /// if it moved.
    hw_checkpointed: Option<i64>,
    /// The log end offset of a producer snapshot equal to the table in memory, if one
    /// exists: a close writes a new snapshot only if the table changed since.
    producers_snapshotted: Option<i64>,
    /// Segments rolled on the append path and not yet sealed, oldest first.
    unsealed: Vec<i64>,
    /// The producer snapshot taken at the last such roll, to be written with the seal.
    pending_snapshot: Option<(i64, Vec<u8>)>,
    /// The recovery point on disk; `None` if the log has no checkpoint yet (a new log,
    /// or one written before it existed), and then rolls seal inline until one is written.
    recovery_point: Option<i64>,
    /// Idempotent batches whose leader append failed on a disk error, by producer id:
    /// (producer epoch, base sequence) of the earliest, until a batch of that producer
    /// is written. See [`StorageError::EarlierWriteFailed`]. At most
    /// [`FAILED_WRITES_REMEMBERED`] producers.
    failed_writes: HashMap<i64, (i16, i32)>,
}

/// How many producers' failed writes a log remembers (one entry each): a disk that fails
/// every append fails every producer's, and the entries go when their writes succeed.
/// Beyond this bound the newest failures are not remembered, and their producers may be
/// answered OUT_OF_ORDER_SEQUENCE_NUMBER, as before this existed.
pub const FAILED_WRITES_REMEMBERED: usize = 4096;

struct DurableState {
    /// Every offset below this is on disk: in the segments, or in the commit journal.
    durable_end: i64,
    /// Every offset below this is on disk in the segments themselves.
    synced_end: i64,
    /// Rolls whose seal was deferred to a group commit, and of them those sealed: while
    /// they differ, the journal cannot vouch for offsets (the seal must come first).
    rolls_taken: u64,
    rolls_sealed: u64,
    flushing: bool,
    generation: u64,
    waiters: Vec<(i64, DurableCallback)>,
    offline: Option<String>,
}

impl<S: Storage> fmt::Debug for PartitionLog<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartitionLog")
            .field("dir", &self.dir)
            .field("log_start_offset", &self.log_start_offset())
            .field("log_end_offset", &self.log_end_offset())
            .finish()
    }
}

/// A poisoned lock means a panic (a broken invariant) while the log's state was being
/// changed: that is fatal, never read from or appended to (README, "Failure stance").
const POISONED: &str = "log lock poisoned by an earlier panic";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect(POISONED)
}

impl<F: StorageFile> LogState<F> {
    fn active(&self) -> &Segment<F> {
        self.segments.last().expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment<F> {
        self.segments.last_mut().expect("a log always has an active segment")
    }

    /// See [`PartitionLog::last_stable_offset`].
    fn last_stable_offset(&self) -> i64 {
        let unstable = self.producers.first_unstable_offset().map(|first| first.max(self.log_start_offset));
        unstable.map_or(self.high_watermark, |first| first.min(self.high_watermark))
    }

    fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }

    fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// A read view of segment `i` starting at `position`, reopening its file if it was
    /// closed and keeping it among the recently used open ones.
    fn view<S: Storage<File = F>>(&mut self, storage: &S, i: usize, position: u64) -> Result<SegmentView<F>> {
        let was_closed = self.segments[i].file.is_none();
        let file = self.segments[i].ensure_open(storage)?;
        let seg = &self.segments[i];
        let view = SegmentView { file, path: seg.path.clone(), size: seg.size, start_position: position };
        if i + 1 < self.segments.len() {
            let base = seg.base_offset;
            if was_closed || self.open_sealed.contains(&base) {
                self.note_open_sealed(base);
            }
        }
        Ok(view)
    }

    /// Marks a sealed segment's file most recently used and closes the least recently
    /// used beyond `MAX_OPEN_SEALED_SEGMENTS` (readers holding one keep it until done).
    fn note_open_sealed(&mut self, base: i64) {
        self.open_sealed.retain(|&b| b != base);
        self.open_sealed.push_back(base);
        while self.open_sealed.len() > MAX_OPEN_SEALED_SEGMENTS {
            let Some(evicted) = self.open_sealed.pop_front() else { break };
            let last = self.segments.len() - 1;
            if let Some(i) = self.segments.iter().position(|s| s.base_offset == evicted) {
                if i != last {
                    self.segments[i].file = None;
                }
            }
        }
    }
}

/// A batch validated on the way in: where it is in the appended buffer and its header.
struct Incoming {
    position: usize,
    header: BatchHeader,
}

/// How appended batches reach the segment file.
#[derive(Debug, Clone, Copy)]
enum Written {
    /// As they are in the buffer: a follower's, stamped by its leader.
    AsTheyAre,
    /// Each with its prefix stamped from its `Incoming` header (base offset and leader
    /// epoch assigned here) and the rest from the buffer: a leader's.
    Stamped,
}

impl<S: Storage> PartitionLog<S> {
    // ----- settings and close ---------------------------------------------------------

    /// The log's current settings.
    pub fn config(&self) -> LogConfig {
        self.config.read().expect(POISONED).clone()
    }

    /// Replaces the settings (a topic config change): segment size and time, retention,
    /// flush policy, message size and timestamp type apply from the next append, roll or
    /// retention pass; existing segments are not rewritten.
    pub fn set_config(&self, config: LogConfig) {
        *self.config.write().expect(POISONED) = config;
    }

    /// The damage this open found (offset ranges lost), already logged at ERROR.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// True when this open found a clean-shutdown marker (or a new, empty log) and so
    /// skipped the recovery scan.
    pub fn opened_clean(&self) -> bool {
        self.opened_clean
    }

    /// Clean shutdown: fsyncs the data, writes the active segment's indexes, the
    /// producer snapshot and the high watermark, then the clean-shutdown marker that lets
    /// the next open skip the recovery scan. A broker that marks its data directory
    /// instead, once every log closed, calls [`close_unmarked`](Self::close_unmarked).
    ///
    /// Only what changed is written: a log opened clean and not changed since (no
    /// append, truncation, roll, producer expiry or high-watermark move) already has all
    /// of it on disk, so its close is one directory fsync (the marker's; none at all
    /// with [`close_unmarked`](Self::close_unmarked)). Under
    /// fsync-before-ack the data is durable already, so shutdown time follows what is
    /// dirty, not the number of partitions.
    /// Takes `&self` so a log shared through `Arc` (e.g. with a `Flusher`) can be closed;
    /// afterwards appends fail with `LogOffline` ("closed").
    pub fn close(&self) -> Result<()> {
        self.close_unmarked()?;
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        self.storage.open(&marker, true).map_err(|e| StorageError::io("create", &marker, e))?;
        self.storage.sync_dir(&self.dir).map_err(|e| StorageError::io("fsync dir", &self.dir, e))
    }

    /// [`close`](Self::close) without the log's own marker: everything the next open
    /// needs to skip recovery is durable on return, and the caller vouches for it (the
    /// data directory's marker, as Kafka's `LogManager` writes one per log directory).
    /// A log opened clean and not changed since costs nothing here.
    pub fn close_unmarked(&self) -> Result<()> {
        self.flush()?;
        let _sealing = lock(&self.sealing);
        let mut state = lock(&self.state);
        if let Some(reason) = &state.offline {
            return Err(self.offline_error(reason));
        }
        self.seal_now(&mut state)?;
        // Nothing may be appended after the marker vouches for the files.
        state.offline = Some("closed".to_string());
        let hw = state.high_watermark;
        if !state.active().indexes_persisted() {
            state.active_mut().persist_indexes(&self.storage, &self.dir)?;
        }
        if state.producers_snapshotted != Some(state.log_end_offset()) {
            self.write_producer_snapshot(&mut state)?;
        }
        if state.hw_checkpointed != Some(hw) {
            checkpoint::write(&self.storage, &self.dir, HIGH_WATERMARK_CHECKPOINT, &[hw.to_string()])?;
            state.hw_checkpointed = Some(hw);
        }
        Ok(())
    }

    // ----- append ---------------------------------------------------------------------

    /// Appends one or more v2 batches as leader in `leader_epoch`: validates them (length,
    /// magic, CRC, record count, `max.message.bytes`), assigns offsets from the log end
    /// offset, then writes them to the active segment (rolling it first if needed) with
    /// their baseOffset and partitionLeaderEpoch stamped (fields outside the CRC): each
    /// batch's stamped 16-byte prefix and the rest of it from `batches`, which stays as it
    /// was. Only under `message.timestamp.type=LogAppendTime`, whose stamp is inside the
    /// CRC, are the batches copied to be stamped.
    ///
    /// On return the data is written but not necessarily durable: call
    /// [`wait_for_ack`](Self::wait_for_ack) (or [`on_durable`](Self::on_durable)) before
    /// acknowledging the producer. On an I/O error nothing of this append remains in the
    /// log (or, if even that cannot be ensured, the log goes offline).
    pub fn append(&self, batches: &[u8], leader_epoch: i32, now_ms: i64) -> Result<AppendInfo> {
        // Validation is CPU work on the caller's buffer: done before taking the lock.
        let incoming = validate_batches(batches, Some(self.config().max_message_bytes))?;
        let (batches, log_append_time) = match self.config().message_timestamp_type {
            TimestampType::LogAppendTime => {
                let mut copy = batches.to_vec();
                for b in &incoming {
                    let end = b.position + b.header.total_size() as usize;
                    batch::stamp_log_append_time(&mut copy[b.position..end], now_ms);
                }
                (Cow::Owned(copy), now_ms)
            }
            TimestampType::CreateTime => (Cow::Borrowed(batches), -1),
        };

        let state = lock(&self.state);
        if let Some(reason) = &state.offline {
            return Err(self.offline_error(reason));
        }
        if let Some(latest) = state.epochs.latest_epoch() {
            if leader_epoch < latest {
                return Err(StorageError::StaleLeaderEpoch { epoch: leader_epoch, latest });
            }
        }
        if let Some(original) = self.check_sequences(&state, &batches, &incoming)? {
            return Ok(AppendInfo {
                base_offset: original.first_offset,
                last_offset: original.last_offset,
                max_timestamp: original.max_timestamp,
                offset_of_max_timestamp: original.first_offset,
                log_append_time,
                batches: 0,
                records: 0,
                bytes: 0,
                log_start_offset: state.log_start_offset,
                duplicate: true,
            });
        }
        let mut next = state.log_end_offset();
        let mut stamped = Vec::with_capacity(incoming.len());
        for b in &incoming {
            let mut header = b.header;
            header.base_offset = next;
            header.partition_leader_epoch = leader_epoch;
            if log_append_time >= 0 {
                header.max_timestamp = log_append_time;
            }
            next = header.last_offset() + 1;
            stamped.push(Incoming { position: b.position, header });
        }
        let mut info = match self.write_batches(state, &batches, &stamped, Written::Stamped, now_ms) {
            Ok(info) => info,
            Err(e) => {
                if e.is_kafka_storage_error() {
                    self.remember_failed_write(&stamped);
                }
                return Err(e);
            }
        };
        info.log_append_time = log_append_time;
        Ok(info)
    }

    /// Notes the idempotent batches of a leader append that failed on a disk error, so
    /// that their producers' later batches wait for them (see
    /// [`StorageError::EarlierWriteFailed`]). A connection's requests are handled in
    /// order, so a producer's next batch is checked after this.
    fn remember_failed_write(&self, failed: &[Incoming]) {
        let mut state = lock(&self.state);
        for b in failed.iter().filter(|b| b.header.producer_id >= 0 && b.header.base_sequence >= 0) {
            let h = &b.header;
            let known = state.failed_writes.get(&h.producer_id).is_some_and(|&(epoch, _)| epoch == h.producer_epoch);
            if !known && state.failed_writes.len() < FAILED_WRITES_REMEMBERED {
                state.failed_writes.insert(h.producer_id, (h.producer_epoch, h.base_sequence));
            }
        }
    }

    /// Appends batches replicated from the leader as they are: offsets and leader epochs
    /// already assigned (the epoch cache learns new epochs from them), no sequence checks.
    /// The first batch must start at or after the log end offset (compaction may leave
    /// gaps), each later one after its predecessor. Durability is as for `append`.
    pub fn append_as_follower(&self, batches: &[u8], now_ms: i64) -> Result<AppendInfo> {
        let incoming = validate_batches(batches, None)?;
        let state = lock(&self.state);
        if let Some(reason) = &state.offline {
            return Err(self.offline_error(reason));
        }
        let mut expected = state.log_end_offset();
        for b in &incoming {
            if b.header.base_offset < expected {
                return Err(StorageError::UnexpectedAppendOffset {
                    offset: b.header.base_offset,
                    log_end_offset: state.log_end_offset(),
                });
            }
            expected = b.header.last_offset() + 1;
        }
        self.write_batches(state, batches, &incoming, Written::AsTheyAre, now_ms)
    }

    /// The part of an append shared by leader and follower: roll if needed, record new
    /// leader epochs (durably, before the data), write the batches (`written` says
    /// whether their headers are final in `batches` or in `incoming`), and update indexes,
    /// producer state and flush accounting.
    fn write_batches(
        &self,
        mut guard: MutexGuard<'_, LogState<S::File>>,
        batches: &[u8],
        incoming: &[Incoming],
        written: Written,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        let (Some(first), Some(last)) = (incoming.first(), incoming.last()) else {
            return Err(StorageError::InvalidBatch {
                position: 0,
                reason: batch::BatchError::Truncated { needed: HEADER_LEN as u64, available: 0 },
            });
        };
        let (base_offset, last_offset) = (first.header.base_offset, last.header.last_offset());
        let total = batches.len() as u64;
        let records: u64 = incoming.iter().map(|b| b.header.records_count.max(0) as u64).sum();
        if let Err(e) = self.maybe_roll(&mut guard, total, last_offset, now_ms) {
            drop(guard);
            if e.is_kafka_storage_error() {
                // The sealing fsync of the old segment may have failed, and the next group
                // commit (of the new segment only) would then vouch for unsynced data.
                self.go_offline(format!("segment roll failed: {e}"));
            }
            return Err(e);
        }
        let mut epochs_changed = false;
        for b in incoming {
            epochs_changed |= guard.epochs.assign(b.header.partition_leader_epoch, b.header.base_offset);
        }
        if epochs_changed {
            // Written before the data: recovery drops epochs past the log end, whereas an
            // epoch missing from the checkpoint could not be noticed.
            if let Err(e) = self.write_epoch_checkpoint(&guard) {
                guard.epochs.truncate_from_end(base_offset);
                return Err(e);
            }
        }

        let write_at = guard.active().size;
        let written_as = written;
        let prefixes: Vec<_> = match written {
            Written::AsTheyAre => Vec::new(),
            Written::Stamped => incoming.iter().map(|b| batch::stamped_prefix(&b.header)).collect(),
        };
        let mut pieces = Vec::with_capacity(2 * incoming.len());
        match written {
            Written::AsTheyAre => pieces.push(batches),
            Written::Stamped => {
                for (b, prefix) in incoming.iter().zip(&prefixes) {
                    let end = b.position + b.header.total_size() as usize;
                    pieces.push(&prefix[..]);
                    pieces.push(&batches[b.position + batch::STAMPED_PREFIX_LEN..end]);
                }
            }
        }
        let written = match written {
            Written::AsTheyAre => guard.active().handle()?.write_all_at(batches, write_at),
            Written::Stamped => guard.active().handle()?.write_all_vectored_at(&pieces, write_at),
        };
        if let Err(e) = written {
            let err = StorageError::io("write", &guard.active().path, e);
            let offline = self.undo_partial_write(&mut guard, write_at);
            drop(guard);
            if let Some(reason) = offline {
                self.fail_waiters(reason);
            }
            return Err(err);
        }

        let mut info = AppendInfo {
            base_offset,
            last_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            log_append_time: -1,
            batches: incoming.len() as u32,
            records,
            bytes: total,
            log_start_offset: guard.log_start_offset,
            duplicate: false,
        };
        let interval = self.config().index_interval_bytes;
        let state = &mut *guard;
        let segment = state.segments.last_mut().expect("a log always has an active segment");
        for b in incoming {
            if b.header.max_timestamp > info.max_timestamp {
                info.max_timestamp = b.header.max_timestamp;
                info.offset_of_max_timestamp = b.header.base_offset;
            }
            segment.note_batch(&b.header, write_at + b.position as u64, interval);
            let bytes = &batches[b.position..b.position + b.header.total_size() as usize];
            if let Some(aborted) = record_batch(&mut state.producers, &b.header, bytes) {
                txn_index::insert(&mut segment.aborted_txns, aborted);
            }
            if !state.failed_writes.is_empty() {
                state.failed_writes.remove(&b.header.producer_id);
            }
        }
        segment.size = write_at + total;
        debug_assert_eq!(segment.next_offset, last_offset + 1);
        if let Some(link) = self.journal.get().filter(|_| matches!(written_as, Written::Stamped)) {
            // Under the state lock, so the journal holds this log's appends in log order.
            // A leader's appends only: a follower fsyncs its segment before it fetches
            // again (its next fetch offset tells the leader what it holds durably).
            if self.config().flush_policy() == FlushPolicy::FsyncBeforeAck
                && !link.journal.record(link, state.generation, base_offset, last_offset + 1, &pieces)
            {
                self.journal_stalled.store(true, Ordering::Release);
            }
        }
        state.producers_snapshotted = None;

        state.appended_records += records;
        state.oldest_unflushed_ms.get_or_insert(now_ms);
        let flush_now = match self.config().flush_policy() {
            FlushPolicy::Periodic { messages: Some(n), .. } => state.appended_records - state.flushed_records >= n,
            _ => false,
        };
        drop(guard);
        if flush_now {
            // Kafka flushes inline in the append that crosses flush.messages.
            self.wait_durable(last_offset)?;
        }
        Ok(info)
    }

    /// Idempotence: checks each idempotent batch against its producer's state (and the
    /// batches before it in this append). Returns the original batch if the append is an
    /// exact retry of one already in the log.
    /// A transaction marker is also checked against the coordinator epoch of the
    /// producer's last marker (a leader's append only: a follower copies what its leader
    /// accepted, as Kafka's replication appends do).
    fn check_sequences(
        &self,
        state: &LogState<S::File>,
        batches: &[u8],
        incoming: &[Incoming],
    ) -> Result<Option<crate::producer::BatchMetadata>> {
        let mut scratch = state.producers.subset(incoming.iter().map(|b| b.header.producer_id));
        let mut next = state.log_end_offset();
        for b in incoming {
            if b.header.is_control() && b.header.producer_id >= 0 {
                let bytes = &batches[b.position..b.position + b.header.total_size() as usize];
                if let Some(marker) = txn_index::marker_of(&b.header, bytes) {
                    scratch.check_marker(b.header.producer_id, marker.coordinator_epoch)?;
                }
            }
            let verdict = scratch.check(&b.header);
            if let Some(&(epoch, failed_seq)) = state.failed_writes.get(&b.header.producer_id) {
                let retry_or_duplicate =
                    matches!(verdict, Ok(SequenceCheck::Duplicate(_))) || b.header.base_sequence == failed_seq;
                if epoch == b.header.producer_epoch && !b.header.is_control() && !retry_or_duplicate {
                    return Err(StorageError::EarlierWriteFailed {
                        producer_id: b.header.producer_id,
                        first_seq: b.header.base_sequence,
                        failed_seq,
                    });
                }
            }
            match verdict? {
                SequenceCheck::Duplicate(original) if incoming.len() == 1 => return Ok(Some(original)),
                SequenceCheck::Duplicate(original) => {
                    // Produce v3+ sends one batch per partition; a retry mixed with new
                    // batches cannot be answered with one offset range.
                    return Err(crate::producer::SequenceError::OutOfOrderSequence {
                        producer_id: b.header.producer_id,
                        first_seq: b.header.base_sequence,
                        expected_after: original.last_seq,
                    }
                    .into());
                }
                SequenceCheck::Accept | SequenceCheck::NotIdempotent => {}
            }
            let mut header = b.header;
            header.base_offset = next;
            scratch.record(&header);
            next = header.last_offset() + 1;
        }
        Ok(None)
    }

    /// Writes `<log end offset>.snapshot` of the producer state and drops old snapshots.
    fn write_producer_snapshot(&self, state: &mut LogState<S::File>) -> Result<()> {
        let offset = state.log_end_offset();
        self.write_snapshot_bytes(offset, &state.producers.to_snapshot())?;
        state.producers_snapshotted = Some(offset);
        Ok(())
    }

    /// Writes `<offset>.snapshot` and drops the oldest beyond `SNAPSHOTS_KEPT`.
    fn write_snapshot_bytes(&self, offset: i64, bytes: &[u8]) -> Result<()> {
        let name = format!("{}{SNAPSHOT_SUFFIX}", segment::file_stem(offset));
        checkpoint::write_bytes(&self.storage, &self.dir, &name, bytes)?;
        let mut snapshots = list_snapshots(&self.storage, &self.dir)?;
        snapshots.sort_unstable();
        let excess = snapshots.len().saturating_sub(SNAPSHOTS_KEPT);
        for old in &snapshots[..excess] {
            remove_snapshot(&self.storage, &self.dir, *old)?;
        }
        Ok(())
    }

    /// Drops the state of producers idle for `producer_id_expiration_ms` (the broker's
    /// `producer.id.expiration.ms`, Kafka default 86400000), judged by their newest
    /// batch's max timestamp, as Kafka's periodic expiry does. Returns how many went. The
    /// next snapshot (roll, close) leaves them out; a reload from an older snapshot may
    /// bring them back until the next expiry pass, as in Kafka.
    pub fn expire_producers(&self, now_ms: i64, producer_id_expiration_ms: i64) -> usize {
        let mut state = lock(&self.state);
        let removed = state.producers.remove_expired(now_ms, producer_id_expiration_ms);
        if removed > 0 {
            state.producers_snapshotted = None;
            tracing::debug!(dir = %self.dir.display(), removed, "expired idle producer ids");
        }
        removed
    }

    /// Every producer's state, by producer id (DescribeProducers).
    pub fn producer_states(&self) -> Vec<(i64, crate::producer::ProducerEntry)> {
        lock(&self.state).producers.iter().map(|(id, e)| (id, e.clone())).collect()
    }

    /// Producer state of one producer id, for DescribeProducers and tests.
    pub fn producer_state(&self, producer_id: i64) -> Option<crate::producer::ProducerEntry> {
        lock(&self.state).producers.get(producer_id).cloned()
    }

    /// After a failed write, cuts the file back so no partial batch stays in the log; if
    /// that fails too the log's content is unknown and it goes offline.
    /// Returns the reason if the log went offline; the caller fails the waiters once it
    /// has released the state lock (callbacks never run under it).
    fn undo_partial_write(&self, state: &mut LogState<S::File>, write_at: u64) -> Option<String> {
        let active = state.active();
        let e = match active.handle() {
            Ok(file) => file.set_len(write_at).err()?,
            Err(e) => std::io::Error::other(e.to_string()),
        };
        let reason = format!("could not remove a failed write from {}: {e}", active.path.display());
        tracing::error!(dir = %self.dir.display(), %reason, "log going offline");
        state.offline = Some(reason.clone());
        Some(reason)
    }

    /// Refuses further appends and fails every durability waiter (takes both locks).
    fn go_offline(&self, reason: String) {
        tracing::error!(dir = %self.dir.display(), %reason, "log going offline");
        lock(&self.state).offline.get_or_insert_with(|| reason.clone());
        self.fail_waiters(reason);
    }

    fn fail_waiters(&self, reason: String) {
        let mut d = lock(&self.durability);
        let reason = d.offline.get_or_insert(reason).clone();
        let waiters: Vec<_> = d.waiters.drain(..).collect();
        self.durable_changed.notify_all();
        drop(d);
        for (_, cb) in waiters {
            cb(Err(self.offline_error(&reason)));
        }
    }

    /// Rolls to a new segment if this append would overflow the active one by size,
    /// index capacity or relative offset, or the active one is older than `segment.ms`.
    fn maybe_roll(
        &self,
        state: &mut LogState<S::File>,
        append_bytes: u64,
        last_offset: i64,
        now_ms: i64,
    ) -> Result<()> {
        let c = self.config();
        let a = state.active();
        if a.size == 0 {
            return Ok(());
        }
        let full = a.size + append_bytes > c.segment_bytes;
        let old = now_ms.saturating_sub(state.active_since_ms) > c.segment_ms;
        let offset_index_full = (a.offset_index.len() as u64 + 1) * segment::OFFSET_ENTRY > c.segment_index_bytes;
        let time_index_full = (a.time_index.len() as u64 + 1) * segment::TIME_ENTRY > c.segment_index_bytes;
        // Index entries hold 32-bit relative offsets and positions.
        let offsets_overflow = last_offset - a.base_offset > i64::from(i32::MAX);
        let positions_overflow = a.size + append_bytes > u64::from(u32::MAX);
        if full || old || offset_index_full || time_index_full || offsets_overflow || positions_overflow {
            self.roll(state, now_ms, false)?;
        }
        Ok(())
    }

    /// Starts a new segment at the log end offset. The old one is sealed (indexes written,
    /// data and indexes fsynced, producer snapshot, high watermark and recovery point
    /// checkpointed) by the next group commit, as Kafka schedules `flush-log` after a roll
    /// rather than flush inline: no fsync runs on the appending thread, and no append
    /// after the roll is acknowledged before the seal is durable. `inline` seals at once
    /// (callers off the append path holding `sealing`), as does a log with no recovery
    /// point on disk yet, since its recovery could not tell an unsealed segment.
    fn roll(&self, state: &mut LogState<S::File>, now_ms: i64, inline: bool) -> Result<()> {
        let base = state.log_end_offset();
        let segment = Segment::create(&self.storage, &self.dir, base)?;
        let sealed = state.active().base_offset;
        state.segments.push(segment);
        // Consumers that lag a little read the just-sealed segment next.
        state.note_open_sealed(sealed);
        state.active_since_ms = now_ms;
        state.unsealed.push(sealed);
        state.pending_snapshot = Some((base, state.producers.to_snapshot()));
        if inline || state.recovery_point.is_none() {
            // Without a recovery point no deferred seal was ever taken, so none is being
            // written concurrently and `sealing` is not needed.
            self.seal_now(state)?;
        } else {
            lock(&self.durability).rolls_taken += 1;
        }
        Ok(())
    }

    fn offline_error(&self, reason: &str) -> StorageError {
        StorageError::LogOffline { dir: self.dir.clone(), reason: reason.to_string() }
    }

    // ----- reads ----------------------------------------------------------------------

    /// Reads whole batches from `fetch_offset` (the batch containing it first), up to
    /// `max_bytes` — but always at least one batch, even a larger one, as Kafka's fetch
    /// does. Stops at a segment boundary. `fetch_offset` equal to the log end offset
    /// gives an empty slice; outside `[log start, log end]` is `OffsetOutOfRange`.
    pub fn read(&self, fetch_offset: i64, max_bytes: usize) -> Result<ReadSlice> {
        self.read_bounded(fetch_offset, max_bytes, i64::MAX)
    }

    /// Like [`read`](Self::read) but returns only batches wholly below `end_offset`
    /// (the high watermark or last stable offset for consumers).
    pub fn read_bounded(&self, fetch_offset: i64, max_bytes: usize, end_offset: i64) -> Result<ReadSlice> {
        self.read_limited(fetch_offset, max_bytes, end_offset, true)
    }

    /// Like [`read_bounded`](Self::read_bounded), but a first batch larger than
    /// `max_bytes` is returned only if `min_one_batch`; otherwise the slice is empty.
    /// (Kafka's `minOneMessage`: a fetch grants it to its first partition with data only,
    /// so its response stays within its limit.) The offset is checked either way.
    pub fn read_limited(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        end_offset: i64,
        min_one_batch: bool,
    ) -> Result<ReadSlice> {
        let limits = ReadLimits { max_bytes, end_offset, min_one_batch };
        Ok(self.read_whole_batches(fetch_offset, limits, None)?.0)
    }

    /// The same read as [`read_limited`](Self::read_limited) (the same batches, offsets
    /// and errors), for a transport that can send file bytes with sendfile(2): if the
    /// batches total at least `min_located_bytes` and the segment is an OS file, they
    /// are not read but located, and returned as a [`FileChunk`] with `records` empty.
    /// Otherwise `records` holds them and the chunk is `None`.
    ///
    /// Locating reads batch headers only, and few of them: the offset index tells which
    /// batches the read is sure to return, and the walk of headers starts after them.
    pub fn read_located(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        end_offset: i64,
        min_one_batch: bool,
        min_located_bytes: usize,
    ) -> Result<(ReadSlice, Option<FileChunk>)> {
        let limits = ReadLimits { max_bytes, end_offset, min_one_batch };
        self.read_whole_batches(fetch_offset, limits, Some(min_located_bytes))
    }

    /// `read_limited`, and with `locate_from` the batches of at least that many bytes
    /// located rather than read.
    fn read_whole_batches(
        &self,
        fetch_offset: i64,
        limits: ReadLimits,
        locate_from: Option<usize>,
    ) -> Result<(ReadSlice, Option<FileChunk>)> {
        let (views, mut slice) = {
            let mut s = lock(&self.state);
            let leo = s.log_end_offset();
            if fetch_offset < s.log_start_offset || fetch_offset > leo {
                return Err(StorageError::OffsetOutOfRange {
                    offset: fetch_offset,
                    log_start_offset: s.log_start_offset,
                    log_end_offset: leo,
                });
            }
            let slice = ReadSlice {
                records: Bytes::new(),
                next_offset: fetch_offset,
                log_start_offset: s.log_start_offset,
                log_end_offset: leo,
                high_watermark: s.high_watermark,
            };
            let first = s.segments.partition_point(|seg| seg.base_offset <= fetch_offset).saturating_sub(1);
            // Two segments suffice: the fetch offset lies in the first unless it is its
            // end, and then the next one starts there.
            let indexes: Vec<usize> =
                (first..s.segments.len()).filter(|&i| s.segments[i].next_offset > fetch_offset).take(2).collect();
            let mut views = Vec::with_capacity(indexes.len());
            for i in indexes {
                let seg = &s.segments[i];
                let position = seg.index_lookup(fetch_offset);
                // From the index as it is now, under the lock, like the view's size.
                let known_included = seg.known_included(position, limits.max_bytes as u64, limits.end_offset);
                views.push((s.view(&self.storage, i, position)?, known_included));
            }
            (views, slice)
        };
        if limits.max_bytes == 0 && !limits.min_one_batch {
            return Ok((slice, None));
        }
        for (view, known_included) in views {
            let Some(first) = view.find(view.start_position, |h| h.last_offset() >= fetch_offset)? else {
                continue;
            };
            if first.header.last_offset() >= limits.end_offset {
                break;
            }
            let (batches, next_offset) = match locate_from {
                Some(min_bytes) => view.locate_batches(first, &limits, known_included, min_bytes)?,
                None => view.read_batches(first.position, &limits)?,
            };
            let chunk = match batches {
                Batches::Read(records) if records.is_empty() => return Ok((slice, None)),
                Batches::Read(records) => {
                    slice.records = records;
                    None
                }
                Batches::Located(chunk) => Some(chunk),
            };
            slice.next_offset = next_offset;
            return Ok((slice, chunk));
        }
        Ok((slice, None))
    }

    /// ListOffsets by timestamp: the first batch whose max timestamp is at least `ts`,
    /// found through the time index; `None` if every batch is older.
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<TimestampOffset>> {
        let (view, log_start) = {
            let mut s = lock(&self.state);
            let Some(i) = s.segments.iter().position(|seg| seg.max_timestamp >= ts) else {
                return Ok(None);
            };
            let seg = &s.segments[i];
            let position = seg.index_lookup(seg.time_lookup(ts).max(s.log_start_offset));
            (s.view(&self.storage, i, position)?, s.log_start_offset)
        };
        let Some(found) = view.find(view.start_position, |h| h.max_timestamp >= ts)? else {
            return Ok(None);
        };
        let mut batch = vec![0u8; found.header.total_size() as usize];
        view.file.read_exact_at(&mut batch, found.position).map_err(|e| StorageError::io("read", &view.path, e))?;
        Ok(Some(TimestampOffset {
            offset: found.header.base_offset.max(log_start),
            timestamp: found.header.max_timestamp,
            batch: Bytes::from(batch),
        }))
    }

    /// ListOffsets MAX_TIMESTAMP (-3): the largest timestamp and the batch offset holding it.
    pub fn max_timestamp_and_offset(&self) -> Option<(i64, i64)> {
        let s = lock(&self.state);
        s.segments
            .iter()
            .filter(|seg| seg.max_timestamp >= 0)
            .max_by_key(|seg| seg.max_timestamp)
            .map(|seg| (seg.max_timestamp, seg.offset_of_max_timestamp.max(s.log_start_offset)))
    }

    // ----- offsets, high watermark, epochs ---------------------------------------------

    /// The first offset readable.
    pub fn log_start_offset(&self) -> i64 {
        lock(&self.state).log_start_offset
    }

    /// The offset the next append gets.
    pub fn log_end_offset(&self) -> i64 {
        lock(&self.state).log_end_offset()
    }

    /// The high watermark.
    pub fn high_watermark(&self) -> i64 {
        lock(&self.state).high_watermark
    }

    /// The log's offsets read together under one lock, so they agree with each other
    /// (log start <= LSO <= HW <= log end). Reading them one by one races appends and
    /// durability: an LSO read after the HW can be above it.
    pub fn offsets(&self) -> LogOffsets {
        let s = lock(&self.state);
        LogOffsets {
            log_start_offset: s.log_start_offset,
            last_stable_offset: s.last_stable_offset(),
            high_watermark: s.high_watermark,
            log_end_offset: s.log_end_offset(),
        }
    }

    /// Moves the high watermark forward. It never moves back (except through
    /// `truncate_to`) and never passes the log end offset; a violation is reported as
    /// `InvalidHighWatermark` and not applied.
    pub fn update_high_watermark(&self, hw: i64) -> Result<()> {
        let mut s = lock(&self.state);
        let leo = s.log_end_offset();
        if hw < s.high_watermark || hw > leo {
            // An error, not a panic: the one caller (the server's replica state machine,
            // under its own lock) only moves it forward within what it was told the log
            // holds, so this is a log truncated under it; the durability callback that
            // reports it runs on a flusher thread, which must not go down.
            return Err(StorageError::InvalidHighWatermark {
                requested: hw,
                current: s.high_watermark,
                log_end_offset: leo,
            });
        }
        s.high_watermark = hw;
        Ok(())
    }

    // ----- transactions ---------------------------------------------------------------

    /// The last stable offset: min(first offset of the oldest ongoing transaction, high
    /// watermark). read_committed fetches pass it to [`read_bounded`](Self::read_bounded)
    /// and ListOffsets(read_committed) returns it as the latest offset. A transaction
    /// whose start was deleted (DeleteRecords, retention) holds it at the log start
    /// offset, as Kafka's `maybeIncrementFirstUnstableOffset` does.
    pub fn last_stable_offset(&self) -> i64 {
        lock(&self.state).last_stable_offset()
    }

    /// First offset of the oldest ongoing transaction (Kafka's `firstUnstableOffset`),
    /// whatever the high watermark.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        lock(&self.state).producers.first_unstable_offset()
    }

    /// Aborted transactions overlapping `[fetch_offset, upper_offset)` as
    /// `(producer_id, first_offset)`, oldest marker first: a read_committed Fetch's
    /// AbortedTransactions for a read from `fetch_offset` bounded by `upper_offset`
    /// (normally the read's `next_offset`, or the LSO).
    pub fn aborted_transactions(&self, fetch_offset: i64, upper_offset: i64) -> Vec<(i64, i64)> {
        self.aborted_transaction_entries(fetch_offset, upper_offset)
            .into_iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect()
    }

    /// Like [`aborted_transactions`](Self::aborted_transactions), with whole index entries.
    pub fn aborted_transaction_entries(&self, fetch_offset: i64, upper_offset: i64) -> Vec<AbortedTxn> {
        let s = lock(&self.state);
        let first = s.segments.partition_point(|seg| seg.base_offset <= fetch_offset).saturating_sub(1);
        txn_index::collect(
            s.segments[first..].iter().map(|seg| seg.aborted_txns.as_slice()),
            fetch_offset,
            upper_offset,
        )
    }

    /// Appends a transaction marker as leader (WriteTxnMarkers): builds the control batch
    /// with [`BatchBuilder::end_txn_marker`](osprey_protocol::records::BatchBuilder::end_txn_marker)
    /// (timestamp `now_ms`) and appends it through [`append`](Self::append), which ends
    /// the producer's transaction, indexes an abort and refuses a fenced epoch. Appending a
    /// marker batch built elsewhere through `append` or `append_as_follower` has the same
    /// effect.
    pub fn append_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        use osprey_protocol::records::{BatchBuilder, EndTxnMarker};
        let marker = EndTxnMarker { commit, coordinator_epoch };
        let built = BatchBuilder::end_txn_marker(marker, producer_id, producer_epoch, now_ms)
            .and_then(|b| b.build())
            .map_err(|e| StorageError::io("build marker", &self.dir, std::io::Error::other(e.to_string())))?;
        self.append(built.as_bytes(), leader_epoch, now_ms)
    }

    /// A new leader epoch starts at the log end offset: this replica became the leader
    /// (Kafka's `maybeAssignEpochStartOffset`). A follower whose last batches are of an
    /// older epoch past this point then learns where the logs part (diverging epoch,
    /// OffsetForLeaderEpoch) even before the first batch of the new epoch is written.
    /// An epoch not newer than the latest is ignored.
    pub fn assign_epoch_start(&self, epoch: i32) -> Result<()> {
        let mut s = lock(&self.state);
        if let Some(reason) = &s.offline {
            return Err(self.offline_error(reason));
        }
        let start = s.log_end_offset();
        if s.epochs.assign(epoch, start) {
            if let Err(e) = self.write_epoch_checkpoint(&s) {
                s.epochs.truncate_from_end(start);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The leader-epoch cache: (epoch, start offset), oldest first.
    pub fn leader_epochs(&self) -> Vec<(i32, i64)> {
        lock(&self.state).epochs.entries().to_vec()
    }

    /// OffsetForLeaderEpoch: `(largest epoch <= epoch, its end offset)`, Kafka's rules;
    /// `(-1, -1)` when undefined.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let s = lock(&self.state);
        s.epochs.end_offset_for(epoch, s.log_end_offset())
    }

    /// Bytes in all segments.
    pub fn size_bytes(&self) -> u64 {
        lock(&self.state).size_bytes()
    }

    /// Whether the log went offline after an I/O failure (a failed fsync, segment roll,
    /// truncation, or cut-back of a failed write): it refuses appends until the broker
    /// restarts. A closed log is not offline; closing marks only the state.
    pub fn is_offline(&self) -> bool {
        lock(&self.durability).offline.is_some()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        lock(&self.state).segments.len()
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    // ----- truncation ------------------------------------------------------------------

    /// Removes every batch from the one containing `offset` on (a follower whose log
    /// diverged). Returns the new log end offset (at most `offset`; lower if `offset`
    /// fell inside a batch). Later segments are deleted, the epoch cache and high
    /// watermark are cut back, and waiters for removed offsets fail with `Truncated`.
    /// Below the log start offset the log is emptied and restarts at `offset`; if the
    /// cut would leave the log end below the log start, it restarts at the log start.
    pub fn truncate_to(&self, offset: i64) -> Result<i64> {
        self.truncate_checked(offset, false)
    }

    /// Empties the log and starts it again at `offset`, which may be past its end (Kafka's
    /// `truncateFullyAndStartAt`): a follower whose log ends before the leader's log start
    /// (retention removed what it lacks) starts over where the leader's log starts. Every
    /// segment, the epoch cache and the producer state go; the high watermark and the log
    /// start offset become `offset`, and the empty log is durable there.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<i64> {
        self.truncate_checked(offset.max(0), true)
    }

    fn truncate_checked(&self, offset: i64, fully: bool) -> Result<i64> {
        let mut covered = Completions::default();
        let result = self.truncate_locked(offset, fully, &mut covered);
        if let Some(link) = self.journal.get() {
            link.journal.deliver(covered);
        }
        if let Err(e) = &result {
            if e.is_kafka_storage_error() {
                // Half-done truncation leaves files and memory disagreeing; only a reopen
                // (recovery) can be trusted to reconcile them.
                self.go_offline(format!("truncation to {offset} failed: {e}"));
            }
        }
        result
    }

    fn truncate_locked(&self, offset: i64, fully: bool, covered: &mut Completions) -> Result<i64> {
        let _sealing = lock(&self.sealing);
        let mut s = lock(&self.state);
        if let Some(reason) = &s.offline {
            return Err(self.offline_error(reason));
        }
        // Nothing pending, so the recovery point is the active segment's base and only
        // needs lowering if the cut reaches below it.
        self.seal_now(&mut s)?;
        let leo = s.log_end_offset();
        if offset >= leo && !fully {
            // No record goes, but an epoch entry at the log end does (Kafka's
            // `UnifiedLog.truncateTo`): a replica that led and stamped an epoch's start
            // offset without appending anything in it must not keep claiming that epoch
            // once it follows, or the leader's truncation point never matches its own.
            if s.epochs.truncate_from_end(leo) {
                self.write_epoch_checkpoint(&s)?;
            }
            return Ok(leo);
        }
        if let Some(link) = self.journal.get() {
            // Durably before the files change: the journal's entries of what goes must
            // never be replayed into the log that follows.
            let cut = if fully || offset < s.log_start_offset { None } else { Some(offset) };
            *covered = link.journal.record_cut(&link.key, cut)?;
        }
        let offset = offset.max(0);
        let mut removed: Vec<i64> = Vec::new();
        if offset >= s.log_start_offset && !fully {
            let keep = s.segments.partition_point(|seg| seg.base_offset <= offset).max(1);
            removed = s.segments.drain(keep..).map(|seg| seg.base_offset).collect();
            for &base in &removed {
                Segment::delete_files(&self.storage, &self.dir, base)?;
            }
            // The segment cut becomes the active one, whose file always stays open.
            let active_base = s.active().base_offset;
            s.open_sealed.retain(|&b| b != active_base);
            s.active_mut().ensure_open(&self.storage)?;
            let seg = s.active_mut();
            let end = seg.size;
            // The log ends at `offset`, or below it where a batch straddles it. Not at the
            // base of the cut batch when that lies above `offset`: a follower's log can have
            // a gap there (compaction on the leader), and ending it past `offset` would keep
            // offsets the truncation was asked to remove (chaos seed 1066: the follower
            // then fetched from past its divergence point, and truncated again, in a loop).
            match seg.find_batch(offset, end)? {
                Some(found) => seg.truncate_at(found.position, found.header.base_offset.min(offset))?,
                None => seg.truncate_at(end, seg.next_offset.min(offset))?,
            }
        }
        // Below the log start nothing readable remains: restart the log empty at `offset`
        // (Kafka's truncateFullyAndStartAt). If the cut removed the batch holding the log
        // start, the log restarts at the log start so its end never falls below it.
        let restart_at = if fully || offset < s.log_start_offset {
            Some(offset)
        } else {
            (s.log_end_offset() < s.log_start_offset).then_some(s.log_start_offset)
        };
        if let Some(start) = restart_at {
            // The new segment exists before the old ones leave the list, so the log always
            // has an active segment even if this fails half way (it then goes offline).
            for seg in s.segments.iter().filter(|seg| seg.base_offset != start) {
                Segment::<S::File>::delete_files(&self.storage, &self.dir, seg.base_offset)?;
            }
            let fresh = Segment::create(&self.storage, &self.dir, start)?;
            removed.extend(std::mem::replace(&mut s.segments, vec![fresh]).iter().map(|seg| seg.base_offset));
            s.log_start_offset = start;
            self.write_log_start_checkpoint(start)?;
        }
        let active_base = s.active().base_offset;
        if s.recovery_point.is_some_and(|point| point > active_base) {
            checkpoint::write(&self.storage, &self.dir, RECOVERY_POINT_CHECKPOINT, &[active_base.to_string()])?;
            s.recovery_point = Some(active_base);
        }
        self.storage.sync_dir(&self.dir).map_err(|e| StorageError::io("fsync dir", &self.dir, e))?;
        let new_leo = s.log_end_offset();
        if fully {
            // Nothing of the old log remains: what was committed, dirty, produced or
            // epoch-stamped there means nothing for the log that starts here.
            s.high_watermark = new_leo;
            s.first_dirty_offset = new_leo;
            for snapshot in loader::list_snapshots(&self.storage, &self.dir)? {
                loader::remove_snapshot(&self.storage, &self.dir, snapshot)?;
            }
        }
        s.high_watermark = s.high_watermark.min(new_leo);
        s.log_start_offset = s.log_start_offset.min(new_leo);
        s.first_dirty_offset = s.first_dirty_offset.min(new_leo);
        let (producers, aborted, _) = load_producers(&self.storage, &self.dir, &s, new_leo)?;
        s.producers = producers;
        // The producer state was rebuilt from what the log keeps: a gap is judged afresh.
        s.failed_writes.clear();
        s.producers_snapshotted = None;
        insert_aborted(&mut s, aborted);
        let epochs_cut = if fully { s.epochs.truncate_from_end(i64::MIN) } else { s.epochs.truncate_from_end(new_leo) };
        if epochs_cut {
            self.write_epoch_checkpoint(&s)?;
        }
        s.generation += 1;
        let mut d = lock(&self.durability);
        d.generation += 1;
        // The empty log is durable where it starts: its segment and checkpoint were written
        // and the directory fsynced above.
        d.durable_end = if fully { new_leo } else { d.durable_end.min(new_leo) };
        d.synced_end = if fully { new_leo } else { d.synced_end.min(new_leo) };
        let (failed, kept): (Vec<_>, Vec<_>) = d.waiters.drain(..).partition(|(end, _)| *end > new_leo);
        d.waiters = kept;
        self.durable_changed.notify_all();
        drop(d);
        drop(s);
        tracing::info!(dir = %self.dir.display(), offset, new_leo, segments_removed = removed.len(), "log truncated");
        for (end, cb) in failed {
            cb(Err(StorageError::Truncated(end - 1)));
        }
        Ok(new_leo)
    }

    fn write_epoch_checkpoint(&self, s: &LogState<S::File>) -> Result<()> {
        let lines: Vec<String> = s.epochs.entries().iter().map(|(e, o)| format!("{e} {o}")).collect();
        checkpoint::write(&self.storage, &self.dir, LEADER_EPOCH_CHECKPOINT, &lines)
    }

    fn write_log_start_checkpoint(&self, offset: i64) -> Result<()> {
        checkpoint::write(&self.storage, &self.dir, LOG_START_OFFSET_CHECKPOINT, &[offset.to_string()])
    }
}

/// Checks the append buffer is a sequence of whole, valid v2 batches. With a size limit
/// (leader appends) each batch must also be at most `max.message.bytes` and have
/// `recordsCount == lastOffsetDelta + 1`, as Kafka's LogValidator requires of producers.
fn validate_batches(buf: &[u8], max_message_bytes: Option<u32>) -> Result<Vec<Incoming>> {
    let mut incoming = Vec::new();
    let mut position = 0;
    if buf.is_empty() {
        return Err(StorageError::InvalidBatch {
            position: 0,
            reason: batch::BatchError::Truncated { needed: HEADER_LEN as u64, available: 0 },
        });
    }
    while position < buf.len() {
        let rest = &buf[position..];
        let header =
            batch::validate(rest, u64::MAX).map_err(|reason| StorageError::InvalidBatch { position, reason })?;
        let Some(max) = max_message_bytes else {
            incoming.push(Incoming { position, header });
            position += header.total_size() as usize;
            continue;
        };
        if header.total_size() > u64::from(max) {
            return Err(StorageError::RecordBatchTooLarge { size: header.total_size(), max });
        }
        if header.records_count < 1 || i64::from(header.last_offset_delta) + 1 != i64::from(header.records_count) {
            return Err(StorageError::InvalidBatch {
                position,
                reason: batch::BatchError::BadRecordCount {
                    last_offset_delta: header.last_offset_delta,
                    records_count: header.records_count,
                },
            });
        }
        incoming.push(Incoming { position, header });
        position += header.total_size() as usize;
    }
    Ok(incoming)
}

/// What a read may return, as its caller asked.
#[derive(Debug, Clone, Copy)]
struct ReadLimits {
    max_bytes: usize,
    /// No batch reaching this offset (the high watermark or LSO) is returned.
    end_offset: i64,
    /// A first batch larger than `max_bytes` is returned whole (Kafka's `minOneMessage`).
    min_one_batch: bool,
}

/// The batches a read returns: copied into memory, or located in their segment file.
enum Batches {
    Read(Bytes),
    Located(FileChunk),
}

/// The batches a walk of headers chose.
struct Chosen {
    /// Their bytes, from the first.
    len: u64,
    /// The offset after the last; `None` if none was chosen.
    next_offset: Option<i64>,
}

/// What a reader needs of a segment, copied out under the lock so the reads themselves
/// (pread) run without it.
struct SegmentView<F> {
    file: Arc<F>,
    path: PathBuf,
    size: u64,
    start_position: u64,
}

impl<F: StorageFile> SegmentView<F> {
    /// A view for a one-off scan (recovery of epochs or producer state): uses the open
    /// file or opens one just for this scan.
    fn transient<S: Storage<File = F>>(seg: &Segment<F>, storage: &S, start_position: u64) -> Result<Self> {
        let file = seg.handle_or_open(storage)?;
        Ok(SegmentView { file, path: seg.path.clone(), size: seg.size, start_position })
    }

    fn find(&self, from: u64, mut pred: impl FnMut(&BatchHeader) -> bool) -> Result<Option<segment::Located>> {
        let mut position = from;
        let mut buf = [0u8; HEADER_LEN];
        while position + HEADER_LEN as u64 <= self.size {
            self.file.read_exact_at(&mut buf, position).map_err(|e| StorageError::io("read", &self.path, e))?;
            let header = BatchHeader::parse(&buf).map_err(|reason| self.corrupt(position, reason))?;
            if header.total_size() > self.size - position {
                return Err(self.corrupt(position, batch::BatchError::BadLength(header.batch_length)));
            }
            if pred(&header) {
                return Ok(Some(segment::Located { position, header }));
            }
            position += header.total_size();
        }
        Ok(None)
    }

    /// Reads whole batches from `position` (at least one), up to `max_bytes`, stopping
    /// before the first batch reaching `end_offset`. One pread in the common case.
    fn read_batches(&self, position: u64, limits: &ReadLimits) -> Result<(Batches, i64)> {
        let want = self.window(position, limits.max_bytes);
        let mut buf = Vec::with_capacity(want as usize);
        self.read_into(&mut buf, want, position)?;
        let chosen = self.choose(position, want, limits, 0, |used| {
            BatchHeader::parse(&buf[used as usize..]).map_err(|r| self.corrupt(position + used, r))
        })?;
        if chosen.len > want {
            // The first batch is larger than max_bytes and returned whole: read its rest.
            self.read_into(&mut buf, chosen.len - want, position + want)?;
        }
        buf.truncate(chosen.len as usize);
        Ok((Batches::Read(Bytes::from(buf)), chosen.next_offset.unwrap_or(i64::MIN)))
    }

    /// Bytes from `position` a read of at most `max_bytes` may return: at least a header
    /// (a read below that returns a batch of only a header), at most the segment's rest.
    fn window(&self, position: u64, max_bytes: usize) -> u64 {
        (max_bytes as u64).max(HEADER_LEN as u64).min(self.size - position)
    }

    /// The rules of a read, shared by the read that copies batches and the one that
    /// locates them: from the batch at `position`, walking headers (`header_at` gives
    /// the one `used` bytes on) from `from` bytes on, the batches that end within
    /// `window` and below `limits.end_offset`, or the first alone if larger and
    /// `limits.min_one_batch`. `from` must be a batch boundary that the rules reach.
    fn choose(
        &self,
        position: u64,
        window: u64,
        limits: &ReadLimits,
        from: u64,
        mut header_at: impl FnMut(u64) -> Result<BatchHeader>,
    ) -> Result<Chosen> {
        let available = self.size - position;
        let mut used = from;
        let mut next_offset = None;
        while used + HEADER_LEN as u64 <= window {
            let header = header_at(used)?;
            let size = header.total_size();
            if size > available - used {
                return Err(self.corrupt(position + used, batch::BatchError::BadLength(header.batch_length)));
            }
            if header.last_offset() >= limits.end_offset {
                break;
            }
            if used + size > window {
                if used == 0 && limits.min_one_batch {
                    // The first batch is larger than max_bytes: return it whole anyway.
                    used = size;
                    next_offset = Some(header.last_offset() + 1);
                }
                break;
            }
            used += size;
            next_offset = Some(header.last_offset() + 1);
        }
        Ok(Chosen { len: used, next_offset })
    }

    /// Appends `len` bytes at `position` to `buf`.
    fn read_into(&self, buf: &mut Vec<u8>, len: u64, position: u64) -> Result<()> {
        self.file.read_exact_at_into(buf, len as usize, position).map_err(|e| StorageError::io("read", &self.path, e))
    }

    fn corrupt(&self, position: u64, reason: batch::BatchError) -> StorageError {
        tracing::error!(file = %self.path.display(), position, %reason, "corrupt batch in segment; not serving it");
        StorageError::io(
            "read",
            &self.path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("corrupt batch at byte {position}: {reason}")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{build, BatchSpec};
    use crate::fs::SimStorage;

    #[test]
    fn pending_callbacks_for_truncated_offsets_fail_with_truncated() {
        let log = PartitionLog::open(SimStorage::new(), "/p", LogConfig::default(), 0).unwrap();
        for seed in 0..3 {
            log.append(&build(BatchSpec { seed, ..Default::default() }), 0, 0).unwrap();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        for end in [1, 3] {
            let tx = tx.clone();
            // Registered directly: no flusher runs, so both stay pending until truncation.
            lock(&log.durability).waiters.push((end, Box::new(move |r| tx.send((end, r)).unwrap())));
        }
        log.truncate_to(2).unwrap();
        let (end, result) = rx.try_recv().unwrap();
        assert_eq!(end, 3);
        assert!(matches!(result, Err(StorageError::Truncated(2))));
        assert!(rx.try_recv().is_err(), "the waiter for a kept offset stays pending");
        log.flush_waiters();
        assert!(matches!(rx.try_recv().unwrap(), (1, Ok(()))));
    }
}
