//! ShareGroupDescribe v1 (ListGroups lists share groups in `admin.rs`).

use super::{ShareGroup, ShareGroupState, SIMPLE_ASSIGNOR_NAME};
use crate::group::consumer::Assignment;
use crate::group::GroupCoordinator;
use osprey_protocol::messages::share_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member as DescribedMember,
    TopicPartitions as DescribedTopicPartitions,
};
use osprey_protocol::messages::ShareGroupDescribeResponse;
use osprey_protocol::ErrorCode;

impl GroupCoordinator {
    /// The state of share group `group_id`, if there is one.
    pub fn share_group_state(&self, group_id: &str) -> Option<ShareGroupState> {
        self.share_groups.get(group_id).map(ShareGroup::state)
    }

    /// Share group `group_id` as the coordinator holds it (for tests and debugging).
    pub fn share_group(&self, group_id: &str) -> Option<&ShareGroup> {
        self.share_groups.get(group_id)
    }

    /// ShareGroupDescribe v1. `authorized_operations` is left for the server to fill.
    pub fn share_group_describe(&self, group_ids: &[String]) -> ShareGroupDescribeResponse {
        let groups = group_ids.iter().map(|id| self.describe_share_group(id)).collect();
        ShareGroupDescribeResponse { groups, ..Default::default() }
    }

    fn describe_share_group(&self, group_id: &str) -> DescribedGroup {
        if let Some(error) = self.serving_error(group_id) {
            return DescribedGroup { group_id: group_id.to_string(), error_code: error.code(), ..Default::default() };
        }
        let Some(group) = self.share_groups.get(group_id) else {
            // Kafka's `shareGroup(groupId, committedOffset)`.
            let other = self.groups.contains_key(group_id)
                || self.consumer_groups.contains_key(group_id)
                || self.is_streams_group(group_id);
            let message = if other {
                format!("Group {group_id} is not a share group.")
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
                    topic_name: names.get(topic).cloned().unwrap_or_default(),
                    partitions: ps.iter().copied().collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let members = group
            .members
            .values()
            .map(|m| DescribedMember {
                member_id: m.member_id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.member_epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
                assignment: describe(&m.assigned_partitions),
                ..Default::default()
            })
            .collect();
        DescribedGroup {
            group_id: group_id.to_string(),
            group_state: group.state().name().to_string(),
            group_epoch: group.group_epoch,
            assignment_epoch: group.assignment_epoch,
            assignor_name: SIMPLE_ASSIGNOR_NAME.to_string(),
            members,
            ..Default::default()
        }
    }
}
