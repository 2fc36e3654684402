//! The five codecs of attribute bits 0-2, in both directions, with bounded decompression.
//!
//! What is written is what Kafka's Java client and broker write, so that every consumer
//! reads it: gzip at the default level, snappy in xerial framing (`SnappyOutputStream`,
//! 32 KiB blocks), the LZ4 frame format with independent 64 KiB blocks (Kafka's
//! `Lz4BlockInputStream` decodes each block on its own and rejects dependent blocks), and
//! zstd at level 3, Kafka's default.
//!
//! What is read is anything those clients or librdkafka send: gzip (also multi-member),
//! snappy raw or xerial, an LZ4 frame (only the first, as Kafka's reader), zstd frames. Every decoder stops with
//! [`RecordsError::DecompressionBudgetExceeded`] as soon as its output passes the caller's
//! budget, so a kilobyte claiming gigabytes costs at most about the budget in memory.

use super::RecordsError;
use bytes::Bytes;
use std::fmt;
use std::io::{Read, Write};

/// A compression codec, as attribute bits 0-2 name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// 0: records are stored as they are.
    None,
    /// 1: gzip (RFC 1952).
    Gzip,
    /// 2: snappy, raw or in xerial framing.
    Snappy,
    /// 3: the LZ4 frame format.
    Lz4,
    /// 4: zstd. Kafka allows it from Produce v7 and Fetch v10 on; the broker checks that.
    Zstd,
}

impl Compression {
    /// Every codec, in id order.
    pub const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    /// The codec with this id (attribute bits 0-2).
    pub fn from_id(id: i16) -> Result<Compression, RecordsError> {
        match id {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            codec => Err(RecordsError::UnsupportedCompression { codec }),
        }
    }

    /// The id written in attribute bits 0-2.
    pub fn id(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// Kafka's name for the codec, as in `compression.type`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Compresses `input` as Kafka's Java client would (snappy in xerial framing).
pub fn compress(codec: Compression, input: &[u8]) -> Result<Vec<u8>, RecordsError> {
    let failed = |e: std::io::Error| RecordsError::Compress { codec, reason: e.to_string() };
    match codec {
        Compression::None => Ok(input.to_vec()),
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(input).map_err(failed)?;
            encoder.finish().map_err(failed)
        }
        Compression::Snappy => compress_snappy_xerial(input),
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            encoder.write_all(input).map_err(failed)?;
            encoder.finish().map_err(|e| RecordsError::Compress { codec, reason: e.to_string() })
        }
        Compression::Zstd => zstd::bulk::compress(input, ZSTD_LEVEL).map_err(failed),
    }
}

/// Compresses `input` as one raw snappy block, as librdkafka does; for tests and peers
/// that want it. [`compress`] writes xerial framing instead.
pub fn compress_snappy_raw(input: &[u8]) -> Result<Vec<u8>, RecordsError> {
    snap::raw::Encoder::new()
        .compress_vec(input)
        .map_err(|e| RecordsError::Compress { codec: Compression::Snappy, reason: e.to_string() })
}

/// Decompresses `input`, failing as soon as the output would pass `max_output_bytes`.
///
/// Memory use is bounded by about twice the budget (a growing buffer), whatever the input
/// claims: streams are read through a limit, and snappy's declared lengths are checked
/// before anything is allocated for them.
pub fn decompress(codec: Compression, input: &[u8], max_output_bytes: usize) -> Result<Bytes, RecordsError> {
    let out = match codec {
        Compression::None => {
            if input.len() > max_output_bytes {
                return Err(RecordsError::DecompressionBudgetExceeded { codec, limit: max_output_bytes });
            }
            input.to_vec()
        }
        Compression::Snappy if input.starts_with(&XERIAL_MAGIC) => decompress_snappy_xerial(input, max_output_bytes)?,
        Compression::Snappy => decompress_snappy_raw(input, max_output_bytes)?,
        Compression::Gzip | Compression::Lz4 | Compression::Zstd => {
            read_bounded(codec, stream_decoder(codec, input)?, input.len(), max_output_bytes)?
        }
    };
    Ok(Bytes::from(out))
}

