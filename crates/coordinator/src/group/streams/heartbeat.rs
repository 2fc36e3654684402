//! StreamsGroupHeartbeat v0-1: joining with a topology, heartbeating, leaving (Kafka
//! 4.4's `GroupMetadataManager.streamsGroupHeartbeat`, `streamsGroupLeave` and the
//! request checks of `GroupCoordinatorService`), and the target assignment they compute.

use super::assignor::{self, MemberSpec, SubtopologySpec};
use super::reconcile::{self, TaskOwners};
use super::topology::{self, ConfiguredTopology, InternalTopic, InvalidTopology, Status};
use super::{records, AssignedTasks, Endpoint, StreamsGroup, StreamsMember, StreamsTopology, Tasks, TasksTuple};
use super::{LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, NUM_STANDBY_REPLICAS};
use crate::group::consumer::heartbeat::{
    fenced_instance, leaving_member_id, reject, unknown_member, HeartbeatResponse, Rejection,
};
use crate::group::consumer::TopicsView;
use crate::group::metadata_hash::{group_hash, topic_hash};
use crate::group::records::{Continuation, Record};
use crate::group::{GroupCoordinator, ReplyId, Response};
use osprey_protocol::messages::streams_group_heartbeat_request::{TaskIds as RequestTaskIds, TaskOffset, Topology};
use osprey_protocol::messages::streams_group_heartbeat_response::{
    Endpoint as ResponseEndpoint, EndpointToPartitions, Status as ResponseStatus, TaskIds as ResponseTaskIds,
    TopicPartition as ResponseTopicPartition,
};
use osprey_protocol::messages::streams_group_topology_value::{
    CopartitionGroup, Subtopology, TopicConfig, TopicInfo as RecordTopicInfo,
};
use osprey_protocol::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use osprey_protocol::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

/// The answer to a StreamsGroupHeartbeat, and the internal topics its topology needs
/// that do not exist yet: the server creates them (Kafka's `StreamsGroupHeartbeatResult`).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamsHeartbeatAnswer {
    pub response: StreamsGroupHeartbeatResponse,
    pub topics_to_create: Vec<InternalTopic>,
}

impl HeartbeatResponse for StreamsHeartbeatAnswer {
    fn rejected(rejection: Rejection) -> Self {
        StreamsHeartbeatAnswer {
            response: StreamsGroupHeartbeatResponse {
                error_code: rejection.code,
                error_message: Some(rejection.message),
                ..Default::default()
            },
            topics_to_create: Vec::new(),
        }
    }
    fn into_response(self) -> Response {
        Response::StreamsGroupHeartbeat(Box::new(self))
    }
    fn after_persist(self, reply: ReplyId) -> Continuation {
        Continuation::StreamsGroupHeartbeat { reply, answer: Box::new(self) }
    }
}

/// `Utils.throwIfEmptyString`: a string given but blank.
fn blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// Kafka's `throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures` and
/// `throwIfStreamsGroupHeartbeatRequestIsInvalid`, in that order.
fn validate_request(request: &StreamsGroupHeartbeatRequest) -> Result<(), Rejection> {
    let invalid = |message: String| Err(reject(ErrorCode::INVALID_REQUEST, message));
    if let Some(topology) = &request.topology {
        if topology.subtopologies.iter().any(|s| !s.source_topic_regex.is_empty()) {
            return invalid("Regular expressions for source topics are not supported yet.".into());
        }
    }
    if blank(&request.member_id) {
        return invalid("MemberId can't be empty.".into());
    }
    if blank(&request.group_id) {
        return invalid("GroupId can't be empty.".into());
    }
    if request.instance_id.as_deref().is_some_and(blank) {
        return invalid("InstanceId can't be empty.".into());
    }
    if request.rack_id.as_deref().is_some_and(blank) {
        return invalid("RackId can't be empty.".into());
    }
    let non_empty = |tasks: &Option<Vec<RequestTaskIds>>| tasks.as_ref().is_some_and(|t| !t.is_empty());
    match request.member_epoch {
        0 => {
            if request.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.".into());
            }
            if non_empty(&request.active_tasks) {
                return invalid("ActiveTasks must be empty when (re-)joining.".into());
            }
            if non_empty(&request.standby_tasks) {
                return invalid("StandbyTasks must be empty when (re-)joining.".into());
            }
            if non_empty(&request.warmup_tasks) {
                return invalid("WarmupTasks must be empty when (re-)joining.".into());
            }
            let Some(topology) = &request.topology else {
                return invalid("Topology must be non-null when (re-)joining.".into());
            };
            validate_topology(topology)?;
        }
        LEAVE_GROUP_STATIC_MEMBER_EPOCH if request.instance_id.is_none() => {
            return invalid("InstanceId can't be null.".into());
        }
        epoch if epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH => {
            return invalid(format!("MemberEpoch is {epoch}, but must be greater than or equal to -2."));
        }
        _ => {}
    }
    let given = [&request.active_tasks, &request.standby_tasks, &request.warmup_tasks].map(Option::is_some);
    if given.contains(&true) && given.contains(&false) {
        return invalid("If one task-type is non-null, all must be non-null.".into());
    }
    if request.member_epoch != 0 && request.topology.is_some() {
        return invalid("Topology can only be provided when (re-)joining.".into());
    }
    Ok(())
}

