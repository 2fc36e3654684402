//! The storage crate's error type.

use std::io;
use std::path::PathBuf;

use crate::batch::BatchError;

/// Why a log operation failed. [`StorageError::is_kafka_storage_error`] tells the broker
/// which of these it must answer with KAFKA_STORAGE_ERROR (56).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A read, write, fsync or metadata operation failed (disk full, EIO, ...).
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An earlier write or fsync failed in a way that leaves the log's state unknown
    /// (after a failed fsync the page cache can no longer be trusted), so the log refuses
    /// further appends until it is reopened, which re-runs recovery.
    #[error("log {dir} is offline after an I/O failure: {reason}")]
    LogOffline {
        /// The partition directory.
        dir: PathBuf,
        /// The failure that took it offline.
        reason: String,
    },
    /// The bytes handed to append are not a sequence of valid v2 batches.
    #[error("invalid record batch at byte {position} of the append: {reason}")]
    InvalidBatch {
        /// Byte position of the bad batch in the appended buffer.
        position: usize,
        /// What is wrong with it.
        reason: BatchError,
    },
    /// A batch is larger than `max.message.bytes`.
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    RecordBatchTooLarge {
        /// Batch size with log overhead.
        size: u64,
        /// The limit.
        max: u32,
    },
    /// The offset is outside `[log_start_offset, log_end_offset]`.
    #[error("offset {offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// Requested offset.
        offset: i64,
        /// Current log start offset.
        log_start_offset: i64,
        /// Current log end offset.
        log_end_offset: i64,
    },
    /// A replicated batch starts below the log end offset (Kafka's
    /// UnexpectedAppendOffsetException): the follower must truncate first.
    #[error("replicated batch at offset {offset} is below the log end offset {log_end_offset}")]
    UnexpectedAppendOffset {
        /// First offset of the offending batch.
        offset: i64,
        /// Current log end offset.
        log_end_offset: i64,
    },
    /// An append as leader with an epoch older than the newest in the epoch cache.
    #[error("leader epoch {epoch} is older than the log's latest epoch {latest}")]
    StaleLeaderEpoch {
        /// Epoch given.
        epoch: i32,
        /// Newest epoch already in the log.
        latest: i32,
    },
    /// A high watermark moved backwards or beyond the log end offset.
    #[error("high watermark {requested} invalid (current {current}, log end {log_end_offset})")]
    InvalidHighWatermark {
        /// Value given.
        requested: i64,
        /// Current value.
        current: i64,
        /// Current log end offset.
        log_end_offset: i64,
    },
    /// An idempotent batch out of sequence or from a fenced producer epoch.
    #[error(transparent)]
    Sequence(#[from] crate::producer::SequenceError),
    /// The appended data was removed by `truncate_to` before it became durable.
    #[error("offset {0} was truncated before it became durable")]
    Truncated(i64),
    /// An idempotent batch whose producer's earlier batch (same epoch) failed to be
    /// written on a disk error and has not been written since: the gap in its sequence
    /// is this log's failure, not the producer's, so the batch gets the retriable
    /// KAFKA_STORAGE_ERROR and waits for the earlier one's retry. Answering
    /// OUT_OF_ORDER_SEQUENCE_NUMBER instead makes librdkafka bump the producer epoch and
    /// renumber every unacknowledged message, which writes twice a message that was
    /// written but not yet acknowledged (librdkafka issue 4953).
    #[error(
        "producer {producer_id} batch at sequence {first_seq} waits for sequence {failed_seq}, whose write failed"
    )]
    EarlierWriteFailed {
        /// Producer id.
        producer_id: i64,
        /// baseSequence of the refused batch.
        first_seq: i32,
        /// baseSequence of the batch whose write failed.
        failed_seq: i32,
    },
}

impl StorageError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> StorageError {
        StorageError::Io { op, path: path.into(), source }
    }

    /// True for disk failures, which Kafka reports as KAFKA_STORAGE_ERROR; false for
    /// errors about the request itself.
    pub fn is_kafka_storage_error(&self) -> bool {
        matches!(
            self,
            StorageError::Io { .. } | StorageError::LogOffline { .. } | StorageError::EarlierWriteFailed { .. }
        )
    }
}

/// Result alias for this crate.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;
