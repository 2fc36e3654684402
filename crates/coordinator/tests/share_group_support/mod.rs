//! A harness for the share-group side of the coordinator: it plays the server (persisting
//! every record at once into a log, the `__consumer_offsets` partition) and sends
//! ShareGroupHeartbeats as share consumers do.
#![allow(dead_code)]

use osprey_coordinator::group::consumer::Assignment;
use osprey_coordinator::group::group_config::ShareGroupOverrides;
use osprey_coordinator::group::{
    GroupConfig, GroupCoordinator, Output, Record, ReplyId, Response, TopicInfo, TopicsView,
};
use osprey_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use osprey_protocol::Uuid;
use std::collections::BTreeMap;

pub const GROUP: &str = "share-g";

pub fn topic_id(n: u8) -> Uuid {
    Uuid([n; 16])
}

pub struct Harness {
    pub coordinator: GroupCoordinator,
    pub now: i64,
    next_reply: u64,
    pub topics: BTreeMap<String, TopicInfo>,
    /// Every record made durable, in order.
    pub log: Vec<Record>,
    pub overrides: BTreeMap<String, ShareGroupOverrides>,
}

struct View<'a> {
    topics: &'a BTreeMap<String, TopicInfo>,
    overrides: &'a BTreeMap<String, ShareGroupOverrides>,
}

impl TopicsView for View<'_> {
    fn topic(&self, name: &str) -> Option<TopicInfo> {
        self.topics.topic(name)
    }
    fn for_each_name(&self, f: &mut dyn FnMut(&str)) {
        self.topics.for_each_name(f)
    }
    fn version(&self) -> u64 {
        self.topics.version()
    }
    fn share_group_overrides(&self, group_id: &str) -> ShareGroupOverrides {
        self.overrides.get(group_id).cloned().unwrap_or_default()
    }
}

impl Harness {
    pub fn new(config: GroupConfig) -> Harness {
        Harness {
            coordinator: GroupCoordinator::new(config),
            now: 1_000,
            next_reply: 0,
            topics: BTreeMap::new(),
            log: Vec::new(),
            overrides: BTreeMap::new(),
        }
    }

    pub fn with_topics(topics: &[(&str, u8, i32)]) -> Harness {
        let mut h = Harness::new(GroupConfig::default());
        for (name, id, partitions) in topics {
            h.set_topic(name, *id, *partitions);
        }
        h
    }

    pub fn set_topic(&mut self, name: &str, id: u8, partitions: i32) {
        self.topics.insert(name.to_string(), TopicInfo { topic_id: topic_id(id), num_partitions: partitions });
    }

    pub fn reply(&mut self) -> ReplyId {
        self.next_reply += 1;
        ReplyId(self.next_reply)
    }

    /// Runs the outputs: persists become durable at once; returns the responses.
    pub fn drain(&mut self) -> Vec<(ReplyId, Response)> {
        let mut responses = Vec::new();
        while let Some(output) = self.coordinator.poll_output() {
            match output {
                Output::Persist { id, records, .. } => {
                    self.log.extend(records);
                    self.coordinator.persisted(id, Ok(()), self.now);
                }
                Output::Respond { reply, response } => responses.push((reply, response)),
            }
        }
        self.coordinator.check_invariants().expect("invariants");
        responses
    }

    /// One ShareGroupHeartbeat of `group`; its answer.
    pub fn heartbeat_to(
        &mut self,
        group: &str,
        member_id: &str,
        epoch: i32,
        topics: Option<&[&str]>,
    ) -> ShareGroupHeartbeatResponse {
        let request = ShareGroupHeartbeatRequest {
            group_id: group.to_string(),
            member_id: member_id.to_string(),
            member_epoch: epoch,
            subscribed_topic_names: topics.map(|ts| ts.iter().map(|t| t.to_string()).collect()),
            ..Default::default()
        };
        let reply = self.reply();
        let view = View { topics: &self.topics, overrides: &self.overrides };
        self.coordinator.share_group_heartbeat(&request, "client", "/10.0.0.1", &view, reply, self.now);
        let responses = self.drain();
        let answer = responses.into_iter().find(|(r, _)| *r == reply).expect("answered");
        match answer.1 {
            Response::ShareGroupHeartbeat(response) => response,
            other => panic!("unexpected {other:?}"),
        }
    }

    pub fn heartbeat(&mut self, member_id: &str, epoch: i32, topics: Option<&[&str]>) -> ShareGroupHeartbeatResponse {
        self.heartbeat_to(GROUP, member_id, epoch, topics)
    }

    /// Joins `member_id` subscribed to `topics`; its epoch.
    pub fn join(&mut self, member_id: &str, topics: &[&str]) -> i32 {
        let r = self.heartbeat(member_id, 0, Some(topics));
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        r.member_epoch
    }

    pub fn tick(&mut self, advance_ms: i64) {
        self.now += advance_ms;
        self.coordinator.tick(self.now);
        self.drain();
    }

    /// A fresh coordinator loaded from the log.
    pub fn reloaded(&self) -> GroupCoordinator {
        let mut fresh = GroupCoordinator::new(self.coordinator.config().clone());
        fresh.load(self.log.clone(), self.now).expect("the log loads");
        fresh.check_invariants().expect("invariants after load");
        fresh
    }
}

/// The partitions of a heartbeat's assignment.
pub fn assigned(response: &ShareGroupHeartbeatResponse) -> Option<Assignment> {
    response
        .assignment
        .as_ref()
        .map(|a| a.topic_partitions.iter().map(|t| (t.topic_id, t.partitions.iter().copied().collect())).collect())
}

pub fn count_partitions(a: &Assignment) -> usize {
    a.values().map(|ps| ps.len()).sum()
}
