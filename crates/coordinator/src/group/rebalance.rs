//! Rebalance mechanics shared by every input: starting a rebalance, ending its join
//! phase, handing out assignments, removing members, and the response shapes.

use super::state::{Group, GroupState, HeldJoin, HeldSync, JoinTimer, Member};
use super::{records, GroupCoordinator, Response};
use bytes::Bytes;
use osprey_protocol::messages::join_group_response::JoinGroupResponseMember;
use osprey_protocol::messages::{JoinGroupResponse, SyncGroupResponse};
use osprey_protocol::ErrorCode;

/// What a successful JoinGroup response says about the generation.
pub(super) struct JoinResult<'a> {
    pub member_id: &'a str,
    pub generation_id: i32,
    pub protocol_type: Option<&'a str>,
    pub protocol_name: Option<&'a str>,
    pub leader_id: &'a str,
    pub skip_assignment: bool,
    pub members: Vec<JoinGroupResponseMember>,
}

/// A JoinGroup response shaped for `api_version`: protocol type only from v7, a null
/// protocol name only from v7, skip_assignment only in v9.
pub(super) fn join_response(api_version: i16, error: ErrorCode, result: JoinResult<'_>) -> JoinGroupResponse {
    let protocol_name = match result.protocol_name {
        Some(name) => Some(name.to_string()),
        None if api_version >= 7 => None,
        None => Some(String::new()),
    };
    JoinGroupResponse {
        error_code: error.code(),
        generation_id: result.generation_id,
        protocol_type: if api_version >= 7 { result.protocol_type.map(str::to_string) } else { None },
        protocol_name,
        leader: result.leader_id.to_string(),
        skip_assignment: api_version >= 9 && result.skip_assignment,
        member_id: result.member_id.to_string(),
        members: result.members,
        ..Default::default()
    }
}

/// Kafka's `JoinGroupResult(memberId, error)`.
pub(super) fn join_error(api_version: i16, member_id: &str, error: ErrorCode) -> JoinGroupResponse {
    let result = JoinResult {
        member_id,
        generation_id: -1,
        protocol_type: None,
        protocol_name: None,
        leader_id: "",
        skip_assignment: false,
        members: Vec::new(),
    };
    join_response(api_version, error, result)
}

/// A SyncGroup response shaped for `api_version` (protocol type and name only in v5).
pub(super) fn sync_response(
    api_version: i16,
    error: ErrorCode,
    protocol_type: Option<&str>,
    protocol_name: Option<&str>,
    assignment: Bytes,
) -> SyncGroupResponse {
    let v5 = api_version >= 5;
    SyncGroupResponse {
        error_code: error.code(),
        protocol_type: protocol_type.filter(|_| v5).map(str::to_string),
        protocol_name: protocol_name.filter(|_| v5).map(str::to_string),
        assignment,
        ..Default::default()
    }
}

/// Kafka's `completeAndScheduleNextExpiration`: the member's next heartbeat is due
/// `timeout_ms` from now, unless it is waiting in a rebalance.
pub(super) fn schedule_heartbeat(member: &mut Member, now_ms: i64, timeout_ms: i64) {
    member.heartbeat_deadline_ms = if member.has_satisfied_heartbeat() { None } else { Some(now_ms + timeout_ms) };
}

pub(super) fn schedule_session(member: &mut Member, now_ms: i64) {
    let timeout = i64::from(member.session_timeout_ms);
    schedule_heartbeat(member, now_ms, timeout);
}

impl GroupCoordinator {
    pub(super) fn respond_join(&mut self, held: HeldJoin, response: JoinGroupResponse) {
        self.respond(held.reply, Response::JoinGroup(response));
    }

    pub(super) fn respond_sync(&mut self, held: HeldSync, response: SyncGroupResponse) {
        self.respond(held.reply, Response::SyncGroup(response));
    }

    /// Answers a member's held JoinGroup with the current generation.
    pub(super) fn complete_member_join(&mut self, group: &Group, member_id: &str, held: HeldJoin) {
        let is_leader = group.is_leader(member_id);
        let result = JoinResult {
            member_id,
            generation_id: group.generation_id,
            protocol_type: group.protocol_type.as_deref(),
            protocol_name: group.protocol_name.as_deref(),
            leader_id: group.leader_id.as_deref().unwrap_or(""),
            skip_assignment: false,
            members: if is_leader { group.current_member_metadata(held.api_version) } else { Vec::new() },
        };
        let response = join_response(held.api_version, ErrorCode::NONE, result);
        self.respond_join(held, response);
    }

