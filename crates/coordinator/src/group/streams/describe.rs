//! StreamsGroupDescribe v0-1 (ListGroups lists streams groups in `admin.rs`).

use super::topology::{ConfiguredTopology, InternalTopic};
use super::{StreamsGroup, StreamsGroupState, StreamsTopology, Tasks, STICKY_ASSIGNOR_NAME};
use crate::group::GroupCoordinator;
use osprey_protocol::messages::streams_group_describe_response::{
    Assignment, DescribedGroup, Endpoint, KeyValue, Member, Subtopology, TaskIds, TaskOffset, TopicInfo, Topology,
};
use osprey_protocol::messages::streams_group_topology_value::TopicInfo as RecordTopicInfo;
use osprey_protocol::messages::StreamsGroupDescribeResponse;
use osprey_protocol::ErrorCode;
use std::collections::BTreeMap;

/// Kafka 4.4's topology description status of a group described without a description
/// plugin: NOT_STORED (KIP-1331).
const TOPOLOGY_DESCRIPTION_NOT_STORED: i8 = 1;

impl GroupCoordinator {
    /// The state of streams group `group_id`, if there is one.
    pub fn streams_group_state(&self, group_id: &str) -> Option<StreamsGroupState> {
        self.streams_groups.get(group_id).map(StreamsGroup::state)
    }

    /// Streams group `group_id` as the coordinator holds it (for tests and debugging).
    pub fn streams_group(&self, group_id: &str) -> Option<&StreamsGroup> {
        self.streams_groups.get(group_id)
    }

    /// StreamsGroupDescribe v0-1; `include_topology_description` is v1's request field.
    /// `authorized_operations` is left for the server to fill.
    pub fn streams_group_describe(
        &self,
        group_ids: &[String],
        include_topology_description: bool,
    ) -> StreamsGroupDescribeResponse {
        let groups = group_ids.iter().map(|id| self.describe_streams_group(id, include_topology_description)).collect();
        StreamsGroupDescribeResponse { groups, ..Default::default() }
    }

    fn describe_streams_group(&self, group_id: &str, include_topology_description: bool) -> DescribedGroup {
        if group_id.is_empty() {
            return DescribedGroup { error_code: ErrorCode::INVALID_GROUP_ID.code(), ..Default::default() };
        }
        if let Some(error) = self.serving_error(group_id) {
            return DescribedGroup { group_id: group_id.to_string(), error_code: error.code(), ..Default::default() };
        }
        let Some(group) = self.streams_groups.get(group_id) else {
            // Kafka's `streamsGroup(groupId, committedOffset)`.
            let message = match self.not_a_streams_group(group_id, false) {
                Some(rejection) => rejection.message,
                None => format!("Streams group {group_id} not found."),
            };
            return DescribedGroup {
                group_id: group_id.to_string(),
                error_code: ErrorCode::GROUP_ID_NOT_FOUND.code(),
                error_message: Some(message),
                ..Default::default()
            };
        };
        let topology = match (&group.configured, &group.topology) {
            (Some(configured), _) if configured.is_ready() => Some(configured_topology(configured)),
            (_, Some(topology)) => Some(recorded_topology(topology)),
            _ => None,
        };
        let members = group
            .members
            .values()
            .map(|m| {
                let target = group.target.get(&m.member_id).cloned().unwrap_or_default();
                Member {
                    member_id: m.member_id.clone(),
                    member_epoch: m.member_epoch,
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topology_epoch: m.topology_epoch,
                    process_id: m.process_id.clone(),
                    user_endpoint: m.user_endpoint.as_ref().map(|e| Endpoint {
                        host: e.host.clone(),
                        port: e.port,
                        ..Default::default()
                    }),
                    client_tags: m
                        .client_tags
                        .iter()
                        .map(|(key, value)| KeyValue { key: key.clone(), value: value.clone(), ..Default::default() })
                        .collect(),
                    task_offsets: task_offsets(&m.task_offsets.offsets),
                    task_end_offsets: task_offsets(&m.task_offsets.end_offsets),
                    assignment: assignment(&m.assigned.active_tasks(), &m.assigned.standby, &m.assigned.warmup),
                    target_assignment: assignment(&target.active, &target.standby, &target.warmup),
                    is_classic: false,
                    ..Default::default()
                }
            })
            .collect();
        DescribedGroup {
            group_id: group_id.to_string(),
            group_state: group.state().name().to_string(),
            group_epoch: group.group_epoch,
            assignment_epoch: group.assignment_epoch,
            topology,
            members,
            assignor_name: Some(STICKY_ASSIGNOR_NAME.to_string()),
            topology_description_status: if include_topology_description { TOPOLOGY_DESCRIPTION_NOT_STORED } else { 0 },
            ..Default::default()
        }
    }
}

