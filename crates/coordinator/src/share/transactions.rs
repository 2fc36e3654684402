//! read_committed: which of the batches read belong to aborted transactions (Kafka's
//! `SharePartition.fetchAbortedTransactionRecordBatches`).

use super::acquire::{AbortedTransaction, ControlMarker, LogBatch};
use std::collections::BTreeSet;

/// The `(first_offset, last_offset)` of the data batches of `batches` that belong to one
/// of `aborted` (both as the log read returns them), in offset order. A producer's
/// transaction is aborted from its first offset up to its ABORT marker.
pub(super) fn aborted_batches(batches: &[LogBatch], aborted: &[AbortedTransaction]) -> Vec<(i64, i64)> {
    let mut pending: Vec<AbortedTransaction> = aborted.to_vec();
    pending.sort_by_key(|t| std::cmp::Reverse(t.first_offset));
    let mut aborted_producers = BTreeSet::new();
    let mut out = Vec::new();
    for batch in batches.iter().filter(|b| b.producer_id >= 0) {
        while pending.last().is_some_and(|t| t.first_offset <= batch.last_offset) {
            if let Some(t) = pending.pop() {
                aborted_producers.insert(t.producer_id);
            }
        }
        match batch.control {
            Some(ControlMarker::Abort) => {
                aborted_producers.remove(&batch.producer_id);
            }
            Some(ControlMarker::Commit) => {}
            None if batch.is_transactional && aborted_producers.contains(&batch.producer_id) => {
                out.push((batch.first_offset, batch.last_offset));
            }
            None => {}
        }
    }
    out
}
