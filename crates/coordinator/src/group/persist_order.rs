//! Completions of a group's persists, applied in the order the persists were issued.
//!
//! The server reports appends durable from whichever task sees the fsync finish first,
//! so two OffsetCommits of one group can be reported in either order. Applying them as
//! reported would let an older commit overwrite a newer one (librdkafka pipelines
//! dozens of commits on one connection and then reads back the last). Kafka applies a
//! partition's appends in offset order; here each group's completions wait for the ones
//! issued before them.

use super::PersistId;
use osprey_protocol::ErrorCode;
use std::collections::{HashMap, VecDeque};

/// A persist's outcome as the server reports it.
pub(super) type PersistResult = Result<(), ErrorCode>;

#[derive(Debug, Default)]
pub(super) struct PersistOrder {
    /// Per group: its persists in issue order, each with its result once reported.
    queues: HashMap<String, VecDeque<(PersistId, Option<PersistResult>)>>,
    group_of: HashMap<PersistId, String>,
}

impl PersistOrder {
    /// `id` was issued for `group_id`, after every persist issued before it.
    pub(super) fn issued(&mut self, group_id: &str, id: PersistId) {
        self.queues.entry(group_id.to_string()).or_default().push_back((id, None));
        self.group_of.insert(id, group_id.to_string());
    }

    /// Records `id`'s result; returns the completions that may now be applied, oldest
    /// first: `id`'s and those queued behind it, once every earlier one has a result.
    /// An id never issued (or already applied) comes back at once, to be ignored or
    /// applied by the caller as before.
    pub(super) fn reported(&mut self, id: PersistId, result: PersistResult) -> Vec<(PersistId, PersistResult)> {
        let Some(group_id) = self.group_of.get(&id).cloned() else { return vec![(id, result)] };
        let Some(queue) = self.queues.get_mut(&group_id) else { return vec![(id, result)] };
        if let Some(slot) = queue.iter_mut().find(|(queued, _)| *queued == id) {
            slot.1 = Some(result);
        }
        let mut ready = Vec::new();
        while let Some((front, Some(_))) = queue.front() {
            let front = *front;
            let (_, result) = queue.pop_front().expect("front exists");
            self.group_of.remove(&front);
            ready.push((front, result.expect("checked above")));
        }
        if queue.is_empty() {
            self.queues.remove(&group_id);
        }
        ready
    }

    /// Gives up on every persist of the groups `abandoned` picks: returns them, oldest
    /// first per group, each with `error`, to be applied now; a later report of one of
    /// them comes back from [`PersistOrder::reported`] as never issued.
    pub(super) fn abandon(
        &mut self,
        abandoned: impl Fn(&str) -> bool,
        error: ErrorCode,
    ) -> Vec<(PersistId, PersistResult)> {
        let groups: Vec<String> = self.queues.keys().filter(|g| abandoned(g)).cloned().collect();
        let mut out = Vec::new();
        for group_id in groups {
            for (id, _) in self.queues.remove(&group_id).unwrap_or_default() {
                self.group_of.remove(&id);
                out.push((id, Err(error)));
            }
        }
        out
    }

    /// Persists issued and not yet applied.
    pub(super) fn len(&self) -> usize {
        self.group_of.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_persist_waits_for_the_earlier_one_of_its_group() {
        let mut order = PersistOrder::default();
        order.issued("g", PersistId(1));
        order.issued("g", PersistId(2));
        order.issued("other", PersistId(3));
        assert!(order.reported(PersistId(2), Ok(())).is_empty());
        // Another group is not held back by g's.
        assert_eq!(order.reported(PersistId(3), Ok(())), vec![(PersistId(3), Ok(()))]);
        assert_eq!(
            order.reported(PersistId(1), Err(ErrorCode::KAFKA_STORAGE_ERROR)),
            vec![(PersistId(1), Err(ErrorCode::KAFKA_STORAGE_ERROR)), (PersistId(2), Ok(()))]
        );
        assert_eq!(order.len(), 0);
    }

    #[test]
    fn an_unknown_persist_comes_back_at_once() {
        let mut order = PersistOrder::default();
        assert_eq!(order.reported(PersistId(9), Ok(())), vec![(PersistId(9), Ok(()))]);
    }
}
