//! The checks of the `record_batch` fuzz target, shared with `cargo test` so that the
//! committed corpus (seeds and any reproducers) is replayed on stable without libFuzzer.
//!
//! Bytes from an untrusted peer are split into batches; each has its CRC and produce
//! invariants checked, its header rewritten in place, its records decompressed within a
//! budget and iterated (and walked as the broker validates them, which must agree), and
//! what parsed is built again. Nothing may panic, and the
//! properties asserted here must hold for any input.

use super::{
    BatchBuilder, Batches, Compression, Record, RecordBatch, RecordBatchMut, TimestampType, ATTR_TIMESTAMP_TYPE,
};
use bytes::Bytes;

/// Decompression budget: small enough that a bomb costs little per execution.
const BUDGET: usize = 256 * 1024;
/// The append time the rewrite check stamps.
const APPEND_TIME: i64 = 1_700_000_000_000;

/// Runs every reader and rewrite over `data`, asserting their properties.
pub fn check_untrusted_batches(data: &[u8]) {
    for batch in Batches::new(Bytes::copy_from_slice(data)) {
        let Ok(batch) = batch else { break };
        let crc_valid = batch.validate_crc();
        let _ = batch.check_produce_invariants();
        check_rewrites(&batch, crc_valid);
        let walked = batch.validate_records(BUDGET, |_| {});
        let Ok(records) = batch.records(BUDGET) else {
            assert!(walked.is_err(), "the walk accepted records the iterator cannot read");
            continue;
        };
        let records = records.collect::<Result<Vec<Record>, _>>();
        let consecutive = records.as_ref().is_ok_and(|r| r.iter().zip(0..).all(|(r, i)| r.offset_delta == i));
        assert_eq!(walked.is_ok(), consecutive, "the walk and the iterator disagree: {walked:?}");
        if let Ok(records) = records {
            check_rebuild(&batch, &records);
        }
    }
}

/// baseOffset and partitionLeaderEpoch lie outside the CRC; a LogAppendTime rewrite
/// computes it afresh unless it changes nothing (then, like Kafka's, it leaves it alone).
fn check_rewrites(batch: &RecordBatch, crc_valid: bool) {
    let mut bytes = batch.as_bytes().to_vec();
    let mut view = RecordBatchMut::new(&mut bytes).expect("a parsed batch is a valid view");
    view.set_base_offset(batch.base_offset().wrapping_add(1));
    view.set_partition_leader_epoch(batch.partition_leader_epoch().wrapping_add(1));
    let moved = RecordBatch::new(Bytes::from(bytes.clone())).expect("rewrite keeps framing");
    assert_eq!(moved.validate_crc(), crc_valid, "offset/epoch rewrite changed CRC validity");

    let unchanged = batch.timestamp_type() == TimestampType::LogAppendTime && batch.max_timestamp() == APPEND_TIME;
    let mut view = RecordBatchMut::new(&mut bytes).expect("still a valid view");
    view.set_log_append_time(APPEND_TIME);
    let stamped = RecordBatch::new(Bytes::from(bytes)).expect("rewrite keeps framing");
    assert_eq!(stamped.validate_crc(), crc_valid || !unchanged, "LogAppendTime rewrite left a wrong CRC");
    assert_eq!(stamped.max_timestamp(), APPEND_TIME);
    assert_eq!(stamped.timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!(stamped.attributes() & !ATTR_TIMESTAMP_TYPE, batch.attributes() & !ATTR_TIMESTAMP_TYPE);
}

/// What parsed can be written again, and reads back the same.
fn check_rebuild(batch: &RecordBatch, records: &[Record]) {
    let codec = batch.compression().unwrap_or(Compression::None);
    let mut builder = BatchBuilder::new(codec);
    for r in records {
        builder.append(r.timestamp, r.key.as_deref(), r.value.as_deref(), &r.headers).expect("it came from a batch");
    }
    let rebuilt = builder.build().expect("rebuild");
    assert!(rebuilt.validate_crc());
    let again: Vec<Record> =
        rebuilt.records(usize::MAX).expect("rebuilt records").collect::<Result<_, _>>().expect("rebuilt records parse");
    assert_eq!(again.len(), records.len());
    for (a, b) in again.iter().zip(records) {
        assert_eq!((a.timestamp, &a.key, &a.value, &a.headers), (b.timestamp, &b.key, &b.value, &b.headers));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_record_batch_corpus_passes_the_fuzz_checks() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/record_batch");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut replayed = 0;
        for entry in entries {
            let path = entry.expect("dir entry").path();
            check_untrusted_batches(&std::fs::read(&path).expect("read"));
            replayed += 1;
        }
        assert!(replayed > 0, "no corpus in {}", dir.display());
    }

    #[test]
    fn rewrite_to_the_append_time_already_set_keeps_a_bad_crc_bad() {
        // Found by the fuzzer: a LogAppendTime batch already stamped with APPEND_TIME and a
        // wrong CRC. The rewrite changes nothing, so the CRC stays wrong, as in Kafka.
        let mut builder = BatchBuilder::new(Compression::None).log_append_time(APPEND_TIME);
        builder.append(1, None, Some(b"v"), &[]).expect("append");
        let mut bytes = builder.build().expect("build").into_bytes().to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        check_untrusted_batches(&bytes);
    }
}
