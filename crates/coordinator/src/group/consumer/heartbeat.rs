//! ConsumerGroupHeartbeat v0-1: joining, heartbeating, leaving (Kafka's
//! `GroupMetadataManager.consumerGroupHeartbeat` and `consumerGroupLeave`), and the
//! target assignment and reconciliation steps they run.

use super::{assignor, reconcile, records, subscription_regex};
use super::{Assignment, ConsumerGroup, ConsumerMember, MemberState, TopicInfo, TopicsView};
use super::{INVALID_REGULAR_EXPRESSION, LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH};
use crate::group::records::{Continuation, Record};
use crate::group::{GroupCoordinator, ReplyId, Response};
use osprey_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as RequestTopicPartitions;
use osprey_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as ResponseAssignment, TopicPartitions as ResponseTopicPartitions,
};
use osprey_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, BTreeSet};

/// A heartbeat's failure (ConsumerGroupHeartbeat's or ShareGroupHeartbeat's): the error
/// code and Kafka's message.
pub(in crate::group) struct Rejection {
    pub(in crate::group) code: i16,
    pub(in crate::group) message: String,
}

pub(in crate::group) fn reject(error: ErrorCode, message: impl Into<String>) -> Rejection {
    Rejection { code: error.code(), message: message.into() }
}

/// The response of a KIP-848 ConsumerGroupHeartbeat or a KIP-932 ShareGroupHeartbeat, as
/// [`GroupCoordinator::answer_heartbeat`] sends it.
pub(in crate::group) trait HeartbeatResponse: Sized {
    /// The response to a heartbeat that failed with `rejection`.
    fn rejected(rejection: Rejection) -> Self;
    /// The response as the coordinator answers it.
    fn into_response(self) -> Response;
    /// What answers the response for `reply` once the heartbeat's records are durable.
    fn after_persist(self, reply: ReplyId) -> Continuation;
}

impl HeartbeatResponse for ConsumerGroupHeartbeatResponse {
    fn rejected(rejection: Rejection) -> Self {
        ConsumerGroupHeartbeatResponse {
            error_code: rejection.code,
            error_message: Some(rejection.message),
            ..Default::default()
        }
    }
    fn into_response(self) -> Response {
        Response::ConsumerGroupHeartbeat(self)
    }
    fn after_persist(self, reply: ReplyId) -> Continuation {
        Continuation::ConsumerGroupHeartbeat { reply, response: Box::new(self) }
    }
}

/// Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid` (and
/// `throwIfRegularExpressionIsInvalid`: a pattern must compile, within
/// `max_regex_bytes`).
fn validate_request(
    request: &ConsumerGroupHeartbeatRequest,
    api_version: i16,
    max_regex_bytes: usize,
) -> Result<(), Rejection> {
    let blank = |s: &str| s.trim().is_empty();
    let invalid = |message: &str| Err(reject(ErrorCode::INVALID_REQUEST, message));
    if blank(&request.group_id) {
        return invalid("GroupId can't be empty.");
    }
    if request.instance_id.as_deref().is_some_and(blank) {
        return invalid("InstanceId can't be empty.");
    }
    if request.rack_id.as_deref().is_some_and(blank) {
        return invalid("RackId can't be empty.");
    }
    if api_version >= 1 && blank(&request.member_id) {
        return invalid("MemberId can't be empty.");
    }
    match request.member_epoch {
        0 => {
            if request.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if request.topic_partitions.as_ref().is_none_or(|tps| !tps.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            let has_names = request.subscribed_topic_names.as_ref().is_some_and(|n| !n.is_empty());
            let has_regex = api_version >= 1 && request.subscribed_topic_regex.as_ref().is_some_and(|r| !r.is_empty());
            if !has_names && !has_regex {
                return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.");
            }
        }
        epoch if epoch > 0 || epoch == LEAVE_GROUP_MEMBER_EPOCH => {
            if blank(&request.member_id) {
                return invalid("MemberId can't be empty.");
            }
        }
        LEAVE_GROUP_STATIC_MEMBER_EPOCH => {
            if blank(&request.member_id) {
                return invalid("MemberId can't be empty.");
            }
            if request.instance_id.is_none() {
                return invalid("InstanceId can't be null.");
            }
        }
        _ => return invalid("MemberEpoch is invalid."),
    }
    if api_version >= 1 {
        if let Some(pattern) = request.subscribed_topic_regex.as_deref().filter(|r| !r.is_empty()) {
            subscription_regex::compile(pattern, max_regex_bytes)
                .map_err(|message| Rejection { code: INVALID_REGULAR_EXPRESSION, message })?;
        }
    }
    if let Some(name) = request.server_assignor.as_deref() {
        if !assignor::ASSIGNORS.contains(&name) {
            return Err(reject(
                ErrorCode::UNSUPPORTED_ASSIGNOR,
                format!("ServerAssignor {name} is not supported. Supported assignors: uniform, range."),
            ));
        }
    }
    Ok(())
}

/// Kafka's `throwIfMemberEpochIsInvalid`: a member may come back with its previous epoch
/// if it owns a subset of its assignment (the response with the new epoch was lost).
fn check_member_epoch(member: &ConsumerMember, received: i32, owned: Option<&Assignment>) -> Result<(), Rejection> {
    let fenced = |relation: &str| {
        Err(reject(
            ErrorCode::FENCED_MEMBER_EPOCH,
            format!(
                "The consumer group member has a {relation} member epoch ({received}) than the one known by the \
                 group coordinator ({}). The member must abandon all its partitions and rejoin.",
                member.member_epoch
            ),
        ))
    };
    if received > member.member_epoch {
        return fenced("greater");
    }
    if received < member.member_epoch {
        let subset = owned.is_some_and(|owned| {
            owned.iter().all(|(topic, ps)| member.assigned_partitions.get(topic).is_some_and(|a| ps.is_subset(a)))
        });
        if received != member.previous_member_epoch || !subset {
            return fenced("smaller");
        }
    }
    Ok(())
}

fn to_assignment(partitions: &[RequestTopicPartitions]) -> Assignment {
    let mut assignment = Assignment::new();
    for t in partitions {
        if !t.partitions.is_empty() {
            assignment.entry(t.topic_id).or_default().extend(t.partitions.iter().copied());
        }
    }
    assignment
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

/// Who is heartbeating, once validated: the member before this heartbeat (`previous`,
/// for the change checks), the member to update (`base`), and the static member it
/// replaces.
struct Resolved {
    previous: ConsumerMember,
    base: ConsumerMember,
    replaced: Option<String>,
}

impl GroupCoordinator {
    /// A ConsumerGroupHeartbeat request (v0-1) from `client_id` at `client_host`. The
    /// answer comes as [`super::Output::Respond`] for `reply`: at once when nothing
    /// changed, else once the group's records are durable.
    #[allow(clippy::too_many_arguments)]
    pub fn consumer_group_heartbeat(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
        api_version: i16,
        client_id: &str,
        client_host: &str,
        topics: &dyn TopicsView,
        reply: ReplyId,
        now_ms: i64,
    ) {
        let mut records = Vec::new();
        let max_regex_bytes = self.config.consumer_group_regex_max_compiled_bytes;
        let serving = |error: ErrorCode| {
            reject(error, format!("{}: this broker does not coordinate the group now", error.name()))
        };
        let result = validate_request(request, api_version, max_regex_bytes).and_then(|()| {
            if let Some(error) = self.serving_error(&request.group_id) {
                return Err(serving(error));
            }
            if self.is_share_group(&request.group_id) || self.is_streams_group(&request.group_id) {
                let group_id = &request.group_id;
                return Err(reject(
                    ErrorCode::GROUP_ID_NOT_FOUND,
                    format!("Group {group_id} is not a consumer group."),
                ));
            }
            if matches!(request.member_epoch, LEAVE_GROUP_MEMBER_EPOCH | LEAVE_GROUP_STATIC_MEMBER_EPOCH) {
                self.consumer_group_leave(request, &mut records)
            } else {
                self.consumer_group_join_or_heartbeat(
                    request,
                    api_version,
                    (client_id, client_host),
                    topics,
                    &mut records,
                    now_ms,
                )
            }
        });
        self.answer_heartbeat(&request.group_id, reply, result, records);
    }

    /// Answers a heartbeat of `group_id` for `reply`: at once when it failed or changed
    /// nothing, else once its `records` are durable.
    pub(in crate::group) fn answer_heartbeat<R: HeartbeatResponse>(
        &mut self,
        group_id: &str,
        reply: ReplyId,
        result: Result<R, Rejection>,
        records: Vec<Record>,
    ) {
        let response = match result {
            Ok(response) => response,
            Err(rejection) => return self.respond(reply, R::rejected(rejection).into_response()),
        };
        if records.is_empty() {
            return self.respond(reply, response.into_response());
        }
        self.persist(group_id, records, response.after_persist(reply));
    }

    /// The records of a heartbeat are durable, or failed with `error`.
    pub(in crate::group) fn heartbeat_persisted<R: HeartbeatResponse>(
        &mut self,
        reply: ReplyId,
        response: R,
        result: Result<(), ErrorCode>,
    ) {
        let response = match result {
            Ok(()) => response,
            Err(error) => R::rejected(reject(error, error.name())),
        };
        self.respond(reply, response.into_response());
    }

    /// Kafka's `consumerGroupLeave`: epoch -1 removes the member (its partitions are
    /// freed and the group epoch bumps); -2 marks a static member as gone for now.
    fn consumer_group_leave(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
        records: &mut Vec<Record>,
    ) -> Result<ConsumerGroupHeartbeatResponse, Rejection> {
        let group_id = &request.group_id;
        let Some(group) = self.consumer_groups.get_mut(group_id) else {
            return Err(self.group_not_found(group_id));
        };
        let instance_id = request.instance_id.as_deref();
        let member_id = leaving_member_id(
            group_id,
            &request.member_id,
            instance_id,
            group.members.contains_key(&request.member_id),
            instance_id.and_then(|i| group.static_member(i)).map(|m| m.member_id.as_str()),
        )?;
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            let member = group.members.get_mut(&member_id).expect("checked above");
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
            member.partitions_pending_revocation.clear();
            member.rebalance_deadline = None;
            records.push(records::current_assignment_record(group_id, member));
        } else {
            fence_member(group, &member_id, records);
        }
        Ok(ConsumerGroupHeartbeatResponse {
            member_id: Some(request.member_id.clone()),
            member_epoch: request.member_epoch,
            ..Default::default()
        })
    }

    fn group_not_found(&self, group_id: &str) -> Rejection {
        if self.groups.get(group_id).is_some_and(|g| !g.members.is_empty()) {
            reject(ErrorCode::GROUP_ID_NOT_FOUND, format!("Group {group_id} is not a consumer group."))
        } else {
            reject(ErrorCode::GROUP_ID_NOT_FOUND, format!("Consumer group {group_id} not found."))
        }
    }

    /// A join (epoch 0) or a heartbeat of a member: Kafka's `consumerGroupHeartbeat`.
    fn consumer_group_join_or_heartbeat(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
        api_version: i16,
        client: (&str, &str),
        topics: &dyn TopicsView,
        records: &mut Vec<Record>,
        now_ms: i64,
    ) -> Result<ConsumerGroupHeartbeatResponse, Rejection> {
        let group_id = request.group_id.as_str();
        let joining = request.member_epoch == 0;
        // A classic group with members is not ours to take over (no online upgrade); an
        // empty one (offsets only, or a finished classic group) becomes a consumer group.
        if !self.consumer_groups.contains_key(group_id) {
            if let Some(classic) = self.groups.get(group_id) {
                let in_use = !classic.members.is_empty() || !classic.pending_members.is_empty();
                if in_use || !joining {
                    return Err(reject(
                        ErrorCode::GROUP_ID_NOT_FOUND,
                        format!("Group {group_id} is not a consumer group."),
                    ));
                }
            } else if !joining {
                return Err(reject(ErrorCode::GROUP_ID_NOT_FOUND, format!("Consumer group {group_id} not found.")));
            }
        }
        let existed = self.consumer_groups.contains_key(group_id);
        let mut group = self.consumer_groups.remove(group_id).unwrap_or_else(|| ConsumerGroup::new(group_id));
        let result = self.resolve_member(&group, request);
        let resolved = match result {
            Ok(resolved) => resolved,
            Err(rejection) => {
                if existed {
                    self.consumer_groups.insert(group_id.to_string(), group);
                }
                return Err(rejection);
            }
        };
        if !existed {
            records.extend(self.convert_empty_classic_group(group_id, now_ms));
        }
        let response = self.update_member(&mut group, request, api_version, client, topics, resolved, records, now_ms);
        self.consumer_groups.insert(group_id.to_string(), group);
        Ok(response)
    }

    /// The checks of a heartbeat that come before any change.
    fn resolve_member(
        &mut self,
        group: &ConsumerGroup,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> Result<Resolved, Rejection> {
        let max = self.config.consumer_group_max_size;
        if group.members.len() >= max
            && (request.member_id.is_empty() || !group.members.contains_key(&request.member_id))
        {
            return Err(reject(
                ErrorCode::GROUP_MAX_SIZE_REACHED,
                format!("The consumer group has reached its maximum capacity of {max} members."),
            ));
        }
        check_pattern_count(group, request, self.config.consumer_group_regex_max_patterns)?;
        let epoch = request.member_epoch;
        let owned = request.topic_partitions.as_deref().map(to_assignment);
        // ConsumerGroupHeartbeat v0: the coordinator names a joining member.
        let member_id =
            if request.member_id.is_empty() { self.member_ids.kafka_uuid() } else { request.member_id.clone() };
        let Some(instance_id) = request.instance_id.as_deref() else {
            let member = match group.members.get(&member_id) {
                Some(member) => member.clone(),
                None if epoch == 0 => ConsumerMember::new(&member_id),
                None => return Err(unknown_member(&member_id, &group.group_id)),
            };
            check_member_epoch(&member, epoch, owned.as_ref())?;
            return Ok(Resolved { previous: member.clone(), base: member, replaced: None });
        };
        let existing = group.static_member(instance_id);
        if epoch == 0 {
            return match existing {
                None => {
                    let member =
                        group.members.get(&member_id).cloned().unwrap_or_else(|| ConsumerMember::new(&member_id));
                    Ok(Resolved { previous: member.clone(), base: member, replaced: None })
                }
                Some(old) if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH => Err(reject(
                    ErrorCode::UNRELEASED_INSTANCE_ID,
                    format!("Static member {} with instance id {instance_id} is not released yet.", old.member_id),
                )),
                Some(old) => {
                    // The instance comes back under a new member id and takes over the
                    // old member's partitions.
                    let mut base = ConsumerMember::new(&member_id);
                    base.assigned_partitions = old.assigned_partitions.clone();
                    Ok(Resolved { previous: old.clone(), base, replaced: Some(old.member_id.clone()) })
                }
            };
        }
        let Some(old) = existing else {
            return Err(reject(ErrorCode::UNKNOWN_MEMBER_ID, format!("Instance id {instance_id} is unknown.")));
        };
        if old.member_id != member_id {
            return Err(fenced_instance(instance_id, &old.member_id, &member_id));
        }
        check_member_epoch(old, epoch, owned.as_ref())?;
        Ok(Resolved { previous: old.clone(), base: old.clone(), replaced: None })
    }

    /// Steps 1-3 of Kafka's `consumerGroupHeartbeat` once the member is known: update the
    /// member (bumping the group epoch if subscriptions changed), compute a new target
    /// assignment if the group epoch moved, reconcile the member towards its target.
    #[allow(clippy::too_many_arguments)]
    fn update_member(
        &mut self,
        group: &mut ConsumerGroup,
        request: &ConsumerGroupHeartbeatRequest,
        api_version: i16,
        (client_id, client_host): (&str, &str),
        topics: &dyn TopicsView,
        resolved: Resolved,
        records: &mut Vec<Record>,
        now_ms: i64,
    ) -> ConsumerGroupHeartbeatResponse {
        let group_id = group.group_id.clone();
        let Resolved { previous, base, replaced } = resolved;
        let member_id = base.member_id.clone();
        let mut updated = base;
        if let Some(instance_id) = &request.instance_id {
            updated.instance_id = Some(instance_id.clone());
        }
        if let Some(rack_id) = &request.rack_id {
            updated.rack_id = Some(rack_id.clone());
        }
        if request.rebalance_timeout_ms != -1 {
            updated.rebalance_timeout_ms = request.rebalance_timeout_ms;
        }
        if let Some(name) = &request.server_assignor {
            updated.server_assignor = Some(name.clone());
        }
        if let Some(names) = &request.subscribed_topic_names {
            updated.subscribed_topic_names = names.iter().cloned().collect();
        }
        if api_version >= 1 {
            if let Some(regex) = request.subscribed_topic_regex.as_ref() {
                updated.subscribed_topic_regex = Some(regex.clone()).filter(|r| !r.is_empty());
            }
        }
        updated.client_id = client_id.to_string();
        updated.client_host = client_host.to_string();

        if let Some(old_id) = &replaced {
            // Kafka's `replaceMember`: the old member's records go, the new member takes
            // over its target.
            group.members.remove(old_id);
            let target = group.target.remove(old_id).unwrap_or_default();
            records.extend(records::member_tombstones(&group_id, old_id));
            records.push(records::target_member_record(&group_id, &member_id, &target));
            group.target.insert(member_id.clone(), target);
        }
        let mut bump = group.group_epoch == 0;
        if !updated.same_metadata(&previous) {
            records.push(records::member_metadata_record(&group_id, &updated));
            bump |= updated.subscribed_topic_names != previous.subscribed_topic_names
                || updated.subscribed_topic_regex != previous.subscribed_topic_regex;
        }
        group.members.insert(member_id.clone(), updated);
        group.refresh_regexes(topics, self.config.consumer_group_regex_max_compiled_bytes);
        let metadata = group.compute_subscription_metadata(topics);
        if metadata != group.subscription_metadata {
            records.push(records::subscription_metadata_record(&group_id, &metadata));
            group.subscription_metadata = metadata;
            bump = true;
        }
        if bump {
            group.group_epoch += 1;
            records.push(records::group_epoch_record(&group_id, group.group_epoch));
        }
        if group.group_epoch > group.assignment_epoch {
            compute_target_assignment(group, records);
        }
        let owned = request.topic_partitions.as_deref().map(to_assignment);
        // The group's configs override the broker's (Kafka's `GroupConfigManager`).
        let overrides = topics.consumer_group_overrides(&group_id);
        let session_timeout_ms =
            i64::from(overrides.session_timeout_ms.unwrap_or(self.config.consumer_group_session_timeout_ms));
        let heartbeat_interval_ms =
            overrides.heartbeat_interval_ms.unwrap_or(self.config.consumer_group_heartbeat_interval_ms);
        let member = reconcile_member(group, &member_id, owned.as_ref(), records, now_ms);
        member.session_deadline_ms = Some(now_ms + session_timeout_ms);
        let include_assignment =
            owned.is_some() || request.member_epoch == 0 || member.assigned_partitions != previous.assigned_partitions;
        ConsumerGroupHeartbeatResponse {
            member_id: Some(member_id.clone()),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms,
            assignment: include_assignment.then(|| response_assignment(&member.assigned_partitions)),
            ..Default::default()
        }
    }
}

/// Kafka's `consumerGroupFenceMember`: the member's records go, the subscription
/// metadata loses topics nobody subscribes to any more, the group epoch bumps.
pub(super) fn fence_member(group: &mut ConsumerGroup, member_id: &str, records: &mut Vec<Record>) {
    group.members.remove(member_id);
    group.target.remove(member_id);
    records.extend(records::member_tombstones(&group.group_id, member_id));
    let subscribed = group.subscribed_topic_names();
    let metadata: BTreeMap<String, TopicInfo> = group
        .subscription_metadata
        .iter()
        .filter(|(name, _)| subscribed.contains(*name))
        .map(|(n, t)| (n.clone(), *t))
        .collect();
    if metadata != group.subscription_metadata {
        records.push(records::subscription_metadata_record(&group.group_id, &metadata));
        group.subscription_metadata = metadata;
    }
    group.group_epoch += 1;
    records.push(records::group_epoch_record(&group.group_id, group.group_epoch));
}

/// Kafka's `TargetAssignmentBuilder`: runs the group's preferred assignor for the group
/// epoch and records each member whose target changed (and every new one).
fn compute_target_assignment(group: &mut ConsumerGroup, records: &mut Vec<Record>) {
    let partitions_per_topic: BTreeMap<Uuid, i32> =
        group.subscription_metadata.values().map(|t| (t.topic_id, t.num_partitions)).collect();
    let specs: BTreeMap<String, assignor::MemberSpec> = group
        .members
        .iter()
        .map(|(id, m)| {
            let subscribed_topic_ids = group
                .member_topics(m)
                .filter_map(|name| group.subscription_metadata.get(name))
                .map(|t| t.topic_id)
                .collect();
            let current = group.target.get(id).cloned().unwrap_or_default();
            (id.clone(), assignor::MemberSpec { subscribed_topic_ids, current })
        })
        .collect();
    let name = group.preferred_assignor();
    let new_target = assignor::assign(name, &specs, &partitions_per_topic).expect("a known assignor");
    for (member_id, assignment) in &new_target {
        if group.target.get(member_id) != Some(assignment) {
            records.push(records::target_member_record(&group.group_id, member_id, assignment));
        }
    }
    group.target = new_target;
    group.assignment_epoch = group.group_epoch;
    records.push(records::target_epoch_record(&group.group_id, group.assignment_epoch));
}

/// Kafka's `maybeReconcile`: moves the member towards its target, records the change and
/// (re)arms or clears its rebalance timeout.
fn reconcile_member<'a>(
    group: &'a mut ConsumerGroup,
    member_id: &str,
    owned: Option<&Assignment>,
    records: &mut Vec<Record>,
    now_ms: i64,
) -> &'a mut ConsumerMember {
    let target_epoch = group.assignment_epoch;
    let current = group.members[member_id].clone();
    if !current.is_reconciled_to(target_epoch) {
        let empty = Assignment::new();
        let target = group.target.get(member_id).unwrap_or(&empty);
        let others = group.owned_by_others(member_id);
        let mut next = reconcile::reconcile(&current, target_epoch, target, owned, &|t, p| others.contains(&(t, p)));
        if !next.same_assignment(&current) {
            records.push(records::current_assignment_record(&group.group_id, &next));
            next.rebalance_deadline = (next.state == MemberState::UnrevokedPartitions)
                .then(|| (now_ms + i64::from(next.rebalance_timeout_ms.max(0)), next.member_epoch));
        }
        group.members.insert(member_id.to_string(), next);
    }
    group.members.get_mut(member_id).expect("inserted above")
}

