//! Malformed batches and records: each is a typed error naming what and where, with the
//! Kafka error code a broker answers; and no input at all makes the parser panic.

use bytes::Bytes;
use osprey_protocol::records::{BatchBuilder, Batches, Compression, Header, RecordBatch, RecordsError};
use proptest::prelude::*;

const BUDGET: usize = 1 << 20;

/// An uncompressed batch around a hand-written records section, with a valid CRC.
fn batch_with(attributes: i16, count: i32, records: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&(count - 1).max(0).to_be_bytes());
    out.extend_from_slice(&[0; 16]);
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(records);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

fn first_record_error(count: i32, records: &[u8]) -> RecordsError {
    let batch = RecordBatch::new(Bytes::from(batch_with(0, count, records))).expect("framed");
    assert!(batch.validate_crc());
    let result: Result<Vec<_>, _> = batch.records(BUDGET).expect("records").collect();
    result.expect_err("malformed records")
}

/// The smallest record: length 6, attributes 0, deltas 0, null key and value, no headers.
const EMPTY_RECORD: [u8; 7] = [0x0c, 0, 0, 0, 0x01, 0x01, 0];

#[test]
fn the_smallest_record_parses() {
    let batch = RecordBatch::new(Bytes::from(batch_with(0, 1, &EMPTY_RECORD))).expect("framed");
    let records: Vec<_> = batch.records(BUDGET).expect("records").collect::<Result<_, _>>().expect("parses");
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].key.clone(), records[0].value.clone()), (None, None));
}

#[test]
fn magic_0_and_1_are_invalid_record_and_other_magics_corrupt() {
    for (magic, code) in [(0u8, 87), (1, 87), (3, 2), (0xff, 2)] {
        let mut bytes = batch_with(0, 1, &EMPTY_RECORD);
        bytes[16] = magic;
        let err = RecordBatch::new(Bytes::from(bytes)).expect_err("magic");
        assert_eq!(err, RecordsError::UnsupportedMagic { at: 0, magic: magic as i8 });
        assert_eq!(err.kafka_error_code(), code, "magic {magic}");
    }
}

#[test]
fn old_format_message_is_reported_by_its_magic_not_its_short_length() {
    // A magic v1 message: offset, size 20, crc, magic 1, ... shorter than any v2 batch.
    let mut bytes = vec![0; 32];
    bytes[8..12].copy_from_slice(&20i32.to_be_bytes());
    bytes[16] = 1;
    let err = Batches::new(Bytes::from(bytes)).next().expect("an item").expect_err("v1");
    assert_eq!(err, RecordsError::UnsupportedMagic { at: 0, magic: 1 });
}

#[test]
fn batch_length_below_the_header_is_corrupt() {
    let mut bytes = batch_with(0, 1, &EMPTY_RECORD);
    bytes[8..12].copy_from_slice(&48i32.to_be_bytes());
    let err = RecordBatch::new(Bytes::from(bytes)).expect_err("short");
    assert_eq!(err, RecordsError::BatchLengthTooSmall { at: 0, batch_length: 48 });
    assert_eq!(err.kafka_error_code(), 2);
}

#[test]
fn batch_length_past_the_buffer_is_partial_with_the_bytes_needed() {
    let mut bytes = batch_with(0, 1, &EMPTY_RECORD);
    bytes[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    let available = bytes.len();
    let err = RecordBatch::new(Bytes::from(bytes)).expect_err("partial");
    assert_eq!(err, RecordsError::PartialBatch { at: 0, needed: 12 + i32::MAX as usize, available });
}

#[test]
fn second_batch_errors_name_its_position_in_the_buffer() {
    let good = batch_with(0, 1, &EMPTY_RECORD);
    let mut bad = good.clone();
    bad[16] = 7;
    let buf = [good.clone(), bad].concat();
    let items: Vec<_> = Batches::new(Bytes::from(buf)).collect();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1], Err(RecordsError::UnsupportedMagic { at: good.len(), magic: 7 }));
}

#[test]
fn negative_record_count_is_refused_at_framing() {
    let err = RecordBatch::new(Bytes::from(batch_with(0, -1, &[]))).expect_err("negative");
    assert_eq!(err, RecordsError::NegativeRecordCount { at: 0, count: -1 });
    assert_eq!(err.kafka_error_code(), 87);
}

#[test]
fn codecs_5_to_7_are_unsupported_compression() {
    for codec in 5..8 {
        let batch = RecordBatch::new(Bytes::from(batch_with(codec, 1, &EMPTY_RECORD))).expect("framed");
        let err = batch.compression().expect_err("unknown codec");
        assert_eq!(err, RecordsError::UnsupportedCompression { codec });
        assert_eq!(err.kafka_error_code(), 76);
        assert_eq!(batch.records(BUDGET).map(|_| ()), Err(err));
    }
}

#[test]
fn garbage_in_a_compressed_batch_is_invalid_record() {
    for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let batch =
            RecordBatch::new(Bytes::from(batch_with(codec.id(), 1, b"definitely not compressed"))).expect("framed");
        let err = batch.records(BUDGET).map(|_| ()).expect_err("garbage");
        assert!(matches!(err, RecordsError::Decompress { .. }), "{codec}: {err}");
        assert_eq!(err.kafka_error_code(), 87);
    }
}

