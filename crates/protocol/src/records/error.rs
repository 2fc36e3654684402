//! The one error type of the records module, and the Kafka error code each case answers.

use super::{Compression, MIN_BATCH_LENGTH};

/// Kafka error codes the records module maps to (`org.apache.kafka.common.protocol.Errors`).
mod code {
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const CORRUPT_MESSAGE: i16 = 2;
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
    pub const INVALID_RECORD: i16 = 87;
}

/// What was malformed in a record batch or its records, and where.
///
/// Batch-level positions (`at`) are byte offsets into the buffer being split into batches
/// (0 for a single batch). Record-level positions are byte offsets into the batch's
/// records section, i.e. after the 61-byte header, and for a compressed batch into the
/// decompressed records; `index` is the record's position in the batch, from 0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordsError {
    /// The buffer ends inside a batch. Fetch responses may legitimately end this way.
    #[error("batch at byte {at}: needs {needed} bytes but only {available} are present")]
    PartialBatch { at: usize, needed: usize, available: usize },
    /// batchLength is smaller than the v2 header that follows it.
    #[error("batch at byte {at}: batchLength {batch_length} is below the minimum {MIN_BATCH_LENGTH}")]
    BatchLengthTooSmall { at: usize, batch_length: i32 },
    /// A single batch was expected but more bytes follow it.
    #[error("batch at byte {at}: {trailing} bytes follow the end of the batch")]
    TrailingBytes { at: usize, trailing: usize },
    /// The magic byte is not 2.
    #[error("batch at byte {at}: magic {magic} is not supported, only v2 record batches are")]
    UnsupportedMagic { at: usize, magic: i8 },
    /// recordsCount is negative.
    #[error("batch at byte {at}: recordsCount {count} is negative")]
    NegativeRecordCount { at: usize, count: i32 },
    /// The stored CRC-32C does not match attributes..end.
    #[error("batch at byte {at}: stored CRC {stored:#010x} but the batch hashes to {computed:#010x}")]
    CrcMismatch { at: usize, stored: u32, computed: u32 },
    /// Attribute bits 0-2 name a codec Kafka does not define (5, 6 or 7).
    #[error("compression codec {codec} is not one Kafka defines")]
    UnsupportedCompression { codec: i16 },
    /// The compressed records could not be decompressed.
    #[error("{codec} records are malformed: {reason}")]
    Decompress { codec: Compression, reason: String },
    /// The compressed records inflate to more than the caller's budget.
    #[error("{codec} records inflate past the budget of {limit} bytes")]
    DecompressionBudgetExceeded { codec: Compression, limit: usize },
    /// A record field needs more bytes than the record (or the records section) has left.
    #[error("record {index} at byte {at}: {field} needs {needed} bytes but {remaining} are left")]
    RecordTruncated { index: i32, at: usize, field: &'static str, needed: usize, remaining: usize },
    /// A varint runs past its 5 bytes (varlong: 10).
    #[error("record {index} at byte {at}: {field} varint runs past {max_bytes} bytes")]
    VarintTooLong { index: i32, at: usize, field: &'static str, max_bytes: usize },
    /// A length or count is negative where it may not be (or below -1 where -1 means null).
    #[error("record {index} at byte {at}: {field} has invalid length {length}")]
    InvalidLength { index: i32, at: usize, field: &'static str, length: i64 },
    /// The record's fields do not add up to its declared length.
    #[error("record {index} at byte {at}: declares {declared} bytes but its fields take {consumed}")]
    RecordLengthMismatch { index: i32, at: usize, declared: i32, consumed: usize },
    /// A record's offsetDelta is not its position in the batch: the offsets the broker
    /// assigns to the batch would not be the ones its records read back.
    #[error("record {index} has offsetDelta {offset_delta}; a batch's records take consecutive offsets from 0")]
    OffsetDeltaMismatch { index: i32, offset_delta: i32 },
    /// Bytes remain in the records section after recordsCount records.
    #[error("batch declares {declared} records but {trailing} bytes follow the last of them")]
    TrailingRecordBytes { declared: i32, trailing: usize },
    /// Produce check: lastOffsetDelta + 1 is not a positive count.
    #[error("batch has an invalid offset range: lastOffsetDelta {last_offset_delta}")]
    InvalidOffsetRange { last_offset_delta: i32 },
    /// Produce check: recordsCount is not positive.
    #[error("batch declares invalid record count {count}")]
    InvalidRecordCount { count: i32 },
    /// Produce check: lastOffsetDelta + 1 differs from recordsCount.
    #[error("batch offset range holds {} records but recordsCount is {count}", i64::from(*.last_offset_delta) + 1)]
    OffsetRangeCountMismatch { last_offset_delta: i32, count: i32 },
    /// Produce check: only the broker writes control batches.
    #[error("clients may not write control batches")]
    ControlBatchFromClient,
    /// Produce check: an idempotent batch (producerId >= 0) needs a base sequence.
    #[error("batch of producer {producer_id} has invalid base sequence {base_sequence}")]
    InvalidSequence { producer_id: i64, base_sequence: i32 },
    /// A control record's key or value is not a valid control record.
    #[error("invalid control record: {reason}")]
    InvalidControlRecord { reason: &'static str },
    /// Building: a key, value, record or batch does not fit the format's i32 lengths.
    #[error("{what} of {length} does not fit the record batch format")]
    TooLarge { what: &'static str, length: usize },
    /// Building: the compressor failed.
    #[error("{codec} compression failed: {reason}")]
    Compress { codec: Compression, reason: String },
}

impl RecordsError {
    /// The Kafka error code a broker answers with for this error, chosen as Kafka does.
    ///
    /// - Framing of batches (partial or short batches, CRC, unknown magic) is Kafka's
    ///   `CorruptRecordException`: CORRUPT_MESSAGE (2).
    /// - Magic 0 or 1 in a v2-only request is what `ProduceRequest.validateRecords` rejects
    ///   with `InvalidRecordException`: INVALID_RECORD (87).
    /// - Malformed records and failed produce checks (`LogValidator.validateBatch`,
    ///   `DefaultRecord.readFrom`) are `InvalidRecordException`: INVALID_RECORD (87). So is
    ///   a compressed payload that does not decompress: Kafka raises INVALID_RECORD for a
    ///   truncated one, and a non-retriable code stops a producer resending the same bytes.
    /// - An unknown codec is UNSUPPORTED_COMPRESSION_TYPE (76).
    /// - Inflating past the budget is MESSAGE_TOO_LARGE (10): Java producers answer it by
    ///   splitting the batch, which is the one retry that can succeed.
    /// - Failures while the broker builds a batch are its own: UNKNOWN_SERVER_ERROR (-1).
    pub fn kafka_error_code(&self) -> i16 {
        use RecordsError::*;
        match self {
            PartialBatch { .. } | BatchLengthTooSmall { .. } | TrailingBytes { .. } | CrcMismatch { .. } => {
                code::CORRUPT_MESSAGE
            }
            UnsupportedMagic { magic: 0 | 1, .. } => code::INVALID_RECORD,
            UnsupportedMagic { .. } => code::CORRUPT_MESSAGE,
            UnsupportedCompression { .. } => code::UNSUPPORTED_COMPRESSION_TYPE,
            DecompressionBudgetExceeded { .. } => code::MESSAGE_TOO_LARGE,
            NegativeRecordCount { .. }
            | Decompress { .. }
            | RecordTruncated { .. }
            | VarintTooLong { .. }
            | InvalidLength { .. }
            | RecordLengthMismatch { .. }
            | OffsetDeltaMismatch { .. }
            | TrailingRecordBytes { .. }
            | InvalidOffsetRange { .. }
            | InvalidRecordCount { .. }
            | OffsetRangeCountMismatch { .. }
            | ControlBatchFromClient
            | InvalidSequence { .. }
            | InvalidControlRecord { .. } => code::INVALID_RECORD,
            TooLarge { .. } | Compress { .. } => code::UNKNOWN_SERVER_ERROR,
        }
    }

    /// Whether this is a batch cut short by the end of the buffer, which a reader of Fetch
    /// responses or of a log tail being written may ignore.
    pub fn is_partial_batch(&self) -> bool {
        matches!(self, RecordsError::PartialBatch { .. })
    }
}
