//! Writing record batches: lengths, deltas, compression and the CRC computed here.

use super::varint::{put_varint, put_varlong, varint_len, varlong_len};
use super::{
    compress, Compression, Header, RecordBatch, RecordsError, ATTR_CONTROL, ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL,
    BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC_V2, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
};
use bytes::Bytes;

/// Builds one v2 batch. Records get consecutive offsets from baseOffset; baseTimestamp is
/// the first record's timestamp and maxTimestamp the largest, starting from -1 ("none"),
/// as Kafka's `MemoryRecordsBuilder` writes them.
///
/// ```
/// use osprey_protocol::records::{BatchBuilder, Compression, Header};
/// let mut builder = BatchBuilder::new(Compression::Lz4).producer(7, 0, 0);
/// builder.append(1_700_000_000_000, Some(b"key"), Some(b"value"), &[Header::new("h", None)])?;
/// let batch = builder.build()?;
/// assert!(batch.validate_crc());
/// # Ok::<(), osprey_protocol::records::RecordsError>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    compression: Compression,
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    log_append_time: Option<i64>,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    count: i32,
    /// The records, encoded and not yet compressed.
    records: Vec<u8>,
}

impl BatchBuilder {
    /// An empty, non-idempotent CreateTime batch at offset 0, epoch -1.
    pub fn new(compression: Compression) -> BatchBuilder {
        BatchBuilder {
            compression,
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            log_append_time: None,
            base_timestamp: None,
            max_timestamp: NO_TIMESTAMP,
            count: 0,
            records: Vec::new(),
        }
    }

    /// A control batch holding one transaction marker, as the broker writes it when a
    /// transaction ends: transactional, control, uncompressed, no base sequence.
    pub fn end_txn_marker(
        marker: super::EndTxnMarker,
        producer_id: i64,
        producer_epoch: i16,
        timestamp: i64,
    ) -> Result<BatchBuilder, RecordsError> {
        let mut builder = BatchBuilder::new(Compression::None)
            .producer(producer_id, producer_epoch, NO_SEQUENCE)
            .transactional(true)
            .control(true);
        builder.append(timestamp, Some(&marker.key()), Some(&marker.value()), &[])?;
        Ok(builder)
    }

    /// Sets baseOffset (the broker overwrites it on append).
    pub fn base_offset(mut self, base_offset: i64) -> BatchBuilder {
        self.base_offset = base_offset;
        self
    }

