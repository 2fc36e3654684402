//! One record batch (v2) as a view over its bytes; splitting a buffer into batches; and
//! the in-place rewrites the broker makes when it appends a batch.

use super::record::Records;
use super::{
    Compression, RecordsError, ATTR_COMPRESSION_MASK, ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC_V2, MIN_BATCH_LENGTH, NO_PRODUCER_ID,
};
use bytes::{Bytes, BytesMut};
use std::iter::FusedIterator;

/// Byte offsets of the header fields, from the start of the batch.
mod at {
    pub const BASE_OFFSET: usize = 0;
    pub const BATCH_LENGTH: usize = 8;
    pub const PARTITION_LEADER_EPOCH: usize = 12;
    pub const MAGIC: usize = 16;
    pub const CRC: usize = 17;
    pub const ATTRIBUTES: usize = 21;
    pub const LAST_OFFSET_DELTA: usize = 23;
    pub const BASE_TIMESTAMP: usize = 27;
    pub const MAX_TIMESTAMP: usize = 35;
    pub const PRODUCER_ID: usize = 43;
    pub const PRODUCER_EPOCH: usize = 51;
    pub const BASE_SEQUENCE: usize = 53;
    pub const RECORDS_COUNT: usize = 57;
}

/// How a batch's timestamps were assigned (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// The producer set each record's timestamp.
    CreateTime,
    /// The broker set the batch's maxTimestamp when it appended the batch, and every
    /// record's timestamp reads as that.
    LogAppendTime,
}

/// One complete v2 record batch.
///
/// Construction checks the framing only: batchLength against the bytes, magic, and a
/// non-negative recordsCount. The CRC is checked by [`RecordBatch::validate_crc`] and the
/// records by iterating [`RecordBatch::records`], so a batch can be routed or stored
/// without either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    /// Exactly the batch, from baseOffset to its last record byte; at least 61 bytes.
    bytes: Bytes,
}

impl RecordBatch {
    /// Takes `bytes` as exactly one batch: trailing bytes are an error.
    pub fn new(bytes: Bytes) -> Result<RecordBatch, RecordsError> {
        let len = frame_length(&bytes, 0)?;
        if len != bytes.len() {
            return Err(RecordsError::TrailingBytes { at: 0, trailing: bytes.len() - len });
        }
        Ok(RecordBatch { bytes })
    }

    /// The batch's bytes, header included.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The batch's bytes, header included.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// The batch's bytes, ready for [`RecordBatchMut`]; no copy if nothing else shares them.
    pub fn into_bytes_mut(self) -> BytesMut {
        BytesMut::from(self.bytes)
    }

    /// Size of the whole batch in bytes: batchLength + 12.
    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Offset of the first record.
    pub fn base_offset(&self) -> i64 {
        i64::from_be_bytes(self.field(at::BASE_OFFSET))
    }

    /// Bytes after the batchLength field.
    pub fn batch_length(&self) -> i32 {
        i32::from_be_bytes(self.field(at::BATCH_LENGTH))
    }

    /// Leader epoch of the partition leader that appended the batch.
    pub fn partition_leader_epoch(&self) -> i32 {
        i32::from_be_bytes(self.field(at::PARTITION_LEADER_EPOCH))
    }

    /// Record format version; always 2 for a constructed batch.
    pub fn magic(&self) -> i8 {
        i8::from_be_bytes(self.field(at::MAGIC))
    }

    /// The stored CRC-32C of attributes..end.
    pub fn crc(&self) -> u32 {
        u32::from_be_bytes(self.field(at::CRC))
    }

    /// The raw attributes; see the `ATTR_*` constants.
    pub fn attributes(&self) -> i16 {
        i16::from_be_bytes(self.field(at::ATTRIBUTES))
    }

    /// Offset of the last record minus baseOffset.
    pub fn last_offset_delta(&self) -> i32 {
        i32::from_be_bytes(self.field(at::LAST_OFFSET_DELTA))
    }

    /// Timestamp of the first record, or the delete horizon if [`Self::has_delete_horizon`].
    pub fn base_timestamp(&self) -> i64 {
        i64::from_be_bytes(self.field(at::BASE_TIMESTAMP))
    }

    /// Largest record timestamp, or the log append time for LogAppendTime batches.
    pub fn max_timestamp(&self) -> i64 {
        i64::from_be_bytes(self.field(at::MAX_TIMESTAMP))
    }

