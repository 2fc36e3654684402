//! The few record batch v2 header fields the log needs, parsed without allocation.
//!
//! The storage engine never decodes records; it checks framing (lengths, magic) and the
//! CRC-32C, and rewrites the two fields outside the CRC (baseOffset, partitionLeaderEpoch).
//! The protocol crate owns full record decoding; this is deliberately independent of it.

/// Bytes before `batchLength` counts: baseOffset (8) + batchLength (4).
pub const LOG_OVERHEAD: usize = 12;
/// Size of the v2 batch header, up to and including recordsCount.
pub const HEADER_LEN: usize = 61;
/// Smallest legal `batchLength`: the header after the log overhead, with no records.
pub const MIN_BATCH_LENGTH: i32 = (HEADER_LEN - LOG_OVERHEAD) as i32;
/// The CRC covers everything from the attributes field to the end of the batch.
pub const CRC_START: usize = 21;
/// Attribute bit for LogAppendTime.
pub const ATTR_LOG_APPEND_TIME: i16 = 1 << 3;
/// Attributes bit: the batch belongs to a transaction.
pub const ATTR_TRANSACTIONAL: i16 = 1 << 4;
/// Attributes bit: the batch holds control records (transaction markers).
pub const ATTR_CONTROL: i16 = 1 << 5;
/// Attributes bit: compaction set the batch's delete horizon, stored as its baseTimestamp
/// (KIP-534).
pub const ATTR_DELETE_HORIZON: i16 = 1 << 6;

const OFF_PARTITION_LEADER_EPOCH: usize = 12;
const OFF_MAGIC: usize = 16;
const OFF_CRC: usize = 17;
const OFF_MAX_TIMESTAMP: usize = 35;

/// What is wrong with bytes that should hold a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes left than the header or the declared length needs.
    #[error("truncated batch: need {needed} bytes, {available} available")]
    Truncated {
        /// Bytes the batch needs.
        needed: u64,
        /// Bytes there are.
        available: u64,
    },
    /// `batchLength` below the header size or above the caller's limit.
    #[error("batchLength {0} out of range")]
    BadLength(i32),
    /// Only magic 2 is stored.
    #[error("magic {0} is not 2")]
    BadMagic(i8),
    /// The stored CRC does not match the bytes.
    #[error("crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// `lastOffsetDelta` negative or not `recordsCount - 1`.
    #[error("lastOffsetDelta {last_offset_delta} inconsistent with recordsCount {records_count}")]
    BadRecordCount {
        /// Header value.
        last_offset_delta: i32,
        /// Header value.
        records_count: i32,
    },
}

/// The fixed 61-byte header of a v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the batchLength field.
    pub batch_length: i32,
    /// Leader epoch of the leader that appended it.
    pub partition_leader_epoch: i32,
    /// Format version; 2.
    pub magic: i8,
    /// CRC-32C of bytes `CRC_START..`.
    pub crc: u32,
    /// Codec, timestamp type, transactional, control bits.
    pub attributes: i16,
    /// Last record's offset minus `base_offset`.
    pub last_offset_delta: i32,
    /// First record's timestamp.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch (or the log append time).
    pub max_timestamp: i64,
    /// Idempotent/transactional producer id, -1 if none.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// First record's sequence number.
    pub base_sequence: i32,
    /// Number of records.
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the framing fields at the start of `buf` (which must hold at least
    /// `HEADER_LEN` bytes). Checks the length is at least a header and the magic is 2;
    /// does not check that the body is present or the CRC.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < HEADER_LEN {
            return Err(BatchError::Truncated { needed: HEADER_LEN as u64, available: buf.len() as u64 });
        }
        let header = BatchHeader {
            base_offset: i64_at(buf, 0),
            batch_length: i32_at(buf, 8),
            partition_leader_epoch: i32_at(buf, OFF_PARTITION_LEADER_EPOCH),
            magic: buf[OFF_MAGIC] as i8,
            crc: u32_at(buf, OFF_CRC),
            attributes: i16_at(buf, 21),
            last_offset_delta: i32_at(buf, 23),
            base_timestamp: i64_at(buf, 27),
            max_timestamp: i64_at(buf, OFF_MAX_TIMESTAMP),
            producer_id: i64_at(buf, 43),
            producer_epoch: i16_at(buf, 51),
            base_sequence: i32_at(buf, 53),
            records_count: i32_at(buf, 57),
        };
        if header.batch_length < MIN_BATCH_LENGTH {
            return Err(BatchError::BadLength(header.batch_length));
        }
        if header.magic != 2 {
            return Err(BatchError::BadMagic(header.magic));
        }
        Ok(header)
    }

    /// Bytes the whole batch occupies in the log.
    pub fn total_size(&self) -> u64 {
        LOG_OVERHEAD as u64 + self.batch_length as u64
    }

    /// Offset of the batch's last record.
    pub fn last_offset(&self) -> i64 {
        self.base_offset.saturating_add(i64::from(self.last_offset_delta))
    }

    /// Whether the batch belongs to a transaction (attributes bit 4).
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether the batch holds control records (attributes bit 5).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// The delete horizon compaction stamped into the batch (attributes bit 6, the value
    /// in baseTimestamp, KIP-534), if any.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }
}

