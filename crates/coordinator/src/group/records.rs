//! The `__consumer_offsets` records: Kafka's exact key and value formats, the partition a
//! group lives in, replay on load, and what happens when an append becomes durable.
//!
//! Key = int16 version + key struct; value = int16 version + value struct; a `None`
//! value is a tombstone. Written versions are Kafka's current ones: OffsetCommitKey 1,
//! OffsetCommitValue 3 (1 when the commit carried a retention time), GroupMetadataKey 2,
//! GroupMetadataValue 3.

use super::state::{CommittedOffset, Group, GroupState, Member, TopicPartition};
use super::{GroupCoordinator, PersistId, ProtocolMetadata};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use osprey_protocol::messages::group_metadata_value::MemberMetadata;
use osprey_protocol::messages::{GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, OffsetCommitValue};
use osprey_protocol::{ErrorCode, Message};
use std::collections::BTreeMap;

/// One record of `__consumer_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Bytes,
    /// `None`: a tombstone.
    pub value: Option<Bytes>,
}

/// The `__consumer_offsets` partition of `group_id`: Kafka's
/// `Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`, where `hashCode` is
/// Java's `String.hashCode` over UTF-16 code units and `Utils.abs(Integer.MIN_VALUE)` is 0.
pub fn partition_for(group_id: &str, num_partitions: i32) -> i32 {
    assert!(num_partitions > 0, "offsets.topic.num.partitions must be positive");
    let hash = java_string_hash_code(group_id);
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % num_partitions
}

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` in wrapping 32-bit arithmetic.
pub fn java_string_hash_code(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
const OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY: i16 = 1;
const GROUP_METADATA_KEY_VERSION: i16 = 2;
const GROUP_METADATA_VALUE_VERSION: i16 = 3;

/// `message` prefixed by `version` as Kafka's coordinators write their records' keys and
/// values (the prefix of a `__share_group_state` key is its record type).
pub(crate) fn versioned<M: Message>(message: &M, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    // The structs are built here from the coordinator's state; an encode failure is a bug.
    message.encode(&mut buf, version).expect("internal record encodes");
    buf.freeze()
}

/// A record value at version 0, as the KIP-848 and KIP-932 group records are written.
pub(crate) fn value_v0<M: Message>(message: &M) -> Option<Bytes> {
    Some(versioned(message, 0))
}

pub(super) fn offset_commit_key(group_id: &str, tp: &TopicPartition) -> Bytes {
    let key = OffsetCommitKey { group: group_id.to_string(), topic: tp.0.clone(), partition: tp.1 };
    versioned(&key, OFFSET_COMMIT_KEY_VERSION)
}

pub(super) fn offset_commit_record(group_id: &str, tp: &TopicPartition, offset: &CommittedOffset) -> Record {
    let (version, value) = match offset.expire_timestamp_ms {
        Some(expire) => (
            OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY,
            OffsetCommitValue {
                offset: offset.offset,
                metadata: offset.metadata.clone(),
                commit_timestamp: offset.commit_timestamp_ms,
                expire_timestamp: expire,
                ..Default::default()
            },
        ),
        None => (
            OFFSET_COMMIT_VALUE_VERSION,
            OffsetCommitValue {
                offset: offset.offset,
                leader_epoch: offset.leader_epoch,
                metadata: offset.metadata.clone(),
                commit_timestamp: offset.commit_timestamp_ms,
                ..Default::default()
            },
        ),
    };
    Record { key: offset_commit_key(group_id, tp), value: Some(versioned(&value, version)) }
}

pub(super) fn offset_tombstone(group_id: &str, tp: &TopicPartition) -> Record {
    Record { key: offset_commit_key(group_id, tp), value: None }
}

pub(super) fn group_metadata_key(group_id: &str) -> Bytes {
    versioned(&GroupMetadataKey { group: group_id.to_string() }, GROUP_METADATA_KEY_VERSION)
}

pub(super) fn group_tombstone(group_id: &str) -> Record {
    Record { key: group_metadata_key(group_id), value: None }
}

/// The group's metadata with each member's assignment from `assignment`
/// (Kafka's `GroupMetadataManager.groupMetadataValue`).
pub(super) fn group_metadata_record(group: &Group, assignment: &BTreeMap<String, Bytes>) -> Record {
    let protocol = group.protocol_name.as_deref().unwrap_or("");
    let value = GroupMetadataValue {
        protocol_type: group.protocol_type.clone().unwrap_or_default(),
        generation: group.generation_id,
        protocol: group.protocol_name.clone(),
        leader: group.leader_id.clone(),
        current_state_timestamp: group.state_timestamp_ms.unwrap_or(-1),
        members: group
            .members
            .iter()
            .map(|m| MemberMetadata {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout: m.rebalance_timeout_ms,
                session_timeout: m.session_timeout_ms,
                subscription: m.metadata(protocol).cloned().unwrap_or_default(),
                assignment: assignment.get(&m.member_id).cloned().unwrap_or_default(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    Record { key: group_metadata_key(&group.group_id), value: Some(versioned(&value, GROUP_METADATA_VALUE_VERSION)) }
}

/// The group's metadata with the members' current assignments.
pub(super) fn current_group_metadata_record(group: &Group) -> Record {
    let assignment = group.members.iter().map(|m| (m.member_id.clone(), m.assignment.clone())).collect();
    group_metadata_record(group, &assignment)
}

/// A record of `__consumer_offsets` this coordinator could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed __consumer_offsets record: {0}")]
pub struct LoadError(pub String);

/// What a [`GroupCoordinator::load`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadSummary {
    pub groups: usize,
    pub offsets: usize,
    /// Records of other kinds (share groups, streams groups...), left alone.
    pub skipped: usize,
    /// KIP-848 consumer groups.
    pub consumer_groups: usize,
    /// KIP-932 share groups.
    pub share_groups: usize,
    /// KIP-1071 streams groups.
    pub streams_groups: usize,
    /// Offsets of transactions still open at the end of the log, left pending.
    pub pending_txn_offsets: usize,
}

/// One entry of `__consumer_offsets` as [`GroupCoordinator::load_replay`] takes it, in log
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// A record of a non-transactional batch.
    Record(Record),
    /// A record of a transactional batch of `producer_id` (a TxnOffsetCommit).
    Transactional { producer_id: i64, record: Record },
    /// The COMMIT (`committed`) or ABORT marker of `producer_id` in `__consumer_offsets`
    /// partition `partition`.
    Marker { producer_id: i64, committed: bool, partition: i32 },
}

/// The decoded key of a `__consumer_offsets` record.
enum Key {
    Offset(String, TopicPartition),
    Group(String),
    /// A KIP-848 consumer group record: its key version and the key after it.
    Consumer(i16, Bytes),
    /// A KIP-932 share group record: its key version and the key after it.
    Share(i16, Bytes),
    /// A KIP-1071 streams group record: its key version and the key after it.
    Streams(i16, Bytes),
    Other,
}

/// Decodes a key struct of `version`, the key's prefix already read.
pub(crate) fn decode_key<M: Message>(key: Bytes, version: i16) -> Result<M, LoadError> {
    M::decode_exact(key, version).map_err(|e| LoadError(e.to_string()))
}

fn classify_key(mut key: Bytes) -> Result<Key, LoadError> {
    if key.len() < 2 {
        return Err(LoadError("key shorter than its version".into()));
    }
    let version = key.get_i16();
    match version {
        0 | 1 => {
            let k: OffsetCommitKey = decode_key(key, version)?;
            Ok(Key::Offset(k.group, (k.topic, k.partition)))
        }
        2 => {
            let k: GroupMetadataKey = decode_key(key, version)?;
            Ok(Key::Group(k.group))
        }
        v if super::consumer::records::is_consumer_group_key(v) => Ok(Key::Consumer(v, key)),
        v if super::share::records::is_share_group_key(v) => Ok(Key::Share(v, key)),
        v if super::streams::records::is_streams_group_key(v) => Ok(Key::Streams(v, key)),
        _ => Ok(Key::Other),
    }
}

/// Decodes a versioned value; a version newer than ours is read as our newest (KIP-915:
/// later versions only add tagged fields).
pub(crate) fn decode_value<M: Message>(mut value: Bytes) -> Result<M, LoadError> {
    if value.len() < 2 {
        return Err(LoadError(format!("{} shorter than its version", M::NAME)));
    }
    let version = value.get_i16().min(M::VERSIONS.1);
    M::decode(&mut value, version).map_err(|e| LoadError(e.to_string()))
}

fn decode_offset(value: Bytes) -> Result<CommittedOffset, LoadError> {
    let v: OffsetCommitValue = decode_value(value)?;
    Ok(CommittedOffset {
        offset: v.offset,
        leader_epoch: v.leader_epoch,
        metadata: v.metadata,
        commit_timestamp_ms: v.commit_timestamp,
        expire_timestamp_ms: (v.expire_timestamp != -1).then_some(v.expire_timestamp),
        log_sequence: 0,
    })
}

/// Kafka's `GroupMetadata.loadGroup`: Empty without members, Stable with them; the
/// members' sessions restart at load time.
fn loaded_group(group_id: &str, value: GroupMetadataValue, now_ms: i64) -> Group {
    let mut group = Group::new(group_id, now_ms);
    group.protocol_type = Some(value.protocol_type).filter(|t| !t.is_empty());
    group.generation_id = value.generation;
    group.protocol_name = value.protocol.filter(|p| !p.is_empty());
    group.leader_id = value.leader.filter(|l| !l.is_empty());
    group.state_timestamp_ms = (value.current_state_timestamp != -1).then_some(value.current_state_timestamp);
    let protocol = group.protocol_name.clone().unwrap_or_default();
    let protocol_type = group.protocol_type.clone().unwrap_or_default();
    // Records Kafka could not have written (members without a protocol, a member or
    // instance id twice, a leader that is no member) are repaired rather than trusted, so
    // that the group's invariants hold whatever the log holds.
    let members = if group.protocol_name.is_some() { value.members } else { Vec::new() };
    for m in members {
        let duplicate_instance = m.group_instance_id.as_deref().is_some_and(|i| group.static_member_id(i).is_some());
        if group.has(&m.member_id) || duplicate_instance {
            continue;
        }
        let protocols: Vec<ProtocolMetadata> = vec![(protocol.clone(), m.subscription)];
        let session_timeout_ms = m.session_timeout;
        group.members.push(Member {
            member_id: m.member_id,
            group_instance_id: m.group_instance_id,
            client_id: m.client_id,
            client_host: m.client_host,
            rebalance_timeout_ms: if m.rebalance_timeout == -1 { session_timeout_ms } else { m.rebalance_timeout },
            session_timeout_ms,
            protocol_type: protocol_type.clone(),
            protocols,
            assignment: m.assignment,
            join_reply: None,
            sync_reply: None,
            is_new: false,
            heartbeat_deadline_ms: Some(now_ms + i64::from(session_timeout_ms)),
        });
    }
    if !group.leader_id.as_ref().is_some_and(|l| group.has(l)) {
        group.leader_id = group.members.first().map(|m| m.member_id.clone());
    }
    group.generation_id = group.generation_id.max(0);
    group.state = if group.members.is_empty() { GroupState::Empty } else { GroupState::Stable };
    group.subscribed_topics = group.compute_subscribed_topics();
    group
}

/// Offsets as a load replays them: committed ones and open transactions' by group.
#[derive(Default)]
struct ReplayedOffsets {
    committed: BTreeMap<String, BTreeMap<TopicPartition, CommittedOffset>>,
    /// Group -> producer id -> partition; no empty maps.
    pending: BTreeMap<String, BTreeMap<i64, BTreeMap<TopicPartition, CommittedOffset>>>,
}

impl ReplayedOffsets {
    fn put(&mut self, group_id: String, tp: TopicPartition, offset: CommittedOffset, producer_id: Option<i64>) {
        match producer_id {
            None => self.committed.entry(group_id).or_default().insert(tp, offset),
            Some(producer_id) => {
                self.pending.entry(group_id).or_default().entry(producer_id).or_default().insert(tp, offset)
            }
        };
    }

    /// Kafka replays a tombstone, transactional or not, over the committed offset and
    /// every open transaction's offset of the partition.
    fn tombstone(&mut self, group_id: &str, tp: &TopicPartition) {
        if let Some(offsets) = self.committed.get_mut(group_id) {
            offsets.remove(tp);
        }
        if let Some(by_producer) = self.pending.get_mut(group_id) {
            for offsets in by_producer.values_mut() {
                offsets.remove(tp);
            }
            by_producer.retain(|_, offsets| !offsets.is_empty());
            if by_producer.is_empty() {
                self.pending.remove(group_id);
            }
        }
    }

    /// A marker of `producer_id`, for the groups of its partition (`in_partition`).
    fn end_transaction(&mut self, producer_id: i64, committed: bool, in_partition: impl Fn(&str) -> bool) {
        for (group_id, by_producer) in self.pending.iter_mut().filter(|(g, _)| in_partition(g)) {
            let Some(offsets) = by_producer.remove(&producer_id) else { continue };
            if committed {
                merge_committed_txn_offsets(self.committed.entry(group_id.clone()).or_default(), offsets);
            }
        }
        self.pending.retain(|_, by_producer| !by_producer.is_empty());
    }
}

/// A committed transaction's offsets join the committed ones; where both exist the later
/// record wins (Kafka's `replayEndTransactionMarker` compares record offsets: a plain
/// commit written after the transactional one, before the marker, stays).
pub(super) fn merge_committed_txn_offsets(
    committed: &mut BTreeMap<TopicPartition, CommittedOffset>,
    offsets: BTreeMap<TopicPartition, CommittedOffset>,
) {
    for (tp, offset) in offsets {
        if committed.get(&tp).is_none_or(|current| current.log_sequence < offset.log_sequence) {
            committed.insert(tp, offset);
        }
    }
}

/// What to do once a persist is durable (or failed).
#[derive(Debug)]
pub(super) enum Continuation {
    /// The leader's SyncGroup: on success the assignment takes effect and the group is Stable.
    SyncGroup { group_id: String, generation_id: i32, assignment: BTreeMap<String, Bytes> },
    /// A static member rejoined a Stable group with a new member id.
    StaticReplace(Box<super::join::StaticReplace>),
    /// An OffsetCommit: on success its offsets become visible; then it is answered.
    OffsetCommit(Box<super::offsets::PendingCommit>),
    /// A TxnOffsetCommit: on success its offsets become pending for the producer; then it
    /// is answered.
    TxnOffsetCommit(Box<super::txn_offsets::PendingTxnCommit>),
    /// One group of a DeleteGroups request.
    DeleteGroup { batch_id: u64, group_id: String },
    /// An OffsetDelete: answered once its tombstones are durable.
    OffsetDelete { reply: super::ReplyId, response: osprey_protocol::messages::OffsetDeleteResponse },
    /// A ConsumerGroupHeartbeat: answered once its records are durable.
    ConsumerGroupHeartbeat {
        reply: super::ReplyId,
        response: Box<osprey_protocol::messages::ConsumerGroupHeartbeatResponse>,
    },
    /// A ShareGroupHeartbeat: answered once its records are durable.
    ShareGroupHeartbeat { reply: super::ReplyId, response: Box<osprey_protocol::messages::ShareGroupHeartbeatResponse> },
    /// A StreamsGroupHeartbeat: answered once its records are durable.
    StreamsGroupHeartbeat { reply: super::ReplyId, answer: Box<super::streams::StreamsHeartbeatAnswer> },
    /// A step of the share-group offsets APIs: answered once its record is durable.
    ShareGroupOffsets { reply: super::ReplyId, step: super::share::ShareOffsetsStep },
    /// Nothing waits (an Empty group's metadata, expired offsets).
    Nothing,
}

impl Continuation {
    pub fn holds_reply(&self) -> bool {
        !matches!(self, Continuation::SyncGroup { .. } | Continuation::Nothing)
    }
}

impl GroupCoordinator {
    /// Replays `__consumer_offsets` records of non-transactional batches, oldest first:
    /// later records win, tombstones delete. Call it when this broker becomes the
    /// coordinator of a partition, before serving that partition's groups; a partition
    /// that may hold transactional batches is loaded with [`GroupCoordinator::load_replay`].
    pub fn load(&mut self, records: impl IntoIterator<Item = Record>, now_ms: i64) -> Result<LoadSummary, LoadError> {
        // Without markers the partition count is never consulted.
        self.load_replay(records.into_iter().map(Replay::Record), 1, now_ms)
    }

    /// Replays a `__consumer_offsets` partition, oldest first, transactional batches and
    /// markers included (Kafka's `OffsetMetadataManager.replay` and
    /// `replayEndTransactionMarker`): a transactional offset is pending for its producer
    /// until a marker of that producer in the partition of its group (of
    /// `num_partitions`) commits it (the newer of it and the committed offset, by log
    /// order, stays) or aborts it (dropped). A tombstone also removes the partition's
    /// pending transactional offsets. Offsets of transactions still open at the end stay
    /// pending, for [`GroupCoordinator::complete_txn`].
    pub fn load_replay(
        &mut self,
        items: impl IntoIterator<Item = Replay>,
        num_partitions: i32,
        now_ms: i64,
    ) -> Result<LoadSummary, LoadError> {
        if num_partitions <= 0 {
            return Err(LoadError(format!("offsets.topic.num.partitions {num_partitions} is not positive")));
        }
        let mut replayed = ReplayedOffsets::default();
        let mut groups: BTreeMap<String, Option<GroupMetadataValue>> = BTreeMap::new();
        let mut summary = LoadSummary::default();
        let mut consumer_groups = BTreeMap::new();
        let mut share_groups = BTreeMap::new();
        let mut streams_groups = BTreeMap::new();
        for item in items {
            let (record, producer_id) = match item {
                Replay::Record(record) => (record, None),
                Replay::Transactional { producer_id, record } => (record, Some(producer_id)),
                Replay::Marker { producer_id, committed, partition } => {
                    replayed.end_transaction(producer_id, committed, |group_id| {
                        partition_for(group_id, num_partitions) == partition
                    });
                    continue;
                }
            };
            match classify_key(record.key)? {
                Key::Offset(group_id, tp) => match record.value {
                    Some(value) => {
                        let offset =
                            CommittedOffset { log_sequence: self.take_log_sequence(), ..decode_offset(value)? };
                        replayed.put(group_id, tp, offset, producer_id);
                    }
                    None => replayed.tombstone(&group_id, &tp),
                },
                // Kafka writes only offsets transactionally; anything else in a
                // transactional batch is replayed as it would be outside one.
                Key::Group(group_id) => {
                    let value = record.value.map(decode_value::<GroupMetadataValue>).transpose()?;
                    groups.insert(group_id, value);
                }
                Key::Consumer(version, key) => {
                    super::consumer::records::replay(&mut consumer_groups, version, key, record.value)?
                }
                Key::Share(version, key) => {
                    super::share::records::replay(&mut share_groups, version, key, record.value)?
                }
                Key::Streams(version, key) => {
                    super::streams::records::replay(&mut streams_groups, version, key, record.value)?
                }
                Key::Other => summary.skipped += 1,
            }
        }
        let mut loaded: BTreeMap<String, Group> = BTreeMap::new();
        for (group_id, value) in groups {
            if let Some(value) = value {
                loaded.insert(group_id.clone(), loaded_group(&group_id, value, now_ms));
            }
        }
        for (group_id, group_offsets) in replayed.committed {
            if group_offsets.is_empty() {
                continue;
            }
            summary.offsets += group_offsets.len();
            loaded.entry(group_id.clone()).or_insert_with(|| Group::new(&group_id, now_ms)).offsets = group_offsets;
        }
        for (group_id, by_producer) in replayed.pending {
            if by_producer.is_empty() {
                continue;
            }
            summary.pending_txn_offsets += by_producer.values().map(BTreeMap::len).sum::<usize>();
            // A group whose only offsets are pending exists, as Kafka creates a simple
            // group when it replays any offset commit.
            loaded.entry(group_id.clone()).or_insert_with(|| Group::new(&group_id, now_ms)).pending_txn_offsets =
                by_producer;
        }
        summary.groups = loaded.len();
        self.groups.extend(loaded);
        summary.consumer_groups = self.loaded_consumer_groups(consumer_groups, now_ms);
        summary.share_groups = self.loaded_share_groups(share_groups, now_ms);
        summary.streams_groups = self.loaded_streams_groups(streams_groups, now_ms);
        Ok(summary)
    }

    /// The server reports that the records of `id` are durable (`Ok`) or that the append
    /// failed (`Err` with the append's error code). Reports may arrive in any order; a
    /// group's are applied in the order its persists were issued.
    pub fn persisted(&mut self, id: PersistId, result: Result<(), ErrorCode>, now_ms: i64) {
        for (id, result) in self.persist_order.reported(id, result) {
            self.apply_persisted(id, result, now_ms);
        }
    }

    pub(super) fn apply_persisted(&mut self, id: PersistId, result: Result<(), ErrorCode>, now_ms: i64) {
        let Some(then) = self.pending_persists.remove(&id) else {
            return;
        };
        let result = result.map_err(super::append_error_to_response);
        match then {
            Continuation::SyncGroup { group_id, generation_id, assignment } => {
                self.sync_persisted(&group_id, generation_id, assignment, result, now_ms)
            }
            Continuation::StaticReplace(replace) => self.static_replace_persisted(*replace, result, now_ms),
            Continuation::OffsetCommit(commit) => self.commit_persisted(*commit, result),
            Continuation::TxnOffsetCommit(commit) => self.txn_commit_persisted(*commit, result),
            Continuation::DeleteGroup { batch_id, group_id } => {
                self.delete_group_persisted(batch_id, &group_id, result)
            }
            Continuation::OffsetDelete { reply, mut response } => {
                if let Err(error) = result {
                    response.error_code = error.code();
                    response.topics.clear();
                }
                self.respond(reply, super::Response::OffsetDelete(response));
            }
            Continuation::ConsumerGroupHeartbeat { reply, response } => {
                self.heartbeat_persisted(reply, *response, result)
            }
            Continuation::ShareGroupHeartbeat { reply, response } => self.heartbeat_persisted(reply, *response, result),
            Continuation::StreamsGroupHeartbeat { reply, answer } => self.heartbeat_persisted(reply, *answer, result),
            Continuation::ShareGroupOffsets { reply, step } => self.share_offsets_persisted(reply, step, result),
            Continuation::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_code_of_known_strings() {
        assert_eq!(java_string_hash_code(""), 0);
        assert_eq!(java_string_hash_code("a"), 97);
        assert_eq!(java_string_hash_code("ab"), 97 * 31 + 98);
    }
}
