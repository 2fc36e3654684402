//! Share groups' membership (KIP-932): ShareGroupHeartbeat v1 and ShareGroupDescribe v1,
//! Kafka 4.4's `GroupMetadataManager.shareGroupHeartbeat` as part of the same
//! deterministic [`GroupCoordinator`](crate::group::GroupCoordinator).
//!
//! A share group's members consume partitions together: a partition may be assigned to
//! several members (the share partition leader hands out records one batch at a time),
//! so there is no revocation. When membership, subscriptions or the subscribed topics
//! change, the group epoch bumps, the [`assignor`] (Kafka's `SimpleAssignor`) computes a
//! target assignment for it, and each member takes its target, at member epoch = the
//! target's epoch, at its next heartbeat.
//!
//! # The protocol between the server and the coordinator
//!
//! - [`share_group_heartbeat`] takes a [`ReplyId`]: the answer comes as
//!   [`Output::Respond`] with [`Response::ShareGroupHeartbeat`], at once when nothing
//!   changed, else after the group's records are durable (as ConsumerGroupHeartbeat).
//! - The server passes the [`TopicsView`] of the cluster's topics on every heartbeat; the
//!   group's `share.session.timeout.ms` / `share.heartbeat.interval.ms` come with it
//!   ([`TopicsView::share_group_overrides`]) and override `group.share.*`.
//! - Sessions (`group.share.session.timeout.ms`) run in [`tick`].
//! - ListGroups lists share groups (type "share"); DescribeGroups answers a share group
//!   as Kafka does any non-classic group (GROUP_ID_NOT_FOUND from v6, Dead); DeleteGroups
//!   deletes an empty one (NON_EMPTY_GROUP otherwise); a ConsumerGroupHeartbeat, JoinGroup,
//!   OffsetCommit or OffsetFetch to a share group, and a ShareGroupHeartbeat to a
//!   classic or consumer group, get Kafka's errors.
//! - [`share_group_settings`] gives the share partitions the group's lock duration,
//!   delivery count limit, offset reset and isolation level.
//!
//! # Where Osprey differs from Kafka 4.4
//!
//! - Kafka assigns a partition only once the share coordinator has initialized its state
//!   (InitializeShareGroupState, then a ShareGroupStatePartitionMetadata record moving
//!   it from initializing to initialized, then an epoch bump). Osprey records the
//!   subscribed partitions as initialized in the heartbeat that first sees them: the
//!   share partitions start from `share.auto.offset.reset` when the share coordinator
//!   has no state for them. Kafka loads those records as they are.
//! - DeleteGroups does not delete the share coordinator's state of the group's
//!   partitions (Kafka sends DeleteShareGroupState first); that is the server's part.
//! - Kafka 4.4 may batch target assignments (`group.share.assignment.interval.ms`);
//!   Osprey computes the target in the heartbeat that bumps the epoch, as Kafka does with
//!   that interval at 0.
//!
//! [`share_group_heartbeat`]: crate::group::GroupCoordinator::share_group_heartbeat
//! [`share_group_settings`]: crate::group::GroupCoordinator::share_group_settings
//! [`tick`]: crate::group::GroupCoordinator::tick
//! [`Output::Respond`]: crate::group::Output::Respond
//! [`Response::ShareGroupHeartbeat`]: crate::group::Response::ShareGroupHeartbeat
//! [`ReplyId`]: crate::group::ReplyId
//! [`TopicsView`]: crate::group::TopicsView
//! [`TopicsView::share_group_overrides`]: crate::group::TopicsView::share_group_overrides

pub mod assignor;
mod describe;
mod heartbeat;
mod lifecycle;
mod offsets;
pub(crate) mod records;

use crate::group::consumer::{Assignment, TopicInfo};
use osprey_protocol::Uuid;
use std::collections::{BTreeMap, BTreeSet};

pub use crate::group::metadata_hash::{group_hash, topic_hash};
pub use offsets::{NamedTopic, ShareOffsetsStep};

/// The member epoch of a heartbeat that leaves the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// The protocol type and ListGroups v5 group type of a share group.
pub const SHARE_GROUP_TYPE: &str = "share";
/// The name of Kafka's share assignor, the only one.
pub const SIMPLE_ASSIGNOR_NAME: &str = "simple";

/// Kafka's `ShareGroup.ShareGroupState`, spelled as ShareGroupDescribe spells it (a
/// group the coordinator does not know is "Dead").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareGroupState {
    Empty,
    Stable,
}

