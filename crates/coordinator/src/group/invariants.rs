//! The coordinator's invariants, checked by tests after every step (and available to a
//! debug build of the server).

use super::records::Continuation;
use super::state::{Group, GroupState, JoinTimer};
use super::GroupCoordinator;
use std::collections::BTreeSet;

impl GroupCoordinator {
    /// Checks every invariant of every group; the error says which one broke, where.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (group_id, group) in &self.groups {
            if *group_id != group.group_id {
                return Err(format!("group {} filed under {group_id}", group.group_id));
            }
            self.check_group(group).map_err(|e| format!("group {group_id} ({:?}): {e}", group.state))?;
        }
        if self.persist_order.len() != self.pending_persists.len() {
            return Err(format!(
                "{} persists in issue order, {} pending",
                self.persist_order.len(),
                self.pending_persists.len()
            ));
        }
        self.check_consumer_invariants()?;
        self.check_share_invariants()?;
        self.check_streams_invariants()
    }

    fn check_group(&self, group: &Group) -> Result<(), String> {
        let mut ids = BTreeSet::new();
        let mut instances = BTreeSet::new();
        for m in &group.members {
            if !ids.insert(m.member_id.as_str()) {
                return Err(format!("member {} twice", m.member_id));
            }
            if let Some(instance) = &m.group_instance_id {
                if !instances.insert(instance.as_str()) {
                    return Err(format!("instance {instance} mapped to two members"));
                }
            }
            if group.pending_members.contains_key(&m.member_id) {
                return Err(format!("member {} is also pending", m.member_id));
            }
            if m.protocol_type != group.protocol_type.clone().unwrap_or_default() {
                return Err(format!("member {} has protocol type {}", m.member_id, m.protocol_type));
            }
            if m.sync_reply.is_some() && !group.is(GroupState::CompletingRebalance) {
                return Err(format!("member {} holds a SyncGroup outside CompletingRebalance", m.member_id));
            }
            if m.join_reply.is_some()
                && !group.is(GroupState::PreparingRebalance)
                && !self.replacing(group, &m.member_id)
            {
                return Err(format!("member {} holds a JoinGroup outside PreparingRebalance", m.member_id));
            }
        }
        match (&group.leader_id, group.members.is_empty()) {
            (None, true) => {}
            (Some(leader), false) if group.has(leader) => {}
            (leader, _) => return Err(format!("leader {leader:?} with members {ids:?}")),
        }
        if group.is(GroupState::Empty) && !group.members.is_empty() {
            return Err("Empty with members".into());
        }
        if group.is(GroupState::PreparingRebalance) != group.join_timer.is_some() {
            return Err(format!("join timer {:?}", group.join_timer));
        }
        if let Some(JoinTimer::Initial { remaining_ms, .. }) = group.join_timer {
            if remaining_ms < 0 {
                return Err("negative remaining initial delay".into());
            }
        }
        if matches!(group.state, GroupState::CompletingRebalance | GroupState::Stable) && group.protocol_name.is_none()
        {
            return Err("no protocol for a generation with members".into());
        }
        if group.pending_sync_members.iter().any(|m| !group.has(m)) {
            return Err(format!("pending sync {:?} not members", group.pending_sync_members));
        }
        if group.pending_offset_commits.values().any(|n| *n == 0) {
            return Err("a pending commit count of zero".into());
        }
        if group.pending_txn_offsets.values().any(|offsets| offsets.is_empty()) {
            return Err("a producer without pending transactional offsets".into());
        }
        let pending_txn = group.pending_txn_offsets.values().flat_map(|offsets| offsets.values());
        for offset in group.offsets.values().chain(pending_txn) {
            // Durable offsets carry the sequence they became durable at, never one to come.
            if offset.log_sequence == 0 || offset.log_sequence >= self.next_log_sequence {
                return Err(format!("log sequence {} (next {})", offset.log_sequence, self.next_log_sequence));
            }
        }
        if group.generation_id < 0 {
            return Err(format!("generation {}", group.generation_id));
        }
        Ok(())
    }

    /// Whether a static member's replacement under `member_id` waits for its persist.
    fn replacing(&self, group: &Group, member_id: &str) -> bool {
        self.pending_persists.values().any(|c| match c {
            Continuation::StaticReplace(r) => r.group_id == group.group_id && r.new_member_id == member_id,
            _ => false,
        })
    }
}

/// The first invariants of a KIP-848 consumer group and of a KIP-932 share group: filed
/// under its own id (`named`), its target assignment's epoch not ahead of the group's.
pub(super) fn check_id_and_epochs(
    filed_under: &str,
    named: &str,
    group_epoch: i32,
    assignment_epoch: i32,
) -> Result<(), String> {
    if filed_under != named {
        return Err(format!("filed under {filed_under} but named {named}"));
    }
    if assignment_epoch > group_epoch {
        return Err(format!("assignment epoch {assignment_epoch} > group epoch {group_epoch}"));
    }
    Ok(())
}
