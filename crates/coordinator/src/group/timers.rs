//! Time: session timeouts, the join phase's end, pending SyncGroups, pending member ids,
//! and offset retention.

use super::state::{Group, GroupState, TopicPartition};
use super::{records, GroupCoordinator};

impl GroupCoordinator {
    /// Runs every timer due at `now_ms`.
    pub fn tick(&mut self, now_ms: i64) {
        let group_ids: Vec<String> = self.groups.keys().cloned().collect();
        for group_id in group_ids {
            self.with_group(&group_id, |this, group| this.tick_group(group, now_ms));
        }
        self.tick_consumer_groups(now_ms);
        self.tick_share_groups(now_ms);
        self.tick_streams_groups(now_ms);
        if self.next_offset_cleanup_ms.is_none_or(|at| at <= now_ms) {
            self.next_offset_cleanup_ms = Some(now_ms + self.config.offsets_retention_check_interval_ms);
            self.cleanup_group_metadata(now_ms);
        }
    }

    /// The earliest time a timer is due, so that the server can sleep until then.
    pub fn next_deadline(&self) -> Option<i64> {
        let group_deadlines = self.groups.values().flat_map(|g| {
            let members = g.members.iter().filter_map(|m| m.heartbeat_deadline_ms);
            let pending = g.pending_members.values().copied();
            let join = g.join_timer.map(|t| t.deadline_ms());
            members.chain(pending).chain(join).chain(g.pending_sync_deadline_ms)
        });
        group_deadlines
            .chain(self.next_offset_cleanup_ms)
            .chain(self.consumer_next_deadline())
            .chain(self.share_next_deadline())
            .chain(self.streams_next_deadline())
            .min()
    }

    fn tick_group(&mut self, group: &mut Group, now_ms: i64) {
        let expired_pending: Vec<String> =
            group.pending_members.iter().filter(|(_, &at)| at <= now_ms).map(|(id, _)| id.clone()).collect();
        for member_id in expired_pending {
            self.remove_pending_member_and_update_group(group, &member_id, now_ms);
        }
        self.expire_sessions(group, now_ms);
        if let Some(timer) = group.join_timer {
            if group.is(GroupState::PreparingRebalance) && timer.deadline_ms() <= now_ms {
                self.join_timer_expired(group, now_ms);
            }
        }
        self.expire_pending_syncs(group, now_ms);
    }

    /// Kafka's `onExpireHeartbeat`: a member whose session ran out is removed, unless it
    /// is waiting in a rebalance (new members excepted).
    fn expire_sessions(&mut self, group: &mut Group, now_ms: i64) {
        let mut expired = Vec::new();
        for member in &mut group.members {
            if member.heartbeat_deadline_ms.is_some_and(|at| at <= now_ms) {
                member.heartbeat_deadline_ms = None;
                if !member.has_satisfied_heartbeat() {
                    expired.push(member.member_id.clone());
                }
            }
        }
        for member_id in expired {
            self.remove_member_and_update_group(group, &member_id, now_ms);
        }
    }

    /// Kafka's `onExpirePendingSync`: members that never sent SyncGroup for this
    /// generation are removed and the group rebalances.
    fn expire_pending_syncs(&mut self, group: &mut Group, now_ms: i64) {
        if group.pending_sync_deadline_ms.is_none_or(|at| at > now_ms) {
            return;
        }
        group.pending_sync_deadline_ms = None;
        if !matches!(group.state, GroupState::CompletingRebalance | GroupState::Stable) {
            return;
        }
        if group.pending_sync_members.is_empty() {
            return;
        }
        let pending: Vec<String> = group.pending_sync_members.iter().cloned().collect();
        for member_id in pending {
            if let Some(member) = group.remove(&member_id) {
                self.answer_removed_member(member);
            }
        }
        self.prepare_rebalance(group, now_ms);
    }

    /// Kafka's `cleanupGroupMetadata`: expired offsets get tombstones, and an Empty
    /// group left without offsets is deleted.
    fn cleanup_group_metadata(&mut self, now_ms: i64) {
        let retention_ms = self.config.offsets_retention_ms();
        let group_ids: Vec<String> = self.groups.keys().cloned().collect();
        for group_id in group_ids {
            if self.consumer_groups.get(&group_id).is_some_and(|g| !g.members.is_empty())
                || self.streams_groups.get(&group_id).is_some_and(|g| !g.members.is_empty())
            {
                // A consumer or streams group's offsets are kept while it has members (they
                // live in an offsets-only entry here, which would otherwise expire them).
                continue;
            }
            let Some(group) = self.groups.get_mut(&group_id) else { continue };
            let expired = remove_expired_offsets(group, now_ms, retention_ms);
            let mut tombstones: Vec<records::Record> =
                expired.iter().map(|tp| records::offset_tombstone(&group_id, tp)).collect();
            // Kafka's `cleanupExpiredOffsets`: a group with open transactions' offsets stays.
            let has_offsets = !group.offsets.is_empty()
                || !group.pending_offset_commits.is_empty()
                || !group.pending_txn_offsets.is_empty();
            if group.is(GroupState::Empty) && !has_offsets {
                group.transition_to(GroupState::Dead, now_ms);
                self.groups.remove(&group_id);
                tombstones.push(records::group_tombstone(&group_id));
            }
            if !tombstones.is_empty() {
                self.persist(&group_id, tombstones, records::Continuation::Nothing);
            }
        }
    }
}

/// Kafka's `GroupMetadata.removeExpiredOffsets`. An Empty group's offsets expire
/// `retention` after the group became Empty; a Stable consumer group's offsets of topics
/// nobody subscribes to any more expire `retention` after their commit; a group that only
/// stores offsets (no protocol type) expires each offset `retention` after its commit.
/// Offsets with an explicit expire timestamp (OffsetCommit v2-v4) expire then. A
/// partition with a commit in flight or an open transaction's offset does not expire.
fn remove_expired_offsets(group: &mut Group, now_ms: i64, retention_ms: i64) -> Vec<TopicPartition> {
    let state_timestamp = group.state_timestamp_ms;
    let no_subscriptions = Default::default();
    let (subscribed, use_state_timestamp) = match (&group.protocol_type, group.state) {
        (Some(_), GroupState::Empty) => (&no_subscriptions, true),
        (Some(t), GroupState::Stable) if t == "consumer" && group.subscribed_topics.is_some() => {
            (group.subscribed_topics.as_ref().expect("checked"), false)
        }
        (None, _) => (&no_subscriptions, false),
        _ => return Vec::new(),
    };
    let expired: Vec<TopicPartition> = group
        .offsets
        .iter()
        // Kafka does not expire an offset while a transaction holds one for its partition.
        .filter(|(tp, _)| !subscribed.contains(&tp.0) && !group.has_pending_offset_commit(tp))
        .filter(|(_, o)| match o.expire_timestamp_ms {
            Some(expire) => now_ms >= expire,
            None => {
                let base = if use_state_timestamp {
                    state_timestamp.unwrap_or(o.commit_timestamp_ms)
                } else {
                    o.commit_timestamp_ms
                };
                now_ms - base >= retention_ms
            }
        })
        .map(|(tp, _)| tp.clone())
        .collect();
    for tp in &expired {
        group.offsets.remove(tp);
    }
    expired
}
