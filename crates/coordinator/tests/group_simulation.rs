//! Seeded simulation: clients join, sync, heartbeat, commit, leave and restart at random
//! while time passes and appends succeed, fail or lag. After every step the
//! coordinator's invariants hold; every held request is answered exactly once; and once
//! the clients stop, every held request is answered and nothing stays held. Offsets
//! visible to OffsetFetch are exactly the acknowledged ones, across crashes (appends in
//! flight lost, log reloaded) and partition moves (unload, reload).
//!
//! A failure prints its seed; `SIM_TRACE=1` prints every step.

mod group_support;

use group_support::{subscription, Harness};
use osprey_coordinator::group::{GroupConfig, ReplyId, Response};
use osprey_protocol::messages::leave_group_request::{LeaveGroupRequest, MemberIdentity};
/// Seeded SplitMix64 shared with the codec tests: a run replays from its seed.
use osprey_protocol::wire::{simulation_seeds, TestRng as Rng};
use osprey_protocol::ErrorCode;
use std::collections::BTreeSet;

const G: &str = "sim-group";

#[derive(Default, Clone)]
struct Client {
    instance: Option<String>,
    member_id: String,
    generation: i32,
    leader: bool,
    /// Member ids of the last generation, for the leader's assignment.
    known_members: Vec<String>,
}

struct Sim {
    h: Harness,
    rng: Rng,
    clients: Vec<Client>,
    /// Requests sent whose answer may come later.
    outstanding: BTreeSet<ReplyId>,
    /// How often each (response kind, error code) came back: the run's coverage.
    seen: std::collections::BTreeMap<(&'static str, i16), usize>,
    /// Per partition (= client index): the offset of the last commit acknowledged.
    durable_offsets: std::collections::BTreeMap<i32, i64>,
    /// Commits in flight: reply -> (partition, offset).
    commits: std::collections::BTreeMap<ReplyId, (i32, i64)>,
    next_offset: i64,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let config = GroupConfig { member_id_seed: seed, ..Default::default() };
        let mut clients = vec![Client::default(); 5];
        clients[3].instance = Some("static-3".into());
        clients[4].instance = Some("static-4".into());
        let mut h = Harness::with_config(config);
        h.auto_persist = false;
        Sim {
            h,
            rng: Rng::new(seed),
            clients,
            outstanding: BTreeSet::new(),
            seen: Default::default(),
            durable_offsets: Default::default(),
            commits: Default::default(),
            next_offset: 0,
        }
    }

    fn step(&mut self) {
        let c = self.rng.below(self.clients.len() as u64) as usize;
        let action = self.rng.below(12);
        if std::env::var("SIM_TRACE").is_ok() {
            eprintln!("t={} client {c} action {action} durable {:?}", self.h.now, self.durable_offsets);
        }
        match action {
            0..=2 => self.join(c),
            3..=4 => self.sync(c),
            5..=6 => self.heartbeat(c),
            7 => self.leave(c),
            8 => self.commit(c),
            9 if self.rng.below(20) == 0 => {
                if self.rng.below(2) == 0 {
                    self.crash_and_reload()
                } else {
                    self.move_away_and_back()
                }
            }
            9 => {
                // The client restarts and forgets its member id.
                self.clients[c].member_id.clear();
                self.join(c);
            }
            _ => {
                let ms = self.rng.below(8_000) as i64;
                self.h.advance(ms);
            }
        }
        self.settle_persists();
        self.collect();
        if let Err(e) = self.h.coordinator.check_invariants() {
            panic!("invariant broken: {e}");
        }
        self.check_offsets();
    }

    /// Appends complete, fail, or stay in flight a while.
    fn settle_persists(&mut self) {
        match self.rng.below(4) {
            0 => {}
            1 if self.rng.below(4) == 0 => self.h.fail_persists(ErrorCode::NOT_ENOUGH_REPLICAS),
            1 => self.h.complete_persists_reported_newest_first(),
            _ => self.h.complete_persists(),
        }
    }

    fn send_join(&mut self, c: usize) -> ReplyId {
        // Now and then a confused client sends someone else's member id.
        let mut client = self.clients[c].clone();
        if self.rng.below(10) == 0 {
            let other = self.rng.below(self.clients.len() as u64) as usize;
            client.member_id = self.clients[other].member_id.clone();
        }
        let client = &client;
        let topics = if c < 2 { vec!["a"] } else { vec!["a", "b"] };
        let request = Harness::join_request(
            G,
            &client.member_id,
            client.instance.as_deref(),
            &[("range", subscription(&topics))],
        );
        let version = if client.instance.is_some() { 9 } else { [3, 5, 9][self.rng.below(3) as usize] };
        self.h.send_join(&request, version)
    }