#[test]
fn record_longer_than_its_fields_is_a_length_mismatch() {
    let mut record = EMPTY_RECORD.to_vec();
    record[0] = 0x0e; // length 7
    record.push(0);
    let err = first_record_error(1, &record);
    assert_eq!(err, RecordsError::RecordLengthMismatch { index: 0, at: 0, declared: 7, consumed: 6 });
    assert_eq!(err.kafka_error_code(), 87);
}

#[test]
fn record_shorter_than_its_fields_is_truncated_inside_the_record() {
    let mut record = EMPTY_RECORD.to_vec();
    record[0] = 0x0a; // length 5: the header count falls outside it
    let err = first_record_error(1, &record);
    assert!(matches!(err, RecordsError::RecordTruncated { index: 0, field: "header count", .. }), "{err}");
}

#[test]
fn fewer_records_than_declared_is_truncated() {
    let err = first_record_error(2, &EMPTY_RECORD);
    assert!(matches!(err, RecordsError::RecordTruncated { index: 1, at: 7, field: "record length", .. }), "{err}");
}

#[test]
fn bytes_after_the_declared_records_are_trailing() {
    let err = first_record_error(1, &[EMPTY_RECORD, EMPTY_RECORD].concat());
    assert_eq!(err, RecordsError::TrailingRecordBytes { declared: 1, trailing: 7 });
}

#[test]
fn varint_past_five_bytes_is_too_long() {
    let err = first_record_error(1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    assert_eq!(err, RecordsError::VarintTooLong { index: 0, at: 0, field: "record length", max_bytes: 5 });
}

#[test]
fn negative_lengths_other_than_null_are_invalid() {
    // Record length -1.
    let err = first_record_error(1, &[0x01]);
    assert!(matches!(err, RecordsError::InvalidLength { field: "record length", length: -1, .. }), "{err}");
    // Key length -2.
    let err = first_record_error(1, &[0x0c, 0, 0, 0, 0x03, 0x01, 0]);
    assert!(matches!(err, RecordsError::InvalidLength { field: "key", length: -2, .. }), "{err}");
    // A null header key: header count 1, key length -1, value null.
    let err = first_record_error(1, &[0x10, 0, 0, 0, 0x01, 0x01, 0x02, 0x01, 0x01]);
    assert!(matches!(err, RecordsError::InvalidLength { field: "header key", length: -1, .. }), "{err}");
    // A negative header count.
    let err = first_record_error(1, &[0x0c, 0, 0, 0, 0x01, 0x01, 0x01]);
    assert!(matches!(err, RecordsError::InvalidLength { field: "header count", length: -1, .. }), "{err}");
}

#[test]
fn huge_header_count_fails_on_the_bytes_left_without_allocating_for_it() {
    // Header count i32::MAX (zigzag 0xfffffffe) ending a record of 10 bytes.
    let err = first_record_error(1, &[0x14, 0, 0, 0, 0x01, 0x01, 0xfe, 0xff, 0xff, 0xff, 0x0f]);
    assert!(matches!(err, RecordsError::RecordTruncated { field: "header key", .. }), "{err}");
}

#[test]
fn huge_declared_record_count_fails_on_the_bytes_left() {
    let err = first_record_error(i32::MAX, &EMPTY_RECORD);
    assert!(matches!(err, RecordsError::RecordTruncated { index: 1, .. }), "{err}");
}

#[test]
fn every_truncation_of_every_codec_is_an_error_or_a_shorter_batch_never_a_panic() {
    for codec in Compression::ALL {
        let mut builder = BatchBuilder::new(codec);
        for i in 0..20 {
            builder.append(i, Some(b"key"), Some(&[i as u8; 40]), &[Header::new("h", Some(b"v"))]).expect("append");
        }
        let bytes = builder.build().expect("build").into_bytes();
        for cut in 0..bytes.len() {
            exercise(bytes.slice(..cut));
            // Keep the framing right but cut the payload, as a lying batchLength would.
            let mut reframed = bytes[..cut.max(61)].to_vec();
            let len = (reframed.len() - 12) as i32;
            reframed[8..12].copy_from_slice(&len.to_be_bytes());
            exercise(Bytes::from(reframed));
        }
    }
}

/// Runs every reader over `buf`; the point is that none of it panics.
fn exercise(buf: Bytes) {
    for batch in Batches::new(buf) {
        let Ok(batch) = batch else { break };
        let _ = batch.validate_crc();
        let _ = batch.check_produce_invariants();
        let _ = batch.compression();
        let _ = batch.last_offset();
        if let Ok(records) = batch.records(BUDGET) {
            for record in records {
                if record.is_err() {
                    break;
                }
            }
        }
    }
}

fn valid_batch(codec: Compression, n: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(codec).producer(1, 0, 0);
    for i in 0..n {
        builder.append(i as i64, Some(b"k"), Some(b"some value"), &[Header::new("x", None)]).expect("append");
    }
    builder.build().expect("build").into_bytes().to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        exercise(Bytes::from(bytes));
    }

    #[test]
    fn random_records_behind_a_valid_header_never_panic(
        count in -2i32..40,
        codec in 0i16..8,
        records in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        exercise(Bytes::from(batch_with(codec, count, &records)));
    }

    #[test]
    fn mutated_valid_batches_never_panic(
        codec in prop::sample::select(Compression::ALL.to_vec()),
        n in 1usize..8,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = valid_batch(codec, n);
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let keep = 61 + cut.index(bytes.len() - 60);
        bytes.truncate(keep);
        exercise(Bytes::from(bytes));
    }
}
