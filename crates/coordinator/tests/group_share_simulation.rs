//! A seeded share-group simulation: members join, heartbeat (sometimes with a lost
//! response, coming back at their previous epoch), leave, let their sessions expire;
//! topics are created and grow; and after every step the coordinator's invariants hold,
//! every member's epoch is at most the group epoch, and the group reloaded from its
//! records equals the live one. Once every member has heartbeated after the last change,
//! every partition of every subscribed topic is assigned to at least one member. A failure
//! names its seed.

mod share_group_support;

use osprey_protocol::wire::{simulation_seeds, TestRng as Rng};
use share_group_support::*;
use std::collections::{BTreeMap, BTreeSet};

const TOPICS: [&str; 3] = ["t1", "t2", "t3"];

struct Sim {
    h: Harness,
    rng: Rng,
    /// The epoch each client believes it has, by member id.
    clients: BTreeMap<String, i32>,
    /// Each client's subscription.
    subscriptions: BTreeMap<String, Vec<&'static str>>,
    next_member: u32,
}

impl Sim {
    fn step(&mut self) -> String {
        match self.rng.below(10) {
            0 | 1 if self.clients.len() < 12 => {
                let id = format!("m{}", self.next_member);
                self.next_member += 1;
                let topics: Vec<&'static str> = TOPICS.iter().copied().filter(|_| self.rng.chance(2)).collect();
                let topics = if topics.is_empty() { vec!["t1"] } else { topics };
                let r = self.h.heartbeat(&id, 0, Some(&topics));
                assert_eq!(r.error_code, 0, "{:?}", r.error_message);
                self.clients.insert(id.clone(), r.member_epoch);
                self.subscriptions.insert(id.clone(), topics.clone());
                format!("join {id} {topics:?}")
            }
            2 if !self.clients.is_empty() => {
                let id = self.pick();
                let r = self.h.heartbeat(&id, -1, None);
                assert_eq!(r.error_code, 0, "{:?}", r.error_message);
                self.forget(&id);
                format!("leave {id}")
            }
            3 => {
                let name = TOPICS[self.rng.below(3) as usize];
                let id = TOPICS.iter().position(|t| *t == name).unwrap() as u8 + 1;
                let now = self.h.topics.get(name).map_or(0, |t| t.num_partitions);
                let partitions = now + 1 + self.rng.below(3) as i32;
                self.h.set_topic(name, id, partitions);
                format!("topic {name} -> {partitions}")
            }
            4 => {
                // Time passes: members who stay silent past their session are fenced.
                let advance = self.rng.below(20_000) as i64;
                self.h.tick(advance);
                let known: BTreeSet<String> = self
                    .h
                    .coordinator
                    .share_group(GROUP)
                    .map(|g| g.members.keys().cloned().collect())
                    .unwrap_or_default();
                let gone: Vec<String> = self.clients.keys().filter(|id| !known.contains(*id)).cloned().collect();
                for id in &gone {
                    self.forget(id);
                }
                format!("tick {advance} fenced {gone:?}")
            }
            _ if !self.clients.is_empty() => {
                let id = self.pick();
                let epoch = self.clients[&id];
                let full = self.rng.chance(4);
                let topics = self.subscriptions[&id].clone();
                let r = self.h.heartbeat(&id, epoch, full.then_some(topics.as_slice()));
                if r.error_code == osprey_protocol::ErrorCode::FENCED_MEMBER_EPOCH.code() {
                    // Two responses lost in a row: the coordinator fenced the client,
                    // which abandons this member id (its session expires) and is gone.
                    self.forget(&id);
                    return format!("heartbeat {id} at {epoch} fenced");
                }
                assert_eq!(r.error_code, 0, "heartbeat {id} at {epoch}: {:?}", r.error_message);
                // One response in eight is lost: the client keeps its old epoch.
                if !self.rng.chance(8) {
                    self.clients.insert(id.clone(), r.member_epoch);
                }
                format!("heartbeat {id} at {epoch} -> {}", r.member_epoch)
            }
            _ => "idle".into(),
        }
    }

