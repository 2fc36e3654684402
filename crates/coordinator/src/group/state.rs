//! One classic group and its members: Kafka's `GroupMetadata` and `MemberMetadata`.

use super::{ProtocolMetadata, ReplyId};
use bytes::Bytes;
use osprey_protocol::messages::consumer_protocol_subscription::ConsumerProtocolSubscription;
use osprey_protocol::messages::join_group_response::JoinGroupResponseMember;
use osprey_protocol::Message;
use std::collections::{BTreeMap, BTreeSet};

/// Kafka's group states, spelled as Kafka spells them in DescribeGroups / ListGroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub const ALL: [GroupState; 5] = [
        GroupState::Empty,
        GroupState::PreparingRebalance,
        GroupState::CompletingRebalance,
        GroupState::Stable,
        GroupState::Dead,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A held JoinGroup: where to answer and what the request's version allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HeldJoin {
    pub reply: ReplyId,
    pub api_version: i16,
}

/// A held SyncGroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HeldSync {
    pub reply: ReplyId,
    pub api_version: i16,
}

#[derive(Debug, Clone)]
pub(super) struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    /// In the member's order of preference.
    pub protocols: Vec<ProtocolMetadata>,
    pub assignment: Bytes,
    /// Set while the member awaits the end of the join phase.
    pub join_reply: Option<HeldJoin>,
    /// Set while the member awaits the leader's assignment.
    pub sync_reply: Option<HeldSync>,
    /// Joined during this rebalance: expires after the new-member join timeout even while
    /// it waits.
    pub is_new: bool,
    /// When the member's session expires unless it heartbeats; `None` while no
    /// expiration is scheduled (Kafka completes a member's delayed heartbeat at once
    /// while the member awaits a join or sync).
    pub heartbeat_deadline_ms: Option<i64>,
}

impl Member {
    pub fn is_awaiting_join(&self) -> bool {
        self.join_reply.is_some()
    }

    pub fn is_static(&self) -> bool {
        self.group_instance_id.is_some()
    }

    /// Kafka's `MemberMetadata.hasSatisfiedHeartbeat` right after a new expiration is
    /// scheduled (the "satisfied" flag is then false).
    pub fn has_satisfied_heartbeat(&self) -> bool {
        !self.is_new && (self.join_reply.is_some() || self.sync_reply.is_some())
    }

    pub fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols.iter().find(|(name, _)| name == protocol).map(|(_, m)| m)
    }

    /// Same protocols, same metadata, same order (Kafka's `MemberMetadata.matches`).
    pub fn matches(&self, protocols: &[ProtocolMetadata]) -> bool {
        self.protocols == protocols
    }

    /// The first protocol of the member's preference that all members support.
    fn vote<'a>(&'a self, candidates: &BTreeSet<&str>) -> Option<&'a str> {
        self.protocols.iter().map(|(name, _)| name.as_str()).find(|name| candidates.contains(name))
    }
}

/// When the join phase of a rebalance ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JoinTimer {
    /// Kafka's `DelayedJoin`: ends at `deadline_ms` or as soon as everyone has rejoined.
    Rebalance { deadline_ms: i64 },
    /// Kafka's `InitialDelayedJoin`: ends only at its deadline; extended while new members
    /// keep arriving, up to the rebalance timeout.
    Initial { deadline_ms: i64, delay_ms: i64, remaining_ms: i64 },
}

impl JoinTimer {
    pub fn deadline_ms(self) -> i64 {
        match self {
            JoinTimer::Rebalance { deadline_ms } | JoinTimer::Initial { deadline_ms, .. } => deadline_ms,
        }
    }
}

/// A committed offset, as stored in an OffsetCommitValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1: none.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only from OffsetCommit v2-v4 with a retention time (value version 1).
    pub expire_timestamp_ms: Option<i64>,
    /// Where the record stands in `__consumer_offsets`: the coordinator's count of
    /// records made durable (or replayed on load) when this one was. Kafka compares record
    /// offsets to keep the newer of a transactional and a plain commit when a transaction
    /// commits; the order in which appends become durable stands in for the log order
    /// (the server appends in output order, one partition's appends complete in order).
    /// 0 until the record is durable.
    pub log_sequence: u64,
}

pub(super) type TopicPartition = (String, i32);

