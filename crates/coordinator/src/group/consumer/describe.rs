//! ConsumerGroupDescribe v0-1 (ListGroups lists consumer groups in `admin.rs`).

use super::{Assignment, ConsumerGroup, ConsumerGroupState, MEMBER_TYPE_CONSUMER};
use crate::group::GroupCoordinator;
use osprey_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member as DescribedMember,
    TopicPartitions as DescribedTopicPartitions,
};
use osprey_protocol::messages::ConsumerGroupDescribeResponse;
use osprey_protocol::ErrorCode;

impl GroupCoordinator {
    /// The state of consumer group `group_id`, if there is one.
    pub fn consumer_group_state(&self, group_id: &str) -> Option<ConsumerGroupState> {
        self.consumer_groups.get(group_id).map(ConsumerGroup::state)
    }

    /// ConsumerGroupDescribe v0-1. `authorized_operations` is left for the server to fill.
    pub fn consumer_group_describe(&self, group_ids: &[String]) -> ConsumerGroupDescribeResponse {
        let groups = group_ids.iter().map(|id| self.describe_consumer_group(id)).collect();
        ConsumerGroupDescribeResponse { groups, ..Default::default() }
    }

    fn describe_consumer_group(&self, group_id: &str) -> DescribedGroup {
        if let Some(error) = self.serving_error(group_id) {
            return DescribedGroup { group_id: group_id.to_string(), error_code: error.code(), ..Default::default() };
        }
        let Some(group) = self.consumer_groups.get(group_id) else {
            let other_type = self.groups.get(group_id).is_some_and(|g| !g.members.is_empty());
            let message = if other_type || self.is_share_group(group_id) || self.is_streams_group(group_id) {
                format!("Group {group_id} is not a consumer group.")
            } else {
                format!("Group {group_id} not found.")
            };
            return DescribedGroup {
                group_id: group_id.to_string(),
                error_code: ErrorCode::GROUP_ID_NOT_FOUND.code(),
                error_message: Some(message),
                ..Default::default()
            };
        };
        let names = group.topic_names_by_id();
        let describe = |assignment: &Assignment| DescribedAssignment {
            topic_partitions: assignment
                .iter()
                .map(|(topic, ps)| DescribedTopicPartitions {
                    topic_id: *topic,
                    topic_name: names.get(topic).map(|n| n.to_string()).unwrap_or_default(),
                    partitions: ps.iter().copied().collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let empty = Assignment::new();
        let members = group
            .members
            .values()
            .map(|m| DescribedMember {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.member_epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
                subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                assignment: describe(&m.assigned_partitions),
                target_assignment: describe(group.target.get(&m.member_id).unwrap_or(&empty)),
                member_type: MEMBER_TYPE_CONSUMER,
                ..Default::default()
            })
            .collect();
        DescribedGroup {
            group_id: group_id.to_string(),
            group_state: group.state().name().to_string(),
            group_epoch: group.group_epoch,
            assignment_epoch: group.assignment_epoch,
            assignor_name: group.preferred_assignor().to_string(),
            members,
            ..Default::default()
        }
    }
}
