//! Record batches from an untrusted peer: split into batches, check CRCs and produce
//! invariants, rewrite headers in place, decompress within a budget, iterate records and
//! build again what parsed. The checks live in `osprey_protocol::records::fuzzing`, so
//! that `cargo test` replays the committed corpus through them too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use osprey_protocol::records::fuzzing::check_untrusted_batches;

fuzz_target!(|data: &[u8]| check_untrusted_batches(data));
