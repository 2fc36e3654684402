//! `encode_response_leaving_out`: a Fetch response encoded with some records fields left
//! out, put back together with those fields' bytes at its gaps, is exactly the response
//! `encode_response` writes, at every Fetch version.

use bytes::{Bytes, BytesMut};
use osprey_protocol::frame::{decode_response_header, encode_response, encode_response_leaving_out, RecordsGap};
use osprey_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, NodeEndpoint, PartitionData,
};
use osprey_protocol::messages::FetchResponse;
use osprey_protocol::{ApiKey, EncodeError, Message, ResponseBody, Uuid};
use proptest::prelude::*;

const CORRELATION_ID: i32 = 0x0517;
/// Large enough that a compact length prefix takes three bytes.
const LARGE_RECORDS_BYTES: usize = 70_000;

#[test]
fn fetch_response_put_back_together_at_its_gaps_is_the_plain_encoding_at_every_version() {
    for version in fetch_versions() {
        let body =
            fetch_response(version, &[&[Some(LARGE_RECORDS_BYTES), Some(0), None], &[Some(127), Some(128)], &[]]);
        let mut leave_out = |n: usize, records: &Bytes| n.is_multiple_of(2).then_some(records.len());
        assert_put_back_together_is_plain(version, &body, &mut leave_out);
    }
}

#[test]
fn leaving_nothing_out_gives_the_plain_encoding_and_no_gaps() {
    for version in fetch_versions() {
        let body = fetch_response(version, &[&[Some(LARGE_RECORDS_BYTES), None], &[Some(3)]]);
        let mut buf = BytesMut::new();
        let gaps =
            encode_response_leaving_out(CORRELATION_ID, version, &body_of(body.clone()), &mut buf, &mut |_, _| None)
                .unwrap_or_else(|e| panic!("v{version}: {e}"));
        assert_eq!(gaps, Vec::new(), "v{version}");
        assert_eq!(buf.freeze(), plain(version, &body), "v{version}");
    }
}