/// A reader of the decompressed bytes of `input`, for the codecs that stream (gzip, LZ4,
/// zstd); the caller bounds how much it reads. Snappy and none are not streamed here.
pub(crate) fn stream_decoder<'a>(codec: Compression, input: &'a [u8]) -> Result<Box<dyn Read + 'a>, RecordsError> {
    match codec {
        Compression::Gzip => Ok(Box::new(flate2::read::MultiGzDecoder::new(input))),
        Compression::Lz4 => Ok(Box::new(lz4_flex::frame::FrameDecoder::new(input))),
        Compression::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(input).map_err(|e| malformed(codec, e))?;
            // zstd sizes its window buffer from the frame header. Capping the window log
            // bounds that allocation (128 MiB of address space, touched only as output is
            // written, so resident memory follows the budget); 27 is what zstd itself and
            // Java's zstd-jni accept, so no frame a client can write is refused.
            decoder.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(|e| malformed(codec, e))?;
            Ok(Box::new(decoder))
        }
        Compression::None | Compression::Snappy => Err(malformed(codec, "not a streaming codec")),
    }
}

/// zstd level Kafka uses by default (`compression.zstd.level`).
const ZSTD_LEVEL: i32 = 3;
/// Largest zstd window accepted when decompressing: 2^27 bytes.
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// First bytes of a xerial snappy stream: `\x82SNAPPY\0`.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic, then version and minimum compatible version, both int32 1 as snappy-java writes.
const XERIAL_HEADER_BYTES: usize = 16;
/// Uncompressed bytes per xerial block, snappy-java's default.
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;

fn malformed(codec: Compression, e: impl fmt::Display) -> RecordsError {
    RecordsError::Decompress { codec, reason: e.to_string() }
}

fn over_budget(codec: Compression, limit: usize) -> RecordsError {
    RecordsError::DecompressionBudgetExceeded { codec, limit }
}

/// Reads a decoder to its end, but never more than `limit + 1` bytes: one past the budget
/// is enough to know it is exceeded, and the rest is never inflated.
fn read_bounded(
    codec: Compression,
    decoder: impl Read,
    input_len: usize,
    limit: usize,
) -> Result<Vec<u8>, RecordsError> {
    // Start near a typical ratio so small batches do not regrow many times, but never
    // above the budget: the input's size says nothing trustworthy about the output.
    let mut out = Vec::with_capacity(input_len.saturating_mul(4).clamp(64, limit.saturating_add(1).max(64)));
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    decoder.take(cap).read_to_end(&mut out).map_err(|e| malformed(codec, e))?;
    if out.len() > limit {
        return Err(over_budget(codec, limit));
    }
    Ok(out)
}

fn compress_snappy_xerial(input: &[u8]) -> Result<Vec<u8>, RecordsError> {
    let codec = Compression::Snappy;
    let blocks = input.len().div_ceil(XERIAL_BLOCK_BYTES);
    let mut out = Vec::with_capacity(XERIAL_HEADER_BYTES + blocks * 4 + snap::raw::max_compress_len(input.len()));
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in input.chunks(XERIAL_BLOCK_BYTES) {
        let block = encoder.compress_vec(chunk).map_err(|e| RecordsError::Compress { codec, reason: e.to_string() })?;
        // A block compresses 32 KiB, so its length always fits an i32.
        let len = i32::try_from(block.len())
            .map_err(|_| RecordsError::TooLarge { what: "snappy block", length: block.len() })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&block);
    }
    Ok(out)
}

fn decompress_snappy_raw(input: &[u8], limit: usize) -> Result<Vec<u8>, RecordsError> {
    let codec = Compression::Snappy;
    // The declared length comes first: refuse it before allocating anything for it.
    let declared = snap::raw::decompress_len(input).map_err(|e| malformed(codec, e))?;
    if declared > limit {
        return Err(over_budget(codec, limit));
    }
    let mut out = vec![0; declared];
    let written = snap::raw::Decoder::new().decompress(input, &mut out).map_err(|e| malformed(codec, e))?;
    out.truncate(written);
    Ok(out)
}