    /// Idempotent producer id, or -1.
    pub fn producer_id(&self) -> i64 {
        i64::from_be_bytes(self.field(at::PRODUCER_ID))
    }

    /// Idempotent producer epoch, or -1.
    pub fn producer_epoch(&self) -> i16 {
        i16::from_be_bytes(self.field(at::PRODUCER_EPOCH))
    }

    /// Sequence number of the first record, or -1.
    pub fn base_sequence(&self) -> i32 {
        i32::from_be_bytes(self.field(at::BASE_SEQUENCE))
    }

    /// Number of records the batch declares; never negative for a constructed batch.
    pub fn records_count(&self) -> i32 {
        i32::from_be_bytes(self.field(at::RECORDS_COUNT))
    }

    /// Offset of the last record (wrapping, as Kafka's long arithmetic does).
    pub fn last_offset(&self) -> i64 {
        self.base_offset().wrapping_add(i64::from(self.last_offset_delta()))
    }

    /// Codec of attribute bits 0-2; ids 5-7 are [`RecordsError::UnsupportedCompression`].
    pub fn compression(&self) -> Result<Compression, RecordsError> {
        Compression::from_id(self.attributes() & ATTR_COMPRESSION_MASK)
    }

    /// Attribute bit 3.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & ATTR_TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Attribute bit 4.
    pub fn is_transactional(&self) -> bool {
        self.attributes() & ATTR_TRANSACTIONAL != 0
    }

    /// Attribute bit 5.
    pub fn is_control(&self) -> bool {
        self.attributes() & ATTR_CONTROL != 0
    }

    /// Attribute bit 6.
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & ATTR_DELETE_HORIZON != 0
    }

    /// The delete horizon compaction set, in ms, if any.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        self.has_delete_horizon().then(|| self.base_timestamp())
    }

    /// The CRC-32C of attributes..end, as it should be stored.
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes[at::ATTRIBUTES..])
    }

    /// Whether the stored CRC matches the bytes.
    pub fn validate_crc(&self) -> bool {
        self.crc() == self.compute_crc()
    }

    /// [`Self::validate_crc`] as a `Result`, for the `?` path of a request handler.
    pub fn ensure_valid_crc(&self) -> Result<(), RecordsError> {
        let (stored, computed) = (self.crc(), self.compute_crc());
        if stored != computed {
            return Err(RecordsError::CrcMismatch { at: 0, stored, computed });
        }
        Ok(())
    }

    /// The checks Kafka's `LogValidator.validateBatch` makes on a v2 batch from a client
    /// (Produce), before looking at its records:
    ///
    /// - lastOffsetDelta + 1 (the count the offsets imply) is positive;
    /// - recordsCount is positive;
    /// - the two agree: a batch's offsets are its records, without gaps;
    /// - it is not a control batch (only the broker writes those);
    /// - an idempotent batch (producerId >= 0) has a base sequence >= 0.
    ///
    /// Kafka makes the same checks for every batch a client sends, compressed or not; the
    /// records themselves are checked against the header by [`Self::validate_records`].
    pub fn check_produce_invariants(&self) -> Result<(), RecordsError> {
        let last_offset_delta = self.last_offset_delta();
        let count = self.records_count();
        let count_from_offsets = i64::from(last_offset_delta) + 1;
        if count_from_offsets <= 0 {
            return Err(RecordsError::InvalidOffsetRange { last_offset_delta });
        }
        if count <= 0 {
            return Err(RecordsError::InvalidRecordCount { count });
        }
        if count_from_offsets != i64::from(count) {
            return Err(RecordsError::OffsetRangeCountMismatch { last_offset_delta, count });
        }
        if self.is_control() {
            return Err(RecordsError::ControlBatchFromClient);
        }
        let (producer_id, base_sequence) = (self.producer_id(), self.base_sequence());
        if producer_id > NO_PRODUCER_ID && base_sequence < 0 {
            return Err(RecordsError::InvalidSequence { producer_id, base_sequence });
        }
        Ok(())
    }

    /// The records, decompressed first if the batch is compressed, with the decompressed
    /// size bounded by `max_uncompressed_bytes` (uncompressed records are already in
    /// memory and are not held to it). Records are parsed lazily by the iterator.
    pub fn records(&self, max_uncompressed_bytes: usize) -> Result<Records, RecordsError> {
        let payload = self.bytes.slice(BATCH_HEADER_BYTES..);
        let data = match self.compression()? {
            Compression::None => payload,
            codec => super::decompress(codec, &payload, max_uncompressed_bytes)?,
        };
        let log_append_time = (self.timestamp_type() == TimestampType::LogAppendTime).then(|| self.max_timestamp());
        Ok(Records::new(data, self.records_count(), self.base_offset(), self.base_timestamp(), log_append_time))
    }

    fn field<const N: usize>(&self, offset: usize) -> [u8; N] {
        read_field(&self.bytes, offset)
    }
}

