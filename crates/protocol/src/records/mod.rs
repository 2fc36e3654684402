//! Record batches (magic v2): the unit in which Produce carries records, Fetch returns
//! them and the log stores them.
//!
//! - [`RecordBatch`] is a view over one batch's bytes ([`bytes::Bytes`], so no copy): the
//!   61-byte header is read field by field on demand; records are not touched until
//!   [`RecordBatch::records`] is called. [`Batches`] splits a buffer holding many
//!   concatenated batches (a Produce partition's `records`, a Fetch response, a log
//!   segment) and reports a partial trailing batch as [`RecordsError::PartialBatch`].
//! - [`RecordBatchMut`] rewrites baseOffset and partitionLeaderEpoch in place (outside the
//!   CRC) and maxTimestamp/timestamp type (inside it, so the CRC is recomputed).
//! - [`Records`] iterates the records lazily, after decompressing within a byte budget.
//! - [`RecordBatch::validate_records`] walks them without building them, as the broker
//!   does before it stores a client's batch, decompressing as a stream within a budget.
//! - [`BatchBuilder`] writes batches, including the transaction markers the broker writes.
//! - [`compress`] / [`decompress`] implement the five codecs; decompression is bounded.
//! - `fuzzing` (with the `testing` feature) holds the checks of the `record_batch` fuzz
//!   target, which `cargo test` also runs over the committed corpus.
//!
//! Nothing here trusts a length or count from the wire beyond the bytes present, and no
//! input makes any of it panic.

mod batch;
mod builder;
mod compression;
mod control;
mod error;
#[cfg(any(test, feature = "testing"))]
pub mod fuzzing;
mod record;
mod validate;
mod varint;

pub use batch::{Batches, RecordBatch, RecordBatchMut, TimestampType};
pub use builder::BatchBuilder;
pub use compression::{compress, compress_snappy_raw, decompress, Compression};
pub use control::{ControlRecordType, EndTxnMarker};
pub use error::RecordsError;
pub use record::{Header, Record, Records};
pub use validate::RecordShape;

/// Size of the v2 batch header, from baseOffset through recordsCount.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes before the part that batchLength counts: baseOffset (8) and batchLength (4).
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// The smallest valid batchLength: the header after the length field, with no records.
pub const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32;
/// The only magic (record format version) this crate reads or writes.
pub const MAGIC_V2: i8 = 2;

/// Attribute bits 0-2: the compression codec (see [`Compression`]).
pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
/// Attribute bit 3: timestamps are LogAppendTime (set by the broker), not CreateTime.
pub const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
/// Attribute bit 4: the batch belongs to a transaction.
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
/// Attribute bit 5: the batch holds control records (transaction markers).
pub const ATTR_CONTROL: i16 = 0x20;
/// Attribute bit 6: baseTimestamp holds the delete horizon set by log compaction.
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// The timestamp Kafka writes for "no timestamp" (an empty batch's base and max).
pub const NO_TIMESTAMP: i64 = -1;
/// producerId of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// producerEpoch of a batch written without idempotence.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// baseSequence of a batch written without idempotence, and of control batches.
pub const NO_SEQUENCE: i32 = -1;

// The header size and the minimum batchLength describe the same layout: keep them tied.
const _: () = assert!(MIN_BATCH_LENGTH as usize + LOG_OVERHEAD_BYTES == BATCH_HEADER_BYTES);
