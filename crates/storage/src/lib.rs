//! Osprey's durable partition log: segments of record batches stored exactly as
//! accepted, sparse offset and time indexes, group-committed fsync, crash recovery,
//! truncation, retention, compaction and checkpoints.
//!
//! # Durability (precisely)
//!
//! With the default configuration (`flush.messages` and `flush.ms` both unset; this
//! differs from Kafka, which by default never fsyncs on the append path):
//!
//! * [`PartitionLog::append`] writes the batches to the active segment with `pwrite`.
//!   When it returns they are in the OS page cache, readable, **not yet durable**.
//! * [`PartitionLog::wait_for_ack`] / [`PartitionLog::wait_durable`] /
//!   [`PartitionLog::on_durable`] complete only after an `fdatasync` of the active
//!   segment that started after the append's write finished. The broker acknowledges
//!   acks=1/all only then. One fdatasync covers every append written before it started
//!   (group commit).
//! * An acknowledged append therefore survives a process crash (SIGKILL), a kernel panic
//!   and a power loss, provided the disk honours flush requests (no volatile write cache
//!   that lies about FUA/flush). Segment files and checkpoints are created with a
//!   directory fsync, so the file holding acknowledged data is itself durable.
//! * A roll on the append path does no fsync: the old segment is sealed (indexes written,
//!   data and indexes fsynced, producer snapshot, high watermark and
//!   `recovery-point-checkpoint` written, the directory fsynced) by the next group
//!   commit, before it reports any later offset durable, as Kafka schedules `flush-log`
//!   after a roll. So an acknowledgement still covers the seal and the new segment's
//!   directory entry. Recovery scans the last segment and every segment past the
//!   recovery point (rolled, perhaps not sealed); a torn one there ends the log, since
//!   nothing after it was acknowledged. The first roll of a log without a recovery point
//!   yet (new, or written by an older version) seals inline.
//! * On reopen after an unclean stop (no `.clean-shutdown` marker), the last segment is
//!   scanned; every batch's length, magic, offset sequence and CRC-32C is checked and the
//!   segment is cut before the first bad one (logged with file and byte position).
//!   Unacknowledged appends may survive in whole or vanish, never in part: what remains
//!   is a prefix of the appended batches.
//! * Damage beyond that (a sealed segment torn or corrupted, a segment file deleted)
//!   never makes recovery delete the intact segments after it: see [`recovery`] for
//!   what is kept, what the partition serves and how it is reported. Corruption inside
//!   sealed segments, which open does not scan, is found by [`PartitionLog::scrub`].
//! * If a write fails (ENOSPC, EIO) the append fails with [`StorageError::Io`]
//!   (KAFKA_STORAGE_ERROR) and its partial bytes are cut off again. If an fsync fails the
//!   log goes offline ([`StorageError::LogOffline`]): every waiting and later append
//!   fails, because after a failed fsync the kernel may have dropped dirty pages and a
//!   retried fsync could falsely succeed. Reopening runs recovery. Nothing acknowledged
//!   is lost by either, since acknowledgement waits for a successful fsync.
//!
//! * Checkpoints (`leader-epoch-checkpoint`, `log-start-offset-checkpoint`,
//!   `high-watermark-checkpoint`, `recovery-point-checkpoint`, `<offset>.snapshot`
//!   producer state) are replaced atomically (temp file, fsync, rename, directory
//!   fsync). A new leader epoch is checkpointed before the first batch of that epoch is
//!   written. The high watermark is checkpointed at a segment's seal and clean close
//!   only, so after a crash it may be older (it is clamped to the recovered log);
//!   producer state is rebuilt from the newest snapshot plus the batch headers after it.
//! * A clean close writes only what changed since the log was opened or last sealed
//!   (indexes, producer snapshot, high watermark), then the log's clean-shutdown marker
//!   ([`PartitionLog::close`]): a partition with no writes closes with one directory
//!   fsync. A broker marks its whole data directory instead ([`shutdown`],
//!   [`PartitionLog::close_unmarked`], [`PartitionLog::open_after`]): then a partition
//!   with no writes closes and opens with no fsync at all.
//! * A waiter whose offsets are removed by `truncate_to` before they became durable
//!   gets [`StorageError::Truncated`]; a blocking `wait_durable` that spans any truncation
//!   may get it even for offsets the truncation kept (conservative; the producer retries).
//!
//! * Compaction ([`PartitionLog::clean`], `cleanup.policy=compact`) rewrites sealed
//!   segments only, into `.cleaned` files that are fsynced with their indexes before the
//!   swap; renaming the log file to `.swap` is the commit point. Reopen finishes a swap
//!   that reached it (deleting the segments merged into it) and discards one that did
//!   not, so a crash leaves each group of segments either wholly original or wholly
//!   cleaned. Offsets never change.
//!
//! * Transactions: a transactional batch opens its producer's transaction; a control
//!   batch holding a COMMIT/ABORT marker (appended with [`PartitionLog::append_marker`],
//!   or through `append`/`append_as_follower`) closes it. The open transactions' first
//!   offsets live in the producer state (and its snapshots), so
//!   [`PartitionLog::last_stable_offset`] is right after any reopen. Each abort is indexed
//!   in its segment's `.txnindex` (Kafka's format, see [`txn_index`]), written and
//!   fsynced with the segment's other indexes at its seal and close and otherwise rebuilt
//!   from the markers in the log, so it is exactly as durable as the markers.
//!
//! With `flush.messages=N` or `flush.ms=M` set (Kafka semantics), `wait_for_ack` returns
//! at once: an acknowledged append survives a process crash (it is in the page cache)
//! but not a power loss until the next fsync (every N records, or when
//! [`PartitionLog::flush_if_due`] finds it older than M ms, and always at clean close).
//!
//! # Resources
//!
//! A log keeps its active segment's file open plus at most
//! [`log::MAX_OPEN_SEALED_SEGMENTS`] recently read sealed ones (others are reopened on
//! demand), so descriptors grow with partitions, not segments. To bound them across all
//! partitions, open logs on [`FdLimited`] storage sharing one [`FdBudget`]: at most its
//! `max_open` segment descriptors are open at once, active segments included, the least
//! recently used being closed and reopened on demand. Fsyncs for async callers
//! run on a fixed [`Flusher`] pool shared by all logs.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod batch;
pub mod cleaner;
pub mod config;
pub mod delete;
pub mod durability;
pub mod epoch;
pub mod error;
pub mod fdlimit;
pub mod fs;
pub mod journal;
pub mod log;
pub mod producer;
pub mod recovery;
pub mod scrub;
pub mod shutdown;
pub mod txn_index;

mod checkpoint;
mod segment;

pub use cleaner::CleanOutcome;
pub use config::{CleanupPolicy, FlushPolicy, LogConfig, TimestampType};
pub use durability::{set_fsync_observer, DurableCallback, Flushable, Flusher, FsyncStats};
pub use error::{Result, StorageError};
pub use fdlimit::{FdBudget, FdLimited, LimitedFile};
pub use fs::{CrashMode, SimStorage, StdStorage, Storage, StorageFile};
pub use journal::{Journal, JournalStats};
pub use log::{
    AppendInfo, FileChunk, LogOffsets, PartitionLog, PriorShutdown, ReadSlice, RetentionOutcome, TimestampOffset,
};
pub use producer::{CompletedTxn, ProducerStateTable, SequenceError};
pub use recovery::{DamageKind, DamagedRange, RecoveryReport};
pub use scrub::{ScrubCursor, ScrubFinding, ScrubStep};
pub use txn_index::AbortedTxn;
