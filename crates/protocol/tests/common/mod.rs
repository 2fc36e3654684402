//! Helpers shared by the record tests.

use bytes::Bytes;
use osprey_protocol::records::{Compression, RecordBatch, BATCH_HEADER_BYTES};

/// Wraps a compressed payload in a batch header claiming one record, with a valid CRC.
pub fn batch_around(codec: Compression, payload: &[u8]) -> RecordBatch {
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + payload.len());
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((BATCH_HEADER_BYTES - 12 + payload.len()) as i32).to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&codec.id().to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes()); // lastOffsetDelta
    out.extend_from_slice(&[0; 16]); // timestamps
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    RecordBatch::new(Bytes::from(out)).expect("framed")
}
