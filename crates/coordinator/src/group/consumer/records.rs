//! The KIP-848 records of `__consumer_offsets`, in Kafka's exact formats, and their
//! replay on load.
//!
//! Key versions (the key's int16 prefix says which record it is): ConsumerGroupMetadata 3,
//! ConsumerGroupPartitionMetadata 4, ConsumerGroupMemberMetadata 5,
//! ConsumerGroupTargetAssignmentMetadata 6, ConsumerGroupTargetAssignmentMember 7,
//! ConsumerGroupCurrentMemberAssignment 8, ConsumerGroupRegularExpression 16. Values are
//! written at version 0; a `None` value is a tombstone.

use super::{Assignment, ConsumerGroup, ConsumerMember, MemberState, TopicInfo};
use crate::group::records::{decode_key, decode_value, value_v0, versioned, LoadError, Record};
use bytes::Bytes;
use osprey_protocol::messages::consumer_group_current_member_assignment_value::TopicPartitions as CurrentTopicPartitions;
use osprey_protocol::messages::consumer_group_partition_metadata_value::{PartitionMetadata, TopicMetadata};
use osprey_protocol::messages::consumer_group_target_assignment_member_value::TopicPartition as TargetTopicPartition;
use osprey_protocol::messages::{
    ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue, ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue, ConsumerGroupMetadataKey, ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue, ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue,
};
use std::collections::BTreeMap;

pub(crate) const GROUP_METADATA_KEY_VERSION: i16 = 3;
pub(crate) const PARTITION_METADATA_KEY_VERSION: i16 = 4;
pub(crate) const MEMBER_METADATA_KEY_VERSION: i16 = 5;
pub(crate) const TARGET_METADATA_KEY_VERSION: i16 = 6;
pub(crate) const TARGET_MEMBER_KEY_VERSION: i16 = 7;
pub(crate) const CURRENT_ASSIGNMENT_KEY_VERSION: i16 = 8;
pub(crate) const REGULAR_EXPRESSION_KEY_VERSION: i16 = 16;

/// Whether a key version belongs to a KIP-848 consumer group record.
pub(crate) fn is_consumer_group_key(version: i16) -> bool {
    matches!(version, 3..=8 | 16)
}

fn group_key(group_id: &str, version: i16) -> Bytes {
    let group_id = group_id.to_string();
    match version {
        GROUP_METADATA_KEY_VERSION => versioned(&ConsumerGroupMetadataKey { group_id }, version),
        PARTITION_METADATA_KEY_VERSION => versioned(&ConsumerGroupPartitionMetadataKey { group_id }, version),
        _ => versioned(&ConsumerGroupTargetAssignmentMetadataKey { group_id }, version),
    }
}

fn member_key(group_id: &str, member_id: &str, version: i16) -> Bytes {
    let (group_id, member_id) = (group_id.to_string(), member_id.to_string());
    match version {
        MEMBER_METADATA_KEY_VERSION => versioned(&ConsumerGroupMemberMetadataKey { group_id, member_id }, version),
        TARGET_MEMBER_KEY_VERSION => {
            versioned(&ConsumerGroupTargetAssignmentMemberKey { group_id, member_id }, version)
        }
        _ => versioned(&ConsumerGroupCurrentMemberAssignmentKey { group_id, member_id }, version),
    }
}

