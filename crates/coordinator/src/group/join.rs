//! JoinGroup v0-9: Kafka's `handleJoinGroup` with KIP-394 (member id required, v4+) and
//! KIP-345 (static membership, v5+).

use super::rebalance::{join_error, join_response, schedule_heartbeat, schedule_session, JoinResult};
use super::state::{Group, GroupState, HeldJoin, Member};
use super::{records, GroupCoordinator, ProtocolMetadata, ReplyId};
use bytes::Bytes;
use osprey_protocol::messages::JoinGroupRequest;
use osprey_protocol::ErrorCode;

/// A static member's replacement waiting for the group metadata to be durable.
#[derive(Debug)]
pub(super) struct StaticReplace {
    pub group_id: String,
    pub old_member_id: String,
    pub new_member_id: String,
    pub old_protocols: Vec<ProtocolMetadata>,
    pub old_rebalance_timeout_ms: i32,
    pub old_session_timeout_ms: i32,
    /// The leader before the replacement, for pre-v9 responses.
    pub previous_leader: Option<String>,
    pub held: HeldJoin,
}

/// The parts of a JoinGroup the coordinator keeps about a member.
struct Joining<'a> {
    request: &'a JoinGroupRequest,
    protocols: Vec<ProtocolMetadata>,
    rebalance_timeout_ms: i32,
    client_id: &'a str,
    client_host: &'a str,
    held: HeldJoin,
}

impl GroupCoordinator {
    /// A JoinGroup request of version `api_version` from `client_id` at `client_host`.
    /// The answer comes later as [`super::Output::Respond`] for `reply`.
    pub fn join(
        &mut self,
        request: &JoinGroupRequest,
        api_version: i16,
        client_id: &str,
        client_host: &str,
        reply: ReplyId,
        now_ms: i64,
    ) {
        let held = HeldJoin { reply, api_version };
        let member_id = request.member_id.as_str();
        if request.group_id.is_empty() {
            return self.respond_join(held, join_error(api_version, member_id, ErrorCode::INVALID_GROUP_ID));
        }
        if let Some(error) = self.serving_error(&request.group_id) {
            return self.respond_join(held, join_error(api_version, member_id, error));
        }
        if self.is_share_group(&request.group_id) {
            // Kafka's `classicGroupJoin`: a group of another type that is no consumer group.
            return self.respond_join(held, join_error(api_version, "", ErrorCode::INCONSISTENT_GROUP_PROTOCOL));
        }
        if self.consumer_group_blocks_classic_join(&request.group_id)
            || self.streams_group_blocks_classic_join(&request.group_id)
        {
            // No online migration from the consumer protocol (KIP-848), or the streams
            // protocol (KIP-1071), to the classic one.
            let error = ErrorCode::INCONSISTENT_GROUP_PROTOCOL;
            return self.respond_join(held, join_error(api_version, member_id, error));
        }
        let session = request.session_timeout_ms;
        if session < self.config.group_min_session_timeout_ms || session > self.config.group_max_session_timeout_ms {
            return self.respond_join(held, join_error(api_version, member_id, ErrorCode::INVALID_SESSION_TIMEOUT));
        }
        let is_unknown_member = member_id.is_empty();
        if !self.groups.contains_key(&request.group_id) {
            if !is_unknown_member {
                return self.respond_join(held, join_error(api_version, member_id, ErrorCode::UNKNOWN_MEMBER_ID));
            }
            self.groups.insert(request.group_id.clone(), Group::new(&request.group_id, now_ms));
        }
        let joining = Joining {
            request,
            protocols: request.protocols.iter().map(|p| (p.name.clone(), p.metadata.clone())).collect(),
            // JoinGroup v0 has no rebalance timeout: the session timeout serves as both.
            rebalance_timeout_ms: if api_version == 0 { session } else { request.rebalance_timeout_ms },
            client_id,
            client_host,
            held,
        };
        self.with_group(&request.group_id, |this, group| {
            if !this.accept_joining_member(group, member_id) {
                if let Some(member) = group.remove(member_id) {
                    this.answer_removed_member(member);
                }
                this.respond_join(held, join_error(api_version, "", ErrorCode::GROUP_MAX_SIZE_REACHED));
            } else if is_unknown_member {
                this.join_new_member(group, joining, now_ms);
            } else {
                this.join_current_member(group, joining, now_ms);
            }
            if group.is(GroupState::PreparingRebalance) {
                this.try_complete_join(group, now_ms);
            }
        });
    }

