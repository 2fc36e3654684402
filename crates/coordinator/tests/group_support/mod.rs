//! A test harness driving the group coordinator with explicit time: it plays the server,
//! collecting responses by reply id and either persisting at once or holding persists
//! for the test to complete (or fail).
#![allow(dead_code)]

use bytes::{BufMut, Bytes, BytesMut};
use osprey_coordinator::group::{GroupConfig, GroupCoordinator, Output, PersistId, Record, ReplyId, Response};
use osprey_protocol::messages::consumer_protocol_subscription::ConsumerProtocolSubscription;
use osprey_protocol::messages::heartbeat_request::HeartbeatRequest;
use osprey_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use osprey_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use osprey_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
use osprey_protocol::messages::offset_fetch_response::OffsetFetchResponsePartitions;
use osprey_protocol::messages::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};
use osprey_protocol::messages::{JoinGroupResponse, OffsetCommitResponse, SyncGroupResponse};
use osprey_protocol::{ErrorCode, Message};
use std::collections::BTreeMap;

pub const SESSION_MS: i32 = 10_000;
pub const REBALANCE_MS: i32 = 30_000;

pub struct Harness {
    pub coordinator: GroupCoordinator,
    pub now: i64,
    next_reply: u64,
    /// Persist at once (true) or hold persists in `held_persists` (false).
    pub auto_persist: bool,
    pub held_persists: Vec<(PersistId, String, Vec<Record>)>,
    /// Every record made durable, in order: the `__consumer_offsets` log.
    pub log: Vec<Record>,
    responses: BTreeMap<ReplyId, Response>,
}

/// Consumer-protocol subscription bytes (version 0) for `topics`.
pub fn subscription(topics: &[&str]) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(0);
    let s =
        ConsumerProtocolSubscription { topics: topics.iter().map(|t| t.to_string()).collect(), ..Default::default() };
    s.encode(&mut buf, 0).unwrap();
    buf.freeze()
}