/// A group matches each distinct pattern against every topic whenever the topics
/// change: a pattern the group does not use yet is refused once it uses `max` of them
/// (`osprey.group.consumer.regex.max.patterns`; Kafka has no such bound).
fn check_pattern_count(
    group: &ConsumerGroup,
    request: &ConsumerGroupHeartbeatRequest,
    max: usize,
) -> Result<(), Rejection> {
    let Some(pattern) = request.subscribed_topic_regex.as_deref().filter(|p| !p.is_empty()) else { return Ok(()) };
    // The member's own current pattern is replaced, not added to.
    let patterns: BTreeSet<&str> = group
        .members
        .values()
        .filter(|m| m.member_id != request.member_id)
        .filter_map(|m| m.subscribed_topic_regex.as_deref())
        .collect();
    if patterns.contains(pattern) || patterns.len() < max {
        return Ok(());
    }
    Err(Rejection {
        code: INVALID_REGULAR_EXPRESSION,
        message: format!(
            "SubscribedTopicRegex `{pattern}` is refused: consumer group {} already uses {max} distinct patterns, the \
             most osprey.group.consumer.regex.max.patterns allows.",
            group.group_id
        ),
    })
}

/// The member a leave (epoch -1 or -2) names, as Kafka's consumer and streams group
/// leaves find it: a dynamic member by its id (UNKNOWN_MEMBER_ID if absent), a static one
/// by its instance id, which must still be that member's (else FENCED_INSTANCE_ID).
pub(in crate::group) fn leaving_member_id(
    group_id: &str,
    member_id: &str,
    instance_id: Option<&str>,
    is_member: bool,
    static_member_id: Option<&str>,
) -> Result<String, Rejection> {
    let Some(instance_id) = instance_id else {
        return if is_member { Ok(member_id.to_string()) } else { Err(unknown_member(member_id, group_id)) };
    };
    match static_member_id {
        None => Err(reject(ErrorCode::UNKNOWN_MEMBER_ID, format!("Instance id {instance_id} is unknown."))),
        Some(owner) if owner != member_id => Err(fenced_instance(instance_id, owner, member_id)),
        Some(owner) => Ok(owner.to_string()),
    }
}

pub(in crate::group) fn unknown_member(member_id: &str, group_id: &str) -> Rejection {
    reject(ErrorCode::UNKNOWN_MEMBER_ID, format!("Member {member_id} is not a member of group {group_id}."))
}

pub(in crate::group) fn fenced_instance(instance_id: &str, known: &str, received: &str) -> Rejection {
    reject(
        ErrorCode::FENCED_INSTANCE_ID,
        format!("Static member {received} with instance id {instance_id} was fenced by member {known}."),
    )
}
