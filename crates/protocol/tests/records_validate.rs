//! Batches whose CRC is valid but whose records contradict the header: the walk the broker
//! makes before storing a client's batch refuses each with INVALID_RECORD, compressed or
//! not, and agrees with the record iterator on every input.

mod common;
use bytes::Bytes;
use common::batch_around;
use osprey_protocol::records::{compress, BatchBuilder, Compression, Header, RecordBatch, RecordsError};
use proptest::prelude::*;

const MIB: usize = 1 << 20;
const BUDGET: usize = MIB;
const INVALID_RECORD: i16 = 87;

/// A record as clients write it: `offset_delta`, key "k" and `value`, no headers.
fn record(offset_delta: i32, value: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 0]; // attributes, timestampDelta 0
    put_varint(&mut body, offset_delta);
    put_varint(&mut body, 1);
    body.push(b'k');
    put_varint(&mut body, value.len() as i32);
    body.extend_from_slice(value);
    body.push(0); // no headers
    let mut out = Vec::new();
    put_varint(&mut out, body.len() as i32);
    out.extend_from_slice(&body);
    out
}

/// `n` records with consecutive offset deltas.
fn records(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| record(i as i32, format!("value-{i}").as_bytes())).collect()
}

fn put_varint(out: &mut Vec<u8>, v: i32) {
    let mut z = ((v << 1) ^ (v >> 31)) as u32;
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A batch declaring `count` records (lastOffsetDelta `count - 1`, so the header agrees
/// with itself) around `records`, compressed with `codec`, with a valid CRC: only the
/// records can give it away.
fn lying_batch(codec: Compression, count: i32, records: &[u8]) -> RecordBatch {
    let payload = compress(codec, records).expect("compress");
    let mut out = Vec::new();
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((49 + payload.len()) as i32).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&codec.id().to_be_bytes());
    out.extend_from_slice(&(count - 1).to_be_bytes());
    out.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    out.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&payload);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    let batch = RecordBatch::new(Bytes::from(out)).expect("framed");
    assert!(batch.validate_crc());
    batch.check_produce_invariants().expect("the header agrees with itself");
    batch
}

fn refusal(batch: &RecordBatch) -> RecordsError {
    let err = batch.validate_records(BUDGET, |_| {}).expect_err("lying batch");
    assert_eq!(err.kafka_error_code(), INVALID_RECORD, "{err}");
    err
}

/// 300 bytes no client wrote, the same on every run.
fn garbage() -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..300)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_count_of_2_pow_31_minus_1_around_one_record_is_refused() {
    for codec in Compression::ALL {
        let err = refusal(&lying_batch(codec, i32::MAX, &records(1)));
        assert!(
            matches!(err, RecordsError::RecordTruncated { index: 1, field: "record length", .. }),
            "{codec}: {err}"
        );
    }
}

#[test]
fn a_count_of_1_around_1000_records_is_refused() {
    for codec in Compression::ALL {
        let err = refusal(&lying_batch(codec, 1, &records(1_000)));
        let trailing = records(1_000).len() - records(1).len();
        assert_eq!(err, RecordsError::TrailingRecordBytes { declared: 1, trailing }, "{codec}");
    }
}

#[test]
fn a_count_of_1000_around_one_record_is_refused() {
    for codec in Compression::ALL {
        let err = refusal(&lying_batch(codec, 1_000, &records(1)));
        assert!(matches!(err, RecordsError::RecordTruncated { index: 1, .. }), "{codec}: {err}");
    }
}

#[test]
fn a_record_with_a_negative_length_is_refused() {
    for codec in Compression::ALL {
        let mut bytes = Vec::new();
        put_varint(&mut bytes, -5);
        bytes.extend_from_slice(&record(0, b"v")[1..]);
        let err = refusal(&lying_batch(codec, 1, &bytes));
        assert!(
            matches!(err, RecordsError::InvalidLength { field: "record length", length: -5, .. }),
            "{codec}: {err}"
        );
    }
}

#[test]
fn garbage_in_place_of_records_is_refused() {
    for codec in Compression::ALL {
        for count in [1, 3, 300] {
            refusal(&lying_batch(codec, count, &garbage()));
        }
    }
}

#[test]
fn offset_deltas_that_skip_are_refused() {
    for codec in Compression::ALL {
        let bytes = [record(0, b"a"), record(2, b"b")].concat();
        assert_eq!(
            refusal(&lying_batch(codec, 2, &bytes)),
            RecordsError::OffsetDeltaMismatch { index: 1, offset_delta: 2 },
            "{codec}"
        );
        let bytes = [record(0, b"a"), record(0, b"b")].concat();
        assert_eq!(
            refusal(&lying_batch(codec, 2, &bytes)),
            RecordsError::OffsetDeltaMismatch { index: 1, offset_delta: 0 },
            "{codec}"
        );
    }
}