fn task_ids(tasks: &Tasks) -> Vec<TaskIds> {
    tasks
        .iter()
        .map(|(subtopology, ps)| TaskIds {
            subtopology_id: subtopology.clone(),
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect()
}

fn assignment(active: &Tasks, standby: &Tasks, warmup: &Tasks) -> Assignment {
    Assignment {
        active_tasks: task_ids(active),
        standby_tasks: task_ids(standby),
        warmup_tasks: task_ids(warmup),
        ..Default::default()
    }
}

fn task_offsets(offsets: &BTreeMap<String, BTreeMap<i32, i64>>) -> Vec<TaskOffset> {
    offsets
        .iter()
        .flat_map(|(subtopology, ps)| {
            ps.iter().map(move |(partition, offset)| TaskOffset {
                subtopology_id: subtopology.clone(),
                partition: *partition,
                offset: *offset,
                ..Default::default()
            })
        })
        .collect()
}

fn described_topic(name: &str, partitions: i32, replication_factor: i16, configs: &[(String, String)]) -> TopicInfo {
    TopicInfo {
        name: name.to_string(),
        partitions,
        replication_factor,
        topic_configs: configs
            .iter()
            .map(|(key, value)| KeyValue { key: key.clone(), value: value.clone(), ..Default::default() })
            .collect(),
        ..Default::default()
    }
}

fn internal_topic(topic: &InternalTopic) -> TopicInfo {
    let configs: Vec<(String, String)> = topic.configs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    described_topic(&topic.name, topic.num_partitions, topic.replication_factor.unwrap_or(0), &configs)
}

/// Kafka's `ConfiguredTopology.asStreamsGroupDescribeTopology`: decided partition counts.
fn configured_topology(configured: &ConfiguredTopology) -> Topology {
    let subtopologies = configured
        .subtopologies
        .iter()
        .flatten()
        .map(|(id, s)| Subtopology {
            subtopology_id: id.clone(),
            source_topics: s.source_topics.iter().cloned().collect(),
            repartition_sink_topics: s.repartition_sink_topics.iter().cloned().collect(),
            state_changelog_topics: s.state_changelog_topics.values().map(internal_topic).collect(),
            repartition_source_topics: s.repartition_source_topics.values().map(internal_topic).collect(),
            ..Default::default()
        })
        .collect();
    Topology { epoch: configured.topology_epoch, subtopologies: Some(subtopologies), ..Default::default() }
}

/// Kafka's `StreamsTopology.asStreamsGroupDescribeTopology`: the topology as recorded,
/// subtopologies by id and names sorted.
fn recorded_topology(topology: &StreamsTopology) -> Topology {
    let topic = |t: &RecordTopicInfo| {
        let configs: Vec<(String, String)> = t.topic_configs.iter().map(|c| (c.key.clone(), c.value.clone())).collect();
        described_topic(&t.name, t.partitions, t.replication_factor, &configs)
    };
    let sorted_topics = |topics: &[RecordTopicInfo]| {
        let mut described: Vec<TopicInfo> = topics.iter().map(topic).collect();
        described.sort_by(|a, b| a.name.cmp(&b.name));
        described
    };
    let sorted = |names: &[String]| {
        let mut names = names.to_vec();
        names.sort();
        names
    };
    let subtopologies = topology
        .by_id()
        .into_values()
        .map(|s| Subtopology {
            subtopology_id: s.subtopology_id.clone(),
            source_topics: sorted(&s.source_topics),
            repartition_sink_topics: sorted(&s.repartition_sink_topics),
            state_changelog_topics: sorted_topics(&s.state_changelog_topics),
            repartition_source_topics: sorted_topics(&s.repartition_source_topics),
            ..Default::default()
        })
        .collect();
    Topology { epoch: topology.epoch, subtopologies: Some(subtopologies), ..Default::default() }
}
