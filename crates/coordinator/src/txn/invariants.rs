//! The coordinator's internal invariants, checked by tests after every step.

use super::state::TxnState;
use super::TransactionCoordinator;

impl TransactionCoordinator {
    /// Checks what must hold between any two calls; `Err` says what does not.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (id, m) in &self.txns {
            if !self.is_coordinator_for(id) {
                return Err(format!("{id}: held without its partition"));
            }
            if m.state == TxnState::Empty && !m.partitions.is_empty() {
                return Err(format!("{id}: Empty with partitions {:?}", m.partitions));
            }
            if matches!(m.state, TxnState::Dead | TxnState::PrepareEpochFence) {
                return Err(format!("{id}: in transient state {:?}", m.state));
            }
            if m.state == TxnState::Ongoing && m.txn_start_ms < 0 {
                return Err(format!("{id}: Ongoing without a start time"));
            }
            if m.pending_state == Some(TxnState::PrepareEpochFence) {
                return Err(format!("{id}: a fence is left pending between calls"));
            }
            if m.next_producer_id != super::NO_PRODUCER_ID
                && !matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
            {
                return Err(format!("{id}: next producer id {} outside a prepared state", m.next_producer_id));
            }
            if m.producer_epoch < super::NO_PRODUCER_EPOCH || m.producer_id < 0 {
                return Err(format!("{id}: bad producer {} / {}", m.producer_id, m.producer_epoch));
            }
        }
        for (id, pending) in &self.pending_markers {
            let Some(m) = self.txns.get(id) else { return Err(format!("{id}: markers pending for an unknown id")) };
            let completing = if pending.marker.committed { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
            if m.pending_state != Some(completing) || m.state == completing {
                return Err(format!("{id}: markers pending in {:?} -> {:?}", m.state, m.pending_state));
            }
        }
        // Adds wait only behind an add in flight, within their bound.
        for (id, waiting) in &self.waiting_adds {
            let pending = self.txns.get(id).and_then(|m| m.pending_state);
            if pending != Some(TxnState::Ongoing) {
                return Err(format!("{id}: adds waiting with {pending:?} pending"));
            }
            let held: usize = waiting.iter().map(|w| w.replies.len()).sum();
            if held == 0 || held > super::add_partitions::MAX_WAITING_ADDS {
                return Err(format!("{id}: {held} adds waiting"));
            }
        }
        // Each id has at most one transition in flight.
        let mut in_flight = std::collections::BTreeSet::new();
        for pending in self.pending_persists.values() {
            let live = self.txns.get(&pending.transactional_id).is_some_and(|m| m.pending_state.is_some())
                && self.coordinator_epoch(&pending.transactional_id) == Ok(pending.coordinator_epoch);
            if live && !in_flight.insert(pending.transactional_id.clone()) {
                return Err(format!("{}: two transitions in flight", pending.transactional_id));
            }
        }
        Ok(())
    }
}