    pub(super) fn maybe_prepare_rebalance(&mut self, group: &mut Group, now_ms: i64) {
        if group.can_rebalance() {
            self.prepare_rebalance(group, now_ms);
        }
    }

    /// Kafka's `prepareRebalance`: members waiting for an assignment are told to rejoin,
    /// and the join phase starts (delayed for a group that was Empty).
    pub(super) fn prepare_rebalance(&mut self, group: &mut Group, now_ms: i64) {
        if group.is(GroupState::CompletingRebalance) {
            self.reset_and_propagate_assignment_error(group, ErrorCode::REBALANCE_IN_PROGRESS, now_ms);
        }
        group.pending_sync_deadline_ms = None;
        group.join_timer = Some(if group.is(GroupState::Empty) {
            let delay_ms = i64::from(self.config.group_initial_rebalance_delay_ms);
            JoinTimer::Initial {
                deadline_ms: now_ms + delay_ms,
                delay_ms,
                remaining_ms: (group.rebalance_timeout_ms() - delay_ms).max(0),
            }
        } else {
            JoinTimer::Rebalance { deadline_ms: now_ms + group.rebalance_timeout_ms() }
        });
        group.transition_to(GroupState::PreparingRebalance, now_ms);
        self.try_complete_join(group, now_ms);
    }

    /// Ends the join phase early once every member has rejoined (Kafka's
    /// `DelayedJoin.tryComplete`; the initial delay is never cut short).
    pub(super) fn try_complete_join(&mut self, group: &mut Group, now_ms: i64) {
        if group.is(GroupState::PreparingRebalance)
            && matches!(group.join_timer, Some(JoinTimer::Rebalance { .. }))
            && group.has_all_members_joined()
        {
            self.complete_join(group, now_ms);
        }
    }

    /// The join timer of `group` fired.
    pub(super) fn join_timer_expired(&mut self, group: &mut Group, now_ms: i64) {
        match group.join_timer {
            Some(JoinTimer::Initial { delay_ms, remaining_ms, .. }) if group.new_member_added && remaining_ms != 0 => {
                group.new_member_added = false;
                let configured = i64::from(self.config.group_initial_rebalance_delay_ms);
                let delay = configured.min(remaining_ms);
                group.join_timer = Some(JoinTimer::Initial {
                    deadline_ms: now_ms + delay,
                    delay_ms: delay,
                    remaining_ms: (remaining_ms - delay_ms).max(0),
                });
            }
            _ => self.complete_join(group, now_ms),
        }
    }

    /// Kafka's `onCompleteJoin`: dynamic members that did not rejoin are removed, a new
    /// generation starts and every waiting member gets its JoinGroup response.
    pub(super) fn complete_join(&mut self, group: &mut Group, now_ms: i64) {
        group.join_timer = None;
        let not_rejoined: Vec<String> = group
            .members
            .iter()
            .filter(|m| !m.is_awaiting_join() && !m.is_static())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in not_rejoined {
            if let Some(member) = group.remove(&member_id) {
                self.answer_removed_member(member);
            }
        }
        if !maybe_elect_new_joined_leader(group) && !group.members.is_empty() {
            // Nobody rejoined: wait another rebalance timeout for the sessions to expire.
            group.join_timer = Some(JoinTimer::Rebalance { deadline_ms: now_ms + group.rebalance_timeout_ms() });
            return;
        }
        init_next_generation(group, now_ms);
        if group.is(GroupState::Empty) {
            let record = records::group_metadata_record(group, &Default::default());
            self.persist(&group.group_id.clone(), vec![record], records::Continuation::Nothing);
            return;
        }
        let member_ids: Vec<String> = group.members.iter().map(|m| m.member_id.clone()).collect();
        for member_id in member_ids {
            let held = group.get_mut(&member_id).and_then(|m| m.join_reply.take());
            if let Some(held) = held {
                self.complete_member_join(group, &member_id, held);
            }
            if let Some(member) = group.get_mut(&member_id) {
                schedule_session(member, now_ms);
                member.is_new = false;
            }
            group.pending_sync_members.insert(member_id);
        }
        group.pending_sync_deadline_ms = Some(now_ms + group.rebalance_timeout_ms());
    }

    /// Every member awaiting SyncGroup gets `error` and an empty assignment.
    pub(super) fn reset_and_propagate_assignment_error(&mut self, group: &mut Group, error: ErrorCode, now_ms: i64) {
        for member in &mut group.members {
            member.assignment = Bytes::new();
        }
        self.propagate_assignment(group, error, now_ms);
    }

