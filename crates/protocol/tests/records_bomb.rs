//! Compression bombs: 100 MiB of zeros in every codec, refused under a 1 MiB budget,
//! quickly and without inflating the output.
//!
//! The bombs are built by repeating a compressed MiB (gzip members, LZ4 and zstd frames,
//! xerial blocks are all concatenable, and each decoder reads the repetition as one
//! stream), so building them costs little; raw snappy cannot be concatenated and is
//! written element by element. This file holds a single test so that the process's peak
//! memory reflects it alone.

mod common;
use common::batch_around;
use osprey_protocol::records::{compress, decompress, Compression, RecordBatch, RecordsError};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
const BOMB_BYTES: usize = 100 * MIB;
const BUDGET: usize = MIB;

fn repeated(stream: &[u8], times: usize) -> Vec<u8> {
    stream.repeat(times)
}

/// xerial header, then the same 32 KiB block of zeros until the total is reached.
fn xerial_bomb() -> Vec<u8> {
    let block = osprey_protocol::records::compress_snappy_raw(&[0; 32 * 1024]).expect("block");
    let mut out = vec![0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1];
    for _ in 0..BOMB_BYTES / (32 * 1024) {
        out.extend_from_slice(&(block.len() as i32).to_be_bytes());
        out.extend_from_slice(&block);
    }
    out
}

/// A valid raw snappy stream of zeros: the length preamble, one literal zero, then copies
/// of 64 bytes at offset 1 (tag 0b10, two-byte offset).
fn raw_snappy_bomb() -> Vec<u8> {
    let mut out = Vec::new();
    let mut n = BOMB_BYTES as u64;
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out.extend_from_slice(&[0x00, 0x00]);
    let mut left = BOMB_BYTES - 1;
    while left > 0 {
        let len = left.min(64);
        if len < 4 {
            out.push((len as u8 - 1) << 2); // tag 0b00: a short literal of zeros
            out.extend(std::iter::repeat_n(0, len));
        } else {
            out.extend_from_slice(&[((len as u8 - 1) << 2) | 0b10, 1, 0]);
        }
        left -= len;
    }
    out
}

/// One LZ4 frame (Kafka reads only the first) holding the same independent 64 KiB blocks
/// of zeros again and again: the blocks of a compressed MiB, repeated.
fn lz4_bomb(zeros: &[u8]) -> Vec<u8> {
    let frame = compress(Compression::Lz4, zeros).expect("lz4");
    // Magic, FLG, BD, HC: no content size, so 7 bytes; the end mark is 4 zero bytes.
    let (header, rest) = frame.split_at(7);
    let blocks = &rest[..rest.len() - 4];
    [header.to_vec(), blocks.repeat(BOMB_BYTES / zeros.len()), vec![0; 4]].concat()
}

fn bombs() -> Vec<(Compression, &'static str, Vec<u8>)> {
    let zeros = vec![0u8; MIB];
    let times = BOMB_BYTES / MIB;
    vec![
        (Compression::Gzip, "gzip members", repeated(&compress(Compression::Gzip, &zeros).expect("gzip"), times)),
        (Compression::Snappy, "snappy xerial", xerial_bomb()),
        (Compression::Snappy, "snappy raw", raw_snappy_bomb()),
        (Compression::Lz4, "lz4 blocks", lz4_bomb(&zeros)),
        (Compression::Zstd, "zstd frames", repeated(&compress(Compression::Zstd, &zeros).expect("zstd"), times)),
    ]
}

/// Peak resident memory of this process so far, where Linux reports it.
fn peak_rss_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn hundred_mib_bombs_in_every_codec_are_refused_under_a_one_mib_budget() {
    let bombs = bombs();
    let batches: Vec<RecordBatch> = bombs.iter().map(|(codec, _, payload)| batch_around(*codec, payload)).collect();
    let peak_before = peak_rss_bytes();

    for ((codec, name, payload), batch) in bombs.iter().zip(&batches) {
        // A few MiB at most that claim a hundred.
        assert!(payload.len() < 5 * MIB, "{name}: {} bytes is not much of a bomb", payload.len());

        let started = Instant::now();
        let expected = RecordsError::DecompressionBudgetExceeded { codec: *codec, limit: BUDGET };
        assert_eq!(decompress(*codec, payload, BUDGET).map(|b| b.len()), Err(expected.clone()), "{name}");
        assert_eq!(batch.records(BUDGET).map(|r| r.data().len()), Err(expected.clone()), "{name} inside a batch");
        assert_eq!(expected.kafka_error_code(), 10, "MESSAGE_TOO_LARGE: the producer splits the batch");
        let took = started.elapsed();
        eprintln!("{name}: {} compressed bytes refused in {took:?}", payload.len());
        assert!(took < Duration::from_secs(5), "{name} took {took:?}");
    }

    if let (Some(before), Some(after)) = (peak_before, peak_rss_bytes()) {
        let grew = after.saturating_sub(before);
        eprintln!("peak RSS grew by {} KiB while refusing {} bombs", grew / 1024, bombs.len());
        assert!(grew < 32 * MIB, "peak RSS grew by {grew} bytes: a bomb was inflated");
    }
}