/// ConsumerGroupMetadata: the group epoch.
pub(super) fn group_epoch_record(group_id: &str, epoch: i32) -> Record {
    let v = ConsumerGroupMetadataValue { epoch, ..Default::default() };
    Record { key: group_key(group_id, GROUP_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// ConsumerGroupPartitionMetadata: the subscribed topics' ids and partition counts.
pub(super) fn subscription_metadata_record(group_id: &str, metadata: &BTreeMap<String, TopicInfo>) -> Record {
    let topics = metadata
        .iter()
        .map(|(name, info)| TopicMetadata {
            topic_id: info.topic_id,
            topic_name: name.clone(),
            num_partitions: info.num_partitions,
            // Osprey has no racks yet: every partition has an empty rack list.
            partition_metadata: (0..info.num_partitions)
                .map(|partition| PartitionMetadata { partition, ..Default::default() })
                .collect(),
            ..Default::default()
        })
        .collect();
    let v = ConsumerGroupPartitionMetadataValue { topics, ..Default::default() };
    Record { key: group_key(group_id, PARTITION_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// ConsumerGroupMemberMetadata: the member's subscription and client.
pub(super) fn member_metadata_record(group_id: &str, m: &ConsumerMember) -> Record {
    let v = ConsumerGroupMemberMetadataValue {
        instance_id: m.instance_id.clone(),
        rack_id: m.rack_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
        subscribed_topic_regex: m.subscribed_topic_regex.clone(),
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        server_assignor: m.server_assignor.clone(),
        ..Default::default()
    };
    Record { key: member_key(group_id, &m.member_id, MEMBER_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// ConsumerGroupTargetAssignmentMetadata: the epoch of the target assignment.
pub(super) fn target_epoch_record(group_id: &str, epoch: i32) -> Record {
    let v = ConsumerGroupTargetAssignmentMetadataValue { assignment_epoch: epoch, ..Default::default() };
    Record { key: group_key(group_id, TARGET_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// ConsumerGroupTargetAssignmentMember: one member's target.
pub(super) fn target_member_record(group_id: &str, member_id: &str, target: &Assignment) -> Record {
    let topic_partitions = target
        .iter()
        .map(|(topic, ps)| TargetTopicPartition {
            topic_id: *topic,
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect();
    let v = ConsumerGroupTargetAssignmentMemberValue { topic_partitions, ..Default::default() };
    Record { key: member_key(group_id, member_id, TARGET_MEMBER_KEY_VERSION), value: value_v0(&v) }
}

fn current_partitions(a: &Assignment) -> Vec<CurrentTopicPartitions> {
    a.iter()
        .map(|(topic, ps)| CurrentTopicPartitions {
            topic_id: *topic,
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect()
}

/// ConsumerGroupCurrentMemberAssignment: the member's epochs, state and partitions.
pub(super) fn current_assignment_record(group_id: &str, m: &ConsumerMember) -> Record {
    let v = ConsumerGroupCurrentMemberAssignmentValue {
        member_epoch: m.member_epoch,
        previous_member_epoch: m.previous_member_epoch,
        state: m.state.value(),
        assigned_partitions: current_partitions(&m.assigned_partitions),
        partitions_pending_revocation: current_partitions(&m.partitions_pending_revocation),
        ..Default::default()
    };
    Record { key: member_key(group_id, &m.member_id, CURRENT_ASSIGNMENT_KEY_VERSION), value: value_v0(&v) }
}

/// The three tombstones of a member leaving (Kafka's `removeMember`).
pub(super) fn member_tombstones(group_id: &str, member_id: &str) -> [Record; 3] {
    [CURRENT_ASSIGNMENT_KEY_VERSION, TARGET_MEMBER_KEY_VERSION, MEMBER_METADATA_KEY_VERSION]
        .map(|version| Record { key: member_key(group_id, member_id, version), value: None })
}

/// The tombstones of a whole group (Kafka's `ConsumerGroup.createGroupTombstoneRecords`):
/// every member's, then target metadata, partition metadata and group metadata.
pub(super) fn group_tombstones(group: &ConsumerGroup) -> Vec<Record> {
    let mut records: Vec<Record> = group.members.keys().flat_map(|id| member_tombstones(&group.group_id, id)).collect();
    for version in [TARGET_METADATA_KEY_VERSION, PARTITION_METADATA_KEY_VERSION, GROUP_METADATA_KEY_VERSION] {
        records.push(Record { key: group_key(&group.group_id, version), value: None });
    }
    records
}

/// Replays one KIP-848 record (its key without the version prefix) into `groups`, as
/// Kafka's `GroupMetadataManager.replay`: later records win, tombstones delete.
pub(crate) fn replay(
    groups: &mut BTreeMap<String, ConsumerGroup>,
    version: i16,
    key: Bytes,
    value: Option<Bytes>,
) -> Result<(), LoadError> {
    match version {
        GROUP_METADATA_KEY_VERSION => {
            let k: ConsumerGroupMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ConsumerGroupMetadataValue = decode_value(v)?;
                    group(groups, &k.group_id).group_epoch = v.epoch;
                }
                None => {
                    groups.remove(&k.group_id);
                }
            }
        }
        PARTITION_METADATA_KEY_VERSION => {
            let k: ConsumerGroupPartitionMetadataKey = decode_key(key, version)?;
            let metadata = match value {
                Some(v) => {
                    let v: ConsumerGroupPartitionMetadataValue = decode_value(v)?;
                    v.topics
                        .into_iter()
                        .map(|t| (t.topic_name, TopicInfo { topic_id: t.topic_id, num_partitions: t.num_partitions }))
                        .collect()
                }
                None => BTreeMap::new(),
            };
            if let Some(g) = existing(groups, &k.group_id, value_present(&metadata)) {
                g.subscription_metadata = metadata;
            }
        }
        MEMBER_METADATA_KEY_VERSION => {
            let k: ConsumerGroupMemberMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ConsumerGroupMemberMetadataValue = decode_value(v)?;
                    let g = group(groups, &k.group_id);
                    let m = g.members.entry(k.member_id.clone()).or_insert_with(|| ConsumerMember::new(&k.member_id));
                    m.instance_id = v.instance_id;
                    m.rack_id = v.rack_id;
                    m.client_id = v.client_id;
                    m.client_host = v.client_host;
                    m.subscribed_topic_names = v.subscribed_topic_names.into_iter().collect();
                    m.subscribed_topic_regex = v.subscribed_topic_regex;
                    m.rebalance_timeout_ms = v.rebalance_timeout_ms;
                    m.server_assignor = v.server_assignor;
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.members.remove(&k.member_id);
                    }
                }
            }
        }
        TARGET_METADATA_KEY_VERSION => {
            let k: ConsumerGroupTargetAssignmentMetadataKey = decode_key(key, version)?;
            if let Some(v) = value {
                let v: ConsumerGroupTargetAssignmentMetadataValue = decode_value(v)?;
                group(groups, &k.group_id).assignment_epoch = v.assignment_epoch;
            } else if let Some(g) = groups.get_mut(&k.group_id) {
                g.assignment_epoch = 0;
            }
        }
        TARGET_MEMBER_KEY_VERSION => {
            let k: ConsumerGroupTargetAssignmentMemberKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: ConsumerGroupTargetAssignmentMemberValue = decode_value(v)?;
                    let target = v
                        .topic_partitions
                        .into_iter()
                        .map(|t| (t.topic_id, t.partitions.into_iter().collect()))
                        .collect();
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
            let k: ConsumerGroupCurrentMemberAssignmentKey = decode_key(key, version)?;
            if let Some(v) = value {
                let v: ConsumerGroupCurrentMemberAssignmentValue = decode_value(v)?;
                let g = group(groups, &k.group_id);
                let m = g.members.entry(k.member_id.clone()).or_insert_with(|| ConsumerMember::new(&k.member_id));
                m.member_epoch = v.member_epoch;
                m.previous_member_epoch = v.previous_member_epoch;
                m.state = MemberState::from_value(v.state)
                    .ok_or_else(|| LoadError(format!("unknown member state {}", v.state)))?;
                let topics =
                    |topics: Vec<CurrentTopicPartitions>| topics.into_iter().map(|t| (t.topic_id, t.partitions));
                m.assigned_partitions = assignment_from(topics(v.assigned_partitions));
                m.partitions_pending_revocation = assignment_from(topics(v.partitions_pending_revocation));
            } else if let Some(g) = groups.get_mut(&k.group_id) {
                // Kafka resets the member's assignment; the member itself goes with its
                // metadata tombstone, which follows.
                if let Some(m) = g.members.get_mut(&k.member_id) {
                    m.member_epoch = 0;
                    m.previous_member_epoch = 0;
                    m.state = MemberState::Stable;
                    m.assigned_partitions.clear();
                    m.partitions_pending_revocation.clear();
                }
            }
        }
        REGULAR_EXPRESSION_KEY_VERSION => {
            // Regular expression subscriptions are not supported yet: their resolution
            // is recomputed, so the record can be left alone.
            let _: ConsumerGroupRegularExpressionKey = decode_key(key, version)?;
        }
        other => return Err(LoadError(format!("key version {other} is not a consumer group record"))),
    }
    Ok(())
}

fn value_present(metadata: &BTreeMap<String, TopicInfo>) -> bool {
    !metadata.is_empty()
}

fn group<'a>(groups: &'a mut BTreeMap<String, ConsumerGroup>, group_id: &str) -> &'a mut ConsumerGroup {
    groups.entry(group_id.to_string()).or_insert_with(|| ConsumerGroup::new(group_id))
}

fn existing<'a>(
    groups: &'a mut BTreeMap<String, ConsumerGroup>,
    group_id: &str,
    create: bool,
) -> Option<&'a mut ConsumerGroup> {
    if create {
        Some(group(groups, group_id))
    } else {
        groups.get_mut(group_id)
    }
}

/// An assignment read from a record's topics and partitions (a topic may appear twice;
/// one without partitions is left out).
pub(crate) fn assignment_from(topics: impl IntoIterator<Item = (osprey_protocol::Uuid, Vec<i32>)>) -> Assignment {
    let mut assignment = Assignment::new();
    for (topic, partitions) in topics {
        if !partitions.is_empty() {
            assignment.entry(topic).or_default().extend(partitions);
        }
    }
    assignment
}