    /// Answers every held SyncGroup with the member's assignment (or `error`).
    pub(super) fn propagate_assignment(&mut self, group: &mut Group, error: ErrorCode, now_ms: i64) {
        let ok = error == ErrorCode::NONE;
        let protocol_type = group.protocol_type.clone().filter(|_| ok);
        let protocol_name = group.protocol_name.clone().filter(|_| ok);
        let mut responses = Vec::new();
        for member in &mut group.members {
            if let Some(held) = member.sync_reply.take() {
                let response = sync_response(
                    held.api_version,
                    error,
                    protocol_type.as_deref(),
                    protocol_name.as_deref(),
                    member.assignment.clone(),
                );
                responses.push((held, response));
                // Sessions that ran out while the member waited were ignored: restart them.
                schedule_session(member, now_ms);
            }
        }
        for (held, response) in responses {
            self.respond_sync(held, response);
        }
    }

    /// A member leaves the group for good: its held requests get UNKNOWN_MEMBER_ID.
    pub(super) fn answer_removed_member(&mut self, member: Member) {
        if let Some(held) = member.join_reply {
            self.respond_join(held, join_error(held.api_version, "", ErrorCode::UNKNOWN_MEMBER_ID));
        }
        if let Some(held) = member.sync_reply {
            let response = sync_response(held.api_version, ErrorCode::UNKNOWN_MEMBER_ID, None, None, Bytes::new());
            self.respond_sync(held, response);
        }
    }

    /// Kafka's `removeMemberAndUpdateGroup`.
    pub(super) fn remove_member_and_update_group(&mut self, group: &mut Group, member_id: &str, now_ms: i64) {
        if let Some(member) = group.remove(member_id) {
            self.answer_removed_member(member);
        }
        match group.state {
            GroupState::Dead | GroupState::Empty => {}
            GroupState::Stable | GroupState::CompletingRebalance => self.maybe_prepare_rebalance(group, now_ms),
            GroupState::PreparingRebalance => self.try_complete_join(group, now_ms),
        }
    }

    /// Kafka's `removePendingMemberAndUpdateGroup`.
    pub(super) fn remove_pending_member_and_update_group(&mut self, group: &mut Group, member_id: &str, now_ms: i64) {
        if let Some(member) = group.remove(member_id) {
            self.answer_removed_member(member);
        }
        if group.is(GroupState::PreparingRebalance) {
            self.try_complete_join(group, now_ms);
        }
    }

    /// Runs `f` on the group taken out of the map, so that `f` may also use `self`; a
    /// group that ends Dead is not put back.
    pub(super) fn with_group<R>(&mut self, group_id: &str, f: impl FnOnce(&mut Self, &mut Group) -> R) -> Option<R> {
        let mut group = self.groups.remove(group_id)?;
        let result = f(self, &mut group);
        if !group.is(GroupState::Dead) {
            self.groups.insert(group_id.to_string(), group);
        }
        Some(result)
    }
}

/// Kafka's `maybeElectNewJoinedLeader`: keep the leader if it rejoined, otherwise pick
/// the first member that did.
fn maybe_elect_new_joined_leader(group: &mut Group) -> bool {
    let Some(leader_id) = group.leader_id.clone() else {
        return false;
    };
    if group.get(&leader_id).is_some_and(Member::is_awaiting_join) {
        return true;
    }
    match group.members.iter().find(|m| m.is_awaiting_join()) {
        Some(member) => {
            group.leader_id = Some(member.member_id.clone());
            true
        }
        None => false,
    }
}

/// Kafka's `initNextGeneration`.
fn init_next_generation(group: &mut Group, now_ms: i64) {
    group.generation_id += 1;
    if group.members.is_empty() {
        group.protocol_name = None;
        group.subscribed_topics = group.compute_subscribed_topics();
        group.transition_to(GroupState::Empty, now_ms);
    } else {
        group.protocol_name = group.select_protocol();
        group.subscribed_topics = group.compute_subscribed_topics();
        group.transition_to(GroupState::CompletingRebalance, now_ms);
    }
    // Kafka logs the same at INFO: the one line an operator needs to follow rebalances.
    tracing::info!(
        group = %group.group_id,
        generation = group.generation_id,
        members = group.members.len(),
        protocol = group.protocol_name.as_deref().unwrap_or(""),
        leader = group.leader_id.as_deref().unwrap_or(""),
        "group rebalanced to a new generation"
    );
    group.pending_sync_members.clear();
    group.pending_sync_deadline_ms = None;
}