/// Splits a buffer of concatenated batches (a Produce partition's `records`, a Fetch
/// response's, a log segment) into [`RecordBatch`]es without copying.
///
/// Yields `Err` once and then stops: a batch cut short by the end of the buffer is
/// [`RecordsError::PartialBatch`] (Fetch responses may end with one; skip it with
/// [`RecordsError::is_partial_batch`]), anything else is malformed framing.
#[derive(Debug, Clone)]
pub struct Batches {
    buf: Bytes,
    pos: usize,
    stopped: bool,
}

impl Batches {
    /// Iterates the batches of `buf`.
    pub fn new(buf: Bytes) -> Batches {
        Batches { buf, pos: 0, stopped: false }
    }

    /// Bytes taken by the complete batches yielded so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes not yet yielded as batches (after an error: from the faulty batch on).
    pub fn remainder(&self) -> Bytes {
        self.buf.slice(self.pos..)
    }
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped || self.pos >= self.buf.len() {
            return None;
        }
        match frame_length(&self.buf[self.pos..], self.pos) {
            Ok(len) => {
                let batch = RecordBatch { bytes: self.buf.slice(self.pos..self.pos + len) };
                self.pos += len;
                Some(Ok(batch))
            }
            Err(e) => {
                self.stopped = true;
                Some(Err(e))
            }
        }
    }
}

impl FusedIterator for Batches {}

/// In-place rewrites of a batch's header, as the broker makes when it appends a batch.
///
/// Works on any mutable byte slice holding exactly one batch, such as a `BytesMut` from
/// [`RecordBatch::into_bytes_mut`] or a region of a segment buffer.
#[derive(Debug)]
pub struct RecordBatchMut<'a> {
    /// Exactly one batch, framing checked as for [`RecordBatch::new`].
    bytes: &'a mut [u8],
}

impl<'a> RecordBatchMut<'a> {
    /// Takes `bytes` as exactly one batch, checked as [`RecordBatch::new`] checks it.
    pub fn new(bytes: &'a mut [u8]) -> Result<RecordBatchMut<'a>, RecordsError> {
        let len = frame_length(bytes, 0)?;
        if len != bytes.len() {
            return Err(RecordsError::TrailingBytes { at: 0, trailing: bytes.len() - len });
        }
        Ok(RecordBatchMut { bytes })
    }

    /// Sets baseOffset. It lies outside the CRC, so the CRC stays valid.
    pub fn set_base_offset(&mut self, base_offset: i64) {
        self.put(at::BASE_OFFSET, &base_offset.to_be_bytes());
    }

    /// Sets partitionLeaderEpoch. It lies outside the CRC, so the CRC stays valid.
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) {
        self.put(at::PARTITION_LEADER_EPOCH, &epoch.to_be_bytes());
    }

    /// Marks the batch LogAppendTime with `timestamp` as its maxTimestamp (and so as every
    /// record's timestamp), then recomputes the CRC, which covers both fields.
    pub fn set_log_append_time(&mut self, timestamp: i64) {
        self.set_max_timestamp(TimestampType::LogAppendTime, timestamp);
    }

    /// Sets the timestamp type and maxTimestamp, recomputing the CRC if either changes (as
    /// Kafka's `setMaxTimestamp` does, to spare the hash when nothing changed). Other
    /// attribute bits are kept as they are.
    pub fn set_max_timestamp(&mut self, timestamp_type: TimestampType, max_timestamp: i64) {
        let attributes = i16::from_be_bytes(read_field(self.bytes, at::ATTRIBUTES));
        let new_attributes = match timestamp_type {
            TimestampType::CreateTime => attributes & !ATTR_TIMESTAMP_TYPE,
            TimestampType::LogAppendTime => attributes | ATTR_TIMESTAMP_TYPE,
        };
        let current = i64::from_be_bytes(read_field(self.bytes, at::MAX_TIMESTAMP));
        if new_attributes == attributes && current == max_timestamp {
            return;
        }
        self.put(at::ATTRIBUTES, &new_attributes.to_be_bytes());
        self.put(at::MAX_TIMESTAMP, &max_timestamp.to_be_bytes());
        let crc = crc32c::crc32c(&self.bytes[at::ATTRIBUTES..]);
        self.put(at::CRC, &crc.to_be_bytes());
    }