pub fn code(e: ErrorCode) -> i16 {
    e.code()
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(GroupConfig::default())
    }

    pub fn with_config(config: GroupConfig) -> Harness {
        Harness {
            coordinator: GroupCoordinator::new(config),
            now: 1_000_000,
            next_reply: 1,
            auto_persist: true,
            held_persists: Vec::new(),
            log: Vec::new(),
            responses: BTreeMap::new(),
        }
    }

    pub fn drain(&mut self) {
        while let Some(output) = self.coordinator.poll_output() {
            match output {
                Output::Respond { reply, response } => {
                    assert!(self.responses.insert(reply, response).is_none(), "two responses for {reply:?}");
                }
                Output::Persist { id, group_id, records, .. } => {
                    if self.auto_persist {
                        self.log.extend(records);
                        self.coordinator.persisted(id, Ok(()), self.now);
                    } else {
                        self.held_persists.push((id, group_id, records));
                    }
                }
            }
        }
    }

    /// Completes the held persists in order, successfully.
    pub fn complete_persists(&mut self) {
        for (id, _, records) in std::mem::take(&mut self.held_persists) {
            self.log.extend(records);
            self.coordinator.persisted(id, Ok(()), self.now);
        }
        self.drain();
    }

    /// Completes the held persists successfully, their records in the log in issue
    /// order, but reported newest first: as the server's tasks may see fsyncs finish.
    pub fn complete_persists_reported_newest_first(&mut self) {
        let held = std::mem::take(&mut self.held_persists);
        for (_, _, records) in &held {
            self.log.extend(records.iter().cloned());
        }
        for (id, _, _) in held.into_iter().rev() {
            self.coordinator.persisted(id, Ok(()), self.now);
        }
        self.drain();
    }

    pub fn fail_persists(&mut self, error: ErrorCode) {
        for (id, _, _) in std::mem::take(&mut self.held_persists) {
            self.coordinator.persisted(id, Err(error), self.now);
        }
        self.drain();
    }

    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
        self.coordinator.tick(self.now);
        self.drain();
    }

    fn reply(&mut self) -> ReplyId {
        self.next_reply += 1;
        ReplyId(self.next_reply)
    }

    /// Every response received and not yet taken.
    pub fn take_all(&mut self) -> Vec<(ReplyId, Response)> {
        std::mem::take(&mut self.responses).into_iter().collect()
    }

    pub fn take(&mut self, reply: ReplyId) -> Option<Response> {
        self.responses.remove(&reply)
    }

    pub fn take_join(&mut self, reply: ReplyId) -> Option<JoinGroupResponse> {
        match self.take(reply)? {
            Response::JoinGroup(r) => Some(r),
            other => panic!("not a join response: {other:?}"),
        }
    }

    pub fn take_sync(&mut self, reply: ReplyId) -> Option<SyncGroupResponse> {
        match self.take(reply)? {
            Response::SyncGroup(r) => Some(r),
            other => panic!("not a sync response: {other:?}"),
        }
    }

    pub fn take_commit(&mut self, reply: ReplyId) -> Option<OffsetCommitResponse> {
        match self.take(reply)? {
            Response::OffsetCommit(r) => Some(r),
            other => panic!("not a commit response: {other:?}"),
        }
    }

    pub fn join_request(
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        protocols: &[(&str, Bytes)],
    ) -> JoinGroupRequest {
        JoinGroupRequest {
            group_id: group.into(),
            session_timeout_ms: SESSION_MS,
            rebalance_timeout_ms: REBALANCE_MS,
            member_id: member_id.into(),
            group_instance_id: instance.map(str::to_string),
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|(name, metadata)| JoinGroupRequestProtocol {
                    name: name.to_string(),
                    metadata: metadata.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Sends a JoinGroup; returns the reply id to look the answer up with.
    pub fn send_join(&mut self, request: &JoinGroupRequest, version: i16) -> ReplyId {
        let reply = self.reply();
        self.coordinator.join(request, version, "client", "/10.0.0.1", reply, self.now);
        self.drain();
        reply
    }

    pub fn join(&mut self, group: &str, member_id: &str, instance: Option<&str>, topics: &[&str]) -> ReplyId {
        let request = Self::join_request(group, member_id, instance, &[("range", subscription(topics))]);
        self.send_join(&request, 9)
    }

    /// A new dynamic member: MEMBER_ID_REQUIRED, then the rejoin; returns (member id, reply).
    pub fn join_new(&mut self, group: &str, topics: &[&str]) -> (String, ReplyId) {
        let first = self.join(group, "", None, topics);
        let response = self.take_join(first).expect("immediate answer");
        assert_eq!(response.error_code, code(ErrorCode::MEMBER_ID_REQUIRED));
        let member_id = response.member_id;
        let reply = self.join(group, &member_id, None, topics);
        (member_id, reply)
    }

    pub fn send_sync(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
        assignments: &[(&str, &[u8])],
    ) -> ReplyId {
        let reply = self.reply();
        let request = SyncGroupRequest {
            group_id: group.into(),
            generation_id: generation,
            member_id: member_id.into(),
            group_instance_id: instance.map(str::to_string),
            assignments: assignments
                .iter()
                .map(|(m, a)| SyncGroupRequestAssignment {
                    member_id: m.to_string(),
                    assignment: Bytes::copy_from_slice(a),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        self.coordinator.sync(&request, 5, reply, self.now);
        self.drain();
        reply
    }

    pub fn heartbeat(&mut self, group: &str, generation: i32, member_id: &str, instance: Option<&str>) -> i16 {
        let request = HeartbeatRequest {
            group_id: group.into(),
            generation_id: generation,
            member_id: member_id.into(),
            group_instance_id: instance.map(str::to_string),
            ..Default::default()
        };
        let response = self.coordinator.heartbeat(&request, self.now);
        self.drain();
        response.error_code
    }

    /// Brings `n` dynamic members through the join phase (the group is then
    /// CompletingRebalance); returns (generation, member ids, leader).
    pub fn joined_group(&mut self, group: &str, n: usize, topics: &[&str]) -> (i32, Vec<String>, String) {
        let mut joins = Vec::new();
        for _ in 0..n {
            joins.push(self.join_new(group, topics));
        }
        // Members arriving during the initial delay extend it (by up to the rebalance timeout).
        let delay = i64::from(self.coordinator.config().group_initial_rebalance_delay_ms);
        while !self.responses.contains_key(&joins[0].1) {
            assert!(
                self.coordinator.group_state(group) == Some(osprey_coordinator::group::GroupState::PreparingRebalance)
            );
            self.advance(delay);
        }
        let responses: Vec<JoinGroupResponse> =
            joins.iter().map(|(_, r)| self.take_join(*r).expect("joined")).collect();
        let members = joins.into_iter().map(|(m, _)| m).collect();
        (responses[0].generation_id, members, responses[0].leader.clone())
    }

    /// Brings `n` dynamic members into a Stable group; returns (generation, member ids, leader).
    pub fn stable_group(&mut self, group: &str, n: usize, topics: &[&str]) -> (i32, Vec<String>, String) {
        let (generation, members, leader) = self.joined_group(group, n, topics);
        let assignments: Vec<(String, Vec<u8>)> = members.iter().map(|m| (m.clone(), m.as_bytes().to_vec())).collect();
        let assignment_refs: Vec<(&str, &[u8])> = assignments.iter().map(|(m, a)| (m.as_str(), a.as_slice())).collect();
        let mut syncs = Vec::new();
        for m in &members {
            let a: &[(&str, &[u8])] = if *m == leader { &assignment_refs } else { &[] };
            syncs.push(self.send_sync(group, generation, m, None, a));
        }
        for s in syncs {
            assert_eq!(self.take_sync(s).expect("synced").error_code, 0);
        }
        (generation, members, leader)
    }

    pub fn commit_request(
        group: &str,
        generation: i32,
        member_id: &str,
        offsets: &[(&str, i32, i64)],
    ) -> OffsetCommitRequest {
        OffsetCommitRequest {
            group_id: group.into(),
            generation_id_or_member_epoch: generation,
            member_id: member_id.into(),
            topics: offsets
                .iter()
                .map(|(t, p, o)| OffsetCommitRequestTopic {
                    name: t.to_string(),
                    partitions: vec![OffsetCommitRequestPartition {
                        partition_index: *p,
                        committed_offset: *o,
                        committed_leader_epoch: 5,
                        committed_metadata: Some(format!("meta-{o}")),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    pub fn send_commit(&mut self, request: &OffsetCommitRequest) -> ReplyId {
        let reply = self.reply();
        self.coordinator.commit_offsets(request, 9, reply, self.now);
        self.drain();
        reply
    }

    /// Commits and returns the per-partition error codes (persisting at once).
    pub fn commit(&mut self, group: &str, generation: i32, member_id: &str, offsets: &[(&str, i32, i64)]) -> Vec<i16> {
        let reply = self.send_commit(&Self::commit_request(group, generation, member_id, offsets));
        let response = self.take_commit(reply).expect("commit answered");
        response.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
    }

    pub fn fetch(&self, group: &str, topic: &str, partitions: &[i32]) -> Vec<OffsetFetchResponsePartitions> {
        let topics = [OffsetFetchRequestTopics {
            name: topic.into(),
            partition_indexes: partitions.to_vec(),
            ..Default::default()
        }];
        let group = self.coordinator.fetch_offsets(group, Some(&topics), false);
        group.topics.into_iter().flat_map(|t| t.partitions).collect()
    }

    pub fn next_reply(&mut self) -> ReplyId {
        self.reply()
    }
}
