//! A request frame (without its size prefix) from an untrusted client: splitting the
//! header and decoding the body must never panic, and whatever decodes must re-encode
//! to bytes that decode to the same re-encoding (compared as bytes, so NaN floats are fine).
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use osprey_protocol::frame::split_request;
use osprey_protocol::RequestBody;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = split_request(Bytes::copy_from_slice(data)) else { return };
    let version = frame.header.request_api_version;
    let Ok(body) = RequestBody::decode(frame.api_key, &mut frame.body.clone(), version) else { return };
    let mut first = BytesMut::new();
    body.encode(&mut first, version).expect("a decoded request re-encodes");
    let again = RequestBody::decode(frame.api_key, &mut first.clone().freeze(), version).expect("re-encoded bytes decode");
    let mut second = BytesMut::new();
    again.encode(&mut second, version).expect("re-encodes twice");
    assert_eq!(first, second);
});