/// Validates the batch at the start of `buf`: framing, a length no larger than
/// `max_total_size` and the bytes available, and the CRC. Returns the header; the batch is
/// `buf[..header.total_size()]`.
pub fn validate(buf: &[u8], max_total_size: u64) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(buf)?;
    let total = header.total_size();
    if total > max_total_size {
        return Err(BatchError::BadLength(header.batch_length));
    }
    if total > buf.len() as u64 {
        return Err(BatchError::Truncated { needed: total, available: buf.len() as u64 });
    }
    let computed = crc32c::crc32c(&buf[CRC_START..total as usize]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch { stored: header.crc, computed });
    }
    if header.last_offset_delta < 0 {
        return Err(BatchError::BadRecordCount {
            last_offset_delta: header.last_offset_delta,
            records_count: header.records_count,
        });
    }
    Ok(header)
}

/// Bytes of a batch before its magic byte: base offset, batch length and partition
/// leader epoch, the fields the CRC does not cover.
pub const STAMPED_PREFIX_LEN: usize = OFF_MAGIC;

/// The first [`STAMPED_PREFIX_LEN`] bytes of the batch `header` describes, with its
/// (assigned) base offset and leader epoch: what [`stamp`] would write over them, for a
/// writer that sends this prefix and the rest of the batch from where it is.
pub fn stamped_prefix(header: &BatchHeader) -> [u8; STAMPED_PREFIX_LEN] {
    let mut prefix = [0; STAMPED_PREFIX_LEN];
    prefix[0..8].copy_from_slice(&header.base_offset.to_be_bytes());
    prefix[8..OFF_PARTITION_LEADER_EPOCH].copy_from_slice(&header.batch_length.to_be_bytes());
    prefix[OFF_PARTITION_LEADER_EPOCH..].copy_from_slice(&header.partition_leader_epoch.to_be_bytes());
    prefix
}

/// Rewrites the fields the CRC does not cover.
pub fn stamp(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[OFF_PARTITION_LEADER_EPOCH..OFF_PARTITION_LEADER_EPOCH + 4].copy_from_slice(&leader_epoch.to_be_bytes());
}