impl ShareGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ShareGroupState::Empty => "Empty",
            ShareGroupState::Stable => "Stable",
        }
    }
}

/// One member of a share group: Kafka's `ShareGroupMember`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareMember {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub assigned_partitions: Assignment,
    /// When the member is fenced unless it heartbeats (not persisted).
    pub session_deadline_ms: Option<i64>,
}

impl ShareMember {
    pub(crate) fn new(member_id: &str) -> ShareMember {
        ShareMember {
            member_id: member_id.to_string(),
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_topic_names: BTreeSet::new(),
            member_epoch: 0,
            previous_member_epoch: 0,
            assigned_partitions: Assignment::new(),
            session_deadline_ms: None,
        }
    }

    /// Whether the ShareGroupMemberMetadata record of the two differs.
    fn same_metadata(&self, other: &ShareMember) -> bool {
        self.rack_id == other.rack_id
            && self.client_id == other.client_id
            && self.client_host == other.client_host
            && self.subscribed_topic_names == other.subscribed_topic_names
    }

    /// Whether the ShareGroupCurrentMemberAssignment record of the two differs.
    fn same_assignment(&self, other: &ShareMember) -> bool {
        self.member_epoch == other.member_epoch
            && self.previous_member_epoch == other.previous_member_epoch
            && self.assigned_partitions == other.assigned_partitions
    }
}

/// A topic in ShareGroupStatePartitionMetadata: its name and partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StateTopic {
    pub name: String,
    pub partitions: BTreeSet<i32>,
}

/// Kafka's `ShareGroupStatePartitionMetadataInfo`: which partitions' share state exists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatePartitionMetadata {
    pub initializing: BTreeMap<Uuid, StateTopic>,
    pub initialized: BTreeMap<Uuid, StateTopic>,
    /// Topics whose share state is being deleted, by id, with their names.
    pub deleting: BTreeMap<Uuid, String>,
}

/// One share group: Kafka's `ShareGroup`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareGroup {
    pub group_id: String,
    pub group_epoch: i32,
    /// Kafka's metadata hash of the subscribed topics at `group_epoch` (KIP-1101).
    pub metadata_hash: i64,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    /// The target assignment of `assignment_epoch`, by member id.
    pub target: BTreeMap<String, Assignment>,
    pub state_metadata: StatePartitionMetadata,
    /// The subscribed topics that existed at the last heartbeat, with their hashes, so a
    /// member fenced by a timer recomputes the group's hash without a view (Kafka's topic
    /// hash cache). Not persisted.
    pub topic_hashes: BTreeMap<String, (TopicInfo, i64)>,
}

impl ShareGroup {
    pub(crate) fn new(group_id: &str) -> ShareGroup {
        ShareGroup {
            group_id: group_id.to_string(),
            // As a consumer group, and as in Kafka 4.4 (ModernGroup): epoch 1 before any
            // member joins, so the first member's join makes it 2.
            group_epoch: 1,
            metadata_hash: 0,
            assignment_epoch: 1,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            state_metadata: StatePartitionMetadata::default(),
            topic_hashes: BTreeMap::new(),
        }
    }

    pub fn state(&self) -> ShareGroupState {
        if self.members.is_empty() {
            ShareGroupState::Empty
        } else {
            ShareGroupState::Stable
        }
    }

    /// The group as its records say it is: what a reload of its records gives (sessions
    /// restart and the topic hash cache is refilled at the next heartbeat).
    pub fn durable(&self) -> ShareGroup {
        let mut group = self.clone();
        group.topic_hashes.clear();
        for member in group.members.values_mut() {
            member.session_deadline_ms = None;
        }
        group
    }

    /// Every member's subscribed topic names.
    fn subscribed_topic_names(&self) -> BTreeSet<String> {
        self.members.values().flat_map(|m| m.subscribed_topic_names.iter().cloned()).collect()
    }

    /// Topic names by id, from the state metadata and the topics last seen.
    fn topic_names_by_id(&self) -> BTreeMap<Uuid, String> {
        let mut names: BTreeMap<Uuid, String> =
            self.state_metadata.initialized.iter().map(|(id, t)| (*id, t.name.clone())).collect();
        names.extend(self.topic_hashes.iter().map(|(name, (info, _))| (info.topic_id, name.clone())));
        names
    }
}
