//! The streams group records of `__consumer_offsets`, in Kafka 4.4's exact formats
//! (`StreamsCoordinatorRecordHelpers`), and their replay on load.
//!
//! Key versions: StreamsGroupMetadata 17, StreamsGroupMemberMetadata 19,
//! StreamsGroupTargetAssignmentMetadata 20, StreamsGroupTargetAssignmentMember 21,
//! StreamsGroupCurrentMemberAssignment 22, StreamsGroupTopology 23. Values at version 0; a
//! `None` value is a tombstone. Key 18 (StreamsGroupPartitionMetadata, written by early
//! Kafka 4.x only) is skipped on load.

use super::{AssignedTasks, Endpoint, MemberState, StreamsGroup, StreamsMember, StreamsTopology, Tasks, TasksTuple};
use super::{TasksWithEpochs, LEAVE_GROUP_MEMBER_EPOCH};
use crate::group::records::{decode_key, decode_value, value_v0, versioned, LoadError, Record};
use bytes::Bytes;
use osprey_protocol::messages::streams_group_current_member_assignment_value::TaskIds as CurrentTaskIds;
use osprey_protocol::messages::streams_group_member_metadata_value::{
    Endpoint as RecordEndpoint, KeyValue as RecordKeyValue,
};
use osprey_protocol::messages::streams_group_metadata_value::LastAssignmentConfig;
use osprey_protocol::messages::streams_group_target_assignment_member_value::TaskIds as TargetTaskIds;
use osprey_protocol::messages::{
    StreamsGroupCurrentMemberAssignmentKey, StreamsGroupCurrentMemberAssignmentValue, StreamsGroupMemberMetadataKey,
    StreamsGroupMemberMetadataValue, StreamsGroupMetadataKey, StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey, StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey, StreamsGroupTargetAssignmentMetadataValue, StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
};
use std::collections::BTreeMap;

const GROUP_METADATA_KEY_VERSION: i16 = 17;
/// StreamsGroupPartitionMetadata, no longer written: the metadata hash replaced it.
const PARTITION_METADATA_KEY_VERSION: i16 = 18;
const MEMBER_METADATA_KEY_VERSION: i16 = 19;
const TARGET_METADATA_KEY_VERSION: i16 = 20;
const TARGET_MEMBER_KEY_VERSION: i16 = 21;
const CURRENT_ASSIGNMENT_KEY_VERSION: i16 = 22;
const TOPOLOGY_KEY_VERSION: i16 = 23;

/// Whether a key version belongs to a streams group record.
pub(crate) fn is_streams_group_key(version: i16) -> bool {
    (GROUP_METADATA_KEY_VERSION..=TOPOLOGY_KEY_VERSION).contains(&version)
}

fn group_key(group_id: &str, version: i16) -> Bytes {
    let group_id = group_id.to_string();
    match version {
        GROUP_METADATA_KEY_VERSION => versioned(&StreamsGroupMetadataKey { group_id }, version),
        TARGET_METADATA_KEY_VERSION => versioned(&StreamsGroupTargetAssignmentMetadataKey { group_id }, version),
        _ => versioned(&StreamsGroupTopologyKey { group_id }, version),
    }
}

fn member_key(group_id: &str, member_id: &str, version: i16) -> Bytes {
    let (group_id, member_id) = (group_id.to_string(), member_id.to_string());
    match version {
        MEMBER_METADATA_KEY_VERSION => versioned(&StreamsGroupMemberMetadataKey { group_id, member_id }, version),
        TARGET_MEMBER_KEY_VERSION => versioned(&StreamsGroupTargetAssignmentMemberKey { group_id, member_id }, version),
        _ => versioned(&StreamsGroupCurrentMemberAssignmentKey { group_id, member_id }, version),
    }
}

fn tombstone(key: Bytes) -> Record {
    Record { key, value: None }
}

