//! A harness for the streams-group side of the coordinator: it plays the server
//! (persisting every record at once into a log, the `__consumer_offsets` partition, and
//! creating the internal topics a heartbeat asks for when told to) and runs Kafka Streams
//! clients that heartbeat their owned tasks, as the Java client does.
#![allow(dead_code)]

use osprey_coordinator::group::group_config::StreamsGroupOverrides;
use osprey_coordinator::group::streams::{InternalTopic, Tasks};
use osprey_coordinator::group::{
    GroupConfig, GroupCoordinator, Output, Record, ReplyId, Response, StreamsHeartbeatAnswer, TopicInfo, TopicsView,
};
use osprey_protocol::messages::streams_group_heartbeat_request::{
    CopartitionGroup, Subtopology, TaskIds, TopicInfo as RequestTopicInfo, Topology,
};
use osprey_protocol::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use osprey_protocol::Uuid;
use std::collections::BTreeMap;

pub const GROUP: &str = "word-count";
/// The word count's topics: the input, the repartition topic between its two
/// subtopologies, and the counts' changelog.
pub const INPUT: &str = "words";
pub const REPARTITION: &str = "word-count-counts-repartition";
pub const CHANGELOG: &str = "word-count-counts-changelog";

/// A word count as Kafka Streams describes it: subtopology 0 reads the input and writes
/// the repartition topic, subtopology 1 reads it and counts into a store with a changelog.
pub fn word_count(epoch: i32) -> Topology {
    let internal = |name: &str| RequestTopicInfo { name: name.into(), ..Default::default() };
    Topology {
        epoch,
        subtopologies: vec![
            Subtopology {
                subtopology_id: "0".into(),
                source_topics: vec![INPUT.into()],
                repartition_sink_topics: vec![REPARTITION.into()],
                ..Default::default()
            },
            Subtopology {
                subtopology_id: "1".into(),
                repartition_source_topics: vec![internal(REPARTITION)],
                state_changelog_topics: vec![internal(CHANGELOG)],
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

/// A stateless copy of two copartitioned inputs (a join would copartition them).
pub fn join_topology(left: &str, right: &str) -> Topology {
    Topology {
        epoch: 0,
        subtopologies: vec![Subtopology {
            subtopology_id: "0".into(),
            source_topics: vec![left.into(), right.into()],
            copartition_groups: vec![CopartitionGroup { source_topics: vec![0, 1], ..Default::default() }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub fn topic_id(n: u8) -> Uuid {
    Uuid([n; 16])
}

/// The settings most tests use: no initial rebalance delay and no assignment interval,
/// so that every heartbeat assigns at once.
pub fn immediate() -> GroupConfig {
    GroupConfig {
        streams_group_initial_rebalance_delay_ms: 0,
        streams_group_assignment_interval_ms: 0,
        ..GroupConfig::default()
    }
}

pub struct Harness {
    pub coordinator: GroupCoordinator,
    pub now: i64,
    next_reply: u64,
    next_topic_id: u8,
    pub topics: BTreeMap<String, TopicInfo>,
    /// Every record made durable, in order.
    pub log: Vec<Record>,
    pub overrides: BTreeMap<String, StreamsGroupOverrides>,
    /// Create the internal topics heartbeats ask for, as the server does.
    pub create_internal_topics: bool,
}

struct View<'a> {
    topics: &'a BTreeMap<String, TopicInfo>,
    overrides: &'a BTreeMap<String, StreamsGroupOverrides>,
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
    fn streams_group_overrides(&self, group_id: &str) -> StreamsGroupOverrides {
        self.overrides.get(group_id).copied().unwrap_or_default()
    }
}

impl Harness {
    pub fn new(config: GroupConfig) -> Harness {
        Harness {
            coordinator: GroupCoordinator::new(config),
            now: 1_000,
            next_reply: 0,
            next_topic_id: 1,
            topics: BTreeMap::new(),
            log: Vec::new(),
            overrides: BTreeMap::new(),
            create_internal_topics: true,
        }
    }

    /// The word count's input with `partitions` partitions, internal topics created on
    /// demand, every assignment at once.
    pub fn word_count(partitions: i32) -> Harness {
        let mut h = Harness::new(immediate());
        h.set_topic(INPUT, partitions);
        h
    }

    pub fn set_topic(&mut self, name: &str, partitions: i32) {
        let id = self.topics.get(name).map(|t| t.topic_id).unwrap_or_else(|| {
            self.next_topic_id += 1;
            topic_id(self.next_topic_id)
        });
        self.topics.insert(name.to_string(), TopicInfo { topic_id: id, num_partitions: partitions });
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

    /// One StreamsGroupHeartbeat; its answer. The internal topics it asks for are created
    /// when `create_internal_topics` is set.
    pub fn send(&mut self, request: &StreamsGroupHeartbeatRequest) -> StreamsHeartbeatAnswer {
        let reply = self.reply();
        let view = View { topics: &self.topics, overrides: &self.overrides };
        self.coordinator.streams_group_heartbeat(request, "client", "/10.0.0.1", &view, reply, self.now);
        let responses = self.drain();
        let answer = responses.into_iter().find(|(r, _)| *r == reply).expect("answered");
        let answer = match answer.1 {
            Response::StreamsGroupHeartbeat(answer) => *answer,
            other => panic!("unexpected {other:?}"),
        };
        if self.create_internal_topics {
            for topic in &answer.topics_to_create {
                self.create(topic);
            }
        }
        answer
    }

    pub fn create(&mut self, topic: &InternalTopic) {
        if !self.topics.contains_key(&topic.name) {
            self.set_topic(&topic.name, topic.num_partitions);
        }
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

/// A Kafka Streams member (one stream thread) as the coordinator sees it: what it owns,
/// which it reports on every heartbeat, and its epoch.
#[derive(Debug, Clone)]
pub struct Client {
    pub member_id: String,
    pub process_id: String,
    pub epoch: i32,
    pub topology_epoch: i32,
    pub active: Tasks,
    pub standby: Tasks,
    pub warmup: Tasks,
    pub endpoint_epoch: i32,
    pub rebalance_timeout_ms: i32,
    /// Whether a join was answered: as the Java client's JOINING state, not the epoch,
    /// decides whether the next request is a join (topology, rebalance timeout).
    pub joined: bool,
}

impl Client {
    pub fn new(member_id: &str, process_id: &str) -> Client {
        Client {
            member_id: member_id.into(),
            process_id: process_id.into(),
            epoch: 0,
            topology_epoch: 0,
            active: Tasks::new(),
            standby: Tasks::new(),
            warmup: Tasks::new(),
            endpoint_epoch: -1,
            rebalance_timeout_ms: 300_000,
            joined: false,
        }
    }

    /// The request this client sends next: a join (epoch 0) carries the topology and the
    /// process, a heartbeat its owned tasks (a member answered with epoch 0 sends epoch 0
    /// without them, which Kafka refuses, as the Java client would).
    pub fn request(&self) -> StreamsGroupHeartbeatRequest {
        let joining = !self.joined;
        let ids = |tasks: &Tasks| {
            tasks
                .iter()
                .map(|(s, ps)| TaskIds {
                    subtopology_id: s.clone(),
                    partitions: ps.iter().copied().collect(),
                    ..Default::default()
                })
                .collect::<Vec<_>>()
        };
        StreamsGroupHeartbeatRequest {
            group_id: GROUP.into(),
            member_id: self.member_id.clone(),
            member_epoch: self.epoch,
            endpoint_information_epoch: self.endpoint_epoch,
            rebalance_timeout_ms: if joining { self.rebalance_timeout_ms } else { -1 },
            topology: joining.then(|| word_count(self.topology_epoch)),
            process_id: joining.then(|| self.process_id.clone()),
            active_tasks: Some(ids(&self.active)),
            standby_tasks: Some(ids(&self.standby)),
            warmup_tasks: Some(ids(&self.warmup)),
            ..Default::default()
        }
    }

    /// Applies an answer as the Java client does: a new epoch, and the tasks when given.
    pub fn apply(&mut self, response: &StreamsGroupHeartbeatResponse) {
        if response.error_code != 0 {
            // Fenced or unknown: abandon everything and rejoin.
            self.epoch = 0;
            self.joined = false;
            self.active.clear();
            self.standby.clear();
            self.warmup.clear();
            return;
        }
        self.epoch = response.member_epoch;
        self.joined = true;
        self.endpoint_epoch = response.endpoint_information_epoch;
        let tasks = |ids: &Vec<osprey_protocol::messages::streams_group_heartbeat_response::TaskIds>| -> Tasks {
            ids.iter().map(|t| (t.subtopology_id.clone(), t.partitions.iter().copied().collect())).collect()
        };
        if let Some(active) = &response.active_tasks {
            self.active = tasks(active);
        }
        if let Some(standby) = &response.standby_tasks {
            self.standby = tasks(standby);
        }
        if let Some(warmup) = &response.warmup_tasks {
            self.warmup = tasks(warmup);
        }
    }

    /// One heartbeat round trip.
    pub fn heartbeat(&mut self, h: &mut Harness) -> StreamsHeartbeatAnswer {
        let answer = h.send(&self.request());
        self.apply(&answer.response);
        answer
    }
}

/// The status codes of an answer.
pub fn status_codes(response: &StreamsGroupHeartbeatResponse) -> Vec<i8> {
    response.status.iter().flatten().map(|s| s.status_code).collect()
}

/// Tasks from (subtopology, partitions) pairs.
pub fn tasks(pairs: &[(&str, &[i32])]) -> Tasks {
    pairs.iter().map(|(s, ps)| (s.to_string(), ps.iter().copied().collect())).collect()
}

/// How many tasks in all.
pub fn count(tasks: &Tasks) -> usize {
    tasks.values().map(|ps| ps.len()).sum()
}

/// Heartbeats every client, in turn, `rounds` times.
pub fn rounds(h: &mut Harness, clients: &mut [Client], rounds: usize) {
    for _ in 0..rounds {
        for client in clients.iter_mut() {
            client.heartbeat(h);
        }
    }
}
