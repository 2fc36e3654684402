//! The rest of a consumer group's life in the coordinator: timers, offsets checked
//! against member epochs, coexistence with classic groups, deletion, load and unload,
//! and the invariants.

use super::heartbeat::fence_member;
use super::records;
use super::{ConsumerGroup, MemberState};
use crate::group::invariants::check_id_and_epochs;
use crate::group::records::{Continuation, Record};
use crate::group::state::Group;
use crate::group::GroupCoordinator;
use osprey_protocol::messages::OffsetCommitRequest;
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, BTreeSet};

impl GroupCoordinator {
    /// Session and rebalance timeouts of consumer groups.
    pub(in crate::group) fn tick_consumer_groups(&mut self, now_ms: i64) {
        let group_ids: Vec<String> = self.consumer_groups.keys().cloned().collect();
        for group_id in group_ids {
            let Some(group) = self.consumer_groups.get_mut(&group_id) else { continue };
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| {
                    let session_over = m.session_deadline_ms.is_some_and(|at| at <= now_ms);
                    // Kafka fences a member still holding partitions it was asked to
                    // revoke at the epoch of the request.
                    let revocation_over = m.rebalance_deadline.is_some_and(|(at, epoch)| {
                        at <= now_ms && epoch == m.member_epoch && m.state == MemberState::UnrevokedPartitions
                    });
                    session_over || revocation_over
                })
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

    /// The earliest consumer-group timer.
    pub(in crate::group) fn consumer_next_deadline(&self) -> Option<i64> {
        self.consumer_groups
            .values()
            .flat_map(|g| g.members.values())
            .flat_map(|m| m.session_deadline_ms.into_iter().chain(m.rebalance_deadline.map(|(at, _)| at)))
            .min()
    }

    /// OffsetCommit to a consumer group (Kafka's `ConsumerGroup.validateOffsetCommit`):
    /// `None` when `request.group_id` is no consumer group. A member commits at its
    /// current member epoch; an admin client (epoch < 0) only while the group is empty.
    pub(in crate::group) fn validate_consumer_group_commit(
        &mut self,
        request: &OffsetCommitRequest,
        api_version: i16,
        now_ms: i64,
    ) -> Option<Result<(), ErrorCode>> {
        if self.is_share_group(&request.group_id) {
            // Kafka's `ShareGroup.validateOffsetCommit`: share groups commit no offsets.
            return Some(Err(ErrorCode::GROUP_ID_NOT_FOUND));
        }
        let group = self.consumer_groups.get(&request.group_id)?;
        let epoch = request.generation_id_or_member_epoch;
        let result = if epoch < 0 && group.members.is_empty() {
            Ok(())
        } else {
            match group.members.get(&request.member_id) {
                None => Err(ErrorCode::UNKNOWN_MEMBER_ID),
                Some(_) if api_version < 9 => Err(ErrorCode::UNSUPPORTED_VERSION),
                Some(member) if member.member_epoch != epoch => Err(ErrorCode::STALE_MEMBER_EPOCH),
                Some(_) => Ok(()),
            }
        };
        if result.is_ok() && !self.groups.contains_key(&request.group_id) {
            // The consumer group's committed offsets live in an offsets-only group entry.
            self.groups.insert(request.group_id.clone(), crate::group::state::Group::new(&request.group_id, now_ms));
        }
        Some(result)
    }

    /// OffsetFetch v9+ names the member and its epoch (Kafka's
    /// `ConsumerGroup.validateOffsetFetch`, and `StreamsGroup`'s alike): for a consumer or
    /// streams group, a named member must
    /// exist (UNKNOWN_MEMBER_ID) at that epoch (STALE_MEMBER_EPOCH); a request without a
    /// member id and a negative epoch (admin tools, older clients) is accepted. Other
    /// groups are not checked here. The server calls this before
    /// [`GroupCoordinator::fetch_offsets`] and answers the group's error if it fails.
    pub fn validate_offset_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), ErrorCode> {
        if self.is_share_group(group_id) {
            // Kafka's `ShareGroup.validateOffsetFetch`.
            return Err(ErrorCode::GROUP_ID_NOT_FOUND);
        }
        if let Some(result) = self.validate_streams_group_fetch(group_id, member_id, member_epoch) {
            return result;
        }
        let Some(group) = self.consumer_groups.get(group_id) else { return Ok(()) };
        validate_fetching_member(|id| group.members.get(id).map(|m| m.member_epoch), member_id, member_epoch)
    }

    /// A classic JoinGroup for `group_id`: INCONSISTENT_GROUP_PROTOCOL while a consumer
    /// group with members holds the id; an empty consumer group is deleted (Kafka's
    /// `maybeDeleteEmptyConsumerGroup`) so that the classic group can take its place.
    pub(in crate::group) fn consumer_group_blocks_classic_join(&mut self, group_id: &str) -> bool {
        let Some(group) = self.consumer_groups.get(group_id) else { return false };
        if !group.members.is_empty() {
            return true;
        }
        let records = records::group_tombstones(group);
        self.consumer_groups.remove(group_id);
        self.persist(group_id, records, Continuation::Nothing);
        false
    }

    /// DeleteGroups for `group_id`: NON_EMPTY_GROUP while the consumer group has members;
    /// an empty one is removed and its tombstones returned (`None`: no consumer group).
    pub(in crate::group) fn take_empty_consumer_group(
        &mut self,
        group_id: &str,
    ) -> Result<Option<Vec<Record>>, ErrorCode> {
        let Some(group) = self.consumer_groups.get(group_id) else { return Ok(None) };
        if !group.members.is_empty() {
            return Err(ErrorCode::NON_EMPTY_GROUP);
        }
        let tombstones = records::group_tombstones(group);
        self.consumer_groups.remove(group_id);
        Ok(Some(tombstones))
    }