    /// Kafka's `acceptJoiningMember`: `group.max.size`, counted so that rejoining members
    /// of an oversized group are the ones turned away.
    fn accept_joining_member(&self, group: &Group, member_id: &str) -> bool {
        let max = self.config.group_max_size;
        match group.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                group.get(member_id).is_some_and(Member::is_awaiting_join) || group.num_awaiting_join() < max
            }
            GroupState::CompletingRebalance | GroupState::Stable => group.has(member_id) || group.members.len() < max,
        }
    }

    fn join_new_member(&mut self, group: &mut Group, joining: Joining<'_>, now_ms: i64) {
        let version = joining.held.api_version;
        if !group.supports_protocols(&joining.request.protocol_type, &joining.protocols) {
            return self.respond_join(joining.held, join_error(version, "", ErrorCode::INCONSISTENT_GROUP_PROTOCOL));
        }
        let instance_id = joining.request.group_instance_id.as_deref();
        let new_member_id = loop {
            // A repeat is all but impossible with a random seed; a constant seed reused
            // across restarts would repeat ids of loaded members.
            let id = self.member_ids.generate(joining.client_id, instance_id);
            if !group.has(&id) && !group.is_pending_member(&id) {
                break id;
            }
        };
        match instance_id {
            Some(instance_id) => match group.static_member_id(instance_id).map(str::to_string) {
                Some(old_member_id) => {
                    self.replace_static_member(group, &old_member_id, new_member_id, joining, now_ms)
                }
                None => self.add_member_and_rebalance(group, new_member_id, joining, now_ms),
            },
            None if version >= 4 => {
                // KIP-394: the member gets its id first and must come back with it, so that
                // a client timing out in a long join does not leave a ghost member behind.
                let expires_ms = now_ms + i64::from(joining.request.session_timeout_ms);
                group.pending_members.insert(new_member_id.clone(), expires_ms);
                let response = join_error(version, &new_member_id, ErrorCode::MEMBER_ID_REQUIRED);
                self.respond_join(joining.held, response);
            }
            None => self.add_member_and_rebalance(group, new_member_id, joining, now_ms),
        }
    }

    fn join_current_member(&mut self, group: &mut Group, joining: Joining<'_>, now_ms: i64) {
        let version = joining.held.api_version;
        let member_id = joining.request.member_id.clone();
        let instance_id = joining.request.group_instance_id.as_deref();
        if !group.supports_protocols(&joining.request.protocol_type, &joining.protocols) {
            return self
                .respond_join(joining.held, join_error(version, &member_id, ErrorCode::INCONSISTENT_GROUP_PROTOCOL));
        }
        if group.is_pending_member(&member_id) {
            // A pending member is never static: it got its id from MEMBER_ID_REQUIRED. Kafka
            // throws IllegalStateException here, which reaches the client as
            // UNKNOWN_SERVER_ERROR.
            if instance_id.is_some() {
                let response = join_error(version, &member_id, ErrorCode::UNKNOWN_SERVER_ERROR);
                return self.respond_join(joining.held, response);
            }
            return self.add_member_and_rebalance(group, member_id, joining, now_ms);
        }
        let current_static = instance_id.map(|i| group.static_member_id(i).map(str::to_string));
        if let Some(Some(current)) = &current_static {
            if *current != member_id {
                return self.respond_join(joining.held, join_error(version, &member_id, ErrorCode::FENCED_INSTANCE_ID));
            }
        }
        if !group.has(&member_id) || matches!(current_static, Some(None)) {
            // An unknown dynamic member id, or an instance id the group does not know:
            // the member resets its id and joins again.
            return self.respond_join(joining.held, join_error(version, &member_id, ErrorCode::UNKNOWN_MEMBER_ID));
        }
        let is_leader = group.is_leader(&member_id);
        let matches = group.get(&member_id).is_some_and(|m| m.matches(&joining.protocols));
        match group.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(group, &member_id, joining, now_ms),
            GroupState::CompletingRebalance if matches => {
                // The member lost its JoinGroup response: answer again for this generation.
                self.complete_member_join(group, &member_id, joining.held);
            }
            GroupState::Stable if !is_leader && matches => {
                // A follower with nothing new: it can go on to SyncGroup for this generation.
                let result = JoinResult {
                    member_id: &member_id,
                    generation_id: group.generation_id,
                    protocol_type: group.protocol_type.as_deref(),
                    protocol_name: group.protocol_name.as_deref(),
                    leader_id: group.leader_id.as_deref().unwrap_or(""),
                    skip_assignment: false,
                    members: Vec::new(),
                };
                self.respond_join(joining.held, join_response(version, ErrorCode::NONE, result));
            }
            // Changed metadata, or the leader asking for a rebalance (e.g. topic metadata changed).
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member_and_rebalance(group, &member_id, joining, now_ms)
            }
            GroupState::Empty | GroupState::Dead => {
                self.respond_join(joining.held, join_error(version, &member_id, ErrorCode::UNKNOWN_MEMBER_ID))
            }
        }
    }

    /// Kafka's `addMemberAndRebalance`.
    fn add_member_and_rebalance(&mut self, group: &mut Group, member_id: String, joining: Joining<'_>, now_ms: i64) {
        let mut member = Member {
            member_id,
            group_instance_id: joining.request.group_instance_id.clone(),
            client_id: joining.client_id.to_string(),
            client_host: joining.client_host.to_string(),
            rebalance_timeout_ms: joining.rebalance_timeout_ms,
            session_timeout_ms: joining.request.session_timeout_ms,
            protocol_type: joining.request.protocol_type.clone(),
            protocols: joining.protocols,
            assignment: Bytes::new(),
            join_reply: Some(joining.held),
            sync_reply: None,
            is_new: true,
            heartbeat_deadline_ms: None,
        };
        if group.is(GroupState::PreparingRebalance) && group.generation_id == 0 {
            group.new_member_added = true;
        }
        // A new member cannot heartbeat yet and a client that gave up on a long join may
        // retry with a new id: expire new members that wait too long.
        schedule_heartbeat(&mut member, now_ms, self.config.new_member_join_timeout_ms);
        group.add(member);
        self.maybe_prepare_rebalance(group, now_ms);
    }

    /// Kafka's `updateMemberAndRebalance`: new protocols and timeouts, and the member waits
    /// for the next generation.
    fn update_member_and_rebalance(&mut self, group: &mut Group, member_id: &str, joining: Joining<'_>, now_ms: i64) {
        let superseded = group.get_mut(member_id).and_then(|member| {
            member.protocols = joining.protocols;
            member.rebalance_timeout_ms = joining.rebalance_timeout_ms;
            member.session_timeout_ms = joining.request.session_timeout_ms;
            member.join_reply.replace(joining.held)
        });
        if let Some(old) = superseded {
            // Kafka drops the earlier callback; answer it so that no reply is held forever.
            self.respond_join(old, join_error(old.api_version, member_id, ErrorCode::REBALANCE_IN_PROGRESS));
        }
        self.maybe_prepare_rebalance(group, now_ms);
    }

    /// Kafka's `updateStaticMemberAndRebalance`: a known group.instance.id with a new
    /// member id takes the old member's place (and assignment); a Stable group whose
    /// protocol would not change keeps its generation, no rebalance.
    fn replace_static_member(
        &mut self,
        group: &mut Group,
        old_member_id: &str,
        new_member_id: String,
        joining: Joining<'_>,
        now_ms: i64,
    ) {
        let previous_leader = group.leader_id.clone();
        let (old_protocols, old_rebalance_timeout_ms, old_session_timeout_ms) = {
            let Some(member) = group.get(old_member_id) else { return };
            (member.protocols.clone(), member.rebalance_timeout_ms, member.session_timeout_ms)
        };
        self.rename_member(group, old_member_id, &new_member_id, now_ms);
        let held = joining.held;
        if let Some(member) = group.get_mut(&new_member_id) {
            member.protocols = joining.protocols;
            member.rebalance_timeout_ms = joining.rebalance_timeout_ms;
            member.session_timeout_ms = joining.request.session_timeout_ms;
            member.join_reply = Some(held);
        }
        match group.state {
            GroupState::Stable if group.select_protocol() == group.protocol_name => {
                let record = records::current_group_metadata_record(group);
                let replace = StaticReplace {
                    group_id: group.group_id.clone(),
                    old_member_id: old_member_id.to_string(),
                    new_member_id,
                    old_protocols,
                    old_rebalance_timeout_ms,
                    old_session_timeout_ms,
                    previous_leader,
                    held,
                };
                let group_id = group.group_id.clone();
                self.persist(&group_id, vec![record], records::Continuation::StaticReplace(Box::new(replace)));
            }
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(group, now_ms),
            GroupState::PreparingRebalance | GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Kafka's `replaceStaticMember`: requests held under the old id are fenced.
    fn rename_member(&mut self, group: &mut Group, old_member_id: &str, new_member_id: &str, now_ms: i64) {
        let Some(member) = group.get_mut(old_member_id) else { return };
        let old_join = member.join_reply.take();
        let old_sync = member.sync_reply.take();
        member.member_id = new_member_id.to_string();
        schedule_session(member, now_ms);
        if group.is_leader(old_member_id) {
            group.leader_id = Some(new_member_id.to_string());
        }
        if group.pending_sync_members.remove(old_member_id) {
            group.pending_sync_members.insert(new_member_id.to_string());
        }
        if let Some(held) = old_join {
            self.respond_join(held, join_error(held.api_version, old_member_id, ErrorCode::FENCED_INSTANCE_ID));
        }
        if let Some(held) = old_sync {
            let response = super::rebalance::sync_response(
                held.api_version,
                ErrorCode::FENCED_INSTANCE_ID,
                None,
                None,
                Bytes::new(),
            );
            self.respond_sync(held, response);
        }
    }

    /// The replaced static member's group metadata is durable (or not).
    pub(super) fn static_replace_persisted(
        &mut self,
        replace: StaticReplace,
        result: Result<(), ErrorCode>,
        now_ms: i64,
    ) {
        let group_id = replace.group_id.clone();
        // A group gone meanwhile was unloaded, or emptied and deleted: either way the held
        // join was answered when its member went.
        self.with_group(&group_id, |this, group| {
            let Some(member) = group.get_mut(&replace.new_member_id) else {
                return;
            };
            if member.join_reply != Some(replace.held) {
                return;
            }
            member.join_reply = None;
            let version = replace.held.api_version;
            match result {
                Err(error) => {
                    // Put the old member id back: the new one was never durable.
                    if let Some(member) = group.get_mut(&replace.new_member_id) {
                        member.protocols = replace.old_protocols.clone();
                        member.rebalance_timeout_ms = replace.old_rebalance_timeout_ms;
                        member.session_timeout_ms = replace.old_session_timeout_ms;
                    }
                    this.rename_member(group, &replace.new_member_id, &replace.old_member_id, now_ms);
                    let result = JoinResult {
                        member_id: "",
                        generation_id: group.generation_id,
                        protocol_type: group.protocol_type.as_deref(),
                        protocol_name: group.protocol_name.as_deref(),
                        leader_id: replace.previous_leader.as_deref().unwrap_or(""),
                        skip_assignment: false,
                        members: Vec::new(),
                    };
                    this.respond_join(replace.held, join_response(version, error, result));
                }
                Ok(()) => {
                    let is_leader = group.is_leader(&replace.new_member_id);
                    let skip = version >= 9;
                    // Before v9 the old leader id is returned, so that a restarted leader does
                    // not compute an assignment a Stable group would ignore; from v9 the leader
                    // learns it leads and skips the assignment (KIP-814).
                    let leader_id = if skip { group.leader_id.as_deref() } else { replace.previous_leader.as_deref() };
                    let result = JoinResult {
                        member_id: &replace.new_member_id,
                        generation_id: group.generation_id,
                        protocol_type: group.protocol_type.as_deref(),
                        protocol_name: group.protocol_name.as_deref(),
                        leader_id: leader_id.unwrap_or(""),
                        skip_assignment: skip && is_leader,
                        members: if skip && is_leader { group.current_member_metadata(version) } else { Vec::new() },
                    };
                    this.respond_join(replace.held, join_response(version, ErrorCode::NONE, result));
                }
            }
        });
    }
}