    fn put(&mut self, offset: usize, value: &[u8]) {
        self.bytes[offset..offset + value.len()].copy_from_slice(value);
    }
}

/// Reads a fixed-size header field. Callers hold at least a full header, checked by
/// [`frame_length`], so the range is always in bounds.
fn read_field<const N: usize>(bytes: &[u8], offset: usize) -> [u8; N] {
    let mut field = [0; N];
    field.copy_from_slice(&bytes[offset..offset + N]);
    field
}

/// Checks the framing of the batch starting `buf` (found at byte `at` of the caller's
/// buffer) and returns its total length. Magic is checked as soon as it is present, as
/// Kafka's `ByteBufferLogInputStream` does, so an old-format message is reported as such
/// rather than as a short v2 batch.
fn frame_length(buf: &[u8], at: usize) -> Result<usize, RecordsError> {
    let partial = |needed: usize| RecordsError::PartialBatch { at, needed, available: buf.len() };
    if buf.len() < LOG_OVERHEAD_BYTES {
        return Err(partial(LOG_OVERHEAD_BYTES));
    }
    let batch_length = i32::from_be_bytes(read_field(buf, at::BATCH_LENGTH));
    if let Some(&magic) = buf.get(at::MAGIC) {
        let magic = magic as i8;
        if magic != MAGIC_V2 {
            return Err(RecordsError::UnsupportedMagic { at, magic });
        }
    }
    if batch_length < MIN_BATCH_LENGTH {
        return Err(RecordsError::BatchLengthTooSmall { at, batch_length });
    }
    // batch_length is at least 49 here, so the conversion is exact.
    let total = LOG_OVERHEAD_BYTES + batch_length.unsigned_abs() as usize;
    if buf.len() < total {
        return Err(partial(total));
    }
    let count = i32::from_be_bytes(read_field(buf, at::RECORDS_COUNT));
    if count < 0 {
        return Err(RecordsError::NegativeRecordCount { at, count });
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::BatchBuilder;

    fn batch(n: usize) -> RecordBatch {
        let mut builder = BatchBuilder::new(Compression::None);
        for i in 0..n {
            builder.append(1_000 + i as i64, Some(b"k"), Some(b"value"), &[]).expect("append");
        }
        builder.build().expect("build")
    }

    #[test]
    fn header_offsets_add_up_to_61_bytes() {
        assert_eq!(at::RECORDS_COUNT + 4, BATCH_HEADER_BYTES);
        assert_eq!(at::CRC + 4, at::ATTRIBUTES);
    }

    #[test]
    fn trailing_bytes_after_a_single_batch_are_refused() {
        let mut bytes = batch(1).into_bytes().to_vec();
        bytes.push(0);
        assert!(matches!(RecordBatch::new(Bytes::from(bytes)), Err(RecordsError::TrailingBytes { trailing: 1, .. })));
    }

    #[test]
    fn every_cut_of_a_batch_is_partial_not_a_panic() {
        let bytes = batch(3).into_bytes();
        for cut in 0..bytes.len() {
            let err = RecordBatch::new(bytes.slice(..cut)).expect_err("cut batch");
            assert!(err.is_partial_batch(), "cut at {cut}: {err}");
        }
    }

    #[test]
    fn set_max_timestamp_back_to_create_time_clears_the_bit_and_keeps_the_crc_valid() {
        let mut bytes = batch(2).into_bytes_mut();
        let mut view = RecordBatchMut::new(&mut bytes).expect("view");
        view.set_log_append_time(5);
        view.set_max_timestamp(TimestampType::CreateTime, 1_001);
        let batch = RecordBatch::new(bytes.freeze()).expect("batch");
        assert_eq!(batch.timestamp_type(), TimestampType::CreateTime);
        assert_eq!(batch.max_timestamp(), 1_001);
        assert!(batch.validate_crc());
    }
}
