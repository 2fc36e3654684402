//! The records inside a batch, parsed lazily and without copying.
//!
//! Each record is: length varint | attributes i8 | timestampDelta varlong | offsetDelta
//! varint | key (varint length, -1 for null) | value (same) | header count varint |
//! headers (key: varint length + bytes, never null; value: varint length, -1 for null).

use super::varint::{self, VarintError, MAX_VARINT_BYTES, MAX_VARLONG_BYTES};
use super::RecordsError;
use bytes::Bytes;
use std::iter::FusedIterator;

/// One record, its key, value and header bytes sharing the batch's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset: the batch's baseOffset + offsetDelta.
    pub offset: i64,
    /// Absolute timestamp: baseTimestamp + timestampDelta, or the batch's maxTimestamp in
    /// a LogAppendTime batch (Kafka ignores the deltas there).
    pub timestamp: i64,
    /// Offset relative to the batch's baseOffset, as stored.
    pub offset_delta: i32,
    /// Timestamp relative to the batch's baseTimestamp, as stored.
    pub timestamp_delta: i64,
    /// Record attributes; unused by Kafka so far and kept as read.
    pub attributes: i8,
    /// The key, `None` when null.
    pub key: Option<Bytes>,
    /// The value, `None` when null (a tombstone in a compacted topic).
    pub value: Option<Bytes>,
    /// Headers in their order on the wire.
    pub headers: Vec<Header>,
}

/// A record header: a key (a string on the wire, kept as bytes, as the broker never
/// interprets it) and a nullable value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Header {
    /// The header key; producers write UTF-8.
    pub key: Bytes,
    /// The header value, `None` when null.
    pub value: Option<Bytes>,
}

impl Header {
    /// A header from borrowed parts, copied.
    pub fn new(key: &str, value: Option<&[u8]>) -> Header {
        Header { key: Bytes::copy_from_slice(key.as_bytes()), value: value.map(Bytes::copy_from_slice) }
    }
}

/// Iterator over the records of one batch, from [`super::RecordBatch::records`].
///
/// Yields exactly recordsCount records; bytes left after them, or too few bytes for
/// them, are an error. Yields at most one `Err` and then stops.
#[derive(Debug, Clone)]
pub struct Records {
    /// The (decompressed) records section.
    data: Bytes,
    pos: usize,
    declared: i32,
    read: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    stopped: bool,
}

impl Records {
    pub(crate) fn new(
        data: Bytes,
        declared: i32,
        base_offset: i64,
        base_timestamp: i64,
        log_append_time: Option<i64>,
    ) -> Records {
        Records { data, pos: 0, declared, read: 0, base_offset, base_timestamp, log_append_time, stopped: false }
    }

    /// The records section this iterates, decompressed.
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    fn read_record(&mut self) -> Result<Record, RecordsError> {
        let index = self.read;
        let record_at = self.pos;
        let mut outer = Reader { data: &self.data, pos: self.pos, end: self.data.len(), index };
        let length = outer.varint("record length")?;
        let body_len = outer.length(length, "record length")?;
        // Bound every field read by the record's own length, not by the batch's.
        let body_start = outer.pos;
        outer.need(body_len, "record body")?;
        let mut body = Reader { data: &self.data, pos: body_start, end: body_start + body_len, index };

        let attributes = body.i8("attributes")?;
        let timestamp_delta = body.varlong("timestampDelta")?;
        let offset_delta = body.varint("offsetDelta")?;
        let key = body.nullable_bytes("key")?;
        let value = body.nullable_bytes("value")?;
        let headers = body.headers()?;
        if body.pos != body.end {
            return Err(RecordsError::RecordLengthMismatch {
                index,
                at: record_at,
                declared: length,
                consumed: body.pos - body_start,
            });
        }
        self.pos = body.end;

        let timestamp = self.log_append_time.unwrap_or_else(|| self.base_timestamp.wrapping_add(timestamp_delta));
        Ok(Record {
            offset: self.base_offset.wrapping_add(i64::from(offset_delta)),
            timestamp,
            offset_delta,
            timestamp_delta,
            attributes,
            key,
            value,
            headers,
        })
    }
}

