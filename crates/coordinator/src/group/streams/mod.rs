//! Streams groups (KIP-1071): StreamsGroupHeartbeat v0-1 and StreamsGroupDescribe v0-1,
//! Kafka 4.4's `GroupMetadataManager.streamsGroupHeartbeat` as part of the same
//! deterministic [`GroupCoordinator`](crate::group::GroupCoordinator).
//!
//! A Kafka Streams application (`group.protocol=streams`) joins with its topology: the
//! subtopologies, their source topics, the repartition and changelog topics it needs.
//! The first member to join records the topology (StreamsGroupTopology); the coordinator
//! then *configures* it against the cluster's topics ([`topology`], Kafka's
//! `InternalTopicManager`): source topics present, partition counts of the internal
//! topics decided (repartition topics from their sources, copartitioned topics alike,
//! changelogs as many as their subtopology has tasks). Until the topology is configured
//! and its internal topics exist, the group is NotReady and every heartbeat reports why
//! in its status (MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS with the topics to
//! create, INCORRECTLY_PARTITIONED_TOPICS). Once it is, each subtopology has as many
//! tasks as its largest source topic has partitions, and the sticky [`assignor`]
//! (Kafka's `StickyTaskAssignor`) places active and standby tasks on the members;
//! members reconcile towards their targets as consumer-group members do ([`reconcile`],
//! Kafka's `CurrentAssignmentBuilder`): a task is given to a member only once its
//! previous owner has revoked it.
//!
//! # The protocol between the server and the coordinator
//!
//! - [`streams_group_heartbeat`] takes a [`ReplyId`]; the answer comes as
//!   [`Output::Respond`] with [`Response::StreamsGroupHeartbeat`], at once when nothing
//!   changed, else once the group's records are durable. It carries the internal topics
//!   to create, with the partition counts and configs the topology gives
//!   ([`StreamsHeartbeatAnswer::topics_to_create`]): the server creates them (as Kafka's
//!   `KafkaApis` does through its auto topic creation manager) and the next heartbeat
//!   finds them.
//! - The server passes the [`TopicsView`] of the cluster's topics on every heartbeat; the
//!   group's `streams.session.timeout.ms`, `streams.heartbeat.interval.ms` and
//!   `streams.num.standby.replicas` come with it
//!   ([`TopicsView::streams_group_overrides`]) and override `group.streams.*`.
//! - Sessions, rebalance timeouts (a member that does not revoke within its rebalance
//!   timeout is fenced) and the initial rebalance delay run in [`tick`].
//! - A streams group commits offsets as a consumer group does: OffsetCommit v9+,
//!   TxnOffsetCommit and OffsetFetch v9+ are checked against the member's epoch, and a
//!   task's offsets may still be committed at an older epoch than the member's if the
//!   task was assigned to the member by then (Kafka 4.4's per-task assignment epochs).
//! - ListGroups lists streams groups (type "streams"); DescribeGroups answers one as Kafka
//!   answers any non-classic group; DeleteGroups deletes an empty one; a
//!   ConsumerGroupHeartbeat, ShareGroupHeartbeat or JoinGroup to a streams group, and a
//!   StreamsGroupHeartbeat to a group of another type, get Kafka's errors.
//!
//! # Where Osprey differs from Kafka 4.4
//!
//! - Kafka 4.4 can store topology descriptions through a plugin
//!   (`group.streams.topology.description.plugin.class`, KIP-1331); Osprey has none, as a
//!   Kafka broker without that setting: heartbeats never ask for a description and
//!   StreamsGroupDescribe v1 reports none.
//! - Rack-aware standby placement (`group.streams.rack.aware.assignment.tags`) is not
//!   implemented; the tags are recorded and described.
//! - Kafka 4.4's assignment refiner (warm-up tasks) is a no-op there: the target
//!   assignment holds no warm-up tasks, and so it is here. Warm-up tasks a member holds
//!   (written by a later Kafka) reconcile as Kafka 4.4 reconciles them.
//! - Ties in the sticky assignor are broken by member and process id order where
//!   Kafka's follow Java's hash map order: the placement is Kafka's algorithm, the exact
//!   task a tied member gets may differ.
//!
//! [`streams_group_heartbeat`]: crate::group::GroupCoordinator::streams_group_heartbeat
//! [`tick`]: crate::group::GroupCoordinator::tick
//! [`Output::Respond`]: crate::group::Output::Respond
//! [`Response::StreamsGroupHeartbeat`]: crate::group::Response::StreamsGroupHeartbeat
//! [`ReplyId`]: crate::group::ReplyId
//! [`TopicsView`]: crate::group::TopicsView
//! [`TopicsView::streams_group_overrides`]: crate::group::TopicsView::streams_group_overrides

