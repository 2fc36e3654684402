//! ShareGroupHeartbeat v1: joining, heartbeating and leaving (Kafka's
//! `GroupMetadataManager.shareGroupHeartbeat` and `shareGroupLeave`), and the target
//! assignment and reconciliation steps they run.

use super::assignor::{self, MemberSpec};
use super::records;
use super::{ShareGroup, ShareMember, StateTopic, LEAVE_GROUP_MEMBER_EPOCH};
use crate::group::consumer::heartbeat::{reject, HeartbeatResponse, Rejection};
use crate::group::consumer::{Assignment, TopicsView};
use crate::group::metadata_hash::{group_hash, topic_hash};
use crate::group::records::{Continuation, Record};
use crate::group::{GroupCoordinator, ReplyId, Response};
use osprey_protocol::messages::share_group_heartbeat_response::{
    Assignment as ResponseAssignment, TopicPartitions as ResponseTopicPartitions,
};
use osprey_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, BTreeSet};

/// Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`. The member id is the client's
/// (a UUID it generates, KIP-932); Kafka checks only that it is not blank.
fn validate_request(request: &ShareGroupHeartbeatRequest) -> Result<(), Rejection> {
    let blank = |s: &str| s.trim().is_empty();
    let invalid = |message: &str| Err(reject(ErrorCode::INVALID_REQUEST, message));
    if blank(&request.member_id) {
        return invalid("MemberId can't be empty.");
    }
    if blank(&request.group_id) {
        return invalid("GroupId can't be empty.");
    }
    if request.rack_id.as_deref().is_some_and(blank) {
        return invalid("RackId can't be empty.");
    }
    if request.member_epoch == 0 {
        if request.subscribed_topic_names.as_ref().is_none_or(|names| names.is_empty()) {
            return invalid("SubscribedTopicNames must be set in first request.");
        }
    } else if request.member_epoch < LEAVE_GROUP_MEMBER_EPOCH {
        return invalid("MemberEpoch is invalid.");
    }
    Ok(())
}

/// Kafka's `throwIfShareGroupMemberEpochIsInvalid`: the member may come back with its
/// previous epoch (the response with the new one was lost).
fn check_member_epoch(member: &ShareMember, received: i32) -> Result<(), Rejection> {
    if received > member.member_epoch {
        return Err(reject(
            ErrorCode::FENCED_MEMBER_EPOCH,
            format!(
                "The share group member has a greater member epoch ({received}) than the one known by the group \
                 coordinator ({}). The member must abandon all its partitions and rejoin.",
                member.member_epoch
            ),
        ));
    }
    if received < member.member_epoch && received != member.previous_member_epoch {
        return Err(reject(
            ErrorCode::FENCED_MEMBER_EPOCH,
            format!(
                "The share group member has a smaller member epoch ({received}) than the one known by the group \
                 coordinator ({}), and it does not match the previous member epoch ({}). The member must abandon \
                 all its partitions and rejoin.",
                member.member_epoch, member.previous_member_epoch
            ),
        ));
    }
    Ok(())
}