    fn join(&mut self, c: usize) {
        let reply = self.send_join(c);
        self.outstanding.insert(reply);
    }

    fn sync(&mut self, c: usize) {
        let client = self.clients[c].clone();
        let assignments: Vec<(String, Vec<u8>)> = if client.leader {
            client.known_members.iter().map(|m| (m.clone(), vec![1, 2, 3])).collect()
        } else {
            Vec::new()
        };
        let refs: Vec<(&str, &[u8])> = assignments.iter().map(|(m, a)| (m.as_str(), a.as_slice())).collect();
        let reply = self.h.send_sync(G, client.generation, &client.member_id, client.instance.as_deref(), &refs);
        self.outstanding.insert(reply);
    }

    fn heartbeat(&mut self, c: usize) {
        let client = self.clients[c].clone();
        let error = self.h.heartbeat(G, client.generation, &client.member_id, client.instance.as_deref());
        if error == ErrorCode::UNKNOWN_MEMBER_ID.code() || error == ErrorCode::FENCED_INSTANCE_ID.code() {
            self.clients[c].member_id.clear();
        }
    }

    fn leave(&mut self, c: usize) {
        let client = self.clients[c].clone();
        let request = LeaveGroupRequest {
            group_id: G.into(),
            members: vec![MemberIdentity {
                member_id: client.member_id.clone(),
                group_instance_id: client.instance.clone(),
                ..Default::default()
            }],
            ..Default::default()
        };
        self.h.coordinator.leave(&request, 5, self.h.now);
        self.h.drain();
        self.clients[c].member_id.clear();
    }

    fn commit(&mut self, c: usize) {
        let client = self.clients[c].clone();
        self.next_offset += 1;
        let offset = self.next_offset;
        let mut request = Harness::commit_request(G, client.generation, &client.member_id, &[("a", c as i32, offset)]);
        request.group_instance_id = client.instance.clone();
        let reply = self.h.send_commit(&request);
        self.outstanding.insert(reply);
        self.commits.insert(reply, (c as i32, offset));
    }

    /// Applies every response to its client; each must answer an outstanding request.
    fn collect(&mut self) {
        for (reply, response) in self.h.take_all() {
            assert!(self.outstanding.remove(&reply), "response for {reply:?} nobody waits for: {response:?}");
            if let (Some((partition, offset)), Response::OffsetCommit(r)) = (self.commits.remove(&reply), &response) {
                if r.topics[0].partitions[0].error_code == 0 {
                    self.durable_offsets.insert(partition, offset);
                }
            }
            let kind = match &response {
                Response::JoinGroup(r) => ("join", r.error_code),
                Response::SyncGroup(r) => ("sync", r.error_code),
                Response::OffsetCommit(r) => ("commit", r.topics[0].partitions[0].error_code),
                Response::DeleteGroups(_) => ("delete", 0),
                Response::OffsetDelete(r) => ("offset-delete", r.error_code),
                Response::ConsumerGroupHeartbeat(r) => ("consumer-heartbeat", r.error_code),
                Response::TxnOffsetCommit(r) => ("txn-commit", r.topics[0].partitions[0].error_code),
                Response::ShareGroupHeartbeat(r) => ("share-heartbeat", r.error_code),
                Response::ShareGroupOffsets(_) => ("share-offsets", 0),
                Response::StreamsGroupHeartbeat(a) => ("streams-heartbeat", a.response.error_code),
            };
            *self.seen.entry(kind).or_default() += 1;
            if let Response::JoinGroup(join) = response {
                // The client is whichever one sent it; match by the member id it names.
                let Some(c) = self.client_for(&join.member_id) else { continue };
                let client = &mut self.clients[c];
                match ErrorCode::from_code(join.error_code) {
                    Some(ErrorCode::NONE) => {
                        client.generation = join.generation_id;
                        client.leader = join.leader == join.member_id;
                        client.known_members = join.members.iter().map(|m| m.member_id.clone()).collect();
                    }
                    Some(ErrorCode::UNKNOWN_MEMBER_ID | ErrorCode::FENCED_INSTANCE_ID) => client.member_id.clear(),
                    _ => {}
                }
            }
        }
    }