pub mod assignor;
mod describe;
mod heartbeat;
mod lifecycle;
pub mod reconcile;
pub(crate) mod records;
pub mod topology;

use osprey_protocol::messages::streams_group_topology_value::Subtopology;
use std::collections::{BTreeMap, BTreeSet};

pub use heartbeat::StreamsHeartbeatAnswer;
pub(in crate::group) use lifecycle::StreamsCommitter;
pub use topology::{ConfiguredTopology, InternalTopic};

/// The member epoch of a heartbeat that leaves the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// The member epoch of a static member leaving for now (it keeps its tasks for a session
/// timeout).
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;
/// The protocol type and ListGroups v5 group type of a streams group.
pub const STREAMS_GROUP_TYPE: &str = "streams";
/// The name of Kafka's streams task assignor, the only one built in.
pub const STICKY_ASSIGNOR_NAME: &str = "sticky";
/// The assignment config naming the number of standby replicas (Kafka's
/// `num.standby.replicas` in StreamsGroupMetadataValue's LastAssignmentConfigs).
pub const NUM_STANDBY_REPLICAS: &str = "num.standby.replicas";

/// Tasks by subtopology id: the partitions of the subtopology's source topics a member
/// processes.
pub type Tasks = BTreeMap<String, BTreeSet<i32>>;
/// Active tasks with the epoch each was assigned at (Kafka 4.4's `TasksTupleWithEpochs`):
/// a member may commit a task's offsets at any epoch since.
pub type TasksWithEpochs = BTreeMap<String, BTreeMap<i32, i32>>;

/// Kafka's `TasksTuple`: a target assignment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TasksTuple {
    pub active: Tasks,
    pub standby: Tasks,
    pub warmup: Tasks,
}

impl TasksTuple {
    pub fn is_empty(&self) -> bool {
        self.active.is_empty() && self.standby.is_empty() && self.warmup.is_empty()
    }

    /// Kafka's `containsAny`: a task present in both, in the same role.
    pub fn contains_any(&self, other: &AssignedTasks) -> bool {
        let active: Tasks = task_set(&other.active);
        overlaps(&self.active, &active)
            || overlaps(&self.standby, &other.standby)
            || overlaps(&self.warmup, &other.warmup)
    }
}

/// Kafka's `TasksTupleWithEpochs`: a member's current (or pending-revocation) tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignedTasks {
    pub active: TasksWithEpochs,
    pub standby: Tasks,
    pub warmup: Tasks,
}

impl AssignedTasks {
    pub fn is_empty(&self) -> bool {
        self.active.is_empty() && self.standby.is_empty() && self.warmup.is_empty()
    }

    /// The active tasks without their epochs.
    pub fn active_tasks(&self) -> Tasks {
        task_set(&self.active)
    }

    /// Whether the two hold the same tasks, epochs aside (Kafka's `TasksTuple.sameTasks`).
    pub fn same_tasks(&self, other: &TasksTuple) -> bool {
        self.active_tasks() == other.active && self.standby == other.standby && self.warmup == other.warmup
    }

    /// Kafka's `merge`: every task of both (the epochs of `other` where both have one).
    pub fn merge(&self, other: &AssignedTasks) -> AssignedTasks {
        let mut merged = self.clone();
        for (subtopology, tasks) in &other.active {
            merged.active.entry(subtopology.clone()).or_default().extend(tasks.iter().map(|(p, e)| (*p, *e)));
        }
        for (into, from) in [(&mut merged.standby, &other.standby), (&mut merged.warmup, &other.warmup)] {
            for (subtopology, tasks) in from {
                into.entry(subtopology.clone()).or_default().extend(tasks.iter().copied());
            }
        }
        merged
    }
}

