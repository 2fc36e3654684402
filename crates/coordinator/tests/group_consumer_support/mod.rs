//! A harness for the KIP-848 consumer-group side of the coordinator: it plays the server
//! (persisting at once, or failing persists on request) and simulates consumers that
//! follow the protocol: they revoke what the response's assignment omits, take what it
//! adds, and report what they own in their next heartbeat.
#![allow(dead_code)]

use osprey_coordinator::group::consumer::Assignment;
use osprey_coordinator::group::group_config::ConsumerGroupOverrides;
use osprey_coordinator::group::{
    GroupConfig, GroupCoordinator, Output, Record, ReplyId, Response, TopicInfo, TopicsView,
};
use osprey_protocol::messages::consumer_group_heartbeat_request::{ConsumerGroupHeartbeatRequest, TopicPartitions};
use osprey_protocol::messages::ConsumerGroupHeartbeatResponse;
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, BTreeSet};

pub const GROUP: &str = "g";
pub const REBALANCE_MS: i32 = 60_000;

pub fn topic_id(n: u8) -> Uuid {
    Uuid([n; 16])
}

pub struct Harness {
    pub coordinator: GroupCoordinator,
    pub now: i64,
    next_reply: u64,
    pub topics: BTreeMap<String, TopicInfo>,
    /// Every record made durable, in order: the `__consumer_offsets` log.
    pub log: Vec<Record>,
    /// Fail the next persists with this error instead of making them durable.
    pub fail_persists: Option<ErrorCode>,
    /// The number of persists that carried a heartbeat's answer.
    pub persists: usize,
    /// Group configs, by group id, as the server's metadata view carries them.
    pub group_overrides: BTreeMap<String, ConsumerGroupOverrides>,
}

/// The harness's topics and group configs as the coordinator's view of the cluster.
struct View<'a> {
    topics: &'a BTreeMap<String, TopicInfo>,
    group_overrides: &'a BTreeMap<String, ConsumerGroupOverrides>,
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
    fn consumer_group_overrides(&self, group_id: &str) -> ConsumerGroupOverrides {
        self.group_overrides.get(group_id).copied().unwrap_or_default()
    }
}

/// A consumer following the protocol.
#[derive(Debug, Clone)]
pub struct Client {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub epoch: i32,
    pub owned: Assignment,
    pub topics: Vec<String>,
    /// Subscribes with this SubscribedTopicRegex instead of `topics`.
    pub pattern: Option<String>,
    pub assignor: Option<String>,
}

impl Client {
    pub fn new(member_id: &str, topics: &[&str]) -> Client {
        Client {
            member_id: member_id.to_string(),
            instance_id: None,
            epoch: 0,
            owned: Assignment::new(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            pattern: None,
            assignor: None,
        }
    }

    /// A consumer subscribing with a pattern (`subscribe(Pattern)`).
    pub fn with_pattern(member_id: &str, pattern: &str) -> Client {
        Client { pattern: Some(pattern.to_string()), ..Client::new(member_id, &[]) }
    }

    pub fn with_instance(mut self, instance_id: &str) -> Client {
        self.instance_id = Some(instance_id.to_string());
        self
    }

    /// The request the Java consumer sends: the full one when joining, then epoch and
    /// owned partitions.
    pub fn request(&self) -> ConsumerGroupHeartbeatRequest {
        let joining = self.epoch == 0;
        ConsumerGroupHeartbeatRequest {
            group_id: GROUP.into(),
            member_id: self.member_id.clone(),
            member_epoch: self.epoch,
            instance_id: self.instance_id.clone(),
            rebalance_timeout_ms: if joining { REBALANCE_MS } else { -1 },
            subscribed_topic_names: (joining && self.pattern.is_none()).then(|| self.topics.clone()),
            subscribed_topic_regex: self.pattern.clone().filter(|_| joining),
            server_assignor: if joining { self.assignor.clone() } else { None },
            topic_partitions: Some(owned_list(&self.owned)),
            ..Default::default()
        }
    }

    pub fn count(&self) -> usize {
        self.owned.values().map(BTreeSet::len).sum()
    }
}

pub fn owned_list(owned: &Assignment) -> Vec<TopicPartitions> {
    owned
        .iter()
        .map(|(t, ps)| TopicPartitions { topic_id: *t, partitions: ps.iter().copied().collect(), ..Default::default() })
        .collect()
}

pub fn assignment_of(response: &ConsumerGroupHeartbeatResponse) -> Option<Assignment> {
    response
        .assignment
        .as_ref()
        .map(|a| a.topic_partitions.iter().map(|t| (t.topic_id, t.partitions.iter().copied().collect())).collect())
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(GroupConfig::default())
    }

