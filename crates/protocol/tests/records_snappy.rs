//! Snappy as both families of clients send it: raw (librdkafka) and xerial-framed (Java's
//! snappy-java `SnappyOutputStream`).

use bytes::Bytes;
use osprey_protocol::records::{
    compress, compress_snappy_raw, decompress, BatchBuilder, Compression, RecordBatch, RecordsError,
};

/// A raw snappy block holding `text` as one literal: length varint, literal tag
/// ((len - 1) << 2 for lengths up to 60), the bytes.
fn literal_block(text: &[u8]) -> Vec<u8> {
    assert!(!text.is_empty() && text.len() <= 60);
    let mut block = vec![text.len() as u8, ((text.len() as u8) - 1) << 2];
    block.extend_from_slice(text);
    block
}

/// The 16-byte header snappy-java writes: magic, version 1, minimum compatible version 1.
fn xerial_header() -> Vec<u8> {
    let mut header = b"\x82SNAPPY\x00".to_vec();
    header.extend_from_slice(&1i32.to_be_bytes());
    header.extend_from_slice(&1i32.to_be_bytes());
    header
}

fn xerial(blocks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = xerial_header();
    for block in blocks {
        out.extend_from_slice(&(block.len() as i32).to_be_bytes());
        out.extend_from_slice(block);
    }
    out
}

#[test]
fn hand_built_java_xerial_stream_decodes() {
    let stream = xerial(&[literal_block(b"hello, "), literal_block(b"world")]);
    assert_eq!(decompress(Compression::Snappy, &stream, 1024).expect("xerial"), &b"hello, world"[..]);
}

#[test]
fn hand_built_raw_stream_decodes() {
    let stream = literal_block(b"librdkafka sends raw snappy");
    assert_eq!(decompress(Compression::Snappy, &stream, 1024).expect("raw"), &b"librdkafka sends raw snappy"[..]);
}

#[test]
fn concatenated_xerial_streams_decode_as_one() {
    // snappy-java reads a second header where a block length would be.
    let mut stream = xerial(&[literal_block(b"first ")]);
    stream.extend_from_slice(&xerial(&[literal_block(b"second")]));
    assert_eq!(decompress(Compression::Snappy, &stream, 1024).expect("xerial"), &b"first second"[..]);
}

#[test]
fn xerial_header_alone_is_an_empty_payload() {
    assert_eq!(decompress(Compression::Snappy, &xerial_header(), 1024).expect("empty"), Bytes::new());
}

#[test]
fn xerial_block_over_the_remaining_budget_is_refused_before_it_is_inflated() {
    // Two blocks of 40 bytes under a 60-byte budget: the second's declared length is over.
    let block = literal_block(&[b'x'; 40]);
    let stream = xerial(&[block.clone(), block]);
    assert_eq!(
        decompress(Compression::Snappy, &stream, 60),
        Err(RecordsError::DecompressionBudgetExceeded { codec: Compression::Snappy, limit: 60 })
    );
}

#[test]
fn cut_xerial_streams_are_malformed_not_panics() {
    let stream = xerial(&[literal_block(b"hello, "), literal_block(b"world")]);
    // From 8 bytes on the magic is whole; shorter prefixes read as raw snappy.
    for cut in 8..stream.len() {
        // A cut exactly between blocks is a shorter valid stream.
        if let Err(err) = decompress(Compression::Snappy, &stream[..cut], 1024) {
            assert!(matches!(err, RecordsError::Decompress { .. }), "cut at {cut}: {err}");
        }
    }
}

#[test]
fn our_snappy_is_xerial_and_both_framings_carry_a_batch() {
    let mut builder = BatchBuilder::new(Compression::Snappy);
    for i in 0..100 {
        builder.append(i, None, Some(format!("record {i}").as_bytes()), &[]).expect("append");
    }
    let java_style = builder.build().expect("build");
    let payload = &java_style.as_bytes()[61..];
    assert!(payload.starts_with(b"\x82SNAPPY\x00"), "the broker writes what Java writes");

    // Re-frame the same records as librdkafka would send them: one raw block.
    let records = decompress(Compression::Snappy, payload, 1 << 20).expect("records");
    let raw = compress_snappy_raw(&records).expect("raw");
    let mut librdkafka_style = java_style.as_bytes()[..61].to_vec();
    librdkafka_style.extend_from_slice(&raw);
    let batch_length = (librdkafka_style.len() - 12) as i32;
    librdkafka_style[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&librdkafka_style[21..]);
    librdkafka_style[17..21].copy_from_slice(&crc.to_be_bytes());
    let librdkafka_style = RecordBatch::new(Bytes::from(librdkafka_style)).expect("batch");
    assert!(librdkafka_style.validate_crc());

    for batch in [java_style, librdkafka_style] {
        let values: Vec<Bytes> =
            batch.records(1 << 20).expect("records").map(|r| r.expect("record").value.expect("value")).collect();
        assert_eq!(values.len(), 100);
        assert_eq!(values[42], &b"record 42"[..]);
    }
    assert_ne!(compress(Compression::Snappy, b"abc").expect("xerial"), compress_snappy_raw(b"abc").expect("raw"));
}