#[test]
fn a_record_whose_fields_overrun_its_length_is_refused() {
    for codec in Compression::ALL {
        let mut bytes = record(0, b"value");
        bytes[0] -= 2; // the declared length is one byte short (zigzag: 2 per unit)
        bytes.push(0); // and the byte it lost follows, so the count still fits
        let err = refusal(&lying_batch(codec, 1, &bytes));
        assert!(matches!(err, RecordsError::RecordTruncated { index: 0, field: "header count", .. }), "{codec}: {err}");
    }
}

#[test]
fn batches_clients_write_pass_and_their_shapes_match_the_records() {
    for codec in Compression::ALL {
        let mut builder = BatchBuilder::new(codec).producer(7, 0, 0);
        builder.append(1, Some(b"key"), Some(b"value"), &[Header::new("h", Some(b"v"))]).expect("append");
        builder.append(2, None, None, &[]).expect("append");
        builder
            .append(3, Some(b""), Some(&[9; 5_000]), &[Header::new("a", None), Header::new("b", None)])
            .expect("append");
        let batch = builder.build().expect("build");
        let mut shapes = Vec::new();
        batch.validate_records(BUDGET, |s| shapes.push(s)).expect("valid");
        let records: Vec<_> = batch.records(BUDGET).expect("records").collect::<Result<_, _>>().expect("records");
        assert_eq!(shapes.len(), records.len(), "{codec}");
        for (s, r) in shapes.iter().zip(&records) {
            assert_eq!(s.index, r.offset_delta);
            assert_eq!(s.key_len, r.key.as_ref().map(Bytes::len));
            assert_eq!(s.value_len, r.value.as_ref().map(Bytes::len));
            assert_eq!(s.header_count, r.headers.len());
        }
    }
}

/// A compressed payload of one record whose value is `value_bytes` zeros, built from
/// repeated frames (gzip members, zstd frames) so that it costs little to make.
fn value_bomb(codec: Compression, value_bytes: usize) -> Vec<u8> {
    let mut head = vec![0, 0, 0]; // attributes, timestampDelta 0, offsetDelta 0
    put_varint(&mut head, -1); // null key
    put_varint(&mut head, value_bytes as i32);
    let mut prefix = Vec::new();
    put_varint(&mut prefix, (head.len() + value_bytes + 1) as i32);
    prefix.extend_from_slice(&head);
    let zeros = compress(codec, &vec![0; MIB]).expect("compress");
    let mut payload = compress(codec, &prefix).expect("compress");
    payload.extend_from_slice(&zeros.repeat(value_bytes / MIB));
    payload.extend_from_slice(&compress(codec, &[0]).expect("compress")); // no headers
    payload
}

#[test]
fn a_well_formed_record_inflating_past_the_budget_is_refused_not_stored() {
    for codec in [Compression::Zstd, Compression::Gzip] {
        // 100 MiB of value in a few hundred KiB; the budget is 1 MiB.
        let payload = value_bomb(codec, 100 * MIB);
        assert!(payload.len() < 2 * MIB, "{codec}: {} bytes", payload.len());
        let batch = batch_around(codec, &payload);
        let err = batch.validate_records(BUDGET, |_| {}).expect_err("bomb");
        assert_eq!(err, RecordsError::DecompressionBudgetExceeded { codec, limit: BUDGET });
        // The same record within a budget that holds it is valid: only its size refuses it.
        let small = batch_around(codec, &value_bomb(codec, 2 * MIB));
        small.validate_records(3 * MIB, |_| {}).expect("within budget");
        assert!(small.validate_records(BUDGET, |_| {}).is_err());
    }
}

#[test]
fn a_bomb_of_zeros_is_refused_at_its_first_record() {
    for codec in [Compression::Zstd, Compression::Gzip] {
        let payload = compress(codec, &vec![0; 8 * MIB]).expect("compress");
        let err = refusal(&batch_around(codec, &payload));
        assert!(matches!(err, RecordsError::RecordTruncated { index: 0, field: "attributes", .. }), "{codec}: {err}");
    }
}

/// What the record iterator says of a batch, in the walk's terms: the records parse and
/// their offset deltas run 0, 1, 2, ...
fn iterator_accepts(batch: &RecordBatch) -> bool {
    let Ok(records) = batch.records(BUDGET) else { return false };
    let mut n = 0;
    for record in records {
        match record {
            Ok(r) if r.offset_delta == n => n += 1,
            _ => return false,
        }
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_walk_accepts_exactly_what_the_iterator_accepts(
        codec in prop::sample::select(Compression::ALL.to_vec()),
        count in 1i32..6,
        valid in 0usize..6,
        noise in prop::collection::vec(any::<u8>(), 0..48),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
    ) {
        // Valid records, then noise, with a few bytes changed: mostly near misses.
        let mut bytes = [records(valid), noise].concat();
        for (at, value) in edits {
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
        }
        let batch = lying_batch(codec, count, &bytes);
        let walked = batch.validate_records(BUDGET, |_| {});
        prop_assert_eq!(walked.is_ok(), iterator_accepts(&batch), "{:?}", walked);
    }
}
