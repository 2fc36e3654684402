//! Zigzag varints and varlongs, as records encode their lengths, deltas and counts.
//!
//! Decoding reads at most 5 bytes for a varint and 10 for a varlong, and, like Kafka's
//! `ByteUtils.readVarint`, drops bits beyond the width instead of failing on them, so the
//! broker accepts exactly the records Kafka accepts.

/// Most bytes a 32-bit varint may take.
pub(crate) const MAX_VARINT_BYTES: usize = 5;
/// Most bytes a 64-bit varlong may take.
pub(crate) const MAX_VARLONG_BYTES: usize = 10;

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The buffer ended before the last byte.
    Truncated,
    /// The continuation bit is still set on the last allowed byte.
    TooLong,
}

/// Reads a zigzag varint; returns it and the number of bytes it took.
pub(crate) fn read_varint(buf: &[u8]) -> Result<(i32, usize), VarintError> {
    let (raw, len) = read_unsigned(buf, MAX_VARINT_BYTES)?;
    // Truncation to 32 bits is the point: it is what Kafka's int arithmetic does.
    let raw = raw as u32;
    Ok(((raw >> 1) as i32 ^ -((raw & 1) as i32), len))
}

/// Reads a zigzag varlong; returns it and the number of bytes it took.
pub(crate) fn read_varlong(buf: &[u8]) -> Result<(i64, usize), VarintError> {
    let (raw, len) = read_unsigned(buf, MAX_VARLONG_BYTES)?;
    Ok(((raw >> 1) as i64 ^ -((raw & 1) as i64), len))
}

fn read_unsigned(buf: &[u8], max_bytes: usize) -> Result<(u64, usize), VarintError> {
    let mut raw: u64 = 0;
    for (i, &b) in buf.iter().take(max_bytes).enumerate() {
        // A shift below 64 never panics; bits pushed past the top are dropped on purpose.
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((raw, i + 1));
        }
    }
    if buf.len() < max_bytes {
        Err(VarintError::Truncated)
    } else {
        Err(VarintError::TooLong)
    }
}

/// Appends `v` as a zigzag varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_unsigned(out, u64::from(zigzag32(v)));
}

/// Appends `v` as a zigzag varlong.
pub(crate) fn put_varlong(out: &mut Vec<u8>, v: i64) {
    put_unsigned(out, zigzag64(v));
}

/// Bytes `v` takes as a zigzag varint.
pub(crate) fn varint_len(v: i32) -> usize {
    unsigned_len(u64::from(zigzag32(v)))
}

/// Bytes `v` takes as a zigzag varlong.
pub(crate) fn varlong_len(v: i64) -> usize {
    unsigned_len(zigzag64(v))
}

fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn put_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn unsigned_len(v: u64) -> usize {
    // One byte per started group of 7 bits, and at least one byte for zero.
    let bits = 64 - v.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [0, 1, -1, 63, -64, 64, -65, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(read_varint(&out), Ok((v, out.len())));
        }
        for v in [0, 1, -1, i64::from(i32::MAX) + 1, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v));
            assert_eq!(read_varlong(&out), Ok((v, out.len())));
        }
    }

    #[test]
    fn zigzag_matches_kafka_encoding() {
        // Kafka's ByteUtils: 0 -> 00, -1 -> 01, 1 -> 02, 300 -> d8 04.
        let enc = |v| {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(-1), [0x01]);
        assert_eq!(enc(1), [0x02]);
        assert_eq!(enc(300), [0xd8, 0x04]);
    }

    #[test]
    fn varint_with_continuation_on_fifth_byte_is_too_long() {
        assert_eq!(read_varint(&[0xff; 5]), Err(VarintError::TooLong));
        assert_eq!(read_varint(&[0xff; 4]), Err(VarintError::Truncated));
        assert_eq!(read_varlong(&[0xff; 10]), Err(VarintError::TooLong));
        assert_eq!(read_varlong(&[]), Err(VarintError::Truncated));
    }

    #[test]
    fn overlong_bits_in_last_byte_are_dropped_as_kafka_does() {
        // 0x7f in the fifth byte carries bits 28..34; Java's int keeps only 28..31, so the
        // zigzag value is 0xf000_0000 and decodes to 0x7800_0000.
        assert_eq!(read_varint(&[0x80, 0x80, 0x80, 0x80, 0x7f]), Ok((0x7800_0000, 5)));
    }
}