#[derive(Debug)]
pub(super) struct Group {
    pub group_id: String,
    pub state: GroupState,
    pub state_timestamp_ms: Option<i64>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation_id: i32,
    pub leader_id: Option<String>,
    /// In join order: Kafka picks a new leader among the remaining members.
    pub members: Vec<Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, and when they expire.
    pub pending_members: BTreeMap<String, i64>,
    /// Members that have not sent SyncGroup for the current generation.
    pub pending_sync_members: BTreeSet<String>,
    /// When members still in `pending_sync_members` are removed.
    pub pending_sync_deadline_ms: Option<i64>,
    pub new_member_added: bool,
    pub join_timer: Option<JoinTimer>,
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
    /// Commits written but not yet durable, counted per partition (plain and
    /// transactional alike).
    pub pending_offset_commits: BTreeMap<TopicPartition, u32>,
    /// Durable TxnOffsetCommits of transactions not yet ended, by producer id: invisible
    /// to OffsetFetch until the producer's COMMIT marker (Kafka's
    /// `pendingTransactionalOffsets`). No producer maps to an empty map.
    pub pending_txn_offsets: BTreeMap<i64, BTreeMap<TopicPartition, CommittedOffset>>,
    /// `None`: unknown (unparseable subscriptions), which Kafka treats as "subscribed".
    pub subscribed_topics: Option<BTreeSet<String>>,
}

impl Group {
    pub fn new(group_id: &str, now_ms: i64) -> Group {
        Group {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            state_timestamp_ms: Some(now_ms),
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: Vec::new(),
            pending_members: BTreeMap::new(),
            pending_sync_members: BTreeSet::new(),
            pending_sync_deadline_ms: None,
            new_member_added: false,
            join_timer: None,
            offsets: BTreeMap::new(),
            pending_offset_commits: BTreeMap::new(),
            pending_txn_offsets: BTreeMap::new(),
            subscribed_topics: None,
        }
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub fn transition_to(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_timestamp_ms = Some(now_ms);
    }

    pub fn has(&self, member_id: &str) -> bool {
        self.members.iter().any(|m| m.member_id == member_id)
    }

    pub fn get(&self, member_id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.member_id == member_id)
    }

    pub fn get_mut(&mut self, member_id: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.member_id == member_id)
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    pub fn is_pending_member(&self, member_id: &str) -> bool {
        self.pending_members.contains_key(member_id)
    }

    pub fn static_member_id(&self, instance_id: &str) -> Option<&str> {
        self.members.iter().find(|m| m.group_instance_id.as_deref() == Some(instance_id)).map(|m| m.member_id.as_str())
    }

    pub fn num_awaiting_join(&self) -> usize {
        self.members.iter().filter(|m| m.is_awaiting_join()).count()
    }

