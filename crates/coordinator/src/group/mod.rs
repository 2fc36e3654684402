//! The classic-protocol group coordinator (JoinGroup / SyncGroup / Heartbeat / LeaveGroup,
//! offsets, group administration) as a deterministic state machine.
//!
//! It follows Kafka's `GroupCoordinator` / `GroupMetadata` semantics: the same states
//! (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead), the same error codes in
//! the same situations, the same timers (session timeout, rebalance timeout,
//! `group.initial.rebalance.delay.ms`, the 5-minute new-member join timeout, pending-sync
//! expiry, offset retention) and the same `__consumer_offsets` record formats, so a group
//! written by Kafka loads here and the other way round.
//!
//! No I/O, no clock, no tokio: every input takes `now_ms`, durable writes and replies
//! come out as [`Output`]s the server drains with [`GroupCoordinator::poll_output`].
//!
//! # The protocol between the server and the coordinator
//!
//! - Requests that are answered at once return their response: [`heartbeat`],
//!   [`leave`], [`fetch_offsets`], [`list_groups`], [`describe_groups`]. They can still
//!   queue outputs (a leave can complete a rebalance and release other members' joins).
//! - Requests whose answer waits (JoinGroup until the rebalance completes, SyncGroup until
//!   the leader's assignment is durable, OffsetCommit / DeleteGroups / OffsetDelete until
//!   their records are durable) take a [`ReplyId`] chosen by the server and return nothing;
//!   the answer comes later as [`Output::Respond`] with that id, already shaped for the
//!   request's version (the server encodes it as is).
//! - [`Output::Persist`] asks the server to append `records` (keys and values in Kafka's
//!   exact formats) to partition [`partition_for`]`(group_id, offsets.topic.num.partitions)`
//!   of `__consumer_offsets`, in the order the outputs come out, and to call
//!   [`persisted`]`(id, result, now)` once the append is durable (or failed, with the
//!   append's error code). The reports may come in any order: each group's are applied
//!   in the order its persists were issued, so a connection's pipelined OffsetCommits
//!   take effect in the order sent. Whatever depended on it (a SyncGroup completing the group, an
//!   OffsetCommit becoming visible to OffsetFetch, a static member's replacement) happens
//!   only then: nothing is acknowledged to a client before it is durable.
//! - [`tick`]`(now)` runs the timers; call it at least every [`next_deadline`] (or on a
//!   fixed period, e.g. 100 ms).
//! - After every call, drain [`poll_output`] until `None`.
//! - On becoming the coordinator of a partition, [`load`] its records, oldest first
//!   (answer COORDINATOR_LOAD_IN_PROGRESS for its groups meanwhile). On losing it,
//!   [`unload_partition`]: held JoinGroup/SyncGroup requests of its groups are answered
//!   NOT_COORDINATOR; report its persists still in flight as failed
//!   (NOT_LEADER_OR_FOLLOWER), which answers the OffsetCommits waiting on them.
//! - [`GroupConfig::member_id_seed`] must be random per process: member ids of loaded
//!   groups must not come round again.
//! - TxnOffsetCommit ([`txn_commit_offsets`]) comes out as an [`Output::Persist`] with
//!   `producer: Some((producer_id, producer_epoch))`: the server appends those records as
//!   a transactional batch of that producer. Once durable the offsets are pending for the
//!   producer, invisible to OffsetFetch, until the server has made the producer's COMMIT
//!   or ABORT marker durable in that `__consumer_offsets` partition and calls
//!   [`complete_txn`]. On load, [`load_replay`] takes transactional records and markers
//!   as they are in the log.
//! - KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe, and the
//!   member-epoch checks of OffsetCommit / OffsetFetch) live in the same coordinator:
//!   see [`consumer`] for their part of this protocol.
//! - KIP-932 share groups (ShareGroupHeartbeat, ShareGroupDescribe) too: see [`share`].
//! - KIP-1071 streams groups (StreamsGroupHeartbeat, StreamsGroupDescribe) too: see
//!   [`streams`].
//! - [`check_invariants`] checks the coordinator's internal invariants (tests run it after
//!   every step; a debug server may too).
//!
//! The coordinator does not know which `__consumer_offsets` partitions this broker leads:
//! the server answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS before calling in.
//! OffsetCommit v10 / OffsetFetch v10 name topics by id: the server fills in the names
//! before calling and maps them back in the response.
//!
//! ```
//! use osprey_coordinator::group::{GroupConfig, GroupCoordinator, Output, ReplyId, Response};
//! use osprey_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
//!
//! let mut coordinator = GroupCoordinator::new(GroupConfig::default());
//! let request = JoinGroupRequest {
//!     group_id: "my-group".into(),
//!     session_timeout_ms: 10_000,
//!     rebalance_timeout_ms: 30_000,
//!     protocol_type: "consumer".into(),
//!     protocols: vec![JoinGroupRequestProtocol { name: "range".into(), ..Default::default() }],
//!     ..Default::default()
//! };
//! // JoinGroup v9 with an empty member id: MEMBER_ID_REQUIRED and a member id to rejoin with.
//! coordinator.join(&request, 9, "client-1", "/127.0.0.1", ReplyId(1), 0);
//! let Some(Output::Respond { reply: ReplyId(1), response: Response::JoinGroup(first) }) = coordinator.poll_output()
//! else { panic!() };
//! assert_eq!(first.error_code, 79);
//! // Rejoin with it: the group waits group.initial.rebalance.delay.ms, then answers.
//! coordinator.join(&JoinGroupRequest { member_id: first.member_id.clone(), ..request }, 9, "client-1", "/127.0.0.1", ReplyId(2), 1);
//! assert!(coordinator.poll_output().is_none());
//! coordinator.tick(3_001);
//! let Some(Output::Respond { reply: ReplyId(2), response: Response::JoinGroup(joined) }) = coordinator.poll_output()
//! else { panic!() };
//! assert_eq!((joined.error_code, joined.generation_id), (0, 1));
//! assert_eq!(joined.leader, first.member_id);
//! ```
//!
//! [`heartbeat`]: GroupCoordinator::heartbeat
//! [`leave`]: GroupCoordinator::leave
//! [`fetch_offsets`]: GroupCoordinator::fetch_offsets
//! [`list_groups`]: GroupCoordinator::list_groups
//! [`describe_groups`]: GroupCoordinator::describe_groups
//! [`persisted`]: GroupCoordinator::persisted
//! [`tick`]: GroupCoordinator::tick
//! [`next_deadline`]: GroupCoordinator::next_deadline
//! [`poll_output`]: GroupCoordinator::poll_output
//! [`load`]: GroupCoordinator::load
//! [`load_replay`]: GroupCoordinator::load_replay
//! [`txn_commit_offsets`]: GroupCoordinator::txn_commit_offsets
//! [`complete_txn`]: GroupCoordinator::complete_txn
//! [`unload_partition`]: GroupCoordinator::unload_partition
//! [`check_invariants`]: GroupCoordinator::check_invariants

