//! Heartbeat v0-4: keeps a member's session alive and tells it when to rejoin.

use super::rebalance::schedule_session;
use super::state::GroupState;
use super::sync::validate_current_member;
use super::GroupCoordinator;
use osprey_protocol::messages::{HeartbeatRequest, HeartbeatResponse};
use osprey_protocol::ErrorCode;

impl GroupCoordinator {
    /// A Heartbeat request; answered at once. REBALANCE_IN_PROGRESS tells the member to
    /// rejoin.
    pub fn heartbeat(&mut self, request: &HeartbeatRequest, now_ms: i64) -> HeartbeatResponse {
        let error = self.heartbeat_error(request, now_ms);
        HeartbeatResponse { error_code: error.code(), ..Default::default() }
    }

    fn heartbeat_error(&mut self, request: &HeartbeatRequest, now_ms: i64) -> ErrorCode {
        if request.group_id.is_empty() {
            return ErrorCode::INVALID_GROUP_ID;
        }
        if let Some(error) = self.serving_error(&request.group_id) {
            return error;
        }
        let Some(group) = self.groups.get_mut(&request.group_id) else {
            return ErrorCode::UNKNOWN_MEMBER_ID;
        };
        if group.is(GroupState::Dead) {
            return ErrorCode::COORDINATOR_NOT_AVAILABLE;
        }
        if let Err(error) = validate_current_member(group, &request.member_id, request.group_instance_id.as_deref()) {
            return error;
        }
        if request.generation_id != group.generation_id {
            return ErrorCode::ILLEGAL_GENERATION;
        }
        let state = group.state;
        if let Some(member) = group.get_mut(&request.member_id) {
            if state != GroupState::Empty {
                schedule_session(member, now_ms);
            }
        }
        match state {
            GroupState::Empty => ErrorCode::UNKNOWN_MEMBER_ID,
            GroupState::PreparingRebalance => ErrorCode::REBALANCE_IN_PROGRESS,
            GroupState::CompletingRebalance | GroupState::Stable => ErrorCode::NONE,
            GroupState::Dead => ErrorCode::COORDINATOR_NOT_AVAILABLE,
        }
    }
}