/// The partitions of each subtopology of `tasks`, epochs aside.
pub fn task_set(tasks: &TasksWithEpochs) -> Tasks {
    tasks.iter().map(|(s, ps)| (s.clone(), ps.keys().copied().collect())).collect()
}

/// Whether `a` and `b` share a task.
fn overlaps(a: &Tasks, b: &Tasks) -> bool {
    a.iter().any(|(s, ps)| b.get(s).is_some_and(|other| !ps.is_disjoint(other)))
}

/// Kafka's streams `MemberState`, with the byte it is stored as (not the consumer
/// group's: streams start at 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Reconciled to its target at its epoch (or waiting for a newer target).
    Stable,
    /// Must revoke its tasks pending revocation before it can advance.
    UnrevokedTasks,
    /// At the target epoch, waiting for tasks others have not released.
    UnreleasedTasks,
    /// A state a later Kafka wrote: the member is fenced at its next heartbeat unless it
    /// owns nothing.
    Unknown,
}

impl MemberState {
    pub fn value(self) -> i8 {
        match self {
            MemberState::Stable => 1,
            MemberState::UnrevokedTasks => 2,
            MemberState::UnreleasedTasks => 3,
            MemberState::Unknown => 127,
        }
    }

    pub fn from_value(value: i8) -> MemberState {
        match value {
            1 => MemberState::Stable,
            2 => MemberState::UnrevokedTasks,
            3 => MemberState::UnreleasedTasks,
            _ => MemberState::Unknown,
        }
    }
}

/// Kafka's `StreamsGroup.StreamsGroupState`, spelled as StreamsGroupDescribe and
/// ListGroups spell it (a group the coordinator does not know is "Dead").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamsGroupState {
    Empty,
    NotReady,
    Assigning,
    Reconciling,
    Stable,
}

impl StreamsGroupState {
    pub const ALL: [StreamsGroupState; 5] = [
        StreamsGroupState::Empty,
        StreamsGroupState::NotReady,
        StreamsGroupState::Assigning,
        StreamsGroupState::Reconciling,
        StreamsGroupState::Stable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StreamsGroupState::Empty => "Empty",
            StreamsGroupState::NotReady => "NotReady",
            StreamsGroupState::Assigning => "Assigning",
            StreamsGroupState::Reconciling => "Reconciling",
            StreamsGroupState::Stable => "Stable",
        }
    }

    /// The name ListGroups' state filter matches (Kafka's `toLowerCaseString`:
    /// "not_ready" for NotReady).
    pub fn filter_name(self) -> &'static str {
        match self {
            StreamsGroupState::NotReady => "not_ready",
            other => other.name(),
        }
    }
}

/// A member's user endpoint for interactive queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

/// The changelog offsets a member last reported per task (Kafka 4.4's
/// `MemberTaskOffsets`), which the assignor ranks standby candidates by. Not persisted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskOffsets {
    pub offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    pub end_offsets: BTreeMap<String, BTreeMap<i32, i64>>,
}

/// One member of a streams group: Kafka's `StreamsGroupMember` (a stream thread of a
/// Kafka Streams instance, its process).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamsMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub topology_epoch: i32,
    pub process_id: String,
    pub user_endpoint: Option<Endpoint>,
    pub client_tags: BTreeMap<String, String>,
    pub assigned: AssignedTasks,
    pub pending_revocation: AssignedTasks,
    /// When the member is fenced unless it heartbeats (not persisted).
    pub session_deadline_ms: Option<i64>,
    /// When the member is fenced unless it has revoked by then, and the epoch it was
    /// asked at (not persisted).
    pub rebalance_deadline: Option<(i64, i32)>,
    /// Not persisted.
    pub task_offsets: TaskOffsets,
}

impl StreamsMember {
    /// Kafka's `StreamsGroupMember.Builder.withDefaults`: a member joining.
    pub fn new(member_id: &str) -> StreamsMember {
        StreamsMember {
            member_id: member_id.to_string(),
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout_ms: -1,
            topology_epoch: -1,
            process_id: String::new(),
            user_endpoint: None,
            client_tags: BTreeMap::new(),
            assigned: AssignedTasks::default(),
            pending_revocation: AssignedTasks::default(),
            session_deadline_ms: None,
            rebalance_deadline: None,
            task_offsets: TaskOffsets::default(),
        }
    }

