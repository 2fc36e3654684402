//! LeaveGroup v0-5: members leave (batched, by member id or by group.instance.id from
//! v3), which starts a rebalance.

use super::state::Group;
use super::sync::validate_current_member;
use super::GroupCoordinator;
use osprey_protocol::messages::leave_group_response::MemberResponse;
use osprey_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};
use osprey_protocol::ErrorCode;

impl GroupCoordinator {
    /// A LeaveGroup request of version `api_version`; answered at once. Before v3 the
    /// request names one member and its error is the top-level error.
    pub fn leave(&mut self, request: &LeaveGroupRequest, api_version: i16, now_ms: i64) -> LeaveGroupResponse {
        let leaving: Vec<(String, Option<String>)> = if api_version >= 3 {
            request.members.iter().map(|m| (m.member_id.clone(), m.group_instance_id.clone())).collect()
        } else {
            vec![(request.member_id.clone(), None)]
        };
        let (error, members) = if request.group_id.is_empty() {
            (ErrorCode::INVALID_GROUP_ID, Vec::new())
        } else if let Some(error) = self.serving_error(&request.group_id) {
            (error, Vec::new())
        } else {
            let results: Option<Vec<ErrorCode>> = self.with_group(&request.group_id, |this, group| {
                leaving
                    .iter()
                    .map(|(member_id, instance_id)| this.leave_one(group, member_id, instance_id.as_deref(), now_ms))
                    .collect()
            });
            let results = results.unwrap_or_else(|| leaving.iter().map(|_| ErrorCode::UNKNOWN_MEMBER_ID).collect());
            (ErrorCode::NONE, leaving.into_iter().zip(results).collect::<Vec<_>>())
        };
        if api_version < 3 {
            let error = members.iter().map(|(_, e)| *e).find(|e| *e != ErrorCode::NONE).unwrap_or(error);
            return LeaveGroupResponse { error_code: error.code(), ..Default::default() };
        }
        LeaveGroupResponse {
            error_code: error.code(),
            members: members
                .into_iter()
                .map(|((member_id, group_instance_id), e)| MemberResponse {
                    member_id,
                    group_instance_id,
                    error_code: e.code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn leave_one(&mut self, group: &mut Group, member_id: &str, instance_id: Option<&str>, now_ms: i64) -> ErrorCode {
        if member_id.is_empty() {
            // Administrative removal by group.instance.id (kafka-consumer-groups, KIP-345).
            let current = instance_id.and_then(|i| group.static_member_id(i)).map(str::to_string);
            return match current {
                Some(current) => {
                    self.remove_member_and_update_group(group, &current, now_ms);
                    ErrorCode::NONE
                }
                None => ErrorCode::UNKNOWN_MEMBER_ID,
            };
        }
        if group.is_pending_member(member_id) {
            self.remove_pending_member_and_update_group(group, member_id, now_ms);
            return ErrorCode::NONE;
        }
        match validate_current_member(group, member_id, instance_id) {
            Ok(()) => {
                self.remove_member_and_update_group(group, member_id, now_ms);
                ErrorCode::NONE
            }
            Err(error) => error,
        }
    }
}