    pub fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.num_awaiting_join() && self.pending_members.is_empty()
    }

    /// Whether the classic group is in use (members, or a state other than Empty): a
    /// consumer or share group loaded under its id gives way to it.
    pub fn is_in_use(&self) -> bool {
        !self.members.is_empty() || self.state != GroupState::Empty
    }

    pub fn is_consumer_group(&self) -> bool {
        self.protocol_type.as_deref() == Some("consumer")
    }

    /// The largest rebalance timeout of the members (Kafka's `GroupMetadata.rebalanceTimeoutMs`).
    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members.iter().map(|m| i64::from(m.rebalance_timeout_ms)).max().unwrap_or(0)
    }

    /// Whether a rebalance may start from this state.
    pub fn can_rebalance(&self) -> bool {
        matches!(self.state, GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty)
    }

    /// How many members support each protocol.
    fn supported_protocols(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for member in &self.members {
            for (name, _) in &member.protocols {
                *counts.entry(name.as_str()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Kafka's `GroupMetadata.supportsProtocols` (its counts default to 0, so a group left
    /// without members while rebalancing accepts any protocol of its type).
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[ProtocolMetadata]) -> bool {
        if self.is(GroupState::Empty) {
            !protocol_type.is_empty() && !protocols.is_empty()
        } else {
            let counts = self.supported_protocols();
            self.protocol_type.as_deref() == Some(protocol_type)
                && protocols
                    .iter()
                    .any(|(name, _)| counts.get(name.as_str()).copied().unwrap_or(0) == self.members.len())
        }
    }

    /// The protocol every member supports that most members prefer; ties go to the
    /// protocol preferred by the earliest member.
    pub fn select_protocol(&self) -> Option<String> {
        let counts = self.supported_protocols();
        let candidates: BTreeSet<&str> =
            counts.iter().filter(|(_, &n)| n == self.members.len()).map(|(&name, _)| name).collect();
        let mut votes: Vec<(&str, usize)> = Vec::new();
        for vote in self.members.iter().filter_map(|m| m.vote(&candidates)) {
            match votes.iter_mut().find(|(name, _)| *name == vote) {
                Some((_, n)) => *n += 1,
                None => votes.push((vote, 1)),
            }
        }
        let best = votes.iter().map(|(_, n)| *n).max()?;
        votes.iter().find(|(_, n)| *n == best).map(|(name, _)| name.to_string())
    }

    /// Adds a member (Kafka's `GroupMetadata.add`).
    pub fn add(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        self.pending_members.remove(&member.member_id);
        self.members.push(member);
    }

    /// Removes a member or pending member (Kafka's `GroupMetadata.remove`); returns the
    /// member so that its held replies can be answered.
    pub fn remove(&mut self, member_id: &str) -> Option<Member> {
        let removed = self.members.iter().position(|m| m.member_id == member_id).map(|i| self.members.remove(i));
        if self.is_leader(member_id) {
            self.leader_id = self.members.first().map(|m| m.member_id.clone());
        }
        self.pending_members.remove(member_id);
        self.pending_sync_members.remove(member_id);
        removed
    }

    /// The members and their metadata for the selected protocol, for the leader's JoinGroup response.
    pub fn current_member_metadata(&self, api_version: i16) -> Vec<JoinGroupResponseMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        self.members
            .iter()
            .map(|m| JoinGroupResponseMember {
                member_id: m.member_id.clone(),
                group_instance_id: if api_version >= 5 { m.group_instance_id.clone() } else { None },
                metadata: m.metadata(protocol).cloned().unwrap_or_default(),
                ..Default::default()
            })
            .collect()
    }

    /// Kafka's `GroupMetadata.computeSubscribedTopics`: the union of the members'
    /// subscriptions, parsed with the consumer protocol's version-0 prefix.
    pub fn compute_subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.members.is_empty() {
            return if self.protocol_type.is_some() { Some(BTreeSet::new()) } else { None };
        }
        let protocol = self.protocol_name.as_deref()?;
        if !self.is_consumer_group() {
            return None;
        }
        let mut topics = BTreeSet::new();
        for member in &self.members {
            topics.extend(parse_subscription_topics(member.metadata(protocol)?)?);
        }
        Some(topics)
    }

    /// Kafka's `isSubscribedToTopic`: when the subscriptions are unknown, a consumer group
    /// is assumed to be subscribed.
    pub fn is_subscribed_to_topic(&self, topic: &str) -> bool {
        match &self.subscribed_topics {
            Some(topics) => topics.contains(topic),
            None => self.is_consumer_group(),
        }
    }

    /// Whether the committed offset of `tp` may still change without a new commit: a
    /// commit is on its way to the log, or an open transaction holds an offset for it.
    /// OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT then, and offset
    /// expiry leaves the partition alone.
    pub fn has_pending_offset_commit(&self, tp: &TopicPartition) -> bool {
        self.pending_offset_commits.contains_key(tp) || self.has_pending_txn_offset(tp)
    }

    pub fn has_pending_txn_offset(&self, tp: &TopicPartition) -> bool {
        self.pending_txn_offsets.values().any(|offsets| offsets.contains_key(tp))
    }

    /// A tombstone for `tp` also removes every open transaction's offset for it (Kafka's
    /// `OffsetMetadataManager.replay` of a tombstone).
    pub fn remove_pending_txn_offsets(&mut self, tp: &TopicPartition) {
        for offsets in self.pending_txn_offsets.values_mut() {
            offsets.remove(tp);
        }
        self.pending_txn_offsets.retain(|_, offsets| !offsets.is_empty());
    }

    /// The partitions some open transaction holds an offset for.
    pub fn pending_txn_partitions(&self) -> std::collections::BTreeSet<TopicPartition> {
        self.pending_txn_offsets.values().flat_map(|offsets| offsets.keys().cloned()).collect()
    }
}

/// The subscribed topics of a ConsumerProtocolSubscription: int16 version, then the
/// version-0 fields, which prefix every later version.
pub(super) fn parse_subscription_topics(metadata: &Bytes) -> Option<Vec<String>> {
    let mut buf = metadata.clone();
    if buf.len() < 2 {
        return None;
    }
    let version = i16::from_be_bytes([buf[0], buf[1]]);
    if version < 0 {
        return None;
    }
    let _ = bytes::Buf::get_i16(&mut buf);
    ConsumerProtocolSubscription::decode(&mut buf, 0).ok().map(|s| s.topics)
}
