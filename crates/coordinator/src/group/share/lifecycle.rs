//! The rest of a share group's life in the coordinator: session timers, the group type
//! conflicts with classic and consumer groups, deletion, load and unload, the settings
//! the share partitions read, and the invariants.

use super::heartbeat::fence_member;
use super::records;
use super::{ShareGroup, ShareGroupState};
use crate::group::consumer::TopicsView;
use crate::group::group_config::ShareGroupSettings;
use crate::group::invariants::check_id_and_epochs;
use crate::group::records::{Continuation, Record};
use crate::group::state::Group;
use crate::group::GroupCoordinator;
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, BTreeSet};

impl GroupCoordinator {
    /// What the share partitions of `group_id` run with: `broker` (the broker's
    /// `group.share.*` settings) overridden by the group's configs in `topics`.
    pub fn share_group_settings(
        &self,
        group_id: &str,
        topics: &dyn TopicsView,
        broker: ShareGroupSettings,
    ) -> ShareGroupSettings {
        ShareGroupSettings::with_overrides(broker, &topics.share_group_overrides(group_id))
    }

    /// Session timeouts of share groups: Kafka's `shareGroupFenceMemberOperation`.
    pub(in crate::group) fn tick_share_groups(&mut self, now_ms: i64) {
        let group_ids: Vec<String> = self.share_groups.keys().cloned().collect();
        for group_id in group_ids {
            let Some(group) = self.share_groups.get_mut(&group_id) else { continue };
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| m.session_deadline_ms.is_some_and(|at| at <= now_ms))
                .map(|m| m.member_id.clone())
                .collect();
            if expired.is_empty() {
                continue;
            }
            let mut records = Vec::new();
            for member_id in expired {
                fence_member(group, &member_id, &mut records);
            }
            self.persist(&group_id, records, Continuation::Nothing);
        }
    }

    /// The earliest share-group timer.
    pub(in crate::group) fn share_next_deadline(&self) -> Option<i64> {
        self.share_groups.values().flat_map(|g| g.members.values()).filter_map(|m| m.session_deadline_ms).min()
    }

    /// Whether `group_id` is a share group, which a classic JoinGroup, a
    /// ConsumerGroupHeartbeat, OffsetCommit or OffsetFetch may not use (Kafka:
    /// INCONSISTENT_GROUP_PROTOCOL for a join, GROUP_ID_NOT_FOUND for the others).
    pub(in crate::group) fn is_share_group(&self, group_id: &str) -> bool {
        self.share_groups.contains_key(group_id)
    }

    /// DeleteGroups for `group_id`: NON_EMPTY_GROUP while the share group has members;
    /// an empty one is removed and its tombstones returned (`None`: no share group).
    pub(in crate::group) fn take_empty_share_group(
        &mut self,
        group_id: &str,
    ) -> Result<Option<Vec<Record>>, ErrorCode> {
        let Some(group) = self.share_groups.get(group_id) else { return Ok(None) };
        if group.state() != ShareGroupState::Empty {
            return Err(ErrorCode::NON_EMPTY_GROUP);
        }
        let tombstones = records::group_tombstones(group);
        self.share_groups.remove(group_id);
        Ok(Some(tombstones))
    }

    /// Adds groups replayed by `load`: sessions restart now. Records Kafka could not have
    /// written are repaired rather than trusted; a group id held by a classic group with
    /// members or a consumer group stays theirs.
    pub(in crate::group) fn loaded_share_groups(&mut self, groups: BTreeMap<String, ShareGroup>, now_ms: i64) -> usize {
        let session_timeout_ms = i64::from(self.config.share_group_session_timeout_ms);
        let mut count = 0;
        for (group_id, mut group) in groups {
            if self.groups.get(&group_id).is_some_and(Group::is_in_use) || self.consumer_groups.contains_key(&group_id)
            {
                continue;
            }
            // A share group has no offsets in the classic entry; an empty one (Kafka
            // could not have written both) gives way.
            self.groups.remove(&group_id);
            count += 1;
            repair_loaded(&mut group);
            for member in group.members.values_mut() {
                member.session_deadline_ms = Some(now_ms + session_timeout_ms);
            }
            self.share_groups.insert(group_id, group);
        }
        count
    }

    /// The share groups' invariants: epochs in order, targets only of members, a member
    /// at the target's epoch holds its target (within its subscription), timers set, and
    /// no other group of the same id.
    pub(in crate::group) fn check_share_invariants(&self) -> Result<(), String> {
        for (group_id, group) in &self.share_groups {
            let fail = |e: String| Err(format!("share group {group_id} ({:?}): {e}", group.state()));
            if let Err(e) = check_id_and_epochs(group_id, &group.group_id, group.group_epoch, group.assignment_epoch) {
                return fail(e);
            }
            if self.groups.contains_key(group_id)
                || self.consumer_groups.contains_key(group_id)
                || self.is_streams_group(group_id)
            {
                return fail("also a classic, consumer or streams group".into());
            }
            if group.target.keys().any(|id| !group.members.contains_key(id)) {
                return fail("target assignment of a non-member".into());
            }
            for (id, m) in &group.members {
                if *id != m.member_id {
                    return fail(format!("member {} filed under {id}", m.member_id));
                }
                if m.member_epoch > group.assignment_epoch {
                    return fail(format!("member {id} at epoch {} ahead of the target", m.member_epoch));
                }
                if m.session_deadline_ms.is_none() {
                    return fail(format!("member {id} has no session timer"));
                }
                if m.member_epoch == group.assignment_epoch {
                    let target = group.target.get(id).cloned().unwrap_or_default();
                    let outside =
                        m.assigned_partitions.iter().any(|(t, ps)| !target.get(t).is_some_and(|tp| ps.is_subset(tp)));
                    if outside {
                        return fail(format!(
                            "member {id} holds {:?} outside its target {target:?}",
                            m.assigned_partitions
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Makes a replayed group consistent: targets only of members, epochs in order, no
/// empty partition sets.
fn repair_loaded(group: &mut ShareGroup) {
    group.target.retain(|id, _| group.members.contains_key(id));
    group.group_epoch = group.group_epoch.max(0);
    group.assignment_epoch = group.assignment_epoch.clamp(0, group.group_epoch);
    for member in group.members.values_mut() {
        member.member_epoch = member.member_epoch.clamp(0, group.assignment_epoch);
        let target = group.target.get(&member.member_id);
        if member.member_epoch == group.assignment_epoch {
            // A member at the target's epoch holds (part of) its target.
            let allowed: BTreeSet<(Uuid, i32)> =
                target.into_iter().flatten().flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p))).collect();
            for (topic, partitions) in member.assigned_partitions.iter_mut() {
                partitions.retain(|p| allowed.contains(&(*topic, *p)));
            }
        }
        member.assigned_partitions.retain(|_, partitions| !partitions.is_empty());
    }
}
