//! The share group records of `__consumer_offsets`, in Kafka 4.4's exact formats, and
//! their replay on load.
//!
//! Key versions: ShareGroupMemberMetadata 10, ShareGroupMetadata 11,
//! ShareGroupTargetAssignmentMetadata 12, ShareGroupTargetAssignmentMember 13,
//! ShareGroupCurrentMemberAssignment 14, ShareGroupStatePartitionMetadata 15. Values at
//! version 0; a `None` value is a tombstone. Kafka 4.x no longer writes
//! ShareGroupPartitionMetadata (key 9, replaced by the metadata hash in
//! ShareGroupMetadataValue): a load skips it.

use super::{ShareGroup, ShareMember, StatePartitionMetadata, StateTopic};
use crate::group::consumer::records::assignment_from;
use crate::group::consumer::Assignment;
use crate::group::records::{decode_key, decode_value, value_v0, versioned, LoadError, Record};
use bytes::Bytes;
use osprey_protocol::messages::share_group_current_member_assignment_value::TopicPartitions as CurrentTopicPartitions;
use osprey_protocol::messages::share_group_state_partition_metadata_value::{TopicInfo, TopicPartitionsInfo};
use osprey_protocol::messages::share_group_target_assignment_member_value::TopicPartition as TargetTopicPartition;
use osprey_protocol::messages::{
    ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue, ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue, ShareGroupMetadataKey, ShareGroupMetadataValue, ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue, ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue,
};
use std::collections::BTreeMap;

/// ShareGroupPartitionMetadata, written by Kafka 4.0 only.
const PARTITION_METADATA_KEY_VERSION: i16 = 9;
const MEMBER_METADATA_KEY_VERSION: i16 = 10;
const GROUP_METADATA_KEY_VERSION: i16 = 11;
const TARGET_METADATA_KEY_VERSION: i16 = 12;
const TARGET_MEMBER_KEY_VERSION: i16 = 13;
const CURRENT_ASSIGNMENT_KEY_VERSION: i16 = 14;
const STATE_PARTITION_METADATA_KEY_VERSION: i16 = 15;
/// Kafka's `MemberState.STABLE`: share members are always stable (nothing to revoke).
const MEMBER_STATE_STABLE: i8 = 0;

/// Whether a key version belongs to a share group record.
pub(crate) fn is_share_group_key(version: i16) -> bool {
    (PARTITION_METADATA_KEY_VERSION..=STATE_PARTITION_METADATA_KEY_VERSION).contains(&version)
}

fn group_key(group_id: &str, version: i16) -> Bytes {
    let group_id = group_id.to_string();
    match version {
        GROUP_METADATA_KEY_VERSION => versioned(&ShareGroupMetadataKey { group_id }, version),
        TARGET_METADATA_KEY_VERSION => versioned(&ShareGroupTargetAssignmentMetadataKey { group_id }, version),
        _ => versioned(&ShareGroupStatePartitionMetadataKey { group_id }, version),
    }
}

fn member_key(group_id: &str, member_id: &str, version: i16) -> Bytes {
    let (group_id, member_id) = (group_id.to_string(), member_id.to_string());
    match version {
        MEMBER_METADATA_KEY_VERSION => versioned(&ShareGroupMemberMetadataKey { group_id, member_id }, version),
        TARGET_MEMBER_KEY_VERSION => versioned(&ShareGroupTargetAssignmentMemberKey { group_id, member_id }, version),
        _ => versioned(&ShareGroupCurrentMemberAssignmentKey { group_id, member_id }, version),
    }
}