impl Iterator for Records {
    type Item = Result<Record, RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped {
            return None;
        }
        if self.read >= self.declared {
            self.stopped = true;
            let trailing = self.data.len() - self.pos;
            return (trailing > 0)
                .then_some(Err(RecordsError::TrailingRecordBytes { declared: self.declared, trailing }));
        }
        let record = self.read_record();
        match record {
            Ok(_) => self.read += 1,
            Err(_) => self.stopped = true,
        }
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.stopped {
            return (0, Some(0));
        }
        // A record takes at least 7 bytes, so the bytes left bound the count as much as
        // the declared count does; one more item may be a trailing-bytes error.
        let declared_left = usize::try_from(self.declared - self.read).unwrap_or(0);
        let fit = (self.data.len() - self.pos) / MIN_RECORD_BYTES;
        (0, Some(declared_left.min(fit) + 1))
    }
}

impl FusedIterator for Records {}

/// The smallest record: length, attributes, timestampDelta, offsetDelta, key, value and
/// header count, one byte each.
const MIN_RECORD_BYTES: usize = 7;

/// A cursor over `data[pos..end]` that reports errors with the record index and position.
struct Reader<'a> {
    data: &'a Bytes,
    pos: usize,
    end: usize,
    index: i32,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn need(&self, needed: usize, field: &'static str) -> Result<(), RecordsError> {
        let remaining = self.remaining();
        if needed > remaining {
            return Err(RecordsError::RecordTruncated { index: self.index, at: self.pos, field, needed, remaining });
        }
        Ok(())
    }

    fn i8(&mut self, field: &'static str) -> Result<i8, RecordsError> {
        self.need(1, field)?;
        let b = self.data[self.pos] as i8;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self, field: &'static str) -> Result<i32, RecordsError> {
        let (v, len) = varint::read_varint(&self.data[self.pos..self.end])
            .map_err(|e| self.varint_error(e, field, MAX_VARINT_BYTES))?;
        self.pos += len;
        Ok(v)
    }

    fn varlong(&mut self, field: &'static str) -> Result<i64, RecordsError> {
        let (v, len) = varint::read_varlong(&self.data[self.pos..self.end])
            .map_err(|e| self.varint_error(e, field, MAX_VARLONG_BYTES))?;
        self.pos += len;
        Ok(v)
    }

    fn varint_error(&self, e: VarintError, field: &'static str, max_bytes: usize) -> RecordsError {
        let (index, at) = (self.index, self.pos);
        match e {
            VarintError::Truncated => {
                RecordsError::RecordTruncated { index, at, field, needed: max_bytes, remaining: self.remaining() }
            }
            VarintError::TooLong => RecordsError::VarintTooLong { index, at, field, max_bytes },
        }
    }

    /// A declared length that must not be negative.
    fn length(&self, length: i32, field: &'static str) -> Result<usize, RecordsError> {
        usize::try_from(length).map_err(|_| RecordsError::InvalidLength {
            index: self.index,
            at: self.pos,
            field,
            length: i64::from(length),
        })
    }

    fn bytes(&mut self, len: usize, field: &'static str) -> Result<Bytes, RecordsError> {
        self.need(len, field)?;
        let slice = self.data.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(slice)
    }

    /// Length-prefixed bytes where -1 means null. Kafka reads lengths below -1 as null
    /// too; they are refused here, as no client writes them.
    fn nullable_bytes(&mut self, field: &'static str) -> Result<Option<Bytes>, RecordsError> {
        let length = self.varint(field)?;
        if length == -1 {
            return Ok(None);
        }
        let len = self.length(length, field)?;
        self.bytes(len, field).map(Some)
    }

    fn headers(&mut self) -> Result<Vec<Header>, RecordsError> {
        let count = self.varint("header count")?;
        let count = self.length(count, "header count")?;
        // A header takes at least two bytes: never reserve for more than could fit.
        let mut headers = Vec::with_capacity(count.min(self.remaining() / 2));
        for _ in 0..count {
            let key_len = self.varint("header key")?;
            let key_len = self.length(key_len, "header key")?;
            let key = self.bytes(key_len, "header key")?;
            let value = self.nullable_bytes("header value")?;
            headers.push(Header { key, value });
        }
        Ok(headers)
    }
}
