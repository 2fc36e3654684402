//! Builder -> parse -> iterate round trips for every codec, and the produce checks.

use bytes::Bytes;
use osprey_protocol::records::{
    BatchBuilder, Batches, Compression, ControlRecordType, EndTxnMarker, Header, Record, RecordBatch, RecordsError,
    TimestampType, BATCH_HEADER_BYTES, NO_SEQUENCE,
};
use proptest::prelude::*;

const BUDGET: usize = 64 << 20;

/// A record as a producer hands it over.
#[derive(Debug, Clone, PartialEq)]
struct Input {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

fn build(codec: Compression, inputs: &[Input]) -> RecordBatch {
    let mut builder = BatchBuilder::new(codec).base_offset(1_000).partition_leader_epoch(3).producer(42, 7, 100);
    for input in inputs {
        let headers: Vec<Header> = input.headers.iter().map(|(k, v)| Header::new(k, v.as_deref())).collect();
        builder.append(input.timestamp, input.key.as_deref(), input.value.as_deref(), &headers).expect("append");
    }
    builder.build().expect("build")
}

fn decode(batch: &RecordBatch) -> Vec<Record> {
    batch.records(BUDGET).expect("records").collect::<Result<Vec<_>, _>>().expect("every record parses")
}

fn check_round_trip(codec: Compression, inputs: &[Input]) {
    let batch = build(codec, inputs);
    // Parse again from the bare bytes, as a broker receiving them would.
    let batch = RecordBatch::new(batch.into_bytes()).expect("parse");
    assert!(batch.validate_crc());
    assert_eq!(batch.compression(), Ok(codec));
    assert_eq!(batch.base_offset(), 1_000);
    assert_eq!(batch.partition_leader_epoch(), 3);
    assert_eq!((batch.producer_id(), batch.producer_epoch(), batch.base_sequence()), (42, 7, 100));
    assert_eq!(batch.records_count() as usize, inputs.len());
    if let Some(first) = inputs.first() {
        assert_eq!(batch.last_offset_delta() as usize, inputs.len() - 1);
        assert_eq!(batch.base_timestamp(), first.timestamp);
        // Like Kafka's builder, maxTimestamp starts at -1 (no timestamp), which negative
        // timestamps (invalid in Kafka anyway) do not beat.
        let max = inputs.iter().map(|i| i.timestamp).max().expect("non-empty");
        assert_eq!(batch.max_timestamp(), max.max(-1));
        assert_eq!(batch.check_produce_invariants(), Ok(()));
    }

    let records = decode(&batch);
    assert_eq!(records.len(), inputs.len());
    for (i, (record, input)) in records.iter().zip(inputs).enumerate() {
        assert_eq!(record.offset_delta as usize, i);
        assert_eq!(record.offset, 1_000 + i as i64);
        assert_eq!(record.timestamp, input.timestamp);
        assert_eq!(record.key.as_deref(), input.key.as_deref());
        assert_eq!(record.value.as_deref(), input.value.as_deref());
        let headers: Vec<(String, Option<Vec<u8>>)> = record
            .headers
            .iter()
            .map(|h| (String::from_utf8(h.key.to_vec()).expect("utf-8 key"), h.value.as_ref().map(|v| v.to_vec())))
            .collect();
        assert_eq!(headers, input.headers);
    }
}

fn sample_inputs() -> Vec<Input> {
    vec![
        Input { timestamp: 1_700_000_000_000, key: Some(b"k1".to_vec()), value: Some(b"v1".to_vec()), headers: vec![] },
        Input { timestamp: 1_700_000_000_005, key: None, value: Some(vec![0; 300]), headers: vec![] },
        Input { timestamp: 1_699_999_999_000, key: Some(vec![]), value: None, headers: vec![] },
        Input {
            timestamp: 1_700_000_000_010,
            key: Some(b"with headers".to_vec()),
            value: Some(b"x".repeat(1000)),
            headers: vec![
                ("trace-id".into(), Some(b"abc".to_vec())),
                ("null-value".into(), None),
                ("".into(), Some(vec![])),
                ("ключ".into(), Some(vec![0xff; 3])),
            ],
        },
    ]
}

#[test]
fn every_codec_round_trips_keys_values_nulls_and_headers() {
    for codec in Compression::ALL {
        check_round_trip(codec, &sample_inputs());
    }
}

#[test]
fn empty_builder_writes_an_empty_batch() {
    for codec in Compression::ALL {
        let batch = build(codec, &[]);
        assert_eq!(batch.records_count(), 0);
        assert_eq!(batch.base_timestamp(), -1);
        assert_eq!(decode(&batch), vec![]);
        // An empty batch is valid in a log but not from a producer.
        assert_eq!(batch.check_produce_invariants(), Err(RecordsError::InvalidRecordCount { count: 0 }));
    }
}

#[test]
fn uncompressed_records_share_the_batch_buffer() {
    let batch = build(Compression::None, &sample_inputs());
    let buffer = batch.as_bytes().as_ptr_range();
    let record = decode(&batch).into_iter().next().expect("a record");
    let value = record.value.expect("value");
    assert!(buffer.contains(&value.as_ptr()), "value should be a slice of the batch, not a copy");
}

#[test]
fn batches_split_concatenated_batches_of_every_codec() {
    let mut all = Vec::new();
    let mut sizes = Vec::new();
    for codec in Compression::ALL {
        let bytes = build(codec, &sample_inputs()).into_bytes();
        sizes.push(bytes.len());
        all.extend_from_slice(&bytes);
    }
    let batches: Vec<RecordBatch> =
        Batches::new(Bytes::from(all)).collect::<Result<_, _>>().expect("all batches complete");
    assert_eq!(batches.iter().map(RecordBatch::size_bytes).collect::<Vec<_>>(), sizes);
    for (batch, codec) in batches.iter().zip(Compression::ALL) {
        assert_eq!(batch.compression(), Ok(codec));
        assert_eq!(decode(batch).len(), 4);
    }
}

#[test]
fn fetch_response_ending_in_a_partial_batch_yields_the_whole_ones_then_partial() {
    let one = build(Compression::Lz4, &sample_inputs()).into_bytes();
    let mut buf = one.to_vec();
    buf.extend_from_slice(&one[..one.len() / 2]);
    let mut batches = Batches::new(Bytes::from(buf));
    assert!(batches.next().expect("first").is_ok());
    let err = batches.next().expect("second").expect_err("partial");
    assert!(err.is_partial_batch());
    assert_eq!(err, RecordsError::PartialBatch { at: one.len(), needed: one.len(), available: one.len() / 2 });
    assert_eq!(batches.position(), one.len());
    assert_eq!(batches.remainder().len(), one.len() / 2);
    assert!(batches.next().is_none());
}

#[test]
fn log_append_time_batch_reads_every_timestamp_as_the_append_time() {
    let mut builder = BatchBuilder::new(Compression::Gzip).log_append_time(99);
    builder.append(5, None, Some(b"a"), &[]).expect("append");
    builder.append(6, None, Some(b"b"), &[]).expect("append");
    let batch = builder.build().expect("build");
    assert_eq!(batch.timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!(batch.max_timestamp(), 99);
    assert!(decode(&batch).iter().all(|r| r.timestamp == 99));
}

#[test]
fn transaction_markers_round_trip_as_control_batches() {
    for commit in [true, false] {
        let marker = EndTxnMarker { commit, coordinator_epoch: 17 };
        let batch = BatchBuilder::end_txn_marker(marker, 4_000, 2, 1_234)
            .expect("marker")
            .base_offset(50)
            .build()
            .expect("build");
        assert!(batch.is_control() && batch.is_transactional());
        assert_eq!(batch.compression(), Ok(Compression::None));
        assert_eq!((batch.producer_id(), batch.producer_epoch(), batch.base_sequence()), (4_000, 2, NO_SEQUENCE));
        let records = decode(&batch);
        assert_eq!(records.len(), 1);
        let key = records[0].key.as_deref().expect("key");
        let expected_type = if commit { ControlRecordType::Commit } else { ControlRecordType::Abort };
        assert_eq!(ControlRecordType::from_key(key), Ok(expected_type));
        assert_eq!(key, [0, 0, 0, u8::from(commit)]);
        assert_eq!(records[0].value.as_deref(), Some(&[0, 0, 0, 0, 0, 17][..]));
        assert_eq!(EndTxnMarker::from_record(&records[0]), Ok(marker));
        assert_eq!(batch.check_produce_invariants(), Err(RecordsError::ControlBatchFromClient));
    }
}

#[test]
fn control_keys_shorter_than_four_bytes_or_negative_versions_are_invalid() {
    assert!(ControlRecordType::from_key(&[0, 0, 1]).is_err());
    assert!(ControlRecordType::from_key(&[0xff, 0xff, 0, 1]).is_err());
    assert_eq!(ControlRecordType::from_key(&[0, 0, 0, 5]), Ok(ControlRecordType::Other(5)));
}

/// Rewrites header fields of a built batch and fixes its CRC, to test semantic checks.
fn patched(batch: RecordBatch, offset: usize, value: &[u8]) -> RecordBatch {
    let mut bytes = batch.into_bytes().to_vec();
    bytes[offset..offset + value.len()].copy_from_slice(value);
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    RecordBatch::new(Bytes::from(bytes)).expect("still framed")
}

#[test]
fn produce_checks_match_kafka_log_validator() {
    let batch = build(Compression::None, &sample_inputs());
    assert_eq!(batch.check_produce_invariants(), Ok(()));

    // lastOffsetDelta (offset 23) says 3 records after the first, count says 4: fine. Now
    // make the offsets imply 2 records.
    let mismatch = patched(batch.clone(), 23, &1i32.to_be_bytes());
    assert_eq!(
        mismatch.check_produce_invariants(),
        Err(RecordsError::OffsetRangeCountMismatch { last_offset_delta: 1, count: 4 })
    );
    let negative_range = patched(batch.clone(), 23, &(-1i32).to_be_bytes());
    assert_eq!(
        negative_range.check_produce_invariants(),
        Err(RecordsError::InvalidOffsetRange { last_offset_delta: -1 })
    );

    // producerId 42 with baseSequence (offset 53) -1 is an idempotent batch without a sequence.
    let no_sequence = patched(batch.clone(), 53, &(-1i32).to_be_bytes());
    assert_eq!(
        no_sequence.check_produce_invariants(),
        Err(RecordsError::InvalidSequence { producer_id: 42, base_sequence: -1 })
    );
    // Without a producer id (offset 43), no sequence is needed.
    let not_idempotent = patched(no_sequence, 43, &(-1i64).to_be_bytes());
    assert_eq!(not_idempotent.check_produce_invariants(), Ok(()));
    for err in [
        RecordsError::InvalidOffsetRange { last_offset_delta: -1 },
        RecordsError::ControlBatchFromClient,
        RecordsError::InvalidSequence { producer_id: 1, base_sequence: -1 },
    ] {
        assert_eq!(err.kafka_error_code(), 87, "{err}");
    }
}

#[test]
fn header_is_61_bytes_and_records_follow_it() {
    let batch = build(Compression::None, &sample_inputs()[..1]);
    assert_eq!(BATCH_HEADER_BYTES, 61);
    assert_eq!(batch.size_bytes(), 61 + batch.records(BUDGET).expect("records").data().len());
    assert_eq!(batch.batch_length() as usize, batch.size_bytes() - 12);
}

fn input_strategy() -> impl Strategy<Value = Input> {
    let bytes = || prop::option::of(prop::collection::vec(any::<u8>(), 0..48));
    let header = ("\\PC{0,6}", bytes());
    (any::<i64>(), bytes(), bytes(), prop::collection::vec(header, 0..4))
        .prop_map(|(timestamp, key, value, headers)| Input { timestamp, key, value, headers })
}

proptest! {
    #[test]
    fn decode_of_build_is_identity_for_random_records_and_codecs(
        codec in prop::sample::select(Compression::ALL.to_vec()),
        inputs in prop::collection::vec(input_strategy(), 0..16),
    ) {
        check_round_trip(codec, &inputs);
    }
}