    /// Time passes; returns the clients fenced meanwhile.
    fn tick(&mut self, advance_ms: i64) -> Vec<String> {
        self.h.tick(advance_ms);
        let known: BTreeSet<String> =
            self.h.coordinator.share_group(GROUP).map(|g| g.members.keys().cloned().collect()).unwrap_or_default();
        let gone: Vec<String> = self.clients.keys().filter(|id| !known.contains(*id)).cloned().collect();
        for id in &gone {
            self.forget(id);
        }
        gone
    }

    fn heartbeat_all(&mut self) {
        let ids: Vec<String> = self.clients.keys().cloned().collect();
        for id in ids {
            let r = self.h.heartbeat(&id, self.clients[&id], None);
            if r.error_code == osprey_protocol::ErrorCode::FENCED_MEMBER_EPOCH.code() {
                self.forget(&id);
                continue;
            }
            assert_eq!(r.error_code, 0, "{:?}", r.error_message);
            self.clients.insert(id, r.member_epoch);
        }
    }

    fn pick(&mut self) -> String {
        let ids: Vec<&String> = self.clients.keys().collect();
        ids[self.rng.below(ids.len() as u64) as usize].clone()
    }

    fn forget(&mut self, id: &str) {
        self.clients.remove(id);
        self.subscriptions.remove(id);
    }

    fn check(&mut self) {
        self.h.coordinator.check_invariants().expect("invariants");
        let Some(group) = self.h.coordinator.share_group(GROUP).cloned() else { return };
        for m in group.members.values() {
            assert!(
                m.member_epoch <= group.group_epoch,
                "member {} at {} > {}",
                m.member_id,
                m.member_epoch,
                group.group_epoch
            );
        }
        let reloaded = self.h.reloaded();
        assert_eq!(reloaded.share_group(GROUP).map(|g| g.durable()), Some(group.durable()), "reload differs");
    }

    /// The clients heartbeat while the sessions of abandoned members run out, then until
    /// nothing changes; then every member is at the group epoch and every partition of
    /// every subscribed existing topic is assigned to at least one member.
    fn settle_and_check_coverage(&mut self) {
        for _ in 0..2 {
            self.heartbeat_all();
            self.tick(25_000);
        }
        for _ in 0..2 {
            self.heartbeat_all();
        }
        let Some(group) = self.h.coordinator.share_group(GROUP).cloned() else { return };
        if group.members.is_empty() {
            return;
        }
        let mut covered: BTreeSet<(u8, i32)> = BTreeSet::new();
        for m in group.members.values() {
            assert_eq!(m.member_epoch, group.group_epoch, "member {} not reconciled", m.member_id);
            for (topic, ps) in &m.assigned_partitions {
                covered.extend(ps.iter().map(|p| (topic.0[0], *p)));
            }
        }
        let subscribed: BTreeSet<&str> = self.subscriptions.values().flatten().copied().collect();
        for name in subscribed {
            if let Some(info) = self.h.topics.get(name) {
                for p in 0..info.num_partitions {
                    assert!(covered.contains(&(info.topic_id.0[0], p)), "{name}-{p} assigned to nobody");
                }
            }
        }
    }
}

#[test]
fn share_group_simulation() {
    for seed in simulation_seeds(50) {
        let result = std::panic::catch_unwind(|| {
            let mut sim = Sim {
                h: Harness::with_topics(&[("t1", 1, 2)]),
                rng: Rng::new(seed),
                clients: BTreeMap::new(),
                subscriptions: BTreeMap::new(),
                next_member: 0,
            };
            let trace = std::env::var("SIM_TRACE").is_ok();
            for step in 0..120 {
                let what = sim.step();
                if trace {
                    println!("{seed} {step}: {what}");
                }
                sim.check();
                if step % 30 == 29 {
                    sim.settle_and_check_coverage();
                    sim.check();
                }
            }
        });
        if let Err(e) = result {
            eprintln!("share group simulation failed at seed {seed} (SIM_FIRST_SEED={seed} SIM_SEEDS=1 SIM_TRACE=1)");
            std::panic::resume_unwind(e);
        }
    }
}