mod admin;
pub mod consumer;
pub mod group_config;
mod heartbeat;
mod invariants;
mod join;
mod leave;
mod member_id;
pub mod metadata_hash;
mod offsets;
mod ownership;
mod persist_order;
mod rebalance;
pub mod records;
pub mod share;
mod state;
pub mod streams;
mod sync;
mod timers;
mod txn_offsets;

pub use consumer::{ConsumerGroupState, TopicInfo, TopicsView};
pub use ownership::PartitionLoad;
pub use records::{java_string_hash_code, partition_for, LoadError, LoadSummary, Record, Replay};
pub use share::{ShareGroup, ShareGroupState};
pub use state::GroupState;
pub use streams::{StreamsGroup, StreamsGroupState, StreamsHeartbeatAnswer};

use bytes::Bytes;
use member_id::MemberIdGenerator;
use osprey_protocol::messages::{
    ConsumerGroupHeartbeatResponse, DeleteGroupsResponse, JoinGroupResponse, OffsetCommitResponse,
    OffsetDeleteResponse, ShareGroupHeartbeatResponse, SyncGroupResponse, TxnOffsetCommitResponse,
};
use state::Group;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Identifies a held request; chosen by the server (e.g. connection and correlation id).
/// The transaction coordinator uses the same type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplyId(pub u64);

