//! What the CRC covers, and the in-place rewrites the broker makes on append.

use bytes::Bytes;
use osprey_protocol::records::{
    BatchBuilder, Compression, Header, RecordBatch, RecordBatchMut, RecordsError, TimestampType, ATTR_TIMESTAMP_TYPE,
};
use proptest::prelude::*;

fn sample(codec: Compression) -> RecordBatch {
    let mut builder = BatchBuilder::new(codec).producer(9, 1, 0);
    for i in 0..5 {
        let value = format!("value number {i}");
        builder
            .append(1_000 + i, Some(b"key"), Some(value.as_bytes()), &[Header::new("h", Some(b"v"))])
            .expect("append");
    }
    builder.build().expect("build")
}

#[test]
fn rewriting_base_offset_and_leader_epoch_keeps_the_crc_valid() {
    for codec in Compression::ALL {
        let batch = sample(codec);
        let crc_before = batch.crc();
        let mut bytes = batch.into_bytes_mut();
        let mut view = RecordBatchMut::new(&mut bytes).expect("view");
        view.set_base_offset(1 << 40);
        view.set_partition_leader_epoch(77);
        let batch = RecordBatch::new(bytes.freeze()).expect("batch");
        assert_eq!(batch.base_offset(), 1 << 40);
        assert_eq!(batch.partition_leader_epoch(), 77);
        assert_eq!(batch.crc(), crc_before, "{codec}: the rewrite must not touch the CRC");
        assert!(batch.validate_crc(), "{codec}");
        let offsets: Vec<i64> = batch.records(1 << 20).expect("records").map(|r| r.expect("record").offset).collect();
        assert_eq!(offsets, (0..5).map(|i| (1 << 40) + i).collect::<Vec<_>>());
    }
}

#[test]
fn log_append_time_rewrite_sets_the_bit_and_recomputes_the_crc() {
    for codec in Compression::ALL {
        let batch = sample(codec);
        let crc_before = batch.crc();
        let mut bytes = batch.into_bytes_mut();
        RecordBatchMut::new(&mut bytes).expect("view").set_log_append_time(5_000);
        let batch = RecordBatch::new(bytes.freeze()).expect("batch");
        assert_eq!(batch.timestamp_type(), TimestampType::LogAppendTime);
        assert_ne!(batch.attributes() & ATTR_TIMESTAMP_TYPE, 0);
        assert_eq!(batch.max_timestamp(), 5_000);
        assert_ne!(batch.crc(), crc_before);
        assert!(batch.validate_crc(), "{codec}");
        assert_eq!(batch.compression(), Ok(codec), "the codec bits survive the rewrite");
        assert!(batch.records(1 << 20).expect("records").all(|r| r.expect("record").timestamp == 5_000));
    }
}

#[test]
fn setting_the_same_max_timestamp_changes_nothing() {
    let batch = sample(Compression::None);
    let before = batch.as_bytes().clone();
    let mut bytes = batch.into_bytes_mut();
    RecordBatchMut::new(&mut bytes).expect("view").set_max_timestamp(TimestampType::CreateTime, 1_004);
    assert_eq!(bytes.freeze(), before);
}

#[test]
fn flipping_any_bit_from_attributes_to_the_end_breaks_the_crc() {
    for codec in Compression::ALL {
        let original = sample(codec).into_bytes();
        for i in 21..original.len() {
            for bit in [0x01u8, 0x80] {
                let mut bytes = original.to_vec();
                bytes[i] ^= bit;
                // Some flips break the framing (recordsCount negative); those never get a
                // batch to validate, which is fine too.
                if let Ok(batch) = RecordBatch::new(Bytes::from(bytes)) {
                    assert!(!batch.validate_crc(), "{codec}: flip of bit {bit:#x} at byte {i} went unnoticed");
                    assert!(matches!(batch.ensure_valid_crc(), Err(RecordsError::CrcMismatch { .. })));
                }
            }
        }
    }
}

#[test]
fn bytes_before_the_attributes_are_outside_the_crc() {
    let original = sample(Compression::None).into_bytes();
    // baseOffset and partitionLeaderEpoch: rewritable without a new CRC.
    for i in (0..8).chain(12..16) {
        let mut bytes = original.to_vec();
        bytes[i] ^= 0xff;
        assert!(RecordBatch::new(Bytes::from(bytes)).expect("batch").validate_crc(), "byte {i}");
    }
}

#[test]
fn crc_mismatch_is_corrupt_message() {
    let mut bytes = sample(Compression::None).into_bytes().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let err = RecordBatch::new(Bytes::from(bytes)).expect("framed").ensure_valid_crc().expect_err("mismatch");
    assert_eq!(err.kafka_error_code(), 2);
}

#[test]
fn rewrite_view_refuses_bytes_that_are_not_exactly_one_batch() {
    let mut bytes = sample(Compression::None).into_bytes().to_vec();
    bytes.push(0);
    assert!(matches!(RecordBatchMut::new(&mut bytes), Err(RecordsError::TrailingBytes { trailing: 1, .. })));
    assert!(RecordBatchMut::new(&mut bytes[..30]).expect_err("short").is_partial_batch());
}

proptest! {
    #[test]
    fn any_base_offset_and_epoch_rewrite_keeps_the_crc_valid(offset in any::<i64>(), epoch in any::<i32>()) {
        let mut bytes = sample(Compression::Snappy).into_bytes_mut();
        let mut view = RecordBatchMut::new(&mut bytes).expect("view");
        view.set_base_offset(offset);
        view.set_partition_leader_epoch(epoch);
        let batch = RecordBatch::new(bytes.freeze()).expect("batch");
        prop_assert!(batch.validate_crc());
        prop_assert_eq!(batch.base_offset(), offset);
        prop_assert_eq!(batch.last_offset(), offset.wrapping_add(4));
    }
}
