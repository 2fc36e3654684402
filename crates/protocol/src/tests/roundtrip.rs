//! For every message and every version: decode(encode(x)) == x, and the bytes of a
//! decoded message re-encode to exactly the same bytes.

use crate::messages::visit_messages;
use crate::wire::{MessageVisitor, RandomMessage, TestRng};
use bytes::BytesMut;
use proptest::prelude::*;

/// Round-trips random values of every message at every version, counting the checks.
struct RoundTrip {
    rng: TestRng,
    values_per_version: usize,
    checked: usize,
}

impl MessageVisitor for RoundTrip {
    fn visit<M: RandomMessage>(&mut self) {
        let (min, max) = M::VERSIONS;
        for version in min..=max {
            for _ in 0..self.values_per_version {
                let value = M::random(&mut self.rng, version);
                let mut buf = BytesMut::new();
                value.encode(&mut buf, version).unwrap_or_else(|e| panic!("{} v{version}: encode: {e}", M::NAME));
                let bytes = buf.freeze();
                assert!(bytes.len() >= M::min_len(version), "{} v{version}: shorter than min_len", M::NAME);
                let decoded = M::decode_exact(bytes.clone(), version)
                    .unwrap_or_else(|e| panic!("{} v{version}: decode: {e}\n{value:?}", M::NAME));
                assert_eq!(decoded, value, "{} v{version}: decode(encode(x)) != x", M::NAME);
                let mut again = BytesMut::new();
                decoded
                    .encode(&mut again, version)
                    .unwrap_or_else(|e| panic!("{} v{version}: re-encode: {e}", M::NAME));
                assert_eq!(again.freeze(), bytes, "{} v{version}: encode(decode(bytes)) != bytes", M::NAME);
                self.checked += 1;
            }
        }
    }
}

#[test]
fn every_message_round_trips_at_every_version() {
    let mut rt = RoundTrip { rng: TestRng::new(0x05b7e4), values_per_version: 20, checked: 0 };
    visit_messages(&mut rt);
    // Catches a visitor that silently skips messages: ~220 messages, ~660 (message, version) pairs.
    assert!(rt.checked > 20 * 600, "only {} round trips ran", rt.checked);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn every_message_round_trips_for_any_seed(seed in any::<u64>()) {
        let mut rt = RoundTrip { rng: TestRng::new(seed), values_per_version: 1, checked: 0 };
        visit_messages(&mut rt);
    }
}