/// Identifies one `Output::Persist` of a coordinator; handed back to its `persisted`
/// ([`GroupCoordinator::persisted`], `TransactionCoordinator::persisted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PersistId(pub u64);

/// What the coordinator asks of the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send `response` for the held request `reply`.
    Respond { reply: ReplyId, response: Response },
    /// Append `records` to `__consumer_offsets` partition `partition_for(group_id, n)`,
    /// then call [`GroupCoordinator::persisted`] with `id`. With `producer:
    /// Some((producer_id, producer_epoch))` (a TxnOffsetCommit) the records go in one
    /// transactional batch of that producer, checked as any transactional append is (a
    /// fenced epoch fails the append, and its error code is what `persisted` gets);
    /// `None`: a plain, non-transactional batch.
    Persist { id: PersistId, group_id: String, records: Vec<Record>, producer: Option<(i64, i16)> },
}

/// A delayed response, shaped for the version its request came in.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    JoinGroup(JoinGroupResponse),
    SyncGroup(SyncGroupResponse),
    OffsetCommit(OffsetCommitResponse),
    DeleteGroups(DeleteGroupsResponse),
    OffsetDelete(OffsetDeleteResponse),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse),
    TxnOffsetCommit(TxnOffsetCommitResponse),
    ShareGroupHeartbeat(ShareGroupHeartbeatResponse),
    /// A step of DescribeShareGroupOffsets, AlterShareGroupOffsets or
    /// DeleteShareGroupOffsets, which the server completes ([`share::ShareOffsetsStep`]).
    ShareGroupOffsets(share::ShareOffsetsStep),
    /// With the internal topics the server is to create.
    StreamsGroupHeartbeat(Box<StreamsHeartbeatAnswer>),
}

