//! The coordinator's timers: aborting transactions open longer than their timeout
//! (Kafka's `abortTimedOutTransactions`, which fences the producer's epoch first), expiring
//! transactional ids idle for `transactional.id.expiration.ms`, and retrying completion
//! appends that found the log unavailable.

use super::state::TxnState;
use super::{EndOrigin, Then, TransactionCoordinator};

impl TransactionCoordinator {
    /// Runs the timers due at `now_ms`.
    pub fn tick(&mut self, now_ms: i64) {
        for (transactional_id, pending) in std::mem::take(&mut self.completion_retries) {
            self.write_completion(&transactional_id, pending);
        }
        let abort_interval = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms;
        if *self.next_abort_check_ms.get_or_insert(now_ms + abort_interval) <= now_ms {
            self.next_abort_check_ms = Some(now_ms + abort_interval);
            self.abort_timed_out_transactions(now_ms);
        }
        let expiration_interval = self.config.transaction_remove_expired_transaction_cleanup_interval_ms;
        if *self.next_expiration_check_ms.get_or_insert(now_ms + expiration_interval) <= now_ms {
            self.next_expiration_check_ms = Some(now_ms + expiration_interval);
            self.remove_expired_transactional_ids(now_ms);
        }
    }

    /// The next time `tick` has something to do, if any is scheduled yet.
    pub fn next_deadline(&self) -> Option<i64> {
        [self.next_abort_check_ms, self.next_expiration_check_ms].into_iter().flatten().min()
    }

    /// Aborts every Ongoing transaction older than its timeout at a bumped epoch, so its
    /// producer is fenced and cannot add to it or commit it any more. A transaction of
    /// transaction version 2 is aborted as its own EndTxn would be: one epoch bump.
    pub fn abort_timed_out_transactions(&mut self, now_ms: i64) {
        let timed_out: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, m)| {
                !m.pending_transition_in_progress()
                    && m.state == TxnState::Ongoing
                    && m.txn_start_ms + i64::from(m.txn_timeout_ms) < now_ms
            })
            .map(|(id, _)| id.clone())
            .collect();
        for transactional_id in timed_out {
            let metadata = self.txns.get_mut(&transactional_id).expect("listed above");
            let client_transaction_version = metadata.client_transaction_version;
            let transit = metadata.prepare_fence_producer_epoch();
            let (producer_id, epoch) = (transit.producer_id, transit.producer_epoch);
            tracing::info!(transactional_id, producer_id, epoch, "aborting timed-out transaction");
            if self.fenced_counted.insert(transactional_id.clone()) {
                self.stats.fenced_producers += 1;
            }
            // No producer-id source here: a TV2 abort at an exhausted epoch ends at
            // i16::MAX and the next InitProducerId (or EndTxn) rotates the id.
            self.end_transaction(
                &transactional_id,
                (producer_id, epoch),
                false,
                EndOrigin::Timeout,
                client_transaction_version,
                None,
                now_ms,
            );
        }
    }

    /// Writes tombstones for ids idle for `transactional.id.expiration.ms` in a state that
    /// allows it; each is removed once its tombstone is durable.
    fn remove_expired_transactional_ids(&mut self, now_ms: i64) {
        let cutoff = now_ms - self.config.transactional_id_expiration_ms;
        let expired: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, m)| {
                m.pending_state.is_none() && m.state.is_expiration_allowed() && m.txn_last_update_ms <= cutoff
            })
            .map(|(id, _)| id.clone())
            .collect();
        for transactional_id in expired {
            let Ok(coordinator_epoch) = self.coordinator_epoch(&transactional_id) else { continue };
            let metadata = self.txns.get_mut(&transactional_id).expect("listed above");
            let transit = metadata.prepare_dead();
            self.append(&transactional_id, coordinator_epoch, transit, Then::Expired);
        }
    }
}