    /// Adds groups replayed by `load`: sessions (and pending revocations) restart now.
    /// Records Kafka could not have written are repaired rather than trusted, so that the
    /// invariants hold whatever the log holds; a classic group with members keeps its id.
    pub(in crate::group) fn loaded_consumer_groups(
        &mut self,
        groups: BTreeMap<String, ConsumerGroup>,
        now_ms: i64,
    ) -> usize {
        let session_timeout_ms = i64::from(self.config.consumer_group_session_timeout_ms);
        let mut count = 0;
        for (group_id, mut group) in groups {
            if self.groups.get(&group_id).is_some_and(Group::is_in_use) {
                continue;
            }
            count += 1;
            repair_loaded(&mut group);
            for member in group.members.values_mut() {
                member.session_deadline_ms = Some(now_ms + session_timeout_ms);
                if member.state == MemberState::UnrevokedPartitions {
                    let at = now_ms + i64::from(member.rebalance_timeout_ms.max(0));
                    member.rebalance_deadline = Some((at, member.member_epoch));
                }
            }
            self.consumer_groups.insert(group_id, group);
        }
        count
    }

    /// The consumer groups' invariants: each partition owned by at most one member,
    /// epochs in order, timers set, ids consistent.
    pub(in crate::group) fn check_consumer_invariants(&self) -> Result<(), String> {
        for (group_id, group) in &self.consumer_groups {
            let fail = |e: String| Err(format!("consumer group {group_id} ({:?}): {e}", group.state()));
            if let Err(e) = check_id_and_epochs(group_id, &group.group_id, group.group_epoch, group.assignment_epoch) {
                return fail(e);
            }
            if self.groups.get(group_id).is_some_and(Group::is_in_use) {
                return fail("also a classic group with members".into());
            }
            let mut owners: BTreeMap<(Uuid, i32), &str> = BTreeMap::new();
            let mut instances = BTreeSet::new();
            for (id, m) in &group.members {
                if *id != m.member_id {
                    return fail(format!("member {} filed under {id}", m.member_id));
                }
                if let Some(instance) = &m.instance_id {
                    if !instances.insert(instance) {
                        return fail(format!("instance {instance} mapped to two members"));
                    }
                }
                if m.member_epoch > group.assignment_epoch {
                    return fail(format!("member {id} at epoch {} ahead of the target", m.member_epoch));
                }
                if (m.state == MemberState::UnrevokedPartitions) == m.partitions_pending_revocation.is_empty() {
                    return fail(format!(
                        "member {id} in {:?} with revocations {:?}",
                        m.state, m.partitions_pending_revocation
                    ));
                }
                if m.session_deadline_ms.is_none() {
                    return fail(format!("member {id} has no session timer"));
                }
                let owned = m.assigned_partitions.iter().chain(m.partitions_pending_revocation.iter());
                for (topic, ps) in owned {
                    for p in ps {
                        if let Some(other) = owners.insert((*topic, *p), id) {
                            return fail(format!("{topic}-{p} owned by {other} and {id}"));
                        }
                    }
                }
            }
            if group.target.keys().any(|id| !group.members.contains_key(id)) {
                return fail("target assignment of a non-member".into());
            }
        }
        Ok(())
    }
}

/// Kafka's `validateOffsetFetch` of a consumer or streams group: a fetch without a member
/// id and with a negative epoch (admin tools, older clients) is accepted; a named member
/// must exist (`epoch_of` gives its epoch) at that epoch.
pub(in crate::group) fn validate_fetching_member(
    epoch_of: impl Fn(&str) -> Option<i32>,
    member_id: Option<&str>,
    member_epoch: i32,
) -> Result<(), ErrorCode> {
    let Some(member_id) = member_id else {
        return if member_epoch < 0 { Ok(()) } else { Err(ErrorCode::UNKNOWN_MEMBER_ID) };
    };
    match epoch_of(member_id) {
        None => Err(ErrorCode::UNKNOWN_MEMBER_ID),
        Some(epoch) if epoch != member_epoch => Err(ErrorCode::STALE_MEMBER_EPOCH),
        Some(_) => Ok(()),
    }
}

/// Makes a replayed group consistent: targets only of members, epochs in order, a
/// partition owned by one member only, a pending revocation only in
/// UNREVOKED_PARTITIONS and never empty there.
fn repair_loaded(group: &mut ConsumerGroup) {
    group.target.retain(|id, _| group.members.contains_key(id));
    group.group_epoch = group.group_epoch.max(0);
    group.assignment_epoch = group.assignment_epoch.clamp(0, group.group_epoch);
    let mut owned: BTreeSet<(Uuid, i32)> = BTreeSet::new();
    let mut instances = BTreeSet::new();
    for member in group.members.values_mut() {
        if member.instance_id.as_ref().is_some_and(|i| !instances.insert(i.clone())) {
            member.instance_id = None;
        }
        member.member_epoch = member.member_epoch.min(group.assignment_epoch);
        for assignment in [&mut member.assigned_partitions, &mut member.partitions_pending_revocation] {
            for (topic, partitions) in assignment.iter_mut() {
                partitions.retain(|p| owned.insert((*topic, *p)));
            }
            assignment.retain(|_, partitions| !partitions.is_empty());
        }
        member.state = match (member.state, member.partitions_pending_revocation.is_empty()) {
            (_, false) => MemberState::UnrevokedPartitions,
            (MemberState::UnrevokedPartitions, true) => MemberState::Stable,
            (state, true) => state,
        };
    }
}