/// The coordinator's settings, with Kafka's names and defaults.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub group_max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`
    pub group_initial_rebalance_delay_ms: i32,
    /// `group.max.size`
    pub group_max_size: usize,
    /// `offset.metadata.max.bytes` (counted in UTF-16 code units, as Java's `String.length`)
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes`
    pub offsets_retention_minutes: i64,
    /// `offsets.retention.check.interval.ms`
    pub offsets_retention_check_interval_ms: i64,
    /// How long a new member's JoinGroup may wait before the member is dropped
    /// (Kafka's `GroupCoordinator.NewMemberJoinTimeoutMs`, not configurable there).
    pub new_member_join_timeout_ms: i64,
    /// Seeds the member-id generator (the server passes random bits; tests a constant).
    pub member_id_seed: u64,
    /// `group.consumer.heartbeat.interval.ms`
    pub consumer_group_heartbeat_interval_ms: i32,
    /// `group.consumer.session.timeout.ms`
    pub consumer_group_session_timeout_ms: i32,
    /// `group.consumer.max.size`
    pub consumer_group_max_size: usize,
    /// `osprey.group.consumer.regex.max.patterns`: distinct SubscribedTopicRegex
    /// patterns one consumer group may use at once (each is matched against every
    /// topic whenever the topics change).
    pub consumer_group_regex_max_patterns: usize,
    /// `osprey.group.consumer.regex.max.compiled.bytes`: the most memory one compiled
    /// SubscribedTopicRegex may take (a larger one is INVALID_REGULAR_EXPRESSION).
    pub consumer_group_regex_max_compiled_bytes: usize,
    /// `group.share.session.timeout.ms`
    pub share_group_session_timeout_ms: i32,
    /// `group.share.heartbeat.interval.ms`
    pub share_group_heartbeat_interval_ms: i32,
    /// `group.share.max.size`
    pub share_group_max_size: usize,
    /// `group.streams.session.timeout.ms`
    pub streams_group_session_timeout_ms: i32,
    /// `group.streams.heartbeat.interval.ms`
    pub streams_group_heartbeat_interval_ms: i32,
    /// `group.streams.max.size`
    pub streams_group_max_size: usize,
    /// `group.streams.num.standby.replicas`
    pub streams_group_num_standby_replicas: i32,
    /// `group.streams.initial.rebalance.delay.ms`: how long a new streams group's first
    /// assignment waits for more members.
    pub streams_group_initial_rebalance_delay_ms: i32,
    /// `group.streams.assignment.interval.ms`: the least time between two target
    /// assignments of a streams group.
    pub streams_group_assignment_interval_ms: i32,
    /// `group.streams.task.offset.interval.ms`, told to members.
    pub streams_group_task_offset_interval_ms: i32,
    /// `group.streams.acceptable.recovery.lag`, told to members.
    pub streams_group_acceptable_recovery_lag: i64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_max_size: i32::MAX as usize,
            offset_metadata_max_bytes: 4096,
            offsets_retention_minutes: 7 * 24 * 60,
            offsets_retention_check_interval_ms: 600_000,
            new_member_join_timeout_ms: 300_000,
            member_id_seed: 0x5eed,
            consumer_group_heartbeat_interval_ms: 5_000,
            consumer_group_session_timeout_ms: 45_000,
            consumer_group_max_size: i32::MAX as usize,
            consumer_group_regex_max_patterns: 100,
            consumer_group_regex_max_compiled_bytes: 1 << 20,
            share_group_session_timeout_ms: 45_000,
            share_group_heartbeat_interval_ms: 5_000,
            share_group_max_size: 200,
            streams_group_session_timeout_ms: 45_000,
            streams_group_heartbeat_interval_ms: 5_000,
            streams_group_max_size: i32::MAX as usize,
            streams_group_num_standby_replicas: 0,
            streams_group_initial_rebalance_delay_ms: 3_000,
            streams_group_assignment_interval_ms: 1_000,
            streams_group_task_offset_interval_ms: 60_000,
            streams_group_acceptable_recovery_lag: 10_000,
        }
    }
}

impl GroupConfig {
    fn offsets_retention_ms(&self) -> i64 {
        self.offsets_retention_minutes.saturating_mul(60_000)
    }
}

/// The group coordinator of one broker: every classic group of the `__consumer_offsets`
/// partitions it leads.
#[derive(Debug)]
pub struct GroupCoordinator {
    config: GroupConfig,
    groups: BTreeMap<String, Group>,
    /// KIP-848 consumer groups; their committed offsets live in `groups`, in an entry
    /// without members.
    consumer_groups: BTreeMap<String, consumer::ConsumerGroup>,
    /// KIP-932 share groups; they have no committed offsets here.
    share_groups: BTreeMap<String, share::ShareGroup>,
    /// KIP-1071 streams groups; their committed offsets live in `groups`, in an entry
    /// without members.
    streams_groups: BTreeMap<String, streams::StreamsGroup>,
    outputs: VecDeque<Output>,
    pending_persists: HashMap<PersistId, records::Continuation>,
    /// Each group's persists in issue order, so that completions apply in that order.
    persist_order: persist_order::PersistOrder,
    next_persist_id: u64,
    /// DeleteGroups requests waiting for several groups' tombstones.
    delete_batches: HashMap<u64, admin::DeleteBatch>,
    next_batch_id: u64,
    member_ids: MemberIdGenerator,
    next_offset_cleanup_ms: Option<i64>,
    /// Counts the offset records made durable or replayed, in that order: the
    /// [`state::CommittedOffset::log_sequence`] of the next one.
    next_log_sequence: u64,
    /// The partitions served, when the server hands them over as leadership moves
    /// (`ownership.rs`); `None`: every partition.
    ownership: Option<ownership::Ownership>,
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> GroupCoordinator {
        let member_ids = MemberIdGenerator::new(config.member_id_seed);
        GroupCoordinator {
            config,
            groups: BTreeMap::new(),
            consumer_groups: BTreeMap::new(),
            share_groups: BTreeMap::new(),
            streams_groups: BTreeMap::new(),
            outputs: VecDeque::new(),
            pending_persists: HashMap::new(),
            persist_order: Default::default(),
            next_persist_id: 0,
            delete_batches: HashMap::new(),
            next_batch_id: 0,
            member_ids,
            next_offset_cleanup_ms: None,
            next_log_sequence: 1,
            ownership: None,
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// The next output, oldest first.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The state of `group_id`, if the coordinator knows the group.
    pub fn group_state(&self, group_id: &str) -> Option<GroupState> {
        self.groups.get(group_id).map(|g| g.state)
    }

    /// The current generation of `group_id`.
    pub fn generation(&self, group_id: &str) -> Option<i32> {
        self.groups.get(group_id).map(|g| g.generation_id)
    }

    /// The member ids of `group_id`, in join order (the first is the leader candidate).
    pub fn members(&self, group_id: &str) -> Vec<String> {
        self.groups.get(group_id).map(|g| g.members.iter().map(|m| m.member_id.clone()).collect()).unwrap_or_default()
    }

    /// How many members `group_id` has, a classic group, a KIP-848 consumer group, a
    /// share group or a streams group; 0 for a group the coordinator does not know.
    pub fn member_count(&self, group_id: &str) -> usize {
        if let Some(share) = self.share_groups.get(group_id) {
            return share.members.len();
        }
        if let Some(streams) = self.streams_groups.get(group_id) {
            return streams.members.len();
        }
        match self.consumer_groups.get(group_id) {
            Some(consumer) => consumer.members.len(),
            None => self.groups.get(group_id).map_or(0, |g| g.members.len()),
        }
    }

    /// The number of requests the coordinator holds a reply for (joins, syncs and the
    /// requests waiting for a persist), a bound the server can watch.
    pub fn held_replies(&self) -> usize {
        let members: usize = self
            .groups
            .values()
            .flat_map(|g| g.members.iter())
            .map(|m| usize::from(m.join_reply.is_some()) + usize::from(m.sync_reply.is_some()))
            .sum();
        members + self.pending_persists.values().filter(|c| c.holds_reply()).count()
    }

    fn respond(&mut self, reply: ReplyId, response: Response) {
        self.outputs.push_back(Output::Respond { reply, response });
    }

    fn persist(&mut self, group_id: &str, records: Vec<Record>, then: records::Continuation) -> PersistId {
        self.persist_as(group_id, records, then, None)
    }

    /// A persist written as `producer`'s transactional batch when `producer` is set.
    fn persist_as(
        &mut self,
        group_id: &str,
        records: Vec<Record>,
        then: records::Continuation,
        producer: Option<(i64, i16)>,
    ) -> PersistId {
        let id = PersistId(self.next_persist_id);
        self.next_persist_id += 1;
        self.pending_persists.insert(id, then);
        self.persist_order.issued(group_id, id);
        self.outputs.push_back(Output::Persist { id, group_id: group_id.to_string(), records, producer });
        id
    }

    /// The log sequence of a record becoming durable (or replayed) now.
    fn take_log_sequence(&mut self) -> u64 {
        let sequence = self.next_log_sequence;
        self.next_log_sequence += 1;
        sequence
    }
}

/// Maps an append error to the error the client gets, as Kafka's
/// `appendGroupMetadataErrorToResponseError` (and, for the errors an append here can
/// give, its coordinator runtime's `CoordinatorOperationExceptionHelper`, which the share
/// coordinator uses too).
pub(crate) fn append_error_to_response(error: osprey_protocol::ErrorCode) -> osprey_protocol::ErrorCode {
    use osprey_protocol::ErrorCode as E;
    match error {
        E::UNKNOWN_TOPIC_OR_PARTITION | E::NOT_ENOUGH_REPLICAS | E::NOT_ENOUGH_REPLICAS_AFTER_APPEND => {
            E::COORDINATOR_NOT_AVAILABLE
        }
        E::NOT_LEADER_OR_FOLLOWER | E::KAFKA_STORAGE_ERROR => E::NOT_COORDINATOR,
        E::MESSAGE_TOO_LARGE | E::RECORD_LIST_TOO_LARGE | E::INVALID_FETCH_SIZE => E::UNKNOWN_SERVER_ERROR,
        other => other,
    }
}

/// Bytes of one protocol's metadata, as the member sent them.
type ProtocolMetadata = (String, Bytes);
