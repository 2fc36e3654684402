//! A response body as a client would read it: api key and version from the first four
//! bytes, the body after. Decoding must never panic, and decoded values re-encode stably.
#![no_main]

use bytes::{Buf, Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use osprey_protocol::{ApiKey, ResponseBody};

fuzz_target!(|data: &[u8]| {
    let mut buf = Bytes::copy_from_slice(data);
    if buf.remaining() < 4 {
        return;
    }
    let Some(api_key) = ApiKey::from_i16(buf.get_i16()) else { return };
    let version = buf.get_i16();
    let Ok(body) = ResponseBody::decode(api_key, &mut buf, version) else { return };
    let mut first = BytesMut::new();
    body.encode(&mut first, version).expect("a decoded response re-encodes");
    let again = ResponseBody::decode(api_key, &mut first.clone().freeze(), version).expect("re-encoded bytes decode");
    let mut second = BytesMut::new();
    again.encode(&mut second, version).expect("re-encodes twice");
    assert_eq!(first, second);
});
