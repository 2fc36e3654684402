//! Acquisition locks running out (Kafka's `releaseAcquisitionLockOnTimeout`).

use super::cache::{DlqCause, DlqMark, RecordState};
use super::persisted::{push_coalesced, StateWrite};
use super::SharePartition;

impl SharePartition {
    /// Expires the acquisition locks due by `now_ms`: their records become AVAILABLE, or
    /// ARCHIVED (ARCHIVING, with a dead-letter queue) once delivered
    /// `group.share.delivery.count.limit` times, and the start
    /// offset moves past what is done. The returned write must be persisted; as in Kafka
    /// the change stands whether or not it succeeds (report it with
    /// [`write_completed`](Self::write_completed) all the same).
    pub fn tick(&mut self, now_ms: i64) -> Option<StateWrite> {
        let limit = self.config.delivery_count_limit;
        let archive = self.config.archive_state();
        let mut changes = Vec::new();
        for batch in self.cache.values_mut() {
            let (first, last) = (batch.first_offset, batch.last_offset);
            let expired = |s: &super::cache::InFlightState| s.lock.as_ref().is_some_and(|l| l.deadline_ms <= now_ms);
            batch.update_range(first, last, expired, |from, to, s| {
                let target = if s.delivery_count >= limit { archive } else { RecordState::Available };
                s.state = target;
                s.lock = None;
                if target == RecordState::Archiving {
                    s.dlq = Some(DlqMark { cause: DlqCause::DeliveryCountExceeded, started: false });
                }
                push_coalesced(&mut changes, from, to, target, s.delivery_count);
            });
        }
        self.advance_start_offset();
        if changes.is_empty() {
            return None;
        }
        let archiving = RecordState::Archiving.id();
        self.dlq_waiting |= changes.iter().any(|b: &crate::share_state::StateBatch| b.delivery_state == archiving);
        let id = self.take_write_id();
        Some(self.state_write(id, changes))
    }

    /// The earliest acquisition lock deadline, if any record is ACQUIRED: call
    /// [`tick`](Self::tick) then (it may be in the past, after a rollback).
    pub fn next_deadline(&self) -> Option<i64> {
        let mut deadline: Option<i64> = None;
        for batch in self.cache.values() {
            batch.for_each_state(|_, _, s| {
                if let Some(lock) = &s.lock {
                    deadline = Some(deadline.map_or(lock.deadline_ms, |d| d.min(lock.deadline_ms)));
                }
            });
        }
        deadline
    }
}