fn response_assignment(assignment: &Assignment) -> ResponseAssignment {
    ResponseAssignment {
        topic_partitions: assignment
            .iter()
            .map(|(topic, ps)| ResponseTopicPartitions {
                topic_id: *topic,
                partitions: ps.iter().copied().collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

impl HeartbeatResponse for ShareGroupHeartbeatResponse {
    fn rejected(rejection: Rejection) -> Self {
        ShareGroupHeartbeatResponse {
            error_code: rejection.code,
            error_message: Some(rejection.message),
            ..Default::default()
        }
    }
    fn into_response(self) -> Response {
        Response::ShareGroupHeartbeat(self)
    }
    fn after_persist(self, reply: ReplyId) -> Continuation {
        Continuation::ShareGroupHeartbeat { reply, response: Box::new(self) }
    }
}

impl GroupCoordinator {
    /// A ShareGroupHeartbeat request (v1) from `client_id` at `client_host`. The answer
    /// comes as [`crate::group::Output::Respond`] for `reply`: at once when nothing
    /// changed, else once the group's records are durable.
    #[allow(clippy::too_many_arguments)]
    pub fn share_group_heartbeat(
        &mut self,
        request: &ShareGroupHeartbeatRequest,
        client_id: &str,
        client_host: &str,
        topics: &dyn TopicsView,
        reply: ReplyId,
        now_ms: i64,
    ) {
        let mut records = Vec::new();
        let result = validate_request(request).and_then(|()| {
            if let Some(error) = self.serving_error(&request.group_id) {
                return Err(reject(error, format!("{}: this broker does not coordinate the group now", error.name())));
            }
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH {
                self.share_group_leave(request, &mut records)
            } else {
                self.share_group_join_or_heartbeat(request, (client_id, client_host), topics, &mut records, now_ms)
            }
        });
        self.answer_heartbeat(&request.group_id, reply, result, records);
    }

    /// The error for `group_id` when it is no share group: Kafka's `shareGroup` /
    /// `getOrMaybeCreateShareGroup`.
    pub(super) fn not_a_share_group(&self, group_id: &str, missing: &str) -> Rejection {
        if self.groups.contains_key(group_id)
            || self.consumer_groups.contains_key(group_id)
            || self.is_streams_group(group_id)
        {
            reject(ErrorCode::GROUP_ID_NOT_FOUND, format!("Group {group_id} is not a share group."))
        } else {
            reject(ErrorCode::GROUP_ID_NOT_FOUND, missing.to_string())
        }
    }

    /// Kafka's `shareGroupLeave`: the member goes and the group epoch bumps.
    fn share_group_leave(
        &mut self,
        request: &ShareGroupHeartbeatRequest,
        records: &mut Vec<Record>,
    ) -> Result<ShareGroupHeartbeatResponse, Rejection> {
        let group_id = &request.group_id;
        let Some(group) = self.share_groups.get_mut(group_id) else {
            return Err(self.not_a_share_group(group_id, &format!("Group {group_id} not found.")));
        };
        if !group.members.contains_key(&request.member_id) {
            return Err(reject(
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("Member {} is not a member of group {group_id}.", request.member_id),
            ));
        }
        fence_member(group, &request.member_id, records);
        Ok(ShareGroupHeartbeatResponse {
            member_id: Some(request.member_id.clone()),
            member_epoch: request.member_epoch,
            ..Default::default()
        })
    }

    /// A join (epoch 0) or a heartbeat: Kafka's `shareGroupHeartbeat`.
    fn share_group_join_or_heartbeat(
        &mut self,
        request: &ShareGroupHeartbeatRequest,
        (client_id, client_host): (&str, &str),
        topics: &dyn TopicsView,
        records: &mut Vec<Record>,
        now_ms: i64,
    ) -> Result<ShareGroupHeartbeatResponse, Rejection> {
        let group_id = request.group_id.as_str();
        let joining = request.member_epoch == 0;
        if !self.share_groups.contains_key(group_id) {
            // No conversion between group types, as Kafka: an existing classic (even
            // offsets only) or consumer group keeps its id.
            let rejection = self.not_a_share_group(group_id, &format!("Share group {group_id} not found."));
            let other = self.groups.contains_key(group_id)
                || self.consumer_groups.contains_key(group_id)
                || self.is_streams_group(group_id);
            if !joining || other {
                return Err(rejection);
            }
        }
        let max = self.config.share_group_max_size;
        let empty = ShareGroup::new(group_id);
        let group = self.share_groups.get(group_id).unwrap_or(&empty);
        if group.members.len() >= max && !group.members.contains_key(&request.member_id) {
            return Err(reject(
                ErrorCode::GROUP_MAX_SIZE_REACHED,
                format!("The share group has reached its maximum capacity of {max} members."),
            ));
        }
        let previous = match group.members.get(&request.member_id) {
            Some(member) => member.clone(),
            None if joining => ShareMember::new(&request.member_id),
            None => {
                return Err(reject(
                    ErrorCode::UNKNOWN_MEMBER_ID,
                    format!("Member {} is not a member of group {group_id}.", request.member_id),
                ))
            }
        };
        check_member_epoch(&previous, request.member_epoch)?;

        let overrides = topics.share_group_overrides(group_id);
        let session_timeout_ms =
            i64::from(overrides.session_timeout_ms.unwrap_or(self.config.share_group_session_timeout_ms));
        let heartbeat_interval_ms =
            overrides.heartbeat_interval_ms.unwrap_or(self.config.share_group_heartbeat_interval_ms);
        let mut group = self.share_groups.remove(group_id).unwrap_or_else(|| ShareGroup::new(group_id));
        let mut updated = previous.clone();
        if let Some(rack_id) = &request.rack_id {
            updated.rack_id = Some(rack_id.clone());
        }
        if let Some(names) = &request.subscribed_topic_names {
            updated.subscribed_topic_names = names.iter().cloned().collect();
        }
        updated.client_id = client_id.to_string();
        updated.client_host = client_host.to_string();
        let member_id = updated.member_id.clone();
        let member = update_group(&mut group, updated, &previous, topics, records);
        member.session_deadline_ms = Some(now_ms + session_timeout_ms);
        // Kafka sends the assignment to a full request (epoch 0, or with the subscribed
        // topics, as a client sends after an error) and when it changed.
        let include_assignment = request.member_epoch == 0
            || request.subscribed_topic_names.is_some()
            || member.assigned_partitions != previous.assigned_partitions;
        let response = ShareGroupHeartbeatResponse {
            member_id: Some(member_id),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms,
            assignment: include_assignment.then(|| response_assignment(&member.assigned_partitions)),
            ..Default::default()
        };
        self.share_groups.insert(group_id.to_string(), group);
        Ok(response)
    }
}

/// Steps 1-3 of Kafka's `shareGroupHeartbeat` once the member is known: update the
/// member (bumping the group epoch if its subscription or the subscribed topics
/// changed), compute a new target assignment if the group epoch moved, and move the
/// member to its target.
fn update_group<'a>(
    group: &'a mut ShareGroup,
    updated: ShareMember,
    previous: &ShareMember,
    topics: &dyn TopicsView,
    records: &mut Vec<Record>,
) -> &'a mut ShareMember {
    let group_id = group.group_id.clone();
    let member_id = updated.member_id.clone();
    if updated.same_metadata(previous) && group.members.contains_key(&member_id) {
        // Unchanged (a new member always gets its metadata record).
    } else {
        records.push(records::member_metadata_record(&group_id, &updated));
    }
    let mut bump = updated.subscribed_topic_names != previous.subscribed_topic_names;
    group.members.insert(member_id.clone(), updated);

    refresh_topic_hashes(group, topics);
    let hash = group_hash(group.topic_hashes.iter().map(|(name, (_, hash))| (name, *hash)));
    bump |= hash != group.metadata_hash;
    bump |= initialize_state(group, records);
    if bump {
        group.group_epoch += 1;
        group.metadata_hash = hash;
        records.push(records::group_epoch_record(&group_id, group.group_epoch, hash));
    }
    if group.group_epoch > group.assignment_epoch {
        compute_target_assignment(group, records);
    }
    reconcile(group, &member_id, bump, records)
}

/// The subscribed topics as the view shows them now, with their hashes.
fn refresh_topic_hashes(group: &mut ShareGroup, topics: &dyn TopicsView) {
    group.topic_hashes = group
        .subscribed_topic_names()
        .into_iter()
        .filter_map(|name| topics.topic(&name).filter(|t| t.num_partitions > 0).map(|info| (name, info)))
        .map(|(name, info)| {
            let hash = topic_hash(&name, info);
            (name, (info, hash))
        })
        .collect();
}

/// Records the share state of every subscribed partition as initialized (see the module
/// documentation for how this differs from Kafka) and forgets topics that no longer
/// exist. True when partitions became assignable that were not: their target must be
/// computed again (Kafka's `initializedAssignmentPending`).
fn initialize_state(group: &mut ShareGroup, records: &mut Vec<Record>) -> bool {
    let existing: BTreeMap<Uuid, (&String, i32)> =
        group.topic_hashes.iter().map(|(name, (info, _))| (info.topic_id, (name, info.num_partitions))).collect();
    let mut metadata = group.state_metadata.clone();
    let mut added = false;
    for (topic_id, (name, num_partitions)) in &existing {
        let entry = metadata
            .initialized
            .entry(*topic_id)
            .or_insert_with(|| StateTopic { name: (*name).clone(), partitions: BTreeSet::new() });
        for partition in 0..*num_partitions {
            added |= entry.partitions.insert(partition);
        }
        metadata.initializing.remove(topic_id);
    }
    // A topic deleted (or recreated under another id) leaves the initialized set only
    // when nobody subscribes to its name any more, so a subscription that briefly sees
    // no topic does not lose it.
    let subscribed = group.subscribed_topic_names();
    metadata.initialized.retain(|id, t| existing.contains_key(id) || subscribed.contains(&t.name));
    if metadata != group.state_metadata {
        records.push(records::state_partition_metadata_record(&group.group_id, &metadata));
        group.state_metadata = metadata;
    }
    added && !group.members.is_empty()
}

/// The assignable partitions of each existing subscribed topic: those whose share state
/// is initialized.
fn assignable_partitions(group: &ShareGroup) -> BTreeMap<Uuid, BTreeSet<i32>> {
    group
        .topic_hashes
        .values()
        .filter_map(|(info, _)| {
            let initialized = group.state_metadata.initialized.get(&info.topic_id)?;
            let partitions: BTreeSet<i32> =
                initialized.partitions.iter().copied().filter(|p| *p < info.num_partitions).collect();
            Some((info.topic_id, partitions))
        })
        .collect()
}

/// Kafka's `TargetAssignmentBuilder.ShareTargetAssignmentBuilder`: runs the simple
/// assignor for the group epoch and records each member whose target changed (and every
/// new one), then the target's epoch.
fn compute_target_assignment(group: &mut ShareGroup, records: &mut Vec<Record>) {
    let topic_ids: BTreeMap<&String, Uuid> =
        group.topic_hashes.iter().map(|(name, (info, _))| (name, info.topic_id)).collect();
    let specs: BTreeMap<String, MemberSpec> = group
        .members
        .iter()
        .map(|(id, m)| {
            let subscribed_topic_ids =
                m.subscribed_topic_names.iter().filter_map(|n| topic_ids.get(n)).copied().collect();
            let current = group.target.get(id).cloned().unwrap_or_default();
            (id.clone(), MemberSpec { subscribed_topic_ids, current })
        })
        .collect();
    let mut subscriptions = group.members.values().map(|m| &m.subscribed_topic_names);
    let homogeneous = subscriptions.next().is_none_or(|first| subscriptions.all(|s| s == first));
    let new_target = assignor::assign(&specs, &assignable_partitions(group), homogeneous);
    for (member_id, assignment) in &new_target {
        if group.target.get(member_id) != Some(assignment) {
            records.push(records::target_member_record(&group.group_id, member_id, assignment));
        }
    }
    group.target = new_target;
    group.assignment_epoch = group.group_epoch;
    records.push(records::target_epoch_record(&group.group_id, group.assignment_epoch));
}

/// Kafka's `maybeReconcile` with `ShareGroupAssignmentBuilder`: a member not at the
/// target's epoch (or whose subscription changed) takes its target, filtered to the
/// topics it subscribes to, at the target's epoch. Nothing to revoke first.
fn reconcile<'a>(
    group: &'a mut ShareGroup,
    member_id: &str,
    subscription_changed: bool,
    records: &mut Vec<Record>,
) -> &'a mut ShareMember {
    let target_epoch = group.assignment_epoch;
    let subscribed_ids: BTreeSet<Uuid> = {
        let member = &group.members[member_id];
        member
            .subscribed_topic_names
            .iter()
            .filter_map(|name| group.topic_hashes.get(name).map(|(info, _)| info.topic_id))
            .collect()
    };
    let target = group.target.get(member_id).cloned().unwrap_or_default();
    let member = group.members.get_mut(member_id).expect("inserted by the caller");
    if !subscription_changed && member.member_epoch == target_epoch {
        return member;
    }
    let mut next = member.clone();
    if member.member_epoch != target_epoch {
        next.previous_member_epoch = member.member_epoch;
        next.member_epoch = target_epoch;
    }
    next.assigned_partitions = target.into_iter().filter(|(topic, _)| subscribed_ids.contains(topic)).collect();
    if !next.same_assignment(member) {
        records.push(records::current_assignment_record(&group.group_id, &next));
        *member = next;
    }
    member
}

/// Kafka's `shareGroupFenceMember`: the member's records go and the group epoch bumps,
/// with the hash of the topics the others still subscribe to.
pub(super) fn fence_member(group: &mut ShareGroup, member_id: &str, records: &mut Vec<Record>) {
    group.members.remove(member_id);
    group.target.remove(member_id);
    records.extend(records::member_tombstones(&group.group_id, member_id));
    let subscribed = group.subscribed_topic_names();
    group.topic_hashes.retain(|name, _| subscribed.contains(name));
    let hash = group_hash(group.topic_hashes.iter().map(|(name, (_, hash))| (name, *hash)));
    group.group_epoch += 1;
    group.metadata_hash = hash;
    records.push(records::group_epoch_record(&group.group_id, group.group_epoch, hash));
}
