//! SyncGroup v0-5: followers wait for the leader's assignment; the leader's SyncGroup
//! writes the group metadata, and once that is durable everyone gets their assignment and
//! the group is Stable.

use super::rebalance::{schedule_session, sync_response};
use super::state::{Group, GroupState, HeldSync};
use super::{records, GroupCoordinator, ReplyId};
use bytes::Bytes;
use osprey_protocol::messages::SyncGroupRequest;
use osprey_protocol::ErrorCode;
use std::collections::BTreeMap;

impl GroupCoordinator {
    /// A SyncGroup request of version `api_version`; answered later for `reply`.
    pub fn sync(&mut self, request: &SyncGroupRequest, api_version: i16, reply: ReplyId, now_ms: i64) {
        let held = HeldSync { reply, api_version };
        let fail = |error: ErrorCode| sync_response(api_version, error, None, None, Bytes::new());
        if request.group_id.is_empty() {
            return self.respond_sync(held, fail(ErrorCode::INVALID_GROUP_ID));
        }
        if let Some(error) = self.serving_error(&request.group_id) {
            return self.respond_sync(held, fail(error));
        }
        let result = self.with_group(&request.group_id, |this, group| {
            if let Err(error) = validate_sync(group, request) {
                return this.respond_sync(held, fail(error));
            }
            match group.state {
                GroupState::Empty => this.respond_sync(held, fail(ErrorCode::UNKNOWN_MEMBER_ID)),
                GroupState::PreparingRebalance => this.respond_sync(held, fail(ErrorCode::REBALANCE_IN_PROGRESS)),
                GroupState::CompletingRebalance => this.sync_completing(group, request, held),
                GroupState::Stable => {
                    group.pending_sync_members.remove(&request.member_id);
                    if let Some(member) = group.get_mut(&request.member_id) {
                        let assignment = member.assignment.clone();
                        schedule_session(member, now_ms);
                        let (protocol_type, protocol_name) =
                            (group.protocol_type.as_deref(), group.protocol_name.as_deref());
                        let response =
                            sync_response(api_version, ErrorCode::NONE, protocol_type, protocol_name, assignment);
                        this.respond_sync(held, response);
                    }
                }
                GroupState::Dead => this.respond_sync(held, fail(ErrorCode::COORDINATOR_NOT_AVAILABLE)),
            }
        });
        if result.is_none() {
            self.respond_sync(held, fail(ErrorCode::UNKNOWN_MEMBER_ID));
        }
    }

    fn sync_completing(&mut self, group: &mut Group, request: &SyncGroupRequest, held: HeldSync) {
        let member_id = request.member_id.as_str();
        let superseded = group.get_mut(member_id).and_then(|m| m.sync_reply.replace(held));
        if let Some(old) = superseded {
            // Answer a duplicate's predecessor instead of holding it forever.
            let response = sync_response(old.api_version, ErrorCode::REBALANCE_IN_PROGRESS, None, None, Bytes::new());
            self.respond_sync(old, response);
        }
        group.pending_sync_members.remove(member_id);
        if !group.is_leader(member_id) {
            return;
        }
        // Members the leader left out get an empty assignment; ids it invented are ignored.
        let mut assignment: BTreeMap<String, Bytes> =
            group.members.iter().map(|m| (m.member_id.clone(), Bytes::new())).collect();
        for a in &request.assignments {
            if let Some(slot) = assignment.get_mut(&a.member_id) {
                *slot = a.assignment.clone();
            }
        }
        let record = records::group_metadata_record(group, &assignment);
        let then = records::Continuation::SyncGroup {
            group_id: group.group_id.clone(),
            generation_id: group.generation_id,
            assignment,
        };
        let group_id = group.group_id.clone();
        self.persist(&group_id, vec![record], then);
    }

    /// The leader's assignment is durable (or the append failed).
    pub(super) fn sync_persisted(
        &mut self,
        group_id: &str,
        generation_id: i32,
        assignment: BTreeMap<String, Bytes>,
        result: Result<(), ErrorCode>,
        now_ms: i64,
    ) {
        self.with_group(group_id, |this, group| {
            // A member may have joined meanwhile and started another rebalance: then the
            // append is moot.
            if !group.is(GroupState::CompletingRebalance) || group.generation_id != generation_id {
                return;
            }
            match result {
                Ok(()) => {
                    for member in &mut group.members {
                        member.assignment = assignment.get(&member.member_id).cloned().unwrap_or_default();
                    }
                    this.propagate_assignment(group, ErrorCode::NONE, now_ms);
                    group.transition_to(GroupState::Stable, now_ms);
                }
                Err(error) => {
                    this.reset_and_propagate_assignment_error(group, error, now_ms);
                    this.maybe_prepare_rebalance(group, now_ms);
                }
            }
        });
    }
}

/// Kafka's `validateSyncGroup`.
fn validate_sync(group: &Group, request: &SyncGroupRequest) -> Result<(), ErrorCode> {
    validate_current_member(group, &request.member_id, request.group_instance_id.as_deref())?;
    if request.generation_id != group.generation_id {
        return Err(ErrorCode::ILLEGAL_GENERATION);
    }
    if request.protocol_type.as_ref().is_some_and(|t| group.protocol_type.as_ref() != Some(t)) {
        return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
    }
    if request.protocol_name.as_ref().is_some_and(|n| group.protocol_name.as_ref() != Some(n)) {
        return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
    }
    Ok(())
}

/// Kafka's `validateCurrentMember`: a static member's instance id must map to this member
/// id (FENCED_INSTANCE_ID otherwise), and the member must exist.
pub(super) fn validate_current_member(
    group: &Group,
    member_id: &str,
    instance_id: Option<&str>,
) -> Result<(), ErrorCode> {
    if let Some(instance_id) = instance_id {
        match group.static_member_id(instance_id) {
            Some(current) if current != member_id => return Err(ErrorCode::FENCED_INSTANCE_ID),
            Some(_) => {}
            None => return Err(ErrorCode::UNKNOWN_MEMBER_ID),
        }
    }
    if !group.has(member_id) {
        return Err(ErrorCode::UNKNOWN_MEMBER_ID);
    }
    Ok(())
}
