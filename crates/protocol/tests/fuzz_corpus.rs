//! Replays the committed fuzz corpora (seeds and any crash reproducers) through the same
//! checks as the fuzz targets, so every `cargo test` guards the fixed bugs without nightly.

use bytes::{Buf, Bytes, BytesMut};
use osprey_protocol::frame::split_request;
use osprey_protocol::{ApiKey, RequestBody, ResponseBody};
use std::path::PathBuf;

/// One seed per API key at its lowest and its highest version (one when they are equal).
fn expected_seeds() -> usize {
    ApiKey::ALL.iter().map(|k| if k.versions().0 == k.versions().1 { 1 } else { 2 }).sum()
}

fn corpus(name: &str) -> Vec<(String, Bytes)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| (p.file_name().expect("name").to_string_lossy().into_owned(), std::fs::read(&p).expect("read").into()))
        .collect()
}

#[test]
fn request_seeds_decode_and_re_encode_exactly() {
    let seeds = corpus("request");
    assert!(seeds.len() >= expected_seeds(), "seed corpus is missing files");
    for (name, bytes) in seeds {
        let frame = split_request(bytes.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let version = frame.header.request_api_version;
        let body = RequestBody::decode(frame.api_key, &mut frame.body.clone(), version)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut out = BytesMut::new();
        body.encode(&mut out, version).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.freeze(), frame.body, "{name}: body did not re-encode byte for byte");
    }
}

#[test]
fn response_seeds_decode_and_re_encode_exactly() {
    let seeds = corpus("response");
    assert!(seeds.len() >= expected_seeds(), "seed corpus is missing files");
    for (name, mut bytes) in seeds {
        let key = ApiKey::from_i16(bytes.get_i16()).unwrap_or_else(|| panic!("{name}: unknown key"));
        let version = bytes.get_i16();
        let body = ResponseBody::decode(key, &mut bytes.clone(), version).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut out = BytesMut::new();
        body.encode(&mut out, version).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.freeze(), bytes, "{name}: body did not re-encode byte for byte");
    }
}
