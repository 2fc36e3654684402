//! Golden tests: request frames that real clients sent, decoded and re-encoded byte for
//! byte.
//!
//! The frames under `tests/golden/{librdkafka,java}/<client-id>/` were captured by
//! `compat-tests/golden/capture.sh` (librdkafka through Python confluent-kafka, and the
//! Java kafka-clients; versions in `tests/golden/CLIENTS.txt`) talking to the capture
//! listener example. Each `<ApiName>-v<version>-<n>.bin` is one request without its
//! size prefix. A `.undecodable` file is a request at a version newer than the codec
//! knows (the listener answered it per KIP-511). No client is needed to run these tests.

use bytes::{Bytes, BytesMut};
use osprey_protocol::frame::{encode_request, split_request};
use osprey_protocol::messages::ProduceRequest;
use osprey_protocol::{ApiKey, DecodeError, RequestBody};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

const FAMILIES: &[&str] = &["librdkafka", "java"];

/// The APIs every client family must have been captured sending.
const REQUIRED_APIS: &[ApiKey] =
    &[ApiKey::ApiVersions, ApiKey::Metadata, ApiKey::Produce, ApiKey::Fetch, ApiKey::JoinGroup, ApiKey::InitProducerId];

/// Record batch compression codecs (attributes bits 0-2): none, gzip, snappy, lz4, zstd.
const CODECS: &[(u8, &str)] = &[(0, "none"), (1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")];

#[test]
fn every_captured_request_round_trips_byte_for_byte() {
    let mut failures = String::new();
    let mut checked = 0;
    for family in FAMILIES {
        for path in files(family, "bin") {
            checked += 1;
            if let Err(why) = round_trip(&path) {
                let _ = writeln!(failures, "{}: {why}", relative(&path));
            }
        }
    }
    assert!(checked > 0, "no golden frames under {}", golden_root().display());
    assert!(failures.is_empty(), "frames that did not round-trip:\n{failures}");
}

#[test]
fn librdkafka_captures_cover_the_required_requests_and_codecs() {
    assert_coverage("librdkafka");
}

#[test]
fn java_captures_cover_the_required_requests_and_codecs() {
    assert_coverage("java");
}

/// A frame kept because the codec could not decode it must still have a readable header,
/// and its body must fail only for its version; once the codec learns that version the
/// test says so, and the capture should be refreshed so that the frame becomes a `.bin`.
#[test]
fn undecodable_captures_are_only_versions_the_codec_does_not_know() {
    for family in FAMILIES {
        for path in files(family, "undecodable") {
            let frame = Bytes::from(fs::read(&path).expect("readable golden file"));
            let split = split_request(frame).unwrap_or_else(|e| panic!("{}: header: {e}", relative(&path)));
            let version = split.header.request_api_version;
            match RequestBody::decode(split.api_key, &mut split.body.clone(), version) {
                Err(DecodeError::UnsupportedVersion { .. }) => {}
                other => panic!(
                    "{}: {} v{version} now decodes ({other:?}); re-run compat-tests/golden/capture.sh",
                    relative(&path),
                    split.api_key.name()
                ),
            }
        }
    }
}

fn assert_coverage(family: &str) {
    let mut apis = BTreeSet::new();
    let mut codecs = BTreeSet::new();
    for path in files(family, "bin") {
        let frame = Bytes::from(fs::read(&path).expect("readable golden file"));
        let Ok(split) = split_request(frame) else { continue };
        apis.insert(split.api_key);
        if split.api_key == ApiKey::Produce {
            let version = split.header.request_api_version;
            if let Ok(RequestBody::Produce(produce)) =
                RequestBody::decode(ApiKey::Produce, &mut split.body.clone(), version)
            {
                codecs.extend(batch_codecs(&produce));
            }
        }
    }
    let missing_apis: Vec<_> = REQUIRED_APIS.iter().filter(|k| !apis.contains(k)).map(|k| k.name()).collect();
    let missing_codecs: Vec<_> = CODECS.iter().filter(|(c, _)| !codecs.contains(c)).map(|(_, name)| *name).collect();
    assert!(
        missing_apis.is_empty() && missing_codecs.is_empty(),
        "{family}: no golden frame for {missing_apis:?}, no Produce batch compressed with {missing_codecs:?} \
         (under {}; re-run compat-tests/golden/capture.sh)",
        golden_root().join(family).display()
    );
}

/// Splits, decodes and re-encodes one frame; on a difference, says where and how.
fn round_trip(path: &Path) -> Result<(), String> {
    let frame = Bytes::from(fs::read(path).map_err(|e| e.to_string())?);
    let split = split_request(frame.clone()).map_err(|e| format!("header: {e}"))?;
    let version = split.header.request_api_version;
    let expected_prefix = format!("{}-v{version}-", split.api_key.name());
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if !name.starts_with(&expected_prefix) {
        return Err(format!("the frame is a {expected_prefix}* request, not what its name says"));
    }
    let mut body = split.body.clone();
    let decoded = RequestBody::decode(split.api_key, &mut body, version).map_err(|e| format!("decode: {e}"))?;
    if !body.is_empty() {
        return Err(format!("{} bytes left after decoding the body", body.len()));
    }
    let mut encoded = BytesMut::new();
    encode_request(&split.header, &decoded, &mut encoded).map_err(|e| format!("encode: {e}"))?;
    if encoded[..] != frame[..] {
        return Err(describe_difference(&frame, &encoded, frame.len() - split.body.len()));
    }
    Ok(())
}

fn describe_difference(captured: &[u8], encoded: &[u8], header_len: usize) -> String {
    let at = captured.iter().zip(encoded).position(|(a, b)| a != b).unwrap_or(captured.len().min(encoded.len()));
    let window = |b: &[u8]| {
        let from = at.saturating_sub(8);
        let to = (at + 16).min(b.len());
        b.get(from..to).unwrap_or_default().iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
    };
    let place = if at < header_len { "header" } else { "body" };
    format!(
        "re-encoded differs at byte {at} (in the {place}, header is {header_len} bytes); captured {} bytes, \
         encoded {} bytes\n  captured from {}: {}\n  encoded  from {}: {}",
        captured.len(),
        encoded.len(),
        at.saturating_sub(8),
        window(captured),
        at.saturating_sub(8),
        window(encoded)
    )
}

/// The compression codec of every record batch in a Produce request: bits 0-2 of the
/// int16 attributes at byte 21 of each v2 batch (PROTOCOL-NOTES, "Record batch v2").
fn batch_codecs(produce: &ProduceRequest) -> Vec<u8> {
    let mut codecs = Vec::new();
    for partition in produce.topic_data.iter().flat_map(|t| &t.partition_data) {
        let mut records: &[u8] = partition.records.as_deref().unwrap_or_default();
        // baseOffset i64, batchLength i32: the batch is 12 + batchLength bytes.
        while let (Some(length), Some(&magic), Some(&attributes)) =
            (records.get(8..12), records.get(16), records.get(22))
        {
            assert_eq!(magic, 2, "only record batch v2 is expected from current clients");
            codecs.push(attributes & 0x07);
            let length = i32::from_be_bytes(length.try_into().expect("four bytes"));
            let Some(rest) = usize::try_from(length).ok().and_then(|l| records.get(12 + l..)) else { break };
            records = rest;
        }
    }
    codecs
}

fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn relative(path: &Path) -> String {
    path.strip_prefix(golden_root()).unwrap_or(path).display().to_string()
}

/// Every file with the extension under `tests/golden/<family>/`, sorted.
fn files(family: &str, extension: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, extension: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, extension, out);
            } else if path.extension().is_some_and(|e| e == extension) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&golden_root().join(family), extension, &mut out);
    out.sort();
    out
}
