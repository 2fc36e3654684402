//! Bytes from the network must never panic the decoder or size an allocation by a
//! length they merely claim.

use crate::frame::{split_request, FrameError};
use crate::messages::{visit_messages, ApiVersionsRequest, MetadataRequest, ProduceRequest};
use crate::wire::{DecodeError, Message, MessageVisitor, RandomMessage, RawTaggedField, TestRng};
use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

/// Decodes every strict prefix of valid encodings, and corrupted copies of them.
struct Mangle {
    rng: TestRng,
}

impl MessageVisitor for Mangle {
    fn visit<M: RandomMessage>(&mut self) {
        let (min, max) = M::VERSIONS;
        for version in min..=max {
            let value = M::random(&mut self.rng, version);
            let mut buf = BytesMut::new();
            value.encode(&mut buf, version).expect("random values encode");
            let bytes = buf.freeze();
            for cut in 0..bytes.len() {
                // A strict prefix can never decode as the whole message.
                assert!(M::decode_exact(bytes.slice(..cut), version).is_err(), "{} v{version} prefix {cut}", M::NAME);
            }
            for _ in 0..8 {
                let mut bad = bytes.to_vec();
                if bad.is_empty() {
                    break;
                }
                let at = self.rng.below(bad.len() as u64) as usize;
                bad[at] = self.rng.next_u64() as u8;
                let _ = M::decode_exact(Bytes::from(bad), version);
            }
        }
    }
}

#[test]
fn truncated_and_corrupted_messages_never_panic() {
    visit_messages(&mut Mangle { rng: TestRng::new(7) });
}

proptest! {
    #[test]
    fn random_bytes_never_panic_any_decoder(data in proptest::collection::vec(any::<u8>(), 0..256), version in 0i16..20) {
        struct Any { data: Bytes, version: i16 }
        impl MessageVisitor for Any {
            fn visit<M: RandomMessage>(&mut self) {
                let _ = M::decode(&mut self.data.clone(), self.version);
            }
        }
        visit_messages(&mut Any { data: Bytes::from(data.clone()), version });
        let _ = split_request(Bytes::from(data));
    }
}

#[test]
fn array_count_larger_than_the_frame_is_refused_before_allocating() {
    // Metadata v0: topics array claiming i32::MAX entries, followed by nothing.
    let mut buf = BytesMut::new();
    buf.put_i32(i32::MAX);
    let err = MetadataRequest::decode(&mut buf.freeze(), 0).unwrap_err();
    assert!(matches!(err, DecodeError::InvalidLength { length, .. } if length == i64::from(i32::MAX)), "{err}");
}

#[test]
fn array_count_times_smallest_element_beyond_the_frame_is_refused() {
    // Metadata v0: 10 topic names claimed, each at least 2 bytes, but only 15 bytes follow.
    let mut buf = BytesMut::new();
    buf.put_i32(10);
    buf.put_slice(&[0; 15]);
    let err = MetadataRequest::decode(&mut buf.freeze(), 0).unwrap_err();
    assert!(matches!(err, DecodeError::InvalidLength { length: 10, .. }), "{err}");
}

#[test]
fn string_length_larger_than_the_frame_is_truncated_not_allocated() {
    // Produce v3: transactional id claims 30000 bytes, 2 are present.
    let mut buf = BytesMut::new();
    buf.put_i16(30000);
    buf.put_slice(b"ab");
    let err = ProduceRequest::decode(&mut buf.freeze(), 3).unwrap_err();
    assert!(matches!(err, DecodeError::Truncated { needed: 30000, remaining: 2, .. }), "{err}");
}

#[test]
fn negative_lengths_other_than_null_are_invalid() {
    let mut buf = BytesMut::new();
    buf.put_i32(-2);
    let err = MetadataRequest::decode(&mut buf.freeze(), 1).unwrap_err();
    assert!(matches!(err, DecodeError::InvalidLength { length: -2, .. }), "{err}");
}

#[test]
fn null_in_a_version_where_the_field_is_not_nullable_is_refused() {
    // Metadata v0 topics are not nullable (null means "all topics" only from v1).
    let mut buf = BytesMut::new();
    buf.put_i32(-1);
    let err = MetadataRequest::decode(&mut buf.freeze(), 0).unwrap_err();
    assert!(matches!(err, DecodeError::UnexpectedNull { .. }), "{err}");
    let mut buf = BytesMut::new();
    buf.put_i32(-1);
    assert_eq!(MetadataRequest::decode(&mut buf.freeze(), 1).unwrap().topics, None);
}

#[test]
fn overlong_varint_is_refused() {
    // ApiVersions v3 (flexible): client_software_name length as a 6-byte varint.
    let bytes = Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
    let err = ApiVersionsRequest::decode(&mut bytes.clone(), 3).unwrap_err();
    assert!(matches!(err, DecodeError::VarintTooLong { .. }), "{err}");
}

#[test]
fn unknown_tagged_fields_are_skipped_and_kept() {
    let mut req = ApiVersionsRequest {
        client_software_name: "osprey-test".into(),
        client_software_version: "1".into(),
        ..Default::default()
    };
    req.unknown_tagged_fields.push(RawTaggedField { tag: 77, data: Bytes::from_static(b"\x01\x02\x03") });
    let mut buf = BytesMut::new();
    req.encode(&mut buf, 3).unwrap();
    let decoded = ApiVersionsRequest::decode_exact(buf.freeze(), 3).unwrap();
    assert_eq!(decoded.client_software_name, "osprey-test");
    assert_eq!(decoded.unknown_tagged_fields, req.unknown_tagged_fields);
}

#[test]
fn unsupported_versions_are_typed_errors() {
    let err = ProduceRequest::decode(&mut Bytes::new(), 99).unwrap_err();
    assert!(matches!(err, DecodeError::UnsupportedVersion { version: 99, .. }), "{err}");
}

#[test]
fn unknown_api_key_is_reported_with_its_correlation_id() {
    let mut buf = BytesMut::new();
    buf.put_i16(9999);
    buf.put_i16(0);
    buf.put_i32(42);
    buf.put_i16(-1);
    let err = split_request(buf.freeze()).unwrap_err();
    assert_eq!(err, FrameError::UnknownApiKey { api_key: 9999, correlation_id: 42 });
}

#[test]
fn api_versions_of_an_unknown_version_still_has_a_readable_header() {
    // KIP-511: a client may send ApiVersions v127; the header is v2 and must parse so the
    // broker can answer UNSUPPORTED_VERSION with its ranges.
    let mut buf = BytesMut::new();
    buf.put_i16(18);
    buf.put_i16(127);
    buf.put_i32(5);
    buf.put_i16(3);
    buf.put_slice(b"cli");
    buf.put_u8(0); // no tagged fields
    buf.put_slice(b"future body");
    let frame = split_request(buf.freeze()).unwrap();
    assert_eq!(frame.header.correlation_id, 5);
    assert_eq!(frame.header.client_id.as_deref(), Some("cli"));
    assert_eq!(&frame.body[..], b"future body");
}