/// ShareGroupMetadata: the group epoch and the metadata hash of its topics.
pub(super) fn group_epoch_record(group_id: &str, epoch: i32, metadata_hash: i64) -> Record {
    let v = ShareGroupMetadataValue { epoch, metadata_hash, ..Default::default() };
    Record { key: group_key(group_id, GROUP_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// ShareGroupMemberMetadata: the member's client and subscription (names sorted, as
/// Kafka's `newShareGroupMemberSubscriptionRecord`).
pub(super) fn member_metadata_record(group_id: &str, m: &ShareMember) -> Record {
    let v = ShareGroupMemberMetadataValue {
        rack_id: m.rack_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
        ..Default::default()
    };
    Record { key: member_key(group_id, &m.member_id, MEMBER_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// ShareGroupTargetAssignmentMetadata: the epoch of the target assignment.
pub(super) fn target_epoch_record(group_id: &str, epoch: i32) -> Record {
    let v = ShareGroupTargetAssignmentMetadataValue { assignment_epoch: epoch, ..Default::default() };
    Record { key: group_key(group_id, TARGET_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// ShareGroupTargetAssignmentMember: one member's target.
pub(super) fn target_member_record(group_id: &str, member_id: &str, target: &Assignment) -> Record {
    let topic_partitions = target
        .iter()
        .map(|(topic, ps)| TargetTopicPartition {
            topic_id: *topic,
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect();
    let v = ShareGroupTargetAssignmentMemberValue { topic_partitions, ..Default::default() };
    Record { key: member_key(group_id, member_id, TARGET_MEMBER_KEY_VERSION), value: value_v0(&v) }
}

/// ShareGroupCurrentMemberAssignment: the member's epochs and partitions.
pub(super) fn current_assignment_record(group_id: &str, m: &ShareMember) -> Record {
    let v = ShareGroupCurrentMemberAssignmentValue {
        member_epoch: m.member_epoch,
        previous_member_epoch: m.previous_member_epoch,
        state: MEMBER_STATE_STABLE,
        assigned_partitions: m
            .assigned_partitions
            .iter()
            .map(|(topic, ps)| CurrentTopicPartitions {
                topic_id: *topic,
                partitions: ps.iter().copied().collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    Record { key: member_key(group_id, &m.member_id, CURRENT_ASSIGNMENT_KEY_VERSION), value: value_v0(&v) }
}

/// ShareGroupStatePartitionMetadata: which partitions' share state exists.
pub(super) fn state_partition_metadata_record(group_id: &str, metadata: &StatePartitionMetadata) -> Record {
    let topics = |topics: &BTreeMap<osprey_protocol::Uuid, StateTopic>| {
        topics
            .iter()
            .map(|(id, t)| TopicPartitionsInfo {
                topic_id: *id,
                topic_name: t.name.clone(),
                partitions: t.partitions.iter().copied().collect(),
                ..Default::default()
            })
            .collect()
    };
    let v = ShareGroupStatePartitionMetadataValue {
        initializing_topics: topics(&metadata.initializing),
        initialized_topics: topics(&metadata.initialized),
        deleting_topics: metadata
            .deleting
            .iter()
            .map(|(id, name)| TopicInfo { topic_id: *id, topic_name: name.clone(), ..Default::default() })
            .collect(),
        ..Default::default()
    };
    Record { key: group_key(group_id, STATE_PARTITION_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// The three tombstones of a member leaving (Kafka's `shareGroupFenceMember`).
pub(super) fn member_tombstones(group_id: &str, member_id: &str) -> [Record; 3] {
    [CURRENT_ASSIGNMENT_KEY_VERSION, TARGET_MEMBER_KEY_VERSION, MEMBER_METADATA_KEY_VERSION]
        .map(|version| Record { key: member_key(group_id, member_id, version), value: None })
}

/// The tombstones of a whole group, in Kafka's `ShareGroup.createGroupTombstoneRecords`
/// order.
pub(super) fn group_tombstones(group: &ShareGroup) -> Vec<Record> {
    let id = &group.group_id;
    let tombstone = |key| Record { key, value: None };
    let mut records: Vec<Record> = Vec::new();
    for version in [CURRENT_ASSIGNMENT_KEY_VERSION, TARGET_MEMBER_KEY_VERSION] {
        records.extend(group.members.keys().map(|m| tombstone(member_key(id, m, version))));
    }
    records.push(tombstone(group_key(id, TARGET_METADATA_KEY_VERSION)));
    records.extend(group.members.keys().map(|m| tombstone(member_key(id, m, MEMBER_METADATA_KEY_VERSION))));
    records.push(tombstone(group_key(id, STATE_PARTITION_METADATA_KEY_VERSION)));
    records.push(tombstone(group_key(id, GROUP_METADATA_KEY_VERSION)));
    records
}

fn group<'a>(groups: &'a mut BTreeMap<String, ShareGroup>, group_id: &str) -> &'a mut ShareGroup {
    groups.entry(group_id.to_string()).or_insert_with(|| ShareGroup::new(group_id))
}

fn member<'a>(groups: &'a mut BTreeMap<String, ShareGroup>, group_id: &str, member_id: &str) -> &'a mut ShareMember {
    group(groups, group_id).members.entry(member_id.to_string()).or_insert_with(|| ShareMember::new(member_id))
}

fn state_topics(topics: Vec<TopicPartitionsInfo>) -> BTreeMap<osprey_protocol::Uuid, StateTopic> {
    topics
        .into_iter()
        .map(|t| (t.topic_id, StateTopic { name: t.topic_name, partitions: t.partitions.into_iter().collect() }))
        .collect()
}

/// Replays one share group record (its key without the version prefix) into `groups`,
/// as Kafka's `GroupMetadataManager.replay`: later records win, tombstones delete.
pub(crate) fn replay(
    groups: &mut BTreeMap<String, ShareGroup>,
    version: i16,
    key: Bytes,
    value: Option<Bytes>,
) -> Result<(), LoadError> {
    match version {
        GROUP_METADATA_KEY_VERSION => {
            let k: ShareGroupMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ShareGroupMetadataValue = decode_value(v)?;
                    let g = group(groups, &k.group_id);
                    g.group_epoch = v.epoch;
                    g.metadata_hash = v.metadata_hash;
                }
                None => {
                    groups.remove(&k.group_id);
                }
            }
        }
        MEMBER_METADATA_KEY_VERSION => {
            let k: ShareGroupMemberMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ShareGroupMemberMetadataValue = decode_value(v)?;
                    let m = member(groups, &k.group_id, &k.member_id);
                    m.rack_id = v.rack_id;
                    m.client_id = v.client_id;
                    m.client_host = v.client_host;
                    m.subscribed_topic_names = v.subscribed_topic_names.into_iter().collect();
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.members.remove(&k.member_id);
                    }
                }
            }
        }
        TARGET_METADATA_KEY_VERSION => {
            let k: ShareGroupTargetAssignmentMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ShareGroupTargetAssignmentMetadataValue = decode_value(v)?;
                    group(groups, &k.group_id).assignment_epoch = v.assignment_epoch;
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.assignment_epoch = 0;
                    }
                }
            }
        }
        TARGET_MEMBER_KEY_VERSION => {
            let k: ShareGroupTargetAssignmentMemberKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ShareGroupTargetAssignmentMemberValue = decode_value(v)?;
                    let target = assignment_from(v.topic_partitions.into_iter().map(|t| (t.topic_id, t.partitions)));
                    group(groups, &k.group_id).target.insert(k.member_id, target);
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.target.remove(&k.member_id);
                    }
                }
            }
        }
        CURRENT_ASSIGNMENT_KEY_VERSION => {
            let k: ShareGroupCurrentMemberAssignmentKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ShareGroupCurrentMemberAssignmentValue = decode_value(v)?;
                    let m = member(groups, &k.group_id, &k.member_id);
                    m.member_epoch = v.member_epoch;
                    m.previous_member_epoch = v.previous_member_epoch;
                    m.assigned_partitions =
                        assignment_from(v.assigned_partitions.into_iter().map(|t| (t.topic_id, t.partitions)));
                }
                None => {
                    // Kafka resets the member's assignment; the member goes with its
                    // metadata tombstone, which follows.
                    if let Some(m) = groups.get_mut(&k.group_id).and_then(|g| g.members.get_mut(&k.member_id)) {
                        m.member_epoch = 0;
                        m.previous_member_epoch = 0;
                        m.assigned_partitions.clear();
                    }
                }
            }
        }
        STATE_PARTITION_METADATA_KEY_VERSION => {
            let k: ShareGroupStatePartitionMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ShareGroupStatePartitionMetadataValue = decode_value(v)?;
                    group(groups, &k.group_id).state_metadata = StatePartitionMetadata {
                        initializing: state_topics(v.initializing_topics),
                        initialized: state_topics(v.initialized_topics),
                        deleting: v.deleting_topics.into_iter().map(|t| (t.topic_id, t.topic_name)).collect(),
                    };
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.state_metadata = StatePartitionMetadata::default();
                    }
                }
            }
        }
        // Kafka 4.0's ShareGroupPartitionMetadata: the hash in ShareGroupMetadata replaced it.
        PARTITION_METADATA_KEY_VERSION => {}
        other => return Err(LoadError(format!("key version {other} is not a share group record"))),
    }
    Ok(())
}
