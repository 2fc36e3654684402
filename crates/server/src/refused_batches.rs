//! Producer batches a partition refused before appending them (NOT_LEADER_OR_FOLLOWER,
//! NOT_ENOUGH_REPLICAS), remembered so that a gap they leave in a producer's sequence is
//! answered with the same refusal, not OUT_OF_ORDER_SEQUENCE_NUMBER.
//!
//! The race (chaos seed 3, issue 17): metadata from another broker names this one the new
//! leader before this one has applied it. A producer's pipelined batches with sequences
//! 386, 387 and 388 arrive; 386 and 387 are refused NOT_LEADER_OR_FOLLOWER, the leadership
//! lands, and 388 finds 386 (replicated from the old leader) as the producer's last
//! sequence: a gap. Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER. librdkafka then bumps the
//! producer's epoch and renumbers every batch not yet acknowledged, 386 included, although
//! the old leader had written 386 before it lost the leadership (its NOT_LEADER_OR_FOLLOWER
//! answer, Kafka's too, tells librdkafka "not persisted"): 386 is stored twice. Answered
//! NOT_LEADER_OR_FOLLOWER too, 388 is retried after 386 and 387, 386 is found to be a
//! duplicate, and nothing is stored twice. The Java client retries either answer in order.
//!
//! A gap that no refusal here explains still gets OUT_OF_ORDER_SEQUENCE_NUMBER, and a
//! refusal is forgotten after [`REFUSAL_REMEMBERED_FOR`].

use osprey_protocol::ErrorCode;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Producers whose refused batches one partition remembers; past it a refusal is not
/// remembered (that producer's gap gets OUT_OF_ORDER_SEQUENCE_NUMBER, as in Kafka).
pub const REFUSED_PRODUCERS_REMEMBERED: usize = 1024;
/// How long a refusal explains a gap: longer than a client's retry back-off and metadata
/// refresh, shorter than any producer would wait with a real gap.
pub const REFUSAL_REMEMBERED_FOR: Duration = Duration::from_secs(30);

/// The sequences of one producer epoch's refused batches, and the refusal.
#[derive(Debug, Clone, Copy)]
struct Refused {
    epoch: i16,
    first_sequence: i32,
    last_sequence: i32,
    code: ErrorCode,
    at: Instant,
}

#[derive(Debug, Default)]
pub struct RefusedBatches {
    by_producer: Mutex<HashMap<i64, Refused>>,
}

impl RefusedBatches {
    /// Remembers that the batch of `producer_id` at `epoch` with sequences
    /// `first_sequence..=last_sequence` was refused with `code` before it was appended.
    pub fn refused(&self, producer_id: i64, epoch: i16, first_sequence: i32, last_sequence: i32, code: ErrorCode) {
        if producer_id < 0 || first_sequence < 0 {
            return;
        }
        let now = Instant::now();
        let mut by_producer = self.lock();
        if by_producer.len() >= REFUSED_PRODUCERS_REMEMBERED && !by_producer.contains_key(&producer_id) {
            by_producer.retain(|_, r| now.duration_since(r.at) < REFUSAL_REMEMBERED_FOR);
            if by_producer.len() >= REFUSED_PRODUCERS_REMEMBERED {
                return;
            }
        }
        let new = Refused { epoch, first_sequence, last_sequence, code, at: now };
        by_producer
            .entry(producer_id)
            .and_modify(|r| {
                *r = match epoch.cmp(&r.epoch) {
                    std::cmp::Ordering::Less => *r,
                    std::cmp::Ordering::Greater => new,
                    std::cmp::Ordering::Equal => Refused {
                        first_sequence: r.first_sequence.min(first_sequence),
                        last_sequence: r.last_sequence.max(last_sequence),
                        ..new
                    },
                }
            })
            .or_insert(new);
    }