    /// Kafka's `updateMemberEpoch`: the current epoch becomes the previous one.
    pub fn set_epoch(&mut self, epoch: i32) {
        self.previous_member_epoch = self.member_epoch;
        self.member_epoch = epoch;
    }

    pub fn is_reconciled_to(&self, target_epoch: i32) -> bool {
        self.state == MemberState::Stable && self.member_epoch == target_epoch
    }

    /// Whether the StreamsGroupMemberMetadata record of the two differs.
    fn same_metadata(&self, other: &StreamsMember) -> bool {
        self.instance_id == other.instance_id
            && self.rack_id == other.rack_id
            && self.client_id == other.client_id
            && self.client_host == other.client_host
            && self.rebalance_timeout_ms == other.rebalance_timeout_ms
            && self.topology_epoch == other.topology_epoch
            && self.process_id == other.process_id
            && self.user_endpoint == other.user_endpoint
            && self.client_tags == other.client_tags
    }

    /// Whether the StreamsGroupCurrentMemberAssignment record of the two differs.
    fn same_assignment(&self, other: &StreamsMember) -> bool {
        self.member_epoch == other.member_epoch
            && self.previous_member_epoch == other.previous_member_epoch
            && self.state == other.state
            && self.assigned == other.assigned
            && self.pending_revocation == other.pending_revocation
    }

    /// Kafka's `hasEpochRelevantMemberConfigChanged`: what the assignor reads of a member.
    fn assignment_inputs_changed(&self, other: &StreamsMember) -> bool {
        self.topology_epoch != other.topology_epoch
            || self.rack_id != other.rack_id
            || self.client_tags != other.client_tags
            || self.process_id != other.process_id
    }
}

/// The topology a group runs, as recorded (StreamsGroupTopologyValue, its subtopologies
/// in the order the member sent them): Kafka's `StreamsTopology`.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamsTopology {
    pub epoch: i32,
    pub subtopologies: Vec<Subtopology>,
}

impl StreamsTopology {
    /// Every topic the topology reads or needs to exist (Kafka's `requiredTopics`): source
    /// topics, repartition source topics and changelog topics.
    pub fn required_topics(&self) -> BTreeSet<String> {
        self.subtopologies
            .iter()
            .flat_map(|s| {
                let sources = s.source_topics.iter().cloned();
                let repartition = s.repartition_source_topics.iter().map(|t| t.name.clone());
                let changelogs = s.state_changelog_topics.iter().map(|t| t.name.clone());
                sources.chain(repartition).chain(changelogs)
            })
            .collect()
    }

    /// The subtopology reading `topic` (a source or repartition source topic): Kafka's
    /// `sourceTopicMap`.
    pub fn subtopology_of(&self, topic: &str) -> Option<&Subtopology> {
        self.subtopologies.iter().find(|s| {
            s.source_topics.iter().any(|t| t == topic) || s.repartition_source_topics.iter().any(|t| t.name == topic)
        })
    }

    /// The subtopologies by id (Kafka keeps them in a map: their order does not matter).
    pub fn by_id(&self) -> BTreeMap<&str, &Subtopology> {
        self.subtopologies.iter().map(|s| (s.subtopology_id.as_str(), s)).collect()
    }

    /// Kafka's `StreamsTopology.equals`: the same epoch and subtopologies, in any order.
    pub fn same_as(&self, other: &StreamsTopology) -> bool {
        self.epoch == other.epoch && self.by_id() == other.by_id()
    }
}

