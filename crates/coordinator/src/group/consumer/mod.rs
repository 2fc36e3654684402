//! The KIP-848 consumer-group protocol (ConsumerGroupHeartbeat v0-1, ConsumerGroupDescribe
//! v0-1): Kafka's `GroupMetadataManager.consumerGroupHeartbeat` as part of the same
//! deterministic [`GroupCoordinator`].
//!
//! The group coordinator owns the assignment: a member heartbeats its subscription and
//! the partitions it owns; the coordinator bumps the group epoch when membership or
//! subscriptions change, computes a target assignment for that epoch with a server-side
//! assignor ([`assignor`]), and moves each member towards its target
//! ([`reconcile`]): a member is only given partitions no other member still owns, is
//! asked to revoke partitions moving away, and advances to the target epoch once it has.
//!
//! # The protocol between the server and the coordinator
//!
//! - [`GroupCoordinator::consumer_group_heartbeat`] takes a [`ReplyId`]: the answer comes
//!   out as [`Output::Respond`] with [`Response::ConsumerGroupHeartbeat`]. When the
//!   heartbeat changed the group, its records come out first as an [`Output::Persist`]
//!   and the answer only after [`GroupCoordinator::persisted`] reports them durable (an
//!   append error is answered with the mapped error code, as Kafka does). A heartbeat
//!   that changed nothing is answered at once.
//! - The server passes a [`TopicsView`] of the cluster's topics (name → id, partition
//!   count) on every heartbeat: the coordinator resolves subscriptions with it and
//!   notices topics created, deleted or grown at the next heartbeat (for patterns: when
//!   the view's [`TopicsView::version`] has moved).
//! - ConsumerGroupHeartbeat names topics by id; [`GroupCoordinator::consumer_group_describe`]
//!   fills in names from the group's subscribed topics.
//! - The group's configs (`consumer.session.timeout.ms`, `consumer.heartbeat.interval.ms`,
//!   [`crate::group::group_config`]) come with the view too, and override the broker's
//!   settings for that group's heartbeats.
//! - Sessions (`group.consumer.session.timeout.ms`) and rebalance timeouts (a member that
//!   does not revoke within its rebalance timeout) run in [`GroupCoordinator::tick`];
//!   [`GroupCoordinator::next_deadline`] includes them.
//! - OffsetCommit from a consumer-protocol member is checked against its member epoch
//!   (STALE_MEMBER_EPOCH), inside [`GroupCoordinator::commit_offsets`]; OffsetFetch v9+
//!   names member and epoch: the server calls [`GroupCoordinator::validate_offset_fetch`]
//!   before [`GroupCoordinator::fetch_offsets`]. A consumer group's offsets live in a
//!   member-less classic entry and are served by the classic offset paths.
//! - ListGroups lists consumer groups with type "consumer"; DeleteGroups deletes an
//!   empty one (NON_EMPTY_GROUP otherwise); `load` replays their records and
//!   `unload_partition` drops them.
//! - Regular-expression subscriptions (`subscribed_topic_regex`, RE2 syntax) are
//!   resolved against the cluster's topics and resolved again when the topics change
//!   ([`subscription_regex`]).
//!
//! # Not (yet) supported
//!
//! - The online upgrade/downgrade between classic and consumer groups (KIP-848's mixed
//!   groups): a classic JoinGroup to a consumer group with members gets
//!   INCONSISTENT_GROUP_PROTOCOL, a consumer heartbeat to a classic group with members
//!   GROUP_ID_NOT_FOUND; an *empty* group of either kind is converted, as in Kafka.
//! - Rack-aware assignment (racks are recorded, not used).
//!
//! [`Output::Respond`]: super::Output::Respond
//! [`Output::Persist`]: super::Output::Persist
//! [`Response::ConsumerGroupHeartbeat`]: super::Response::ConsumerGroupHeartbeat
//! [`ReplyId`]: super::ReplyId

pub mod assignor;
mod describe;
pub(in crate::group) mod heartbeat;
pub(in crate::group) mod lifecycle;
mod reconcile;
pub(crate) mod records;
mod subscription_regex;

use crate::group::group_config::{ConsumerGroupOverrides, ShareGroupOverrides, StreamsGroupOverrides};
use osprey_protocol::Uuid;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Partitions by topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// What the coordinator needs to know of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopicInfo {
    pub topic_id: Uuid,
    pub num_partitions: i32,
}

/// The cluster's topics as the server sees them: name → id and partition count.
pub trait TopicsView {
    fn topic(&self, name: &str) -> Option<TopicInfo>;
    /// Calls `f` with every topic's name (subscription patterns are matched against them).
    fn for_each_name(&self, f: &mut dyn FnMut(&str));
    /// Changes whenever a topic is created, deleted or changes its partitions (and may
    /// change more often): patterns are resolved again when it moves.
    fn version(&self) -> u64;
    /// The group's configs where they override the broker's (group configs live in the
    /// cluster metadata with the topics); none unless the view has group configs.
    fn consumer_group_overrides(&self, _group_id: &str) -> ConsumerGroupOverrides {
        ConsumerGroupOverrides::default()
    }
    /// A share group's configs where they override the broker's.
    fn share_group_overrides(&self, _group_id: &str) -> ShareGroupOverrides {
        ShareGroupOverrides::default()
    }
    /// A streams group's configs where they override the broker's.
    fn streams_group_overrides(&self, _group_id: &str) -> StreamsGroupOverrides {
        StreamsGroupOverrides::default()
    }
}