    /// Offsets visible to OffsetFetch are exactly the acknowledged ones.
    fn check_offsets(&self) {
        let partitions: Vec<i32> = (0..self.clients.len() as i32).collect();
        for p in self.h.fetch(G, "a", &partitions) {
            let expected = self.durable_offsets.get(&p.partition_index).copied().unwrap_or(-1);
            assert_eq!(p.committed_offset, expected, "partition {}", p.partition_index);
        }
    }

    /// The broker crashes: appends in flight are lost, connections drop, and a new
    /// coordinator loads the log.
    fn crash_and_reload(&mut self) {
        self.h.held_persists.clear();
        self.h.take_all();
        self.outstanding.clear();
        self.commits.clear();
        let log = self.h.log.clone();
        // A restarted broker seeds its member ids afresh.
        let config = GroupConfig { member_id_seed: self.rng.next_u64(), ..self.h.coordinator.config().clone() };
        let mut coordinator = osprey_coordinator::group::GroupCoordinator::new(config);
        coordinator.load(log, self.h.now).expect("our own log loads");
        self.h.coordinator = coordinator;
    }

    /// The coordinator loses the group's partition (everything held is answered
    /// NOT_COORDINATOR, appends in flight fail) and later gets it back and loads it.
    fn move_away_and_back(&mut self) {
        let partition = osprey_coordinator::group::partition_for(G, 50);
        let present = usize::from(self.h.coordinator.group_state(G).is_some());
        assert_eq!(self.h.coordinator.unload_partition(partition, 50, self.h.now), present);
        self.h.drain();
        assert_eq!(self.h.coordinator.group_state(G), None);
        self.h.fail_persists(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        self.collect();
        assert!(self.outstanding.is_empty(), "unload left {:?} unanswered", self.outstanding);
        let log = self.h.log.clone();
        self.h.coordinator.load(log, self.h.now).expect("our own log loads");
    }

    fn client_for(&mut self, member_id: &str) -> Option<usize> {
        if member_id.is_empty() {
            return None;
        }
        if let Some(c) = self.clients.iter().position(|c| c.member_id == member_id) {
            return Some(c);
        }
        // A new member id (MEMBER_ID_REQUIRED or a fresh join): give it to the client whose
        // prefix it carries and that has none yet.
        let c = self.clients.iter().position(|c| {
            c.member_id.is_empty()
                && match &c.instance {
                    Some(i) => member_id.starts_with(&format!("{i}-")),
                    None => member_id.starts_with("client-"),
                }
        })?;
        self.clients[c].member_id = member_id.to_string();
        Some(c)
    }

    /// The clients stop; the coordinator must answer everything it holds.
    fn quiesce(&mut self) {
        for _ in 0..10 {
            self.h.complete_persists();
            self.h.advance(400_000);
            self.h.complete_persists();
            self.collect();
        }
        assert!(self.outstanding.is_empty(), "never answered: {:?}", self.outstanding);
        assert_eq!(self.h.coordinator.held_replies(), 0);
        self.h.coordinator.check_invariants().unwrap();
    }
}

#[test]
fn random_clients_never_break_invariants_or_lose_replies() {
    let mut seen = std::collections::BTreeMap::new();
    for seed in simulation_seeds(200) {
        let mut sim = Sim::new(seed);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for _ in 0..300 {
                sim.step();
            }
            sim.quiesce();
        }));
        if let Err(e) = outcome {
            eprintln!("failing seed: {seed}");
            std::panic::resume_unwind(e);
        }
        for (k, n) in sim.seen {
            *seen.entry(k).or_insert(0) += n;
        }
    }
    eprintln!("responses seen (kind, error code): {seen:?}");
    // The run must reach the interesting paths, not just bounce off errors.
    for wanted in [
        ("join", 0),
        ("join", ErrorCode::MEMBER_ID_REQUIRED.code()),
        ("join", ErrorCode::UNKNOWN_MEMBER_ID.code()),
        ("sync", 0),
        ("sync", ErrorCode::REBALANCE_IN_PROGRESS.code()),
        ("sync", ErrorCode::ILLEGAL_GENERATION.code()),
        ("commit", 0),
        ("commit", ErrorCode::ILLEGAL_GENERATION.code()),
        ("commit", ErrorCode::COORDINATOR_NOT_AVAILABLE.code()),
        ("sync", ErrorCode::COORDINATOR_NOT_AVAILABLE.code()),
    ] {
        assert!(seen.get(&wanted).copied().unwrap_or(0) > 0, "never saw {wanted:?}");
    }
}