/// One streams group: Kafka's `StreamsGroup`.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamsGroup {
    pub group_id: String,
    pub group_epoch: i32,
    /// Kafka's metadata hash of the topology's required topics at `group_epoch`.
    pub metadata_hash: i64,
    /// The topology epoch whose topics were found in a valid configuration (-1: none).
    pub validated_topology_epoch: i32,
    /// The assignment configs the target was computed with (`num.standby.replicas`).
    pub last_assignment_configs: BTreeMap<String, String>,
    /// Kafka 4.4's topology description epochs (KIP-1331), kept as loaded: Osprey stores
    /// no descriptions.
    pub stored_description_topology_epoch: i32,
    pub failed_description_topology_epoch: i32,
    pub assignment_epoch: i32,
    /// When the target assignment of `assignment_epoch` was computed.
    pub assignment_timestamp_ms: i64,
    pub members: BTreeMap<String, StreamsMember>,
    /// The target assignment of `assignment_epoch`, by member id.
    pub target: BTreeMap<String, TasksTuple>,
    pub topology: Option<StreamsTopology>,
    /// The topology configured against the topics last seen (not persisted: configured
    /// again at the next heartbeat after a load).
    pub configured: Option<ConfiguredTopology>,
    /// The member that asked the application to shut down (not persisted).
    pub shutdown_requested_by: Option<String>,
    /// Bumped whenever a member's tasks or endpoint change, so members learn the other
    /// members' endpoints for interactive queries (not persisted).
    pub endpoint_information_epoch: i32,
    /// While the first assignment of a new group waits for more members
    /// (`group.streams.initial.rebalance.delay.ms`): when it is computed (not persisted).
    pub initial_rebalance_deadline_ms: Option<i64>,
}

impl StreamsGroup {
    pub(crate) fn new(group_id: &str) -> StreamsGroup {
        StreamsGroup {
            group_id: group_id.to_string(),
            // Kafka 4.4 starts a group at epoch 1 and its target assignment at epoch 1
            // (`TargetAssignmentMetadata.INITIAL`): a member that joins while the initial
            // rebalance delay holds the first assignment back reconciles to epoch 1, not
            // to 0, which a client could only send again as a join.
            group_epoch: 1,
            metadata_hash: 0,
            validated_topology_epoch: -1,
            last_assignment_configs: BTreeMap::new(),
            stored_description_topology_epoch: -1,
            failed_description_topology_epoch: -1,
            assignment_epoch: 1,
            assignment_timestamp_ms: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            topology: None,
            configured: None,
            shutdown_requested_by: None,
            endpoint_information_epoch: -1,
            initial_rebalance_deadline_ms: None,
        }
    }

    /// Kafka's `maybeUpdateGroupState`.
    pub fn state(&self) -> StreamsGroupState {
        if self.members.is_empty() {
            StreamsGroupState::Empty
        } else if self.topology.as_ref().is_none_or(|t| t.epoch != self.validated_topology_epoch) {
            StreamsGroupState::NotReady
        } else if self.group_epoch > self.assignment_epoch {
            StreamsGroupState::Assigning
        } else if self.members.values().any(|m| !m.is_reconciled_to(self.assignment_epoch)) {
            StreamsGroupState::Reconciling
        } else {
            StreamsGroupState::Stable
        }
    }

    /// The group as its records say it is: what a reload of its records gives.
    pub fn durable(&self) -> StreamsGroup {
        let mut group = self.clone();
        group.configured = None;
        group.shutdown_requested_by = None;
        group.endpoint_information_epoch = -1;
        group.initial_rebalance_deadline_ms = None;
        for member in group.members.values_mut() {
            member.session_deadline_ms = None;
            member.rebalance_deadline = None;
            member.task_offsets = TaskOffsets::default();
        }
        group
    }

    /// The member of a static member's instance id.
    fn static_member(&self, instance_id: &str) -> Option<&StreamsMember> {
        self.members.values().find(|m| m.instance_id.as_deref() == Some(instance_id))
    }

    /// Kafka's `isSubscribedToTopic`: a source topic of the topology, while members run it.
    pub fn is_subscribed_to_topic(&self, topic: &str) -> bool {
        if self.members.is_empty() {
            return false;
        }
        self.topology.as_ref().is_some_and(|t| t.subtopology_of(topic).is_some())
    }

    /// The owners of each task now (assigned or pending revocation), as Kafka's
    /// `currentActiveTaskToProcessId` and friends index them.
    fn owners(&self) -> reconcile::TaskOwners {
        let mut owners = reconcile::TaskOwners::default();
        for member in self.members.values() {
            owners.add(&member.process_id, &member.assigned);
            owners.add(&member.process_id, &member.pending_revocation);
        }
        owners
    }
}