/// Xerial framing: the 16-byte header, then blocks of int32 length + raw snappy. A header
/// may appear again where a block length would be (snappy-java reads concatenated
/// streams), and is skipped.
fn decompress_snappy_xerial(input: &[u8], limit: usize) -> Result<Vec<u8>, RecordsError> {
    let codec = Compression::Snappy;
    let mut out = Vec::new();
    let mut pos = 0;
    let mut decoder = snap::raw::Decoder::new();
    while pos < input.len() {
        let rest = &input[pos..];
        if rest.starts_with(&XERIAL_MAGIC) {
            if rest.len() < XERIAL_HEADER_BYTES {
                return Err(malformed(codec, format!("xerial header at byte {pos} is cut short")));
            }
            pos += XERIAL_HEADER_BYTES;
            continue;
        }
        let Some(len_bytes) = rest.first_chunk::<4>() else {
            return Err(malformed(codec, format!("xerial block length at byte {pos} is cut short")));
        };
        let block_len = i32::from_be_bytes(*len_bytes);
        let block = usize::try_from(block_len)
            .ok()
            .and_then(|len| rest.get(4..4 + len))
            .ok_or_else(|| malformed(codec, format!("xerial block at byte {pos} claims {block_len} bytes")))?;
        // Each block declares its own length: check it against what is left of the budget
        // before growing the output for it.
        let declared = snap::raw::decompress_len(block).map_err(|e| malformed(codec, e))?;
        let start = out.len();
        if declared > limit.saturating_sub(start) {
            return Err(over_budget(codec, limit));
        }
        out.resize(start + declared, 0);
        let written = decoder.decompress(block, &mut out[start..]).map_err(|e| malformed(codec, e))?;
        out.truncate(start + written);
        pos += 4 + block.len();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..100_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let input = sample();
        for codec in Compression::ALL {
            let packed = compress(codec, &input).expect("compress");
            let unpacked = decompress(codec, &packed, input.len()).expect("decompress");
            assert_eq!(unpacked, input, "{codec}");
        }
    }

    #[test]
    fn output_exactly_at_budget_is_accepted_and_one_past_is_not() {
        let input = sample();
        for codec in Compression::ALL {
            let packed = compress(codec, &input).expect("compress");
            assert!(decompress(codec, &packed, input.len()).is_ok(), "{codec}");
            assert_eq!(
                decompress(codec, &packed, input.len() - 1),
                Err(RecordsError::DecompressionBudgetExceeded { codec, limit: input.len() - 1 }),
                "{codec}"
            );
        }
    }

    #[test]
    fn snappy_writes_xerial_framing_with_32_kib_blocks() {
        let packed = compress(Compression::Snappy, &vec![7u8; 100 * 1024]).expect("compress");
        assert_eq!(packed[..8], XERIAL_MAGIC);
        assert_eq!(packed[8..16], [0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn snappy_raw_is_read_too() {
        let input = sample();
        let raw = compress_snappy_raw(&input).expect("compress");
        assert_eq!(decompress(Compression::Snappy, &raw, input.len()).expect("raw"), input);
    }

    #[test]
    fn snappy_raw_declaring_more_than_the_budget_is_refused_before_allocating() {
        // A varint preamble claiming 2 GiB, then nothing.
        let claim = [0x80, 0x80, 0x80, 0x80, 0x08];
        assert_eq!(
            decompress(Compression::Snappy, &claim, 1 << 20),
            Err(RecordsError::DecompressionBudgetExceeded { codec: Compression::Snappy, limit: 1 << 20 })
        );
    }

    #[test]
    fn xerial_block_longer_than_the_input_is_malformed() {
        let mut stream = compress(Compression::Snappy, b"hello").expect("compress");
        stream[16..20].copy_from_slice(&1000i32.to_be_bytes());
        assert!(matches!(decompress(Compression::Snappy, &stream, 1 << 20), Err(RecordsError::Decompress { .. })));
        stream[16..20].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(decompress(Compression::Snappy, &stream, 1 << 20), Err(RecordsError::Decompress { .. })));
    }

    #[test]
    fn unknown_codec_ids_are_unsupported() {
        for id in 5..8 {
            assert_eq!(Compression::from_id(id), Err(RecordsError::UnsupportedCompression { codec: id }));
        }
    }
}