/// Kafka's `throwIfInvalidTopology`: a changelog's partition count is decided here.
fn validate_topology(topology: &Topology) -> Result<(), Rejection> {
    for subtopology in &topology.subtopologies {
        if let Some(t) = subtopology.state_changelog_topics.iter().find(|t| t.partitions != 0) {
            return Err(reject(
                ErrorCode::STREAMS_INVALID_TOPOLOGY,
                format!(
                    "Changelog topic {} must have an undefined partition count, but it is set to {}.",
                    t.name, t.partitions
                ),
            ));
        }
    }
    Ok(())
}

/// Kafka's `convertToStreamsGroupTopologyRecord`: the topology as its record holds it, in
/// the order sent.
fn topology_from_request(topology: &Topology) -> StreamsTopology {
    let topic_info = |t: &osprey_protocol::messages::streams_group_heartbeat_request::TopicInfo| RecordTopicInfo {
        name: t.name.clone(),
        partitions: t.partitions,
        replication_factor: t.replication_factor,
        topic_configs: t
            .topic_configs
            .iter()
            .map(|c| TopicConfig { key: c.key.clone(), value: c.value.clone(), ..Default::default() })
            .collect(),
        ..Default::default()
    };
    let subtopologies = topology
        .subtopologies
        .iter()
        .map(|s| Subtopology {
            subtopology_id: s.subtopology_id.clone(),
            source_topics: s.source_topics.clone(),
            source_topic_regex: s.source_topic_regex.clone(),
            state_changelog_topics: s.state_changelog_topics.iter().map(topic_info).collect(),
            repartition_sink_topics: s.repartition_sink_topics.clone(),
            repartition_source_topics: s.repartition_source_topics.iter().map(topic_info).collect(),
            copartition_groups: s
                .copartition_groups
                .iter()
                .map(|g| CopartitionGroup {
                    source_topics: g.source_topics.clone(),
                    source_topic_regex: g.source_topic_regex.clone(),
                    repartition_source_topics: g.repartition_source_topics.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    StreamsTopology { epoch: topology.epoch, subtopologies }
}

/// Tasks as a heartbeat lists them.
fn request_tasks(tasks: &[RequestTaskIds]) -> Tasks {
    let mut result = Tasks::new();
    for t in tasks {
        result.entry(t.subtopology_id.clone()).or_default().extend(t.partitions.iter().copied());
    }
    result.retain(|_, ps| !ps.is_empty());
    result
}

/// The tasks a heartbeat reports owning: all three lists, or nothing reported.
fn owned_tasks(request: &StreamsGroupHeartbeatRequest) -> Option<TasksTuple> {
    match (&request.active_tasks, &request.standby_tasks, &request.warmup_tasks) {
        (Some(active), Some(standby), Some(warmup)) => Some(TasksTuple {
            active: request_tasks(active),
            standby: request_tasks(standby),
            warmup: request_tasks(warmup),
        }),
        _ => None,
    }
}

/// Kafka's `areOwnedTasksContainedInAssignedTasks`: nothing reported is not contained.
fn contained(owned: &Option<Vec<RequestTaskIds>>, assigned: &Tasks) -> bool {
    let Some(owned) = owned else { return false };
    owned.iter().all(|t| assigned.get(&t.subtopology_id).is_some_and(|ps| t.partitions.iter().all(|p| ps.contains(p))))
}

/// Kafka's `throwIfStreamsGroupMemberEpochIsInvalid`: the member may come back with its
/// previous epoch if it owns a subset of its tasks (the answer with the new epoch was
/// lost).
fn check_member_epoch(member: &StreamsMember, request: &StreamsGroupHeartbeatRequest) -> Result<(), Rejection> {
    let received = request.member_epoch;
    let fenced = |relation: &str| {
        Err(reject(
            ErrorCode::FENCED_MEMBER_EPOCH,
            format!(
                "The streams group member has a {relation} member epoch ({received}) than the one known by the \
                 group coordinator ({}). The member must abandon all its partitions and rejoin.",
                member.member_epoch
            ),
        ))
    };
    if received > member.member_epoch {
        return fenced("greater");
    }
    if received < member.member_epoch {
        let subset = contained(&request.active_tasks, &member.assigned.active_tasks())
            && contained(&request.standby_tasks, &member.assigned.standby)
            && contained(&request.warmup_tasks, &member.assigned.warmup);
        if received != member.previous_member_epoch || !subset {
            return fenced("smaller");
        }
    }
    Ok(())
}

/// Kafka's `throwIfRequestContainsInvalidTasks`: owned tasks of the configured topology.
fn check_owned_tasks(configured: &ConfiguredTopology, request: &StreamsGroupHeartbeatRequest) -> Result<(), Rejection> {
    let Some(subtopologies) = &configured.subtopologies else { return Ok(()) };
    for tasks in [&request.active_tasks, &request.standby_tasks, &request.warmup_tasks].into_iter().flatten() {
        for t in tasks {
            let Some(subtopology) = subtopologies.get(&t.subtopology_id) else {
                return Err(reject(
                    ErrorCode::INVALID_REQUEST,
                    format!("Subtopology {} does not exist in the topology.", t.subtopology_id),
                ));
            };
            if let Some(p) = t.partitions.iter().find(|p| **p < 0 || **p >= subtopology.num_tasks) {
                return Err(reject(
                    ErrorCode::INVALID_REQUEST,
                    format!(
                        "Task {p} for subtopology {} is invalid. Number of tasks for this subtopology: {}",
                        t.subtopology_id, subtopology.num_tasks
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Kafka 4.4's `MemberTaskOffsets.update`: a list replaces the member's, none keeps it.
fn task_offsets(reported: &[TaskOffset]) -> Result<BTreeMap<String, BTreeMap<i32, i64>>, Rejection> {
    let mut offsets: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for o in reported {
        if offsets.entry(o.subtopology_id.clone()).or_default().insert(o.partition, o.offset).is_some() {
            return Err(reject(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "Task offsets contain a duplicate entry for subtopology {} and partition {}.",
                    o.subtopology_id, o.partition
                ),
            ));
        }
    }
    Ok(offsets)
}

fn response_task_ids(tasks: &Tasks) -> Vec<ResponseTaskIds> {
    tasks
        .iter()
        .map(|(subtopology, ps)| ResponseTaskIds {
            subtopology_id: subtopology.clone(),
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect()
}

fn status(code: Status, detail: String) -> ResponseStatus {
    ResponseStatus { status_code: code.code(), status_detail: detail, ..Default::default() }
}

/// The settings a streams group runs with: the group's configs over the broker's.
#[derive(Debug, Clone, Copy)]
pub(in crate::group) struct StreamsSettings {
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub num_standby_replicas: i32,
}

impl GroupCoordinator {
    /// A StreamsGroupHeartbeat request (v0-1) from `client_id` at `client_host`. The
    /// answer comes as [`crate::group::Output::Respond`] for `reply`: at once when
    /// nothing changed, else once the group's records are durable.
    #[allow(clippy::too_many_arguments)]
    pub fn streams_group_heartbeat(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
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
            if matches!(request.member_epoch, LEAVE_GROUP_MEMBER_EPOCH | LEAVE_GROUP_STATIC_MEMBER_EPOCH) {
                self.streams_group_leave(request, &mut records)
            } else {
                self.streams_group_join_or_heartbeat(request, (client_id, client_host), topics, &mut records, now_ms)
            }
        });
        self.answer_heartbeat(&request.group_id, reply, result, records);
    }

    /// The settings of streams group `group_id` (Kafka's `streamsGroupSessionTimeoutMs`
    /// and friends).
    pub(in crate::group) fn streams_settings(&self, group_id: &str, topics: &dyn TopicsView) -> StreamsSettings {
        let overrides = topics.streams_group_overrides(group_id);
        StreamsSettings {
            session_timeout_ms: overrides.session_timeout_ms.unwrap_or(self.config.streams_group_session_timeout_ms),
            heartbeat_interval_ms: overrides
                .heartbeat_interval_ms
                .unwrap_or(self.config.streams_group_heartbeat_interval_ms),
            num_standby_replicas: overrides
                .num_standby_replicas
                .unwrap_or(self.config.streams_group_num_standby_replicas),
        }
    }

    /// The error a group of another type with the id gives a streams request (Kafka's
    /// `castToStreamsGroup`), or `None`. A streams group keeps its committed offsets in an
    /// offsets-only classic entry; a member joining (`joining`) takes over an empty classic
    /// group too (Kafka's `getOrCreateStreamsGroup`).
    pub(in crate::group) fn not_a_streams_group(&self, group_id: &str, joining: bool) -> Option<Rejection> {
        if self.streams_groups.contains_key(group_id) {
            return None;
        }
        let other = self.consumer_groups.contains_key(group_id)
            || self.share_groups.contains_key(group_id)
            || self.groups.get(group_id).is_some_and(|g| !joining || g.is_in_use());
        other.then(|| reject(ErrorCode::GROUP_ID_NOT_FOUND, format!("Group {group_id} is not a streams group.")))
    }

    /// Kafka's `streamsGroupLeave`: -1 removes the member (the group epoch bumps); -2
    /// marks a static member as gone for now.
    fn streams_group_leave(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
        records: &mut Vec<Record>,
    ) -> Result<StreamsHeartbeatAnswer, Rejection> {
        let group_id = request.group_id.as_str();
        if let Some(rejection) = self.not_a_streams_group(group_id, false) {
            return Err(rejection);
        }
        let Some(group) = self.streams_groups.get_mut(group_id) else {
            return Err(reject(ErrorCode::GROUP_ID_NOT_FOUND, format!("Streams group {group_id} not found.")));
        };
        if request.shutdown_application {
            group.shutdown_requested_by.get_or_insert_with(|| request.member_id.clone());
        }
        let instance_id = request.instance_id.as_deref();
        let member_id = leaving_member_id(
            group_id,
            &request.member_id,
            instance_id,
            group.members.contains_key(&request.member_id),
            instance_id.and_then(|i| group.static_member(i)).map(|m| m.member_id.as_str()),
        )?;
        let answer = |member_epoch| StreamsHeartbeatAnswer {
            response: StreamsGroupHeartbeatResponse {
                member_id: request.member_id.clone(),
                member_epoch,
                ..Default::default()
            },
            topics_to_create: Vec::new(),
        };
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            // Kafka's `streamsGroupStaticMemberGroupLeave`: the member keeps its tasks
            // for its session; a new member with its instance id takes them over.
            let member = group.members.get_mut(&member_id).expect("checked above");
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
            member.pending_revocation = AssignedTasks::default();
            member.rebalance_deadline = None;
            records.push(records::current_assignment_record(group_id, member));
            return Ok(answer(LEAVE_GROUP_STATIC_MEMBER_EPOCH));
        }
        fence_member(group, &member_id, records);
        Ok(answer(request.member_epoch))
    }

    /// A join (epoch 0) or a heartbeat: Kafka's `streamsGroupHeartbeat`.
    fn streams_group_join_or_heartbeat(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
        client: (&str, &str),
        topics: &dyn TopicsView,
        records: &mut Vec<Record>,
        now_ms: i64,
    ) -> Result<StreamsHeartbeatAnswer, Rejection> {
        let group_id = request.group_id.as_str();
        let joining = request.member_epoch == 0;
        if let Some(rejection) = self.not_a_streams_group(group_id, joining) {
            return Err(rejection);
        }
        let existed = self.streams_groups.contains_key(group_id);
        if !existed && !joining {
            return Err(reject(ErrorCode::GROUP_ID_NOT_FOUND, format!("Streams group {group_id} not found.")));
        }
        let original = self.streams_groups.remove(group_id);
        let mut group = original.clone().unwrap_or_else(|| StreamsGroup::new(group_id));
        let result = self.update_streams_group(&mut group, request, client, topics, records, now_ms);
        match &result {
            Ok(_) => {
                if !existed {
                    // An empty classic group (offsets only, or a finished classic group)
                    // gives way; its committed offsets stay (Kafka's
                    // `maybeDeleteEmptyClassicGroup`).
                    let mut converted = self.convert_empty_classic_group(group_id, now_ms);
                    converted.append(records);
                    *records = converted;
                }
                self.streams_groups.insert(group_id.to_string(), group);
            }
            // A failed heartbeat changes nothing (Kafka drops its records with it).
            Err(_) => {
                records.clear();
                if let Some(original) = original {
                    self.streams_groups.insert(group_id.to_string(), original);
                }
            }
        }
        result
    }

    /// Steps 1-5 of Kafka's `streamsGroupHeartbeat` on `group`.
    fn update_streams_group(
        &mut self,
        group: &mut StreamsGroup,
        request: &StreamsGroupHeartbeatRequest,
        (client_id, client_host): (&str, &str),
        topics: &dyn TopicsView,
        records: &mut Vec<Record>,
        now_ms: i64,
    ) -> Result<StreamsHeartbeatAnswer, Rejection> {
        let group_id = group.group_id.clone();
        let joining = request.member_epoch == 0;
        let was_empty = group.members.is_empty();
        if joining {
            self.check_group_size(group, request)?;
        }
        let (previous, replaced) = resolve_member(group, request)?;
        if let Some(old_id) = &replaced {
            replace_static_member(group, old_id, &previous, records);
        }
        let mut member = previous.clone();
        if let Some(instance_id) = &request.instance_id {
            member.instance_id = Some(instance_id.clone());
        }
        if let Some(rack_id) = &request.rack_id {
            member.rack_id = Some(rack_id.clone());
        }
        if request.rebalance_timeout_ms != -1 {
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        }
        if let Some(topology) = &request.topology {
            member.topology_epoch = topology.epoch;
        }
        member.client_id = client_id.to_string();
        member.client_host = client_host.to_string();
        if let Some(process_id) = &request.process_id {
            member.process_id = process_id.clone();
        }
        if let Some(tags) = &request.client_tags {
            member.client_tags = tags.iter().map(|t| (t.key.clone(), t.value.clone())).collect();
        }
        let endpoint = request.user_endpoint.as_ref().map(|e| Endpoint { host: e.host.clone(), port: e.port });
        if joining || endpoint.is_some() {
            member.user_endpoint = endpoint;
        }
        let mut bump = false;
        if !member.same_metadata(&previous) || !group.members.contains_key(&member.member_id) {
            records.push(records::member_metadata_record(&group_id, &member));
            // A dynamic member's change bumps the epoch; a static one's only when it
            // changes what the assignor reads.
            bump = request.instance_id.is_none() || member.assignment_inputs_changed(&previous);
        }

        // 2. The topology: the first member's is recorded.
        let mut statuses = Vec::new();
        let topology = self.maybe_update_topology(group, request.topology.as_ref(), records)?;
        if member.topology_epoch < topology.epoch {
            statuses.push(status(
                Status::StaleTopology,
                format!(
                    "The member's topology epoch {} is behind the group's topology epoch {}.",
                    member.topology_epoch, topology.epoch
                ),
            ));
        }

        // 3. The topology configured against the topics, again whenever they changed.
        let metadata_hash = streams_metadata_hash(&topology, topics);
        let reconfigure = group.topology.is_none() || metadata_hash != group.metadata_hash;
        bump |= metadata_hash != group.metadata_hash;
        let configured = match group.configured.as_ref().filter(|c| !reconfigure && c.topology_epoch == topology.epoch)
        {
            Some(configured) => configured.clone(),
            None => topology::configure(&topology, metadata_hash, topics).map_err(invalid_topology)?,
        };
        let validated_topology_epoch = if configured.is_ready() { topology.epoch } else { -1 };
        if configured.is_ready() {
            check_owned_tasks(&configured, request)?;
        }
        if let Some(reported) = &request.task_offsets {
            member.task_offsets.offsets = task_offsets(reported)?;
        }
        if let Some(reported) = &request.task_end_offsets {
            member.task_offsets.end_offsets = task_offsets(reported)?;
        }
        bump |= validated_topology_epoch != group.validated_topology_epoch;
        let settings = self.streams_settings(&group_id, topics);
        let configs: BTreeMap<String, String> =
            [(NUM_STANDBY_REPLICAS.to_string(), settings.num_standby_replicas.to_string())].into();
        bump |= configs != group.last_assignment_configs;

        // Nothing can fail from here on: the group changes.
        group.topology = Some(topology);
        group.configured = Some(configured.clone());
        if bump {
            group.group_epoch += 1;
            group.metadata_hash = metadata_hash;
            group.validated_topology_epoch = validated_topology_epoch;
            group.last_assignment_configs = configs;
            records.push(records::group_epoch_record(group));
            let delay_ms = self.config.streams_group_initial_rebalance_delay_ms;
            if was_empty && delay_ms > 0 && group.initial_rebalance_deadline_ms.is_none() {
                group.initial_rebalance_deadline_ms = Some(now_ms + i64::from(delay_ms));
            }
        }
        let member_id = member.member_id.clone();
        let before = group.members.insert(member_id.clone(), member);

        // 4. A new target assignment if the group epoch moved (unless delayed).
        let interval_ms = self.config.streams_group_assignment_interval_ms;
        let target = match update_target_assignment(group, settings.num_standby_replicas, interval_ms, now_ms, records)
        {
            Ok(()) => group.target.get(&member_id).cloned().unwrap_or_default(),
            Err(delayed) => {
                statuses.push(status(Status::AssignmentDelayed, delayed.to_string()));
                // Kafka reconciles towards nothing while the first assignment waits.
                if group.initial_rebalance_deadline_ms.is_some() {
                    TasksTuple::default()
                } else {
                    group.target.get(&member_id).cloned().unwrap_or_default()
                }
            }
        };

        // 5. The member one step closer to its target.
        let owners = owners_before(group, &member_id, before.as_ref());
        let owned = owned_tasks(request);
        let member = group.members.get_mut(&member_id).expect("inserted above");
        member.session_deadline_ms = Some(now_ms + i64::from(settings.session_timeout_ms));
        if !member.is_reconciled_to(group.assignment_epoch) {
            let next = reconcile::reconcile(member, group.assignment_epoch, &target, &owners, owned.as_ref())
                .map_err(|fenced| reject(ErrorCode::FENCED_MEMBER_EPOCH, fenced.0))?;
            if !next.same_assignment(member) {
                records.push(records::current_assignment_record(&group_id, &next));
                let rebalance_deadline = (next.state == super::MemberState::UnrevokedTasks)
                    .then(|| (now_ms + i64::from(next.rebalance_timeout_ms.max(0)), next.member_epoch));
                *member = StreamsMember { rebalance_deadline, ..next };
            }
        }
        if request.shutdown_application {
            group.shutdown_requested_by.get_or_insert_with(|| member_id.clone());
        }
        Ok(self.heartbeat_response(
            group,
            request,
            &previous,
            replaced.as_deref(),
            configured,
            statuses,
            settings,
            topics,
        ))
    }

    /// Kafka's `throwIfStreamsGroupIsFull`: a member that is not in the group yet may not
    /// join a full one (a static member taking its instance's place may).
    fn check_group_size(&self, group: &StreamsGroup, request: &StreamsGroupHeartbeatRequest) -> Result<(), Rejection> {
        if request.instance_id.as_deref().is_some_and(|i| group.static_member(i).is_some()) {
            return Ok(());
        }
        let max = self.config.streams_group_max_size;
        if group.members.len() >= max && !group.members.contains_key(&request.member_id) {
            return Err(reject(
                ErrorCode::GROUP_MAX_SIZE_REACHED,
                format!("The streams group has reached its maximum capacity of {max} members."),
            ));
        }
        Ok(())
    }

    /// Kafka's `maybeUpdateTopology`: the first member's topology is the group's; a later
    /// member joining with an older epoch runs stale (STALE_TOPOLOGY); with the same
    /// epoch, it must be the same topology.
    fn maybe_update_topology(
        &self,
        group: &StreamsGroup,
        topology: Option<&Topology>,
        records: &mut Vec<Record>,
    ) -> Result<StreamsTopology, Rejection> {
        let current = group.topology.as_ref();
        match (topology, current) {
            (Some(requested), None) => {
                let topology = topology_from_request(requested);
                records.push(records::topology_record(&group.group_id, &topology));
                Ok(topology)
            }
            (Some(requested), Some(current)) => {
                if current.epoch > requested.epoch || current.same_as(&topology_from_request(requested)) {
                    Ok(current.clone())
                } else {
                    Err(reject(ErrorCode::INVALID_REQUEST, "Topology updates are not supported yet."))
                }
            }
            (None, Some(current)) => Ok(current.clone()),
            (None, None) => Err(reject(
                ErrorCode::UNKNOWN_SERVER_ERROR,
                "The topology is null and the group topology is also null.",
            )),
        }
    }

    /// The response to a heartbeat that changed `group` (Kafka's step 6).
    #[allow(clippy::too_many_arguments)]
    fn heartbeat_response(
        &self,
        group: &mut StreamsGroup,
        request: &StreamsGroupHeartbeatRequest,
        previous: &StreamsMember,
        replaced: Option<&str>,
        configured: ConfiguredTopology,
        mut statuses: Vec<ResponseStatus>,
        settings: StreamsSettings,
        topics: &dyn TopicsView,
    ) -> StreamsHeartbeatAnswer {
        let member = group.members[&request.member_id].clone();
        let mut response = StreamsGroupHeartbeatResponse {
            member_id: member.member_id.clone(),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
            task_offset_interval_ms: self.config.streams_group_task_offset_interval_ms,
            acceptable_recovery_lag: self.config.streams_group_acceptable_recovery_lag,
            ..Default::default()
        };
        let tasks_changed = member.assigned != previous.assigned;
        if request.member_epoch == 0 || tasks_changed {
            response.active_tasks = Some(response_task_ids(&member.assigned.active_tasks()));
            response.standby_tasks = Some(response_task_ids(&member.assigned.standby));
            response.warmup_tasks = Some(response_task_ids(&member.assigned.warmup));
        }
        // Kafka 4.4's endpoint information: bumped when a member's endpoint, or the tasks
        // of a member with one, changed; every member not at that epoch learns them all.
        let endpoint_changed = member.user_endpoint != previous.user_endpoint;
        if endpoint_changed || (tasks_changed && member.user_endpoint.is_some()) {
            group.endpoint_information_epoch += 1;
        }
        if group.endpoint_information_epoch != request.endpoint_information_epoch {
            response.partitions_by_user_endpoint = Some(endpoints_to_partitions(group, replaced, topics));
        }
        response.endpoint_information_epoch = group.endpoint_information_epoch;
        let topics_to_create = match &configured.error {
            Some(error) => {
                statuses.push(status(error.status, error.message.clone()));
                configured.topics_to_create.into_values().collect()
            }
            None => Vec::new(),
        };
        if let Some(by) = &group.shutdown_requested_by {
            statuses.push(status(
                Status::ShutdownApplication,
                format!(
                    "Streams group member {by} encountered a fatal error and requested a shutdown for the entire \
                     application."
                ),
            ));
        }
        if !statuses.is_empty() {
            response.status = Some(statuses);
        }
        StreamsHeartbeatAnswer { response, topics_to_create }
    }
}

/// The assignment could not be computed now (Kafka's ASSIGNMENT_DELAYED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delayed {
    InitialRebalance,
    Interval,
}

impl std::fmt::Display for Delayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Delayed::InitialRebalance => "Assignment delayed due to the configured initial rebalance delay.",
            Delayed::Interval => "Assignment delayed due to the configured assignment interval.",
        })
    }
}

/// Kafka 4.4's `maybeUpdateStreamsTargetAssignment`: a new target for the group epoch,
/// unless the first assignment waits for more members or the last was computed less than
/// `group.streams.assignment.interval.ms` ago.
fn update_target_assignment(
    group: &mut StreamsGroup,
    num_standby_replicas: i32,
    interval_ms: i32,
    now_ms: i64,
    records: &mut Vec<Record>,
) -> Result<(), Delayed> {
    if group.initial_rebalance_deadline_ms.is_some() {
        return Err(Delayed::InitialRebalance);
    }
    if group.group_epoch <= group.assignment_epoch {
        return Ok(());
    }
    // Kafka's `canComputeNextTargetAssignment`.
    let timestamp = group.assignment_timestamp_ms;
    if timestamp != 0 && interval_ms != 0 && now_ms < timestamp + i64::from(interval_ms) {
        return Err(Delayed::Interval);
    }
    compute_target_assignment(group, num_standby_replicas, now_ms, records);
    Ok(())
}

/// Kafka 4.4's `TargetAssignmentBuilder`: the sticky assignor over the members' current
/// tasks (nothing while the topology is not ready); a record for each member whose target
/// changed (and each new one), then the target's epoch and time.
pub(super) fn compute_target_assignment(
    group: &mut StreamsGroup,
    num_standby_replicas: i32,
    now_ms: i64,
    records: &mut Vec<Record>,
) {
    let subtopologies: BTreeMap<String, SubtopologySpec> = group
        .configured
        .as_ref()
        .filter(|c| c.is_ready())
        .and_then(|c| c.subtopologies.as_ref())
        .map(|s| {
            s.iter()
                .map(|(id, s)| (id.clone(), SubtopologySpec { num_tasks: s.num_tasks, stateful: s.is_stateful() }))
                .collect()
        })
        .unwrap_or_default();
    let specs: BTreeMap<String, MemberSpec> = group
        .members
        .iter()
        .map(|(id, m)| {
            let spec = MemberSpec {
                process_id: m.process_id.clone(),
                active: m.assigned.active_tasks(),
                standby: m.assigned.standby.clone(),
                task_offsets: m.task_offsets.clone(),
            };
            (id.clone(), spec)
        })
        .collect();
    let assigned = assignor::assign(&specs, &subtopologies, num_standby_replicas);
    let mut new_target = BTreeMap::new();
    for member_id in group.members.keys() {
        let a = assigned.get(member_id).cloned().unwrap_or_default();
        // Kafka 4.4 assigns no warm-up tasks.
        let target = TasksTuple { active: a.active, standby: a.standby, warmup: Tasks::new() };
        if group.target.get(member_id) != Some(&target) {
            records.push(records::target_member_record(&group.group_id, member_id, &target));
        }
        new_target.insert(member_id.clone(), target);
    }
    group.target = new_target;
    group.assignment_epoch = group.group_epoch;
    group.assignment_timestamp_ms = now_ms;
    records.push(records::target_epoch_record(&group.group_id, group.assignment_epoch, now_ms));
}

/// Who held which task before this heartbeat (Kafka's index is updated when the
/// heartbeat's records are replayed, after it): the heartbeating member as it was.
fn owners_before(group: &StreamsGroup, member_id: &str, before: Option<&StreamsMember>) -> TaskOwners {
    let mut owners = TaskOwners::default();
    for (id, member) in &group.members {
        let member = if id == member_id {
            match before {
                Some(before) => before,
                None => continue,
            }
        } else {
            member
        };
        owners.add(&member.process_id, &member.assigned);
        owners.add(&member.process_id, &member.pending_revocation);
    }
    owners
}

/// Who is heartbeating: the member before this heartbeat (a new one when joining), and
/// the static member it replaces.
fn resolve_member(
    group: &StreamsGroup,
    request: &StreamsGroupHeartbeatRequest,
) -> Result<(StreamsMember, Option<String>), Rejection> {
    let joining = request.member_epoch == 0;
    let member_id = &request.member_id;
    let Some(instance_id) = request.instance_id.as_deref() else {
        let member = match group.members.get(member_id) {
            Some(member) => member.clone(),
            None if joining => StreamsMember::new(member_id),
            None => return Err(unknown_member(member_id, &group.group_id)),
        };
        check_member_epoch(&member, request)?;
        return Ok((member, None));
    };
    // Kafka's `getOrMaybeCreateStaticStreamsGroupMember`.
    let existing = group.static_member(instance_id);
    if joining {
        return match existing {
            None => Ok((group.members.get(member_id).cloned().unwrap_or_else(|| StreamsMember::new(member_id)), None)),
            Some(old) if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH => Err(reject(
                ErrorCode::UNRELEASED_INSTANCE_ID,
                format!(
                    "Static member {member_id} with instance id {instance_id} cannot join the group because the \
                     instance id is owned by {} member.",
                    old.member_id
                ),
            )),
            Some(old) => {
                // The instance comes back under a new member id and takes over the old
                // member's tasks and target.
                let mut replacement = StreamsMember { member_id: member_id.clone(), ..old.clone() };
                replacement.member_epoch = 0;
                replacement.previous_member_epoch = 0;
                Ok((replacement, Some(old.member_id.clone()).filter(|old_id| old_id != member_id)))
            }
        };
    }
    let Some(old) = existing else {
        return Err(reject(ErrorCode::UNKNOWN_MEMBER_ID, format!("Instance id {instance_id} is unknown.")));
    };
    if old.member_id != *member_id {
        return Err(fenced_instance(instance_id, &old.member_id, member_id));
    }
    check_member_epoch(old, request)?;
    Ok((old.clone(), None))
}

/// Kafka's `replaceStreamsMember`: the old member's records go, the new member takes its
/// place, its target and its current tasks.
fn replace_static_member(group: &mut StreamsGroup, old_id: &str, member: &StreamsMember, records: &mut Vec<Record>) {
    let group_id = group.group_id.clone();
    group.members.remove(old_id);
    let target = group.target.remove(old_id).unwrap_or_default();
    records.extend(records::member_tombstones(&group_id, old_id));
    records.push(records::member_metadata_record(&group_id, member));
    records.push(records::target_member_record(&group_id, &member.member_id, &target));
    records.push(records::current_assignment_record(&group_id, member));
    group.target.insert(member.member_id.clone(), target);
    group.members.insert(member.member_id.clone(), member.clone());
}

fn invalid_topology(error: InvalidTopology) -> Rejection {
    match error {
        InvalidTopology::Invalid(message) => reject(ErrorCode::STREAMS_INVALID_TOPOLOGY, message),
        InvalidTopology::Inconsistent(message) => reject(ErrorCode::UNKNOWN_SERVER_ERROR, message),
    }
}

/// Kafka's `StreamsGroup.computeMetadataHash`: the group hash of the required topics that
/// exist.
fn streams_metadata_hash(topology: &StreamsTopology, topics: &dyn TopicsView) -> i64 {
    let hashes: Vec<(String, i64)> = topology
        .required_topics()
        .into_iter()
        .filter_map(|name| topics.topic(&name).map(|info| (name.clone(), topic_hash(&name, info))))
        .collect();
    group_hash(hashes.iter().map(|(name, hash)| (name, *hash)))
}

/// Kafka 4.4's `buildEndpointToPartitions`: for each member with a user endpoint (the
/// replaced static member left out), the source partitions of its active tasks, and of
/// its standby and warm-up tasks.
fn endpoints_to_partitions(
    group: &StreamsGroup,
    replaced: Option<&str>,
    topics: &dyn TopicsView,
) -> Vec<EndpointToPartitions> {
    let Some(subtopologies) = group.configured.as_ref().and_then(|c| c.subtopologies.as_ref()) else {
        return Vec::new();
    };
    let partitions = |tasks: &Tasks| -> Vec<ResponseTopicPartition> {
        let mut result = Vec::new();
        for (subtopology, task_partitions) in tasks {
            let Some(configured) = subtopologies.get(subtopology) else { continue };
            let sources: BTreeSet<&String> =
                configured.source_topics.iter().chain(configured.repartition_source_topics.keys()).collect();
            for topic in sources {
                let count = topics.topic(topic).map_or(0, |t| t.num_partitions);
                result.push(ResponseTopicPartition {
                    topic: topic.clone(),
                    partitions: task_partitions.iter().copied().filter(|p| *p < count).collect(),
                    ..Default::default()
                });
            }
        }
        result
    };
    group
        .members
        .values()
        .filter(|m| Some(m.member_id.as_str()) != replaced)
        .filter_map(|m| {
            let endpoint = m.user_endpoint.as_ref()?;
            let mut standby = m.assigned.standby.clone();
            for (s, ps) in &m.assigned.warmup {
                standby.entry(s.clone()).or_default().extend(ps.iter().copied());
            }
            Some(EndpointToPartitions {
                user_endpoint: ResponseEndpoint {
                    host: endpoint.host.clone(),
                    port: endpoint.port,
                    ..Default::default()
                },
                active_partitions: partitions(&m.assigned.active_tasks()),
                standby_partitions: partitions(&standby),
                ..Default::default()
            })
        })
        .collect()
}

/// Kafka's `streamsGroupFenceMember`: the member's records go and the group epoch bumps.
pub(super) fn fence_member(group: &mut StreamsGroup, member_id: &str, records: &mut Vec<Record>) {
    group.members.remove(member_id);
    group.target.remove(member_id);
    records.extend(records::member_tombstones(&group.group_id, member_id));
    group.group_epoch += 1;
    records.push(records::group_epoch_record(group));
}