#[test]
fn ordinals_count_only_the_non_null_records_fields_in_encoding_order() {
    let version = 18;
    let body = fetch_response(version, &[&[Some(1), None, Some(2)], &[None], &[Some(0), Some(3)]]);
    let mut asked = Vec::new();
    let gaps = encode_response_leaving_out(
        CORRELATION_ID,
        version,
        &body_of(body.clone()),
        &mut BytesMut::new(),
        &mut |n, records| {
            asked.push((n, records.clone()));
            Some(records.len())
        },
    )
    .unwrap();
    let non_null: Vec<(usize, Bytes)> = all_records(&body).into_iter().flatten().enumerate().collect();
    assert_eq!(non_null.len(), 4);
    assert_eq!(asked, non_null);
    assert_eq!(gaps.iter().map(|g| g.field).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
}

/// The broker's case: the body carries empty placeholders, and the records come from the
/// log file later, so the declared length is the file's, not the placeholder's.
#[test]
fn placeholder_records_declare_the_length_of_the_bytes_sent_later() {
    for version in fetch_versions() {
        let real = fetch_response(version, &[&[Some(LARGE_RECORDS_BYTES), None, Some(200)]]);
        let real_records: Vec<Bytes> = all_records(&real).into_iter().flatten().collect();
        let mut placeholders = real.clone();
        for records in
            placeholders.responses.iter_mut().flat_map(|t| &mut t.partitions).filter_map(|p| p.records.as_mut())
        {
            *records = Bytes::new();
        }
        let mut buf = BytesMut::new();
        let gaps =
            encode_response_leaving_out(CORRELATION_ID, version, &body_of(placeholders), &mut buf, &mut |n, _| {
                Some(real_records[n].len())
            })
            .unwrap();
        assert_eq!(put_back_together(&buf, &gaps, &real_records), plain(version, &real), "v{version}");
    }
}

#[test]
fn a_failed_encode_leaves_nothing_out_of_the_next_plain_encode() {
    // Node endpoints exist from v16 only, and come after the records: the encode fails
    // after records fields were met.
    let mut too_new = fetch_response(15, &[&[Some(10), Some(20)]]);
    too_new.node_endpoints.push(NodeEndpoint { node_id: 1, host: "h".into(), port: 9092, ..Default::default() });
    let err = encode_response_leaving_out(CORRELATION_ID, 15, &body_of(too_new), &mut BytesMut::new(), &mut |_, r| {
        Some(r.len())
    })
    .unwrap_err();
    assert!(matches!(err, EncodeError::FieldNotInVersion { .. }), "{err}");
    assert_next_plain_encode_writes_all_records(15);

    // A length the prefix cannot declare: over i32::MAX classic, over u32::MAX - 1 compact.
    for (version, len) in [(11, i32::MAX as usize + 1), (12, u32::MAX as usize)] {
        let body = body_of(fetch_response(version, &[&[Some(10), Some(20)]]));
        let err = encode_response_leaving_out(CORRELATION_ID, version, &body, &mut BytesMut::new(), &mut |n, r| {
            Some(if n == 1 { len } else { r.len() })
        })
        .unwrap_err();
        assert_eq!(err, EncodeError::TooLong { field: "PartitionData.records", length: len }, "v{version}");
        assert_next_plain_encode_writes_all_records(version);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn any_records_left_out_put_back_together_give_the_plain_encoding(
        version in 4i16..=18,
        layout in proptest::collection::vec(
            proptest::collection::vec(proptest::option::of(prop_oneof![0usize..4, 120usize..140, 16_000usize..17_000]), 0..5),
            0..4,
        ),
        left_out in any::<u64>(),
    ) {
        let layout: Vec<&[Option<usize>]> = layout.iter().map(Vec::as_slice).collect();
        let body = fetch_response(version, &layout);
        let mut leave_out = |n: usize, records: &Bytes| ((left_out >> (n % 64)) & 1 == 1).then_some(records.len());
        assert_put_back_together_is_plain(version, &body, &mut leave_out);
    }
}

fn fetch_versions() -> std::ops::RangeInclusive<i16> {
    let (min, max) = FetchResponse::VERSIONS;
    assert_eq!((min, max), ApiKey::Fetch.versions());
    min..=max
}

/// Encodes `body` leaving out what `leave_out` says, after a 4-byte size prefix as the
/// server writes one, and checks the gaps, the bytes put back together and their decoding.
fn assert_put_back_together_is_plain(
    version: i16,
    body: &FetchResponse,
    leave_out: &mut dyn FnMut(usize, &Bytes) -> Option<usize>,
) {
    let records: Vec<Bytes> = all_records(body).into_iter().flatten().collect();
    let mut buf = BytesMut::from(&[0xee; 4][..]);
    let gaps = encode_response_leaving_out(CORRELATION_ID, version, &body_of(body.clone()), &mut buf, leave_out)
        .unwrap_or_else(|e| panic!("v{version}: {e}"));
    let expected_fields: Vec<usize> = (0..records.len()).filter(|&n| leave_out(n, &records[n]).is_some()).collect();
    assert_eq!(gaps.iter().map(|g| g.field).collect::<Vec<_>>(), expected_fields, "v{version}");
    assert!(gaps.windows(2).all(|w| w[0].at < w[1].at), "v{version}: gaps out of order {gaps:?}");
    assert!(gaps.iter().all(|g| g.at > 4 && g.at <= buf.len() && g.len == records[g.field].len()), "v{version}");
    let left_out_bytes: usize = gaps.iter().map(|g| g.len).sum();

    let whole = put_back_together(&buf, &gaps, &records);
    assert_eq!(whole.len(), buf.len() + left_out_bytes);
    assert_eq!(&whole[..4], &[0xee; 4], "v{version}: the size prefix moved");
    let plain = plain(version, body);
    assert_eq!(whole.slice(4..), plain, "v{version}: put back together != encode_response");

    let mut frame = whole.slice(4..);
    let header = decode_response_header(&mut frame, ApiKey::Fetch, version).unwrap();
    assert_eq!(header.correlation_id, CORRELATION_ID);
    assert_eq!(FetchResponse::decode_exact(frame, version).unwrap(), *body, "v{version}");
}

/// The wire bytes: `buf` with each gap's records (`records[gap.field]`) at its position.
fn put_back_together(buf: &[u8], gaps: &[RecordsGap], records: &[Bytes]) -> Bytes {
    let mut whole = Vec::new();
    let mut from = 0;
    for gap in gaps {
        whole.extend_from_slice(&buf[from..gap.at]);
        whole.extend_from_slice(&records[gap.field][..gap.len]);
        from = gap.at;
    }
    whole.extend_from_slice(&buf[from..]);
    whole.into()
}

fn assert_next_plain_encode_writes_all_records(version: i16) {
    let body = fetch_response(version, &[&[Some(10), Some(20)]]);
    let mut buf = BytesMut::new();
    encode_response(CORRELATION_ID, version, &body_of(body.clone()), &mut buf).unwrap();
    let mut frame = buf.freeze();
    decode_response_header(&mut frame, ApiKey::Fetch, version).unwrap();
    assert_eq!(FetchResponse::decode_exact(frame, version).unwrap(), body, "v{version}: records left out");
}

fn plain(version: i16, body: &FetchResponse) -> Bytes {
    let mut buf = BytesMut::new();
    encode_response(CORRELATION_ID, version, &body_of(body.clone()), &mut buf)
        .unwrap_or_else(|e| panic!("v{version}: {e}"));
    buf.freeze()
}

fn body_of(fetch: FetchResponse) -> ResponseBody {
    ResponseBody::Fetch(fetch)
}

/// Every partition's records in encoding order, null ones as `None`.
fn all_records(body: &FetchResponse) -> Vec<Option<Bytes>> {
    body.responses.iter().flat_map(|t| &t.partitions).map(|p| p.records.clone()).collect()
}

/// A Fetch response valid at `version`: one topic per entry of `topics`, one partition per
/// entry of that, with records of that many bytes (`None`: null records).
fn fetch_response(version: i16, topics: &[&[Option<usize>]]) -> FetchResponse {
    let responses = topics
        .iter()
        .enumerate()
        .map(|(t, partitions)| FetchableTopicResponse {
            topic: if version <= 12 { format!("topic-{t}") } else { String::new() },
            topic_id: if version >= 13 { Uuid([t as u8 + 1; 16]) } else { Uuid::ZERO },
            partitions: partitions
                .iter()
                .enumerate()
                .map(|(p, records_bytes)| PartitionData {
                    partition_index: p as i32,
                    high_watermark: 1000 + p as i64,
                    last_stable_offset: 900,
                    log_start_offset: if version >= 5 { 10 } else { -1 },
                    aborted_transactions: (p % 2 == 0)
                        .then(|| vec![AbortedTransaction { producer_id: 7, first_offset: 950, ..Default::default() }]),
                    preferred_read_replica: if version >= 11 { 2 } else { -1 },
                    records: records_bytes.map(|n| (0..n).map(|i| (i * 31 + t * 7 + p) as u8).collect()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    FetchResponse {
        throttle_time_ms: 5,
        session_id: if version >= 7 { 42 } else { 0 },
        responses,
        node_endpoints: if version >= 16 {
            vec![NodeEndpoint { node_id: 2, host: "broker-2".into(), port: 9092, ..Default::default() }]
        } else {
            Vec::new()
        },
        ..Default::default()
    }
}
