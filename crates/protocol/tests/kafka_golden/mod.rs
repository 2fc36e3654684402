//! Kafka's own encodings of messages, under `tests/golden/<dir>/`: each `.hex` file was
//! written by the Java program in that directory from Kafka 4.4's generated message
//! classes, with the values the test builds here.

use bytes::{Bytes, BytesMut};
use osprey_protocol::{Message, Uuid};
use std::path::PathBuf;

/// The topic ids the Java programs use (`A` and `B` there).
pub const A: Uuid = Uuid([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
pub const B: Uuid = Uuid([17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32]);

/// The bytes of `tests/golden/<dir>/<file>.hex`.
pub fn kafka_bytes(dir: &str, file: &str) -> Bytes {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(dir).join(format!("{file}.hex"));
    let hex = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let hex = hex.trim();
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect::<Vec<u8>>().into()
}

/// Kafka's bytes of `<name>-v<version>` decode to `expected`, and `expected` encodes to
/// Kafka's bytes.
pub fn check<M: Message>(dir: &str, name: &str, version: i16, expected: M) {
    check_bytes(&format!("{name} v{version}"), kafka_bytes(dir, &format!("{name}-v{version}")), version, expected);
}

/// `bytes` decode to `expected` at `version`, and `expected` encodes to `bytes`.
pub fn check_bytes<M: Message>(what: &str, bytes: Bytes, version: i16, expected: M) {
    let decoded = M::decode_exact(bytes.clone(), version).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(decoded, expected, "{what}: decoded Kafka's bytes");
    let mut out = BytesMut::new();
    expected.encode(&mut out, version).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(out.freeze(), bytes, "{what}: encoded differently from Kafka");
}