/// StreamsGroupMetadata: the group epoch, the metadata hash of its topics, the topology
/// epoch validated, the assignment configs (sorted, as Kafka's `TreeMap`).
pub(super) fn group_epoch_record(group: &StreamsGroup) -> Record {
    let v = StreamsGroupMetadataValue {
        epoch: group.group_epoch,
        metadata_hash: group.metadata_hash,
        validated_topology_epoch: group.validated_topology_epoch,
        last_assignment_configs: Some(
            group
                .last_assignment_configs
                .iter()
                .map(|(key, value)| LastAssignmentConfig {
                    key: key.clone(),
                    value: value.clone(),
                    ..Default::default()
                })
                .collect(),
        ),
        stored_description_topology_epoch: group.stored_description_topology_epoch,
        failed_description_topology_epoch: group.failed_description_topology_epoch,
        ..Default::default()
    };
    Record { key: group_key(&group.group_id, GROUP_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// StreamsGroupMemberMetadata: the member's client, process and endpoint (client tags
/// sorted by key).
pub(super) fn member_metadata_record(group_id: &str, m: &StreamsMember) -> Record {
    let v = StreamsGroupMemberMetadataValue {
        instance_id: m.instance_id.clone(),
        rack_id: m.rack_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        topology_epoch: m.topology_epoch,
        process_id: m.process_id.clone(),
        user_endpoint: m.user_endpoint.as_ref().map(|e| RecordEndpoint {
            host: e.host.clone(),
            port: e.port,
            ..Default::default()
        }),
        client_tags: m
            .client_tags
            .iter()
            .map(|(key, value)| RecordKeyValue { key: key.clone(), value: value.clone(), ..Default::default() })
            .collect(),
        ..Default::default()
    };
    Record { key: member_key(group_id, &m.member_id, MEMBER_METADATA_KEY_VERSION), value: value_v0(&v) }
}

/// StreamsGroupTargetAssignmentMetadata: the target's epoch and when it was computed.
pub(super) fn target_epoch_record(group_id: &str, epoch: i32, timestamp_ms: i64) -> Record {
    let v = StreamsGroupTargetAssignmentMetadataValue {
        assignment_epoch: epoch,
        assignment_timestamp: timestamp_ms,
        ..Default::default()
    };
    Record { key: group_key(group_id, TARGET_METADATA_KEY_VERSION), value: value_v0(&v) }
}

fn target_task_ids(tasks: &Tasks) -> Vec<TargetTaskIds> {
    tasks
        .iter()
        .map(|(subtopology, ps)| TargetTaskIds {
            subtopology_id: subtopology.clone(),
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect()
}

/// StreamsGroupTargetAssignmentMember: one member's target.
pub(super) fn target_member_record(group_id: &str, member_id: &str, target: &TasksTuple) -> Record {
    let v = StreamsGroupTargetAssignmentMemberValue {
        active_tasks: target_task_ids(&target.active),
        standby_tasks: target_task_ids(&target.standby),
        warmup_tasks: target_task_ids(&target.warmup),
        ..Default::default()
    };
    Record { key: member_key(group_id, member_id, TARGET_MEMBER_KEY_VERSION), value: value_v0(&v) }
}

fn current_task_ids(tasks: &Tasks) -> Vec<CurrentTaskIds> {
    tasks
        .iter()
        .map(|(subtopology, ps)| CurrentTaskIds {
            subtopology_id: subtopology.clone(),
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect()
}

/// Active tasks with the epochs they were assigned at, aligned with the sorted
/// partitions (Kafka's `toTaskIdsWithEpochs`).
fn current_task_ids_with_epochs(tasks: &TasksWithEpochs) -> Vec<CurrentTaskIds> {
    tasks
        .iter()
        .map(|(subtopology, ps)| CurrentTaskIds {
            subtopology_id: subtopology.clone(),
            partitions: ps.keys().copied().collect(),
            assignment_epochs: Some(ps.values().copied().collect()),
            ..Default::default()
        })
        .collect()
}

/// StreamsGroupCurrentMemberAssignment: the member's epochs, state and tasks.
pub(super) fn current_assignment_record(group_id: &str, m: &StreamsMember) -> Record {
    let v = StreamsGroupCurrentMemberAssignmentValue {
        member_epoch: m.member_epoch,
        previous_member_epoch: m.previous_member_epoch,
        state: m.state.value(),
        active_tasks: current_task_ids_with_epochs(&m.assigned.active),
        standby_tasks: current_task_ids(&m.assigned.standby),
        warmup_tasks: current_task_ids(&m.assigned.warmup),
        active_tasks_pending_revocation: current_task_ids_with_epochs(&m.pending_revocation.active),
        standby_tasks_pending_revocation: current_task_ids(&m.pending_revocation.standby),
        warmup_tasks_pending_revocation: current_task_ids(&m.pending_revocation.warmup),
        ..Default::default()
    };
    Record { key: member_key(group_id, &m.member_id, CURRENT_ASSIGNMENT_KEY_VERSION), value: value_v0(&v) }
}

/// StreamsGroupTopology: the topology as the first member sent it.
pub(super) fn topology_record(group_id: &str, topology: &StreamsTopology) -> Record {
    let v = StreamsGroupTopologyValue {
        epoch: topology.epoch,
        subtopologies: topology.subtopologies.clone(),
        ..Default::default()
    };
    Record { key: group_key(group_id, TOPOLOGY_KEY_VERSION), value: value_v0(&v) }
}

impl StreamsGroup {
    /// The records that describe the group as it is, in Kafka's order for a group
    /// written from scratch: its metadata, its topology, each member's metadata, each
    /// target, the target's epoch, each member's current assignment. Loading them gives
    /// back [`StreamsGroup::durable`] (the golden tests compare them with Kafka's bytes).
    pub fn records(&self) -> Vec<Record> {
        let id = &self.group_id;
        let mut records = vec![group_epoch_record(self)];
        records.extend(self.topology.iter().map(|t| topology_record(id, t)));
        records.extend(self.members.values().map(|m| member_metadata_record(id, m)));
        records.extend(self.target.iter().map(|(m, t)| target_member_record(id, m, t)));
        records.push(target_epoch_record(id, self.assignment_epoch, self.assignment_timestamp_ms));
        records.extend(self.members.values().map(|m| current_assignment_record(id, m)));
        records
    }
}

/// The three tombstones of a member leaving, in Kafka's `removeStreamsMember` order.
pub(super) fn member_tombstones(group_id: &str, member_id: &str) -> [Record; 3] {
    [CURRENT_ASSIGNMENT_KEY_VERSION, TARGET_MEMBER_KEY_VERSION, MEMBER_METADATA_KEY_VERSION]
        .map(|version| tombstone(member_key(group_id, member_id, version)))
}

/// The tombstones of a whole group, in Kafka's `StreamsGroup.createGroupTombstoneRecords`
/// order.
pub(super) fn group_tombstones(group: &StreamsGroup) -> Vec<Record> {
    let id = &group.group_id;
    let mut records: Vec<Record> = Vec::new();
    for version in [CURRENT_ASSIGNMENT_KEY_VERSION, TARGET_MEMBER_KEY_VERSION] {
        records.extend(group.members.keys().map(|m| tombstone(member_key(id, m, version))));
    }
    records.push(tombstone(group_key(id, TARGET_METADATA_KEY_VERSION)));
    records.extend(group.members.keys().map(|m| tombstone(member_key(id, m, MEMBER_METADATA_KEY_VERSION))));
    records.push(tombstone(group_key(id, GROUP_METADATA_KEY_VERSION)));
    records.push(tombstone(group_key(id, TOPOLOGY_KEY_VERSION)));
    records
}

fn group<'a>(groups: &'a mut BTreeMap<String, StreamsGroup>, group_id: &str) -> &'a mut StreamsGroup {
    groups.entry(group_id.to_string()).or_insert_with(|| StreamsGroup::new(group_id))
}

fn member<'a>(
    groups: &'a mut BTreeMap<String, StreamsGroup>,
    group_id: &str,
    member_id: &str,
) -> &'a mut StreamsMember {
    group(groups, group_id).members.entry(member_id.to_string()).or_insert_with(|| StreamsMember::new(member_id))
}

fn tasks_of(ids: impl IntoIterator<Item = (String, Vec<i32>)>) -> Tasks {
    let mut tasks = Tasks::new();
    for (subtopology, partitions) in ids {
        if !partitions.is_empty() {
            tasks.entry(subtopology).or_default().extend(partitions);
        }
    }
    tasks
}

/// Kafka 4.4's `parseActiveTasksWithEpochs`: the epochs the record carries, else (a
/// record of an older Kafka, or epochs not matching the partitions) the member's epoch.
fn active_tasks_of(ids: Vec<CurrentTaskIds>, default_epoch: i32) -> TasksWithEpochs {
    let mut tasks = TasksWithEpochs::new();
    for t in ids {
        let epochs = t.assignment_epochs.filter(|e| e.len() == t.partitions.len());
        let entry = tasks.entry(t.subtopology_id).or_default();
        match epochs {
            Some(epochs) => entry.extend(t.partitions.into_iter().zip(epochs)),
            None => entry.extend(t.partitions.into_iter().map(|p| (p, default_epoch))),
        }
    }
    tasks.retain(|_, ps| !ps.is_empty());
    tasks
}

fn assigned_of(
    active: Vec<CurrentTaskIds>,
    standby: Vec<CurrentTaskIds>,
    warmup: Vec<CurrentTaskIds>,
    epoch: i32,
) -> AssignedTasks {
    let plain = |ids: Vec<CurrentTaskIds>| tasks_of(ids.into_iter().map(|t| (t.subtopology_id, t.partitions)));
    AssignedTasks { active: active_tasks_of(active, epoch), standby: plain(standby), warmup: plain(warmup) }
}

fn target_of(v: StreamsGroupTargetAssignmentMemberValue) -> TasksTuple {
    let plain = |ids: Vec<TargetTaskIds>| tasks_of(ids.into_iter().map(|t| (t.subtopology_id, t.partitions)));
    TasksTuple { active: plain(v.active_tasks), standby: plain(v.standby_tasks), warmup: plain(v.warmup_tasks) }
}

/// Replays one streams group record (its key without the version prefix) into `groups`,
/// as Kafka's `GroupMetadataManager.replay`: later records win, tombstones delete.
pub(crate) fn replay(
    groups: &mut BTreeMap<String, StreamsGroup>,
    version: i16,
    key: Bytes,
    value: Option<Bytes>,
) -> Result<(), LoadError> {
    match version {
        GROUP_METADATA_KEY_VERSION => {
            let k: StreamsGroupMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: StreamsGroupMetadataValue = decode_value(v)?;
                    let g = group(groups, &k.group_id);
                    g.group_epoch = v.epoch;
                    g.metadata_hash = v.metadata_hash;
                    g.validated_topology_epoch = v.validated_topology_epoch;
                    g.last_assignment_configs =
                        v.last_assignment_configs.unwrap_or_default().into_iter().map(|c| (c.key, c.value)).collect();
                    g.stored_description_topology_epoch = v.stored_description_topology_epoch;
                    g.failed_description_topology_epoch = v.failed_description_topology_epoch;
                }
                None => {
                    groups.remove(&k.group_id);
                }
            }
        }
        MEMBER_METADATA_KEY_VERSION => {
            let k: StreamsGroupMemberMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: StreamsGroupMemberMetadataValue = decode_value(v)?;
                    let m = member(groups, &k.group_id, &k.member_id);
                    m.instance_id = v.instance_id;
                    m.rack_id = v.rack_id;
                    m.client_id = v.client_id;
                    m.client_host = v.client_host;
                    m.rebalance_timeout_ms = v.rebalance_timeout_ms;
                    m.topology_epoch = v.topology_epoch;
                    m.process_id = v.process_id;
                    m.user_endpoint = v.user_endpoint.map(|e| Endpoint { host: e.host, port: e.port });
                    m.client_tags = v.client_tags.into_iter().map(|t| (t.key, t.value)).collect();
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.members.remove(&k.member_id);
                    }
                }
            }
        }
        TARGET_METADATA_KEY_VERSION => {
            let k: StreamsGroupTargetAssignmentMetadataKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: StreamsGroupTargetAssignmentMetadataValue = decode_value(v)?;
                    let g = group(groups, &k.group_id);
                    g.assignment_epoch = v.assignment_epoch;
                    g.assignment_timestamp_ms = v.assignment_timestamp;
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.assignment_epoch = -1;
                        g.assignment_timestamp_ms = 0;
                    }
                }
            }
        }
        TARGET_MEMBER_KEY_VERSION => {
            let k: StreamsGroupTargetAssignmentMemberKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: StreamsGroupTargetAssignmentMemberValue = decode_value(v)?;
                    group(groups, &k.group_id).target.insert(k.member_id, target_of(v));
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.target.remove(&k.member_id);
                    }
                }
            }
        }
        CURRENT_ASSIGNMENT_KEY_VERSION => {
            let k: StreamsGroupCurrentMemberAssignmentKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: StreamsGroupCurrentMemberAssignmentValue = decode_value(v)?;
                    let m = member(groups, &k.group_id, &k.member_id);
                    m.member_epoch = v.member_epoch;
                    m.previous_member_epoch = v.previous_member_epoch;
                    m.state = MemberState::from_value(v.state);
                    m.assigned = assigned_of(v.active_tasks, v.standby_tasks, v.warmup_tasks, v.member_epoch);
                    m.pending_revocation = assigned_of(
                        v.active_tasks_pending_revocation,
                        v.standby_tasks_pending_revocation,
                        v.warmup_tasks_pending_revocation,
                        v.member_epoch,
                    );
                }
                None => {
                    // Kafka marks the member as leaving; it goes with its metadata
                    // tombstone, which follows.
                    if let Some(m) = groups.get_mut(&k.group_id).and_then(|g| g.members.get_mut(&k.member_id)) {
                        m.member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
                        m.previous_member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
                        m.state = MemberState::Stable;
                        m.assigned = AssignedTasks::default();
                        m.pending_revocation = AssignedTasks::default();
                    }
                }
            }
        }
        TOPOLOGY_KEY_VERSION => {
            let k: StreamsGroupTopologyKey = decode_key(key, version)?;
            match value {
                Some(v) => {
                    let v: StreamsGroupTopologyValue = decode_value(v)?;
                    group(groups, &k.group_id).topology =
                        Some(StreamsTopology { epoch: v.epoch, subtopologies: v.subtopologies });
                }
                None => {
                    if let Some(g) = groups.get_mut(&k.group_id) {
                        g.topology = None;
                    }
                }
            }
        }
        PARTITION_METADATA_KEY_VERSION => {}
        other => return Err(LoadError(format!("key version {other} is not a streams group record"))),
    }
    Ok(())
}