    pub fn with_config(config: GroupConfig) -> Harness {
        let mut topics = BTreeMap::new();
        topics.insert("t1".to_string(), TopicInfo { topic_id: topic_id(1), num_partitions: 6 });
        topics.insert("t2".to_string(), TopicInfo { topic_id: topic_id(2), num_partitions: 3 });
        Harness {
            coordinator: GroupCoordinator::new(config),
            now: 1_000_000,
            next_reply: 1,
            topics,
            log: Vec::new(),
            fail_persists: None,
            persists: 0,
            group_overrides: BTreeMap::new(),
        }
    }

    /// Sends one heartbeat (version 1) and returns its answer, playing the server until
    /// it comes.
    pub fn send(&mut self, request: &ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse {
        self.send_version(request, 1)
    }

    pub fn send_version(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
        version: i16,
    ) -> ConsumerGroupHeartbeatResponse {
        let reply = ReplyId(self.next_reply);
        self.next_reply += 1;
        self.coordinator.consumer_group_heartbeat(
            request,
            version,
            "client",
            "/10.0.0.1",
            &View { topics: &self.topics, group_overrides: &self.group_overrides },
            reply,
            self.now,
        );
        let mut answer = None;
        while let Some(output) = self.coordinator.poll_output() {
            match output {
                Output::Respond { reply: r, response: Response::ConsumerGroupHeartbeat(response) } => {
                    assert_eq!(r, reply, "an answer for another request");
                    answer = Some(response);
                }
                Output::Respond { response, .. } => panic!("unexpected response {response:?}"),
                Output::Persist { id, records, .. } => {
                    // Nothing is answered before its records are durable.
                    assert!(answer.is_none(), "answered before the persist");
                    self.persists += 1;
                    match self.fail_persists {
                        Some(error) => self.coordinator.persisted(id, Err(error), self.now),
                        None => {
                            self.log.extend(records);
                            self.coordinator.persisted(id, Ok(()), self.now);
                        }
                    }
                }
            }
        }
        self.coordinator.check_invariants().unwrap();
        answer.expect("a heartbeat is always answered")
    }

    /// Moves time on and runs the timers, persisting what they write.
    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
        self.coordinator.tick(self.now);
        self.drain();
    }

    pub fn drain(&mut self) {
        while let Some(output) = self.coordinator.poll_output() {
            match output {
                Output::Persist { id, records, .. } => {
                    self.log.extend(records);
                    self.coordinator.persisted(id, Ok(()), self.now);
                }
                Output::Respond { response, .. } => panic!("unexpected response {response:?}"),
            }
        }
        self.coordinator.check_invariants().unwrap();
    }

    /// One heartbeat of `client`, which then follows the answer as a consumer does.
    pub fn heartbeat(&mut self, client: &mut Client) -> ConsumerGroupHeartbeatResponse {
        let response = self.send(&client.request());
        assert_eq!(response.error_code, 0, "{:?}", response.error_message);
        if let Some(id) = &response.member_id {
            client.member_id = id.clone();
        }
        client.epoch = response.member_epoch;
        if let Some(assignment) = assignment_of(&response) {
            client.owned = assignment;
        }
        response
    }

    /// Heartbeats every client in turn until a round changes nothing, checking after
    /// every heartbeat that no partition is owned by two clients at once.
    pub fn converge(&mut self, clients: &mut [Client]) -> usize {
        for round in 1..=20 {
            let before: Vec<(i32, Assignment)> = clients.iter().map(|c| (c.epoch, c.owned.clone())).collect();
            for i in 0..clients.len() {
                self.heartbeat(&mut clients[i]);
                assert_exclusive(clients);
            }
            let after: Vec<(i32, Assignment)> = clients.iter().map(|c| (c.epoch, c.owned.clone())).collect();
            if before == after {
                return round;
            }
        }
        panic!("no convergence in 20 rounds: {clients:?}");
    }
}

/// No partition is owned by two clients.
pub fn assert_exclusive(clients: &[Client]) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for (t, ps) in &c.owned {
            for p in ps {
                assert!(seen.insert((*t, *p)), "{t}-{p} owned twice: {clients:?}");
            }
        }
    }
}

impl Harness {
    /// Runs `call` with a fresh reply id, plays the server, and returns that reply's answer.
    pub fn call(&mut self, call: impl FnOnce(&mut GroupCoordinator, ReplyId, i64)) -> Option<Response> {
        let reply = ReplyId(self.next_reply);
        self.next_reply += 1;
        call(&mut self.coordinator, reply, self.now);
        let mut answer = None;
        while let Some(output) = self.coordinator.poll_output() {
            match output {
                Output::Respond { reply: r, response } if r == reply => answer = Some(response),
                Output::Respond { response, .. } => panic!("unexpected response {response:?}"),
                Output::Persist { id, records, .. } => {
                    self.log.extend(records);
                    self.coordinator.persisted(id, Ok(()), self.now);
                }
            }
        }
        self.coordinator.check_invariants().unwrap();
        answer
    }
}
