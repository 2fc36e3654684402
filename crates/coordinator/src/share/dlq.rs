//! The dead-letter queue's side (KIP-1191, `share.version` 2): records moved to ARCHIVING
//! are handed to the server to write to the group's DLQ topic, and become ARCHIVED once
//! that write is done or has given up (Kafka's `SharePartition.initiateDLQAndArchive`).
//!
//! A record reaches ARCHIVING by a REJECT acknowledgement, or at the delivery count limit
//! (a RELEASE, a lock expiry, or a load finding it AVAILABLE there), while the group has a
//! DLQ topic ([`super::ShareConfig::dlq_enabled`]). An acknowledgement's ARCHIVING is
//! handed out only once its state write is durable (a rolled-back one never reaches the
//! queue); a lock expiry's at once, as Kafka does, its write being queued ahead of the
//! ARCHIVED one that follows. A new leader loading ARCHIVING records writes them again:
//! the dead-letter queue is written at least once per record, as Kafka's.

use super::cache::{DlqCause, DlqMark, RecordState};
use super::persisted::{push_coalesced, StateWrite};
use super::SharePartition;

/// Records to write to the group's dead-letter queue: a range of offsets with one delivery
/// count and one cause (Kafka's `ShareGroupDLQRecordParameter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DlqWrite {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
    pub cause: DlqCause,
}

impl SharePartition {
    /// The ARCHIVING records whose dead-letter queue write is still to make and whose
    /// transition is durable, now marked as handed out. Call it after a load, after a write
    /// completes and after [`tick`](Self::tick); report each with
    /// [`dlq_write_done`](Self::dlq_write_done), whatever its outcome.
    pub fn take_dlq_writes(&mut self) -> Vec<DlqWrite> {
        if !self.dlq_waiting {
            return Vec::new();
        }
        let limit = self.config.delivery_count_limit;
        let mut writes: Vec<DlqWrite> = Vec::new();
        // Still waiting afterwards: ARCHIVING records whose transition is not durable yet.
        let in_transition = |s: &super::cache::InFlightState| s.state == RecordState::Archiving && s.pending.is_some();
        self.dlq_waiting = self.cache.values().any(|b| b.count_matching(b.first_offset, in_transition) > 0);
        for batch in self.cache.values_mut() {
            let (first, last) = (batch.first_offset, batch.last_offset);
            let waiting = |s: &super::cache::InFlightState| {
                s.state == RecordState::Archiving && s.pending.is_none() && !s.dlq.is_some_and(|d| d.started)
            };
            batch.update_range(first, last, waiting, |from, to, s| {
                let cause = match s.dlq {
                    Some(mark) => mark.cause,
                    None if s.delivery_count >= limit => DlqCause::DeliveryCountExceeded,
                    None => DlqCause::ClientReject,
                };
                s.dlq = Some(DlqMark { cause, started: true });
                match writes.last_mut() {
                    Some(w)
                        if w.last_offset + 1 == from && w.delivery_count == s.delivery_count && w.cause == cause =>
                    {
                        w.last_offset = to;
                    }
                    _ => writes.push(DlqWrite {
                        first_offset: from,
                        last_offset: to,
                        delivery_count: s.delivery_count,
                        cause,
                    }),
                }
            });
        }
        writes
    }

    /// The dead-letter queue write of `first..=last` is done, written or given up (Kafka
    /// archives either way): its ARCHIVING records become ARCHIVED and the start offset
    /// moves past what is done. The returned write persists ARCHIVED; as a lock expiry's,
    /// it stands whether or not it succeeds (report it with
    /// [`write_completed`](Self::write_completed) all the same).
    pub fn dlq_write_done(&mut self, first: i64, last: i64) -> Option<StateWrite> {
        let mut changes = Vec::new();
        for batch in self.cache.values_mut() {
            if batch.first_offset > last {
                break;
            }
            let handed =
                |s: &super::cache::InFlightState| s.state == RecordState::Archiving && s.dlq.is_some_and(|d| d.started);
            batch.update_range(first, last, handed, |from, to, s| {
                s.state = RecordState::Archived;
                s.dlq = None;
                push_coalesced(&mut changes, from, to, RecordState::Archived, s.delivery_count);
            });
        }
        self.advance_start_offset();
        if changes.is_empty() {
            return None;
        }
        let id = self.take_write_id();
        Some(self.state_write(id, changes))
    }
}