/// A version for the maps tests use as views: a digest of their contents, independent
/// of iteration order.
fn digest_of<'a>(topics: impl Iterator<Item = (&'a String, &'a TopicInfo)>) -> u64 {
    use std::hash::{Hash, Hasher};
    topics
        .map(|entry| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            entry.hash(&mut hasher);
            hasher.finish()
        })
        .fold(0u64, u64::wrapping_add)
}

impl TopicsView for BTreeMap<String, TopicInfo> {
    fn topic(&self, name: &str) -> Option<TopicInfo> {
        self.get(name).copied()
    }
    fn for_each_name(&self, f: &mut dyn FnMut(&str)) {
        self.keys().for_each(|name| f(name));
    }
    fn version(&self) -> u64 {
        digest_of(self.iter())
    }
}

impl TopicsView for HashMap<String, TopicInfo> {
    fn topic(&self, name: &str) -> Option<TopicInfo> {
        self.get(name).copied()
    }
    fn for_each_name(&self, f: &mut dyn FnMut(&str)) {
        self.keys().for_each(|name| f(name));
    }
    fn version(&self) -> u64 {
        digest_of(self.iter())
    }
}

/// The server's view is the cluster metadata: a topic's partitions are the image's, and
/// the version is the metadata log offset the image has applied (Kafka resolves
/// patterns again when its image's offset moves).
impl TopicsView for osprey_cluster::MetadataImage {
    fn topic(&self, name: &str) -> Option<TopicInfo> {
        osprey_cluster::MetadataImage::topic(self, name).map(|t| TopicInfo {
            topic_id: t.id,
            num_partitions: i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
        })
    }
    fn for_each_name(&self, f: &mut dyn FnMut(&str)) {
        self.topics().for_each(|t| f(&t.name));
    }
    fn version(&self) -> u64 {
        self.applied
    }
    fn consumer_group_overrides(&self, group_id: &str) -> ConsumerGroupOverrides {
        self.group_configs(group_id).map(ConsumerGroupOverrides::from_configs).unwrap_or_default()
    }
    fn share_group_overrides(&self, group_id: &str) -> ShareGroupOverrides {
        self.group_configs(group_id).map(ShareGroupOverrides::from_configs).unwrap_or_default()
    }
    fn streams_group_overrides(&self, group_id: &str) -> StreamsGroupOverrides {
        self.group_configs(group_id).map(StreamsGroupOverrides::from_configs).unwrap_or_default()
    }
}

/// The member epoch of a heartbeat that leaves the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// The member epoch of a static member leaving for now (it keeps its assignment for a
/// session timeout).
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;
/// Kafka's INVALID_REGULAR_EXPRESSION; newer than the error codes of the protocol crate.
pub const INVALID_REGULAR_EXPRESSION: i16 = 128;
/// The protocol type and ListGroups v5 group type of a consumer group.
pub(in crate::group) const CONSUMER_GROUP_TYPE: &str = "consumer";
/// ConsumerGroupDescribe v1's `member_type` of a member using the consumer protocol.
const MEMBER_TYPE_CONSUMER: i8 = 1;

/// Kafka's `MemberState`, with the byte it is stored as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Reconciled to its target at its epoch (or waiting for a newer target).
    Stable,
    /// Must revoke `partitions_pending_revocation` before it can advance.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions others have not released.
    UnreleasedPartitions,
}

impl MemberState {
    pub fn value(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        }
    }

    pub fn from_value(value: i8) -> Option<MemberState> {
        match value {
            0 => Some(MemberState::Stable),
            1 => Some(MemberState::UnrevokedPartitions),
            2 => Some(MemberState::UnreleasedPartitions),
            _ => None,
        }
    }
}

/// Kafka's `ConsumerGroup.ConsumerGroupState`, spelled as ConsumerGroupDescribe spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub const ALL: [ConsumerGroupState; 4] = [
        ConsumerGroupState::Empty,
        ConsumerGroupState::Assigning,
        ConsumerGroupState::Reconciling,
        ConsumerGroupState::Stable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// One member of a consumer group: Kafka's `ConsumerGroupMember`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub assigned_partitions: Assignment,
    pub partitions_pending_revocation: Assignment,
    /// When the member is fenced unless it heartbeats.
    pub session_deadline_ms: Option<i64>,
    /// When the member is fenced unless it has revoked by then, and the epoch it was
    /// asked at.
    pub rebalance_deadline: Option<(i64, i32)>,
}

