//! The rest of a streams group's life in the coordinator: timers (sessions, revocation
//! deadlines, the initial rebalance delay), offsets checked against member epochs, the
//! group type conflicts, deletion, load and unload, and the invariants.

use super::heartbeat::{compute_target_assignment, fence_member};
use super::{records, MemberState, StreamsGroup, StreamsGroupState, NUM_STANDBY_REPLICAS};
use crate::group::consumer::lifecycle::validate_fetching_member;
use crate::group::invariants::check_id_and_epochs;
use crate::group::records::{Continuation, Record};
use crate::group::state::Group;
use crate::group::GroupCoordinator;
use osprey_protocol::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

/// Who commits offsets to a streams group, as OffsetCommit and TxnOffsetCommit name it.
pub(in crate::group) struct StreamsCommitter<'a> {
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
    pub member_epoch: i32,
    pub transactional: bool,
    pub api_version: i16,
}

impl GroupCoordinator {
    /// Session timeouts, revocation deadlines and the initial rebalance delay of streams
    /// groups (Kafka's `streamsGroupFenceMemberOperation`, its rebalance timeout and
    /// `computeDelayedTargetAssignment`).
    pub(in crate::group) fn tick_streams_groups(&mut self, now_ms: i64) {
        let group_ids: Vec<String> = self.streams_groups.keys().cloned().collect();
        for group_id in group_ids {
            let Some(group) = self.streams_groups.get_mut(&group_id) else { continue };
            let mut records = Vec::new();
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| {
                    let session_over = m.session_deadline_ms.is_some_and(|at| at <= now_ms);
                    // Kafka fences a member still holding tasks it was asked to revoke at
                    // the epoch of the request.
                    let revocation_over = m.rebalance_deadline.is_some_and(|(at, epoch)| {
                        at <= now_ms && epoch == m.member_epoch && m.state == MemberState::UnrevokedTasks
                    });
                    session_over || revocation_over
                })
                .map(|m| m.member_id.clone())
                .collect();
            for member_id in expired {
                fence_member(group, &member_id, &mut records);
            }
            if group.initial_rebalance_deadline_ms.is_some_and(|at| at <= now_ms) {
                group.initial_rebalance_deadline_ms = None;
                let ready = !group.members.is_empty()
                    && group.group_epoch > group.assignment_epoch
                    && group.configured.is_some();
                if ready {
                    let num_standby_replicas = group
                        .last_assignment_configs
                        .get(NUM_STANDBY_REPLICAS)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(self.config.streams_group_num_standby_replicas);
                    compute_target_assignment(group, num_standby_replicas, now_ms, &mut records);
                }
            }
            if !records.is_empty() {
                self.persist(&group_id, records, Continuation::Nothing);
            }
        }
    }

    /// The earliest streams-group timer.
    pub(in crate::group) fn streams_next_deadline(&self) -> Option<i64> {
        self.streams_groups
            .values()
            .flat_map(|g| {
                let members = g.members.values().flat_map(|m| {
                    let revocation = m.rebalance_deadline.filter(|_| m.state == MemberState::UnrevokedTasks);
                    m.session_deadline_ms.into_iter().chain(revocation.map(|(at, _)| at))
                });
                members.chain(g.initial_rebalance_deadline_ms)
            })
            .min()
    }

    /// Whether `group_id` is a streams group.
    pub(in crate::group) fn is_streams_group(&self, group_id: &str) -> bool {
        self.streams_groups.contains_key(group_id)
    }

    /// A commit to a streams group (Kafka 4.4's `StreamsGroup.validateOffsetCommit` with
    /// its per-task assignment epochs): `None` when `group_id` is no streams group. An
    /// admin client (epoch < 0) commits only while the group is empty; a member commits at
    /// its epoch, or at an older one for tasks it has held since then. The partitions are
    /// those committed.
    pub(in crate::group) fn validate_streams_group_commit<'a>(
        &mut self,
        group_id: &str,
        committer: &StreamsCommitter,
        partitions: impl Iterator<Item = (&'a str, i32)>,
        now_ms: i64,
    ) -> Option<Result<(), ErrorCode>> {
        let group = self.streams_groups.get(group_id)?;
        let result = validate_commit(group, committer, partitions);
        if result.is_ok() && !self.groups.contains_key(group_id) {
            // The streams group's committed offsets live in an offsets-only group entry.
            self.groups.insert(group_id.to_string(), Group::new(group_id, now_ms));
        }
        Some(result)
    }

    /// OffsetFetch v9+ to a streams group (Kafka's `StreamsGroup.validateOffsetFetch`):
    /// a named member must exist at that epoch. `None` when `group_id` is no streams group.
    pub(in crate::group) fn validate_streams_group_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Option<Result<(), ErrorCode>> {
        let group = self.streams_groups.get(group_id)?;
        let epoch_of = |id: &str| group.members.get(id).map(|m| m.member_epoch);
        Some(validate_fetching_member(epoch_of, member_id, member_epoch))
    }

    /// A classic JoinGroup for `group_id`: INCONSISTENT_GROUP_PROTOCOL while a streams
    /// group with members holds the id; an empty streams group is deleted (Kafka's
    /// `maybeDeleteEmptyStreamsGroup`) so that the classic group can take its place.
    pub(in crate::group) fn streams_group_blocks_classic_join(&mut self, group_id: &str) -> bool {
        let Some(group) = self.streams_groups.get(group_id) else { return false };
        if !group.members.is_empty() {
            return true;
        }
        let records = records::group_tombstones(group);
        self.streams_groups.remove(group_id);
        self.persist(group_id, records, Continuation::Nothing);
        false
    }

    /// DeleteGroups for `group_id`: NON_EMPTY_GROUP while the streams group has members;
    /// an empty one is removed and its tombstones returned (`None`: no streams group).
    pub(in crate::group) fn take_empty_streams_group(
        &mut self,
        group_id: &str,
    ) -> Result<Option<Vec<Record>>, ErrorCode> {
        let Some(group) = self.streams_groups.get(group_id) else { return Ok(None) };
        if group.state() != StreamsGroupState::Empty {
            return Err(ErrorCode::NON_EMPTY_GROUP);
        }
        let tombstones = records::group_tombstones(group);
        self.streams_groups.remove(group_id);
        Ok(Some(tombstones))
    }

    /// Adds groups replayed by `load`: sessions (and pending revocations) restart now.
    /// Records Kafka could not have written are repaired rather than trusted; a group id
    /// held by a classic group with members, a consumer or a share group stays theirs.
    pub(in crate::group) fn loaded_streams_groups(
        &mut self,
        groups: BTreeMap<String, StreamsGroup>,
        now_ms: i64,
    ) -> usize {
        let session_timeout_ms = i64::from(self.config.streams_group_session_timeout_ms);
        let mut count = 0;
        for (group_id, mut group) in groups {
            let taken = self.groups.get(&group_id).is_some_and(Group::is_in_use)
                || self.consumer_groups.contains_key(&group_id)
                || self.share_groups.contains_key(&group_id);
            if taken {
                continue;
            }
            count += 1;
            repair_loaded(&mut group);
            for member in group.members.values_mut() {
                member.session_deadline_ms = Some(now_ms + session_timeout_ms);
                if member.state == MemberState::UnrevokedTasks {
                    let at = now_ms + i64::from(member.rebalance_timeout_ms.max(0));
                    member.rebalance_deadline = Some((at, member.member_epoch));
                }
            }
            self.streams_groups.insert(group_id, group);
        }
        count
    }

    /// The streams groups' invariants: epochs in order, an active task owned by one
    /// member, no process holding a task twice, a pending revocation exactly in
    /// UNREVOKED_TASKS, timers set, no other group of the id.
    pub(in crate::group) fn check_streams_invariants(&self) -> Result<(), String> {
        for (group_id, group) in &self.streams_groups {
            let fail = |e: String| Err(format!("streams group {group_id} ({:?}): {e}", group.state()));
            if let Err(e) = check_id_and_epochs(group_id, &group.group_id, group.group_epoch, group.assignment_epoch) {
                return fail(e);
            }
            let other = self.groups.get(group_id).is_some_and(Group::is_in_use)
                || self.consumer_groups.contains_key(group_id)
                || self.share_groups.contains_key(group_id);
            if other {
                return fail("also a group of another type".into());
            }
            if group.target.keys().any(|id| !group.members.contains_key(id)) {
                return fail("target assignment of a non-member".into());
            }
            if let Some(duplicate) = group.owners().duplicates().first() {
                return fail(format!("active task {duplicate:?} owned twice"));
            }
            let mut instances = BTreeSet::new();
            for (id, m) in &group.members {
                if *id != m.member_id {
                    return fail(format!("member {} filed under {id}", m.member_id));
                }
                if m.instance_id.as_ref().is_some_and(|i| !instances.insert(i)) {
                    return fail(format!("instance {:?} mapped to two members", m.instance_id));
                }
                if m.member_epoch > group.assignment_epoch {
                    return fail(format!("member {id} at epoch {} ahead of the target", m.member_epoch));
                }
                // A static member that left for now (-2), and its replacement (0), keep the
                // state Kafka left them in with nothing to revoke.
                let revoking = m.state == MemberState::UnrevokedTasks;
                if (!revoking && !m.pending_revocation.is_empty())
                    || (revoking && m.pending_revocation.is_empty() && m.member_epoch > 0)
                {
                    return fail(format!("member {id} in {:?} with revocations {:?}", m.state, m.pending_revocation));
                }
                if m.session_deadline_ms.is_none() {
                    return fail(format!("member {id} has no session timer"));
                }
                let held = [m.assigned.active_tasks(), m.assigned.standby.clone(), m.assigned.warmup.clone()];
                let mut seen = BTreeSet::new();
                for tasks in &held {
                    for (s, ps) in tasks {
                        for p in ps {
                            if !seen.insert((s.clone(), *p)) {
                                return fail(format!("member {id} holds task {s}-{p} in two roles"));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The checks of [`GroupCoordinator::validate_streams_group_commit`] on `group`.
fn validate_commit<'a>(
    group: &StreamsGroup,
    committer: &StreamsCommitter,
    partitions: impl Iterator<Item = (&'a str, i32)>,
) -> Result<(), ErrorCode> {
    let epoch = committer.member_epoch;
    if epoch < 0 && group.members.is_empty() {
        return Ok(());
    }
    let names_nobody = epoch == -1 && committer.member_id.is_empty() && committer.instance_id.is_none();
    if committer.transactional && names_nobody {
        return Ok(());
    }
    let Some(member) = group.members.get(committer.member_id) else {
        return Err(ErrorCode::UNKNOWN_MEMBER_ID);
    };
    if !committer.transactional && committer.api_version < 9 {
        return Err(ErrorCode::UNSUPPORTED_VERSION);
    }
    let stale = if committer.transactional { ErrorCode::ILLEGAL_GENERATION } else { ErrorCode::STALE_MEMBER_EPOCH };
    if epoch == member.member_epoch {
        return Ok(());
    }
    if epoch > member.member_epoch {
        return Err(stale);
    }
    // Kafka 4.4's `createAssignmentEpochValidator`: each committed partition belongs to a
    // task the member holds (or is revoking), assigned at or before the epoch it commits at.
    let Some(topology) = &group.topology else { return Err(stale) };
    for (topic, partition) in partitions {
        let Some(subtopology) = topology.subtopology_of(topic) else { return Err(stale) };
        let id = &subtopology.subtopology_id;
        let assigned_at = [&member.assigned.active, &member.pending_revocation.active]
            .into_iter()
            .find_map(|tasks| tasks.get(id).and_then(|ps| ps.get(&partition)).copied());
        match assigned_at {
            Some(assigned_at) if epoch >= assigned_at => {}
            _ => return Err(stale),
        }
    }
    Ok(())
}

/// Makes a replayed group consistent: targets only of members, epochs in order, an
/// active task owned by one member only, a pending revocation only in UNREVOKED_TASKS and
/// never empty there, one member per instance id.
fn repair_loaded(group: &mut StreamsGroup) {
    group.target.retain(|id, _| group.members.contains_key(id));
    group.group_epoch = group.group_epoch.max(0);
    group.assignment_epoch = group.assignment_epoch.clamp(0, group.group_epoch);
    let mut owned: BTreeSet<(String, i32)> = BTreeSet::new();
    let mut instances = BTreeSet::new();
    for member in group.members.values_mut() {
        if member.instance_id.as_ref().is_some_and(|i| !instances.insert(i.clone())) {
            member.instance_id = None;
        }
        member.member_epoch = member.member_epoch.min(group.assignment_epoch);
        for tasks in [&mut member.assigned.active, &mut member.pending_revocation.active] {
            for (subtopology, partitions) in tasks.iter_mut() {
                partitions.retain(|p, _| owned.insert((subtopology.clone(), *p)));
            }
            tasks.retain(|_, partitions| !partitions.is_empty());
        }
        // A task held in two roles keeps its first (active, then standby).
        let active = member.assigned.active_tasks();
        for (subtopology, partitions) in member.assigned.standby.iter_mut() {
            partitions.retain(|p| !active.get(subtopology).is_some_and(|a| a.contains(p)));
        }
        let standby = member.assigned.standby.clone();
        for (subtopology, partitions) in member.assigned.warmup.iter_mut() {
            partitions.retain(|p| {
                !active.get(subtopology).is_some_and(|a| a.contains(p))
                    && !standby.get(subtopology).is_some_and(|s| s.contains(p))
            });
        }
        member.assigned.standby.retain(|_, ps| !ps.is_empty());
        member.assigned.warmup.retain(|_, ps| !ps.is_empty());
        member.state = match (member.state, member.pending_revocation.is_empty()) {
            (_, false) => MemberState::UnrevokedTasks,
            (MemberState::UnrevokedTasks, true) => MemberState::Stable,
            (state, true) => state,
        };
    }
}