/// Marks the batch LogAppendTime with `now_ms` as its max timestamp and recomputes the
/// CRC, since both fields are inside the CRC's range.
pub fn stamp_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attributes = i16_at(batch, 21) | ATTR_LOG_APPEND_TIME;
    batch[21..23].copy_from_slice(&attributes.to_be_bytes());
    batch[OFF_MAX_TIMESTAMP..OFF_MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Builds valid v2 batches with opaque record bytes, for tests and the crash appender.
/// The records are not a valid record encoding; the storage engine never decodes them.
pub mod testing {
    use super::*;

    /// Parameters of a synthetic batch.
    #[derive(Debug, Clone, Copy)]
    pub struct BatchSpec {
        /// recordsCount (lastOffsetDelta = count - 1).
        pub records: i32,
        /// Bytes of body after the header.
        pub body_len: usize,
        /// baseTimestamp.
        pub base_timestamp: i64,
        /// maxTimestamp.
        pub max_timestamp: i64,
        /// Seeds the body bytes, so a batch can be regenerated to compare byte for byte.
        pub seed: u64,
        /// producerId (-1 for none).
        pub producer_id: i64,
        /// producerEpoch.
        pub producer_epoch: i16,
        /// baseSequence (-1 for none).
        pub base_sequence: i32,
    }

    impl Default for BatchSpec {
        fn default() -> Self {
            BatchSpec {
                records: 1,
                body_len: 16,
                base_timestamp: 0,
                max_timestamp: 0,
                seed: 0,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            }
        }
    }

    /// A batch with baseOffset 0, epoch -1 and a valid CRC.
    pub fn build(spec: BatchSpec) -> Vec<u8> {
        let total = HEADER_LEN + spec.body_len;
        let mut b = vec![0u8; total];
        b[8..12].copy_from_slice(&((total - LOG_OVERHEAD) as i32).to_be_bytes());
        b[12..16].copy_from_slice(&(-1i32).to_be_bytes());
        b[16] = 2;
        b[23..27].copy_from_slice(&(spec.records - 1).to_be_bytes());
        b[27..35].copy_from_slice(&spec.base_timestamp.to_be_bytes());
        b[35..43].copy_from_slice(&spec.max_timestamp.to_be_bytes());
        b[43..51].copy_from_slice(&spec.producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&spec.producer_epoch.to_be_bytes());
        b[53..57].copy_from_slice(&spec.base_sequence.to_be_bytes());
        b[57..61].copy_from_slice(&spec.records.to_be_bytes());
        let mut x = spec.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for byte in &mut b[HEADER_LEN..] {
            // xorshift: cheap, deterministic filler so regenerated batches compare equal.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{build, BatchSpec};
    use super::*;

    #[test]
    fn built_batch_validates_and_stamping_keeps_crc_valid() {
        let mut b = build(BatchSpec { records: 3, body_len: 100, ..Default::default() });
        let h = validate(&b, u64::MAX).unwrap();
        assert_eq!(h.records_count, 3);
        assert_eq!(h.total_size(), b.len() as u64);
        stamp(&mut b, 1234, 7);
        let h = validate(&b, u64::MAX).unwrap();
        assert_eq!((h.base_offset, h.partition_leader_epoch, h.last_offset()), (1234, 7, 1236));
    }

    #[test]
    fn log_append_time_stamp_recomputes_crc() {
        let mut b = build(BatchSpec::default());
        stamp_log_append_time(&mut b, 99);
        let h = validate(&b, u64::MAX).unwrap();
        assert_eq!(h.max_timestamp, 99);
        assert_ne!(h.attributes & ATTR_LOG_APPEND_TIME, 0);
    }

    #[test]
    fn flipped_body_byte_fails_crc() {
        let mut b = build(BatchSpec::default());
        let last = b.len() - 1;
        b[last] ^= 1;
        assert!(matches!(validate(&b, u64::MAX), Err(BatchError::CrcMismatch { .. })));
    }

    #[test]
    fn declared_length_beyond_buffer_is_truncated_not_a_panic() {
        let b = build(BatchSpec { body_len: 50, ..Default::default() });
        assert!(matches!(validate(&b[..80], u64::MAX), Err(BatchError::Truncated { .. })));
        assert!(matches!(validate(&b[..10], u64::MAX), Err(BatchError::Truncated { .. })));
        let mut bad = b.clone();
        bad[8..12].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(validate(&bad, u64::MAX), Err(BatchError::BadLength(-1))));
        assert!(matches!(validate(&b, 20), Err(BatchError::BadLength(_))));
    }
}