    /// The refusal to answer, instead of OUT_OF_ORDER_SEQUENCE_NUMBER, for a batch of
    /// `producer_id` at `epoch` starting at `first_sequence` whose last sequence on record
    /// is `expected_after`: one whose gap (`expected_after + 1 .. first_sequence`) holds a
    /// sequence this partition refused, recently.
    pub fn explains_gap(
        &self,
        producer_id: i64,
        epoch: i16,
        first_sequence: i32,
        expected_after: i32,
    ) -> Option<ErrorCode> {
        let mut by_producer = self.lock();
        let refused = *by_producer.get(&producer_id)?;
        if refused.at.elapsed() >= REFUSAL_REMEMBERED_FOR {
            by_producer.remove(&producer_id);
            return None;
        }
        let in_gap = refused.first_sequence < first_sequence && refused.last_sequence > expected_after;
        (refused.epoch == epoch && in_gap).then_some(refused.code)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Refused>> {
        self.by_producer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_LEADER: ErrorCode = ErrorCode::NOT_LEADER_OR_FOLLOWER;

    #[test]
    fn a_gap_holding_a_refused_sequence_is_explained_by_the_refusal() {
        let refused = RefusedBatches::default();
        refused.refused(7, 0, 386, 386, NOT_LEADER);
        refused.refused(7, 0, 387, 387, NOT_LEADER);
        // 386 was written by the old leader: the last on record; 388 follows a gap at 387.
        assert_eq!(refused.explains_gap(7, 0, 388, 386), Some(NOT_LEADER));
        // Nothing on record: the gap 0..386 holds 386 and 387.
        assert_eq!(refused.explains_gap(7, 0, 388, -1), Some(NOT_LEADER));
    }

    #[test]
    fn a_gap_without_a_refused_sequence_stays_out_of_order() {
        let refused = RefusedBatches::default();
        refused.refused(7, 0, 386, 387, NOT_LEADER);
        assert_eq!(refused.explains_gap(7, 0, 391, 388), None, "the gap 389..390 was never refused here");
        assert_eq!(refused.explains_gap(7, 0, 386, 380), None, "the gap 381..385 lies below the refusals");
        assert_eq!(refused.explains_gap(8, 0, 388, 385), None, "another producer");
        assert_eq!(refused.explains_gap(7, 1, 5, -1), None, "another epoch");
    }

    #[test]
    fn a_newer_epoch_replaces_the_refusals_of_an_older_one() {
        let refused = RefusedBatches::default();
        refused.refused(7, 0, 386, 387, NOT_LEADER);
        refused.refused(7, 1, 3, 3, ErrorCode::NOT_ENOUGH_REPLICAS);
        assert_eq!(refused.explains_gap(7, 0, 388, 385), None);
        assert_eq!(refused.explains_gap(7, 1, 4, 1), Some(ErrorCode::NOT_ENOUGH_REPLICAS));
        refused.refused(7, 0, 100, 100, NOT_LEADER);
        assert_eq!(
            refused.explains_gap(7, 1, 4, 1),
            Some(ErrorCode::NOT_ENOUGH_REPLICAS),
            "an older epoch's refusal is ignored"
        );
    }

    #[test]
    fn producers_past_the_bound_are_not_remembered() {
        let refused = RefusedBatches::default();
        for producer in 0..REFUSED_PRODUCERS_REMEMBERED as i64 {
            refused.refused(producer, 0, 1, 1, NOT_LEADER);
        }
        refused.refused(-5, 0, 1, 1, NOT_LEADER);
        let one_more = REFUSED_PRODUCERS_REMEMBERED as i64;
        refused.refused(one_more, 0, 1, 1, NOT_LEADER);
        assert_eq!(refused.explains_gap(one_more, 0, 2, 0), None);
        assert_eq!(refused.explains_gap(0, 0, 2, 0), Some(NOT_LEADER));
        assert_eq!(refused.lock().len(), REFUSED_PRODUCERS_REMEMBERED);
    }
}
