//! Seeded simulation of a consumer group: members join, heartbeat, leave, go silent,
//! topics grow, in random order; in half the seeds the members subscribe with a pattern
//! and topics matching it (or not) are created and deleted. After every step the coordinator's invariants hold and
//! every live client owns exactly what the coordinator says it owns (so no partition is
//! owned twice); once the chaos stops the group converges to a complete, balanced,
//! Stable assignment. A failure names its seed.

mod group_consumer_support;

use group_consumer_support::*;
use osprey_coordinator::group::{ConsumerGroupState, TopicInfo};
/// Seeded SplitMix64 shared with the codec tests: a run replays from its seed.
use osprey_protocol::wire::{simulation_seeds, TestRng as Rng};
use osprey_protocol::ErrorCode;
use std::collections::BTreeSet;

/// The pattern of the pattern-subscribing seeds: `t1`, `t2` and the topics `t3`-`t5`
/// created on the way, never `x1`.
const PATTERN: &str = "t[0-9]+";

struct Sim {
    h: Harness,
    clients: Vec<Client>,
    next_id: u32,
    by_pattern: bool,
}

impl Sim {
    fn new_client(&mut self) -> Client {
        self.next_id += 1;
        let id = format!("member-{:016}", self.next_id);
        if self.by_pattern {
            Client::with_pattern(&id, PATTERN)
        } else {
            Client::new(&id, &["t1", "t2"])
        }
    }

    /// Creates or deletes one of the topics only a pattern can pick up.
    fn create_or_delete_topic(&mut self, rng: &mut Rng) {
        let names = ["t3", "t4", "t5", "x1"];
        let i = rng.below(names.len() as u64) as usize;
        let name = names[i];
        if self.h.topics.remove(name).is_none() {
            let info = TopicInfo { topic_id: topic_id(10 + i as u8), num_partitions: 1 + rng.below(4) as i32 };
            self.h.topics.insert(name.to_string(), info);
        }
    }

    /// The partitions the group's subscriptions cover.
    fn subscribed_partitions(&self) -> usize {
        let subscribed =
            |name: &str| if self.by_pattern { name.starts_with('t') } else { ["t1", "t2"].contains(&name) };
        self.h.topics.iter().filter(|(n, _)| subscribed(n)).map(|(_, t)| t.num_partitions as usize).sum()
    }

    fn heartbeat(&mut self, i: usize) {
        let response = self.h.send(&self.clients[i].request());
        let client = &mut self.clients[i];
        match ErrorCode::from_code(response.error_code) {
            Some(ErrorCode::NONE) => {
                client.epoch = response.member_epoch;
                if let Some(assignment) = assignment_of(&response) {
                    client.owned = assignment;
                }
            }
            // Removed (session or rebalance timeout): drop everything and rejoin.
            Some(ErrorCode::UNKNOWN_MEMBER_ID) | Some(ErrorCode::FENCED_MEMBER_EPOCH) => {
                let fresh = self.new_client();
                self.clients[i] = fresh;
            }
            other => panic!("unexpected {other:?}: {:?}", response.error_message),
        }
    }

    /// Live clients own exactly what the coordinator has them own.
    fn check_clients(&self, seed: u64) {
        let described = self.h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
        let Some(group) = described.groups.first().filter(|g| g.error_code == 0) else { return };
        for member in &group.members {
            let Some(client) = self.clients.iter().find(|c| c.member_id == member.member_id) else { continue };
            let coordinator: BTreeSet<(osprey_protocol::Uuid, i32)> = member
                .assignment
                .topic_partitions
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
                .collect();
            let owned: BTreeSet<(osprey_protocol::Uuid, i32)> =
                client.owned.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p))).collect();
            assert!(
                owned.is_subset(&coordinator),
                "seed {seed}: {} owns {owned:?} beyond {coordinator:?}",
                client.member_id
            );
        }
    }
}

fn run(seed: u64) {
    let mut rng = Rng::new(seed);
    let mut sim = Sim { h: Harness::new(), clients: Vec::new(), next_id: 0, by_pattern: seed % 2 == 1 };
    for _ in 0..3 {
        let c = sim.new_client();
        sim.clients.push(c);
    }
    for _ in 0..300 {
        match rng.below(20) {
            0 if sim.clients.len() < 6 => {
                let c = sim.new_client();
                sim.clients.push(c);
                let i = sim.clients.len() - 1;
                sim.heartbeat(i);
            }
            1 if sim.clients.len() > 1 => {
                let i = rng.below(sim.clients.len() as u64) as usize;
                let mut leave = sim.clients[i].request();
                leave.member_epoch = -1;
                let response = sim.h.send(&leave);
                assert!(
                    [0, ErrorCode::UNKNOWN_MEMBER_ID.code(), ErrorCode::GROUP_ID_NOT_FOUND.code()]
                        .contains(&response.error_code),
                    "seed {seed}: leave answered {response:?}"
                );
                sim.clients.remove(i);
            }
            2 => sim.h.advance(rng.below(30_000) as i64),
            3 if rng.below(10) == 0 => {
                let t = if rng.below(2) == 0 { "t1" } else { "t2" };
                let topic = sim.h.topics.get_mut(t).unwrap();
                topic.num_partitions = (topic.num_partitions + 1).min(12);
            }
            4 if sim.by_pattern && rng.below(3) == 0 => sim.create_or_delete_topic(&mut rng),
            _ => {
                let i = rng.below(sim.clients.len() as u64) as usize;
                sim.heartbeat(i);
            }
        }
        sim.check_clients(seed);
    }
    // The chaos stops: everyone heartbeats until nothing changes.
    for _ in 0..30 {
        for i in 0..sim.clients.len() {
            sim.heartbeat(i);
            sim.check_clients(seed);
        }
    }
    let total = sim.subscribed_partitions();
    let counts: Vec<usize> = sim.clients.iter().map(Client::count).collect();
    assert_eq!(counts.iter().sum::<usize>(), total, "seed {seed}: {counts:?}");
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(max - min <= 1, "seed {seed}: unbalanced {counts:?}");
    assert_eq!(sim.h.coordinator.consumer_group_state(GROUP), Some(ConsumerGroupState::Stable), "seed {seed}");
}

#[test]
fn random_membership_changes_keep_ownership_exclusive_and_converge() {
    for seed in simulation_seeds(64) {
        run(seed);
    }
}