    /// Sets partitionLeaderEpoch (the broker overwrites it on append).
    pub fn partition_leader_epoch(mut self, epoch: i32) -> BatchBuilder {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Sets the idempotent producer's id, epoch and the first record's sequence.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> BatchBuilder {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Sets attribute bit 4.
    pub fn transactional(mut self, transactional: bool) -> BatchBuilder {
        self.transactional = transactional;
        self
    }

    /// Sets attribute bit 5.
    pub fn control(mut self, control: bool) -> BatchBuilder {
        self.control = control;
        self
    }

    /// Makes the batch LogAppendTime with this maxTimestamp (attribute bit 3).
    pub fn log_append_time(mut self, timestamp: i64) -> BatchBuilder {
        self.log_append_time = Some(timestamp);
        self
    }

    /// Number of records appended so far.
    pub fn len(&self) -> usize {
        // The count starts at 0 and only grows, so it is never negative.
        usize::try_from(self.count).unwrap_or(0)
    }

    /// Whether no record has been appended.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the records appended so far, before compression.
    pub fn uncompressed_records_bytes(&self) -> usize {
        self.records.len()
    }

    /// Appends a record at the next offset.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header],
    ) -> Result<&mut BatchBuilder, RecordsError> {
        let offset_delta = self.count;
        let next_count =
            self.count.checked_add(1).ok_or(RecordsError::TooLarge { what: "record count", length: self.len() })?;
        let base_timestamp = *self.base_timestamp.get_or_insert(timestamp);
        let timestamp_delta = timestamp.wrapping_sub(base_timestamp);

        let body_len = body_len(timestamp_delta, offset_delta, key, value, headers)?;
        let body_len_i32 = to_i32(body_len, "record")?;
        self.records.reserve(varint_len(body_len_i32) + body_len);
        put_varint(&mut self.records, body_len_i32);
        self.records.push(0); // attributes: none defined for records yet
        put_varlong(&mut self.records, timestamp_delta);
        put_varint(&mut self.records, offset_delta);
        put_nullable(&mut self.records, key);
        put_nullable(&mut self.records, value);
        put_varint(&mut self.records, headers.len() as i32); // checked by body_len
        for header in headers {
            put_varint(&mut self.records, header.key.len() as i32);
            self.records.extend_from_slice(&header.key);
            put_nullable(&mut self.records, header.value.as_deref());
        }

        self.count = next_count;
        self.max_timestamp = self.max_timestamp.max(timestamp);
        Ok(self)
    }

    /// Writes the batch: header, records (compressed if asked), lengths and CRC.
    ///
    /// An empty builder gives an empty batch as Kafka's compaction keeps them:
    /// recordsCount 0, lastOffsetDelta 0, no timestamps.
    pub fn build(self) -> Result<RecordBatch, RecordsError> {
        let payload: std::borrow::Cow<'_, [u8]> = match self.compression {
            Compression::None => self.records.as_slice().into(),
            codec => compress(codec, &self.records)?.into(),
        };
        let batch_length = to_i32(BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES + payload.len(), "batch")?;

        let mut attributes = self.compression.id();
        if self.log_append_time.is_some() {
            attributes |= ATTR_TIMESTAMP_TYPE;
        }
        if self.transactional {
            attributes |= ATTR_TRANSACTIONAL;
        }
        if self.control {
            attributes |= ATTR_CONTROL;
        }
        let last_offset_delta = (self.count - 1).max(0);
        let max_timestamp = self.log_append_time.unwrap_or(self.max_timestamp);

        let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + payload.len());
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&batch_length.to_be_bytes());
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.push(MAGIC_V2 as u8);
        out.extend_from_slice(&[0; 4]); // CRC, filled in below
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&last_offset_delta.to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.unwrap_or(NO_TIMESTAMP).to_be_bytes());
        out.extend_from_slice(&max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&payload);
        let crc = crc32c::crc32c(&out[CRC_END..]);
        out[CRC_START..CRC_END].copy_from_slice(&crc.to_be_bytes());

        // Check what was written the way a reader will, so a builder bug surfaces here
        // rather than at a consumer.
        RecordBatch::new(Bytes::from(out))
    }
}

/// Where the CRC sits in the header; it covers everything after it.
const CRC_START: usize = 17;
const CRC_END: usize = 21;

fn to_i32(length: usize, what: &'static str) -> Result<i32, RecordsError> {
    i32::try_from(length).map_err(|_| RecordsError::TooLarge { what, length })
}

/// Bytes of a record after its length varint, failing if any part overflows an i32.
fn body_len(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header],
) -> Result<usize, RecordsError> {
    let mut len = 1 + varlong_len(timestamp_delta) + varint_len(offset_delta);
    len += nullable_len(key, "key")?;
    len += nullable_len(value, "value")?;
    len += varint_len(to_i32(headers.len(), "header count")?);
    for header in headers {
        len += varint_len(to_i32(header.key.len(), "header key")?) + header.key.len();
        len += nullable_len(header.value.as_deref(), "header value")?;
    }
    Ok(len)
}

fn nullable_len(bytes: Option<&[u8]>, what: &'static str) -> Result<usize, RecordsError> {
    match bytes {
        None => Ok(varint_len(-1)),
        Some(b) => Ok(varint_len(to_i32(b.len(), what)?) + b.len()),
    }
}

/// Writes a length-prefixed nullable field; its length was checked by [`body_len`].
fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}