impl ConsumerMember {
    pub fn new(member_id: &str) -> ConsumerMember {
        ConsumerMember {
            member_id: member_id.to_string(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_topic_names: BTreeSet::new(),
            subscribed_topic_regex: None,
            rebalance_timeout_ms: -1,
            server_assignor: None,
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            assigned_partitions: Assignment::new(),
            partitions_pending_revocation: Assignment::new(),
            session_deadline_ms: None,
            rebalance_deadline: None,
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

    /// Whether the ConsumerGroupMemberMetadata record of the two differs.
    fn same_metadata(&self, other: &ConsumerMember) -> bool {
        self.member_id == other.member_id
            && self.instance_id == other.instance_id
            && self.rack_id == other.rack_id
            && self.client_id == other.client_id
            && self.client_host == other.client_host
            && self.subscribed_topic_names == other.subscribed_topic_names
            && self.subscribed_topic_regex == other.subscribed_topic_regex
            && self.rebalance_timeout_ms == other.rebalance_timeout_ms
            && self.server_assignor == other.server_assignor
    }

    /// Whether the ConsumerGroupCurrentMemberAssignment record of the two differs.
    fn same_assignment(&self, other: &ConsumerMember) -> bool {
        self.member_epoch == other.member_epoch
            && self.previous_member_epoch == other.previous_member_epoch
            && self.state == other.state
            && self.assigned_partitions == other.assigned_partitions
            && self.partitions_pending_revocation == other.partitions_pending_revocation
    }
}

/// One consumer group: Kafka's `ConsumerGroup`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    /// The target assignment of `assignment_epoch`, by member id.
    pub target: BTreeMap<String, Assignment>,
    /// The subscribed topics that exist, by name.
    pub subscription_metadata: BTreeMap<String, TopicInfo>,
    /// What the members' patterns matched (not persisted: resolved again after a load).
    pub resolved_regexes: subscription_regex::ResolvedRegexes,
}

impl ConsumerGroup {
    pub fn new(group_id: &str) -> ConsumerGroup {
        ConsumerGroup {
            group_id: group_id.to_string(),
            // Kafka 4.4 starts a group at epoch 1 and its target assignment at epoch 1
            // (ModernGroup's constructor, `TargetAssignmentMetadata.INITIAL`): the first
            // member's join makes it 2.
            group_epoch: 1,
            assignment_epoch: 1,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            subscription_metadata: BTreeMap::new(),
            resolved_regexes: Default::default(),
        }
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self.members.values().any(|m| !m.is_reconciled_to(self.assignment_epoch)) {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    fn static_member(&self, instance_id: &str) -> Option<&ConsumerMember> {
        self.members.values().find(|m| m.instance_id.as_deref() == Some(instance_id))
    }

    /// The partitions owned (assigned or pending revocation) by members other than
    /// `member_id`: Kafka's `currentPartitionEpoch != -1`.
    fn owned_by_others(&self, member_id: &str) -> BTreeSet<(Uuid, i32)> {
        self.members
            .values()
            .filter(|m| m.member_id != member_id)
            .flat_map(|m| m.assigned_partitions.iter().chain(m.partitions_pending_revocation.iter()))
            .flat_map(|(topic, ps)| ps.iter().map(move |p| (*topic, *p)))
            .collect()
    }

    /// The server assignor most members ask for (ties to the first in name order), or
    /// the default: Kafka's `computePreferredServerAssignor`.
    pub fn preferred_assignor(&self) -> &'static str {
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        for name in self.members.values().filter_map(|m| m.server_assignor.as_deref()) {
            if let Some(known) = assignor::ASSIGNORS.iter().find(|a| **a == name) {
                *counts.entry(known).or_default() += 1;
            }
        }
        let best = counts.values().copied().max().unwrap_or(0);
        counts.into_iter().find(|(_, n)| *n == best && best > 0).map_or(assignor::ASSIGNORS[0], |(name, _)| name)
    }

    /// The subscribed topics that exist, resolved with `topics`.
    fn compute_subscription_metadata(&self, topics: &dyn TopicsView) -> BTreeMap<String, TopicInfo> {
        self.subscribed_topic_names()
            .into_iter()
            .filter_map(|name| topics.topic(&name).map(|info| (name, info)))
            .filter(|(_, info)| info.num_partitions > 0)
            .collect()
    }

    fn subscribed_topic_names(&self) -> BTreeSet<String> {
        self.members.values().flat_map(|m| self.member_topics(m).cloned()).collect()
    }

    /// The topics `member` subscribes to: its names, and what its pattern resolved to.
    fn member_topics<'a>(&'a self, member: &'a ConsumerMember) -> impl Iterator<Item = &'a String> {
        let by_pattern = member.subscribed_topic_regex.as_deref().into_iter().flat_map(|p| self.regex_topics(p));
        member.subscribed_topic_names.iter().chain(by_pattern)
    }

    fn topic_names_by_id(&self) -> BTreeMap<Uuid, &str> {
        self.subscription_metadata.iter().map(|(name, info)| (info.topic_id, name.as_str())).collect()
    }
}
