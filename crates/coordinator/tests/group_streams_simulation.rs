//! A seeded streams-group simulation: Kafka Streams members (threads of a few processes)
//! join with the word count's topology, heartbeat their owned tasks (sometimes without
//! them, sometimes losing the answer and coming back at their previous epoch), leave,
//! fall silent until their session runs out; the input topic grows; the number of standby
//! replicas changes; time passes. After every step the coordinator's invariants hold (an
//! active task owned by one member, no process holding a task twice), no two live clients
//! run the same active task, each client runs at most what the coordinator says it owns,
//! and the group reloaded from its records equals the live one. Once the chaos stops the
//! group converges: every member Stable at the target epoch, every task of a ready
//! topology run by exactly one member, no standby where its active task runs. A failure
//! names its seed.

mod streams_group_support;

use osprey_coordinator::group::group_config::StreamsGroupOverrides;
use osprey_coordinator::group::streams::{task_set, StreamsGroupState};
use osprey_coordinator::group::GroupConfig;
use osprey_protocol::wire::{simulation_seeds, TestRng as Rng};
use osprey_protocol::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};
use streams_group_support::*;

struct Sim {
    h: Harness,
    rng: Rng,
    clients: Vec<Client>,
    next_member: u32,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let config = GroupConfig {
            streams_group_initial_rebalance_delay_ms: if rng.chance(2) { 0 } else { 3_000 },
            streams_group_assignment_interval_ms: if rng.chance(2) { 0 } else { 1_000 },
            ..GroupConfig::default()
        };
        let mut h = Harness::new(config);
        h.set_topic(INPUT, 1 + rng.below(4) as i32);
        Sim { h, rng, clients: Vec::new(), next_member: 0 }
    }

    fn step(&mut self) -> String {
        match self.rng.below(12) {
            0 | 1 if self.clients.len() < 8 => {
                self.next_member += 1;
                let process = format!("p{}", self.rng.below(4));
                let mut client = Client::new(&format!("m{}", self.next_member), &process);
                // A member that lost the answer asking it to revoke is stuck there (Kafka
                // sends tasks only when they change) until its rebalance timeout fences it.
                client.rebalance_timeout_ms = 20_000;
                let answer = client.heartbeat(&mut self.h);
                assert_eq!(answer.response.error_code, 0, "{:?}", answer.response.error_message);
                let what = format!("join {} in {process}", client.member_id);
                self.clients.push(client);
                what
            }
            2 if !self.clients.is_empty() => {
                let i = self.pick();
                let mut request = self.clients[i].request();
                request.member_epoch = -1;
                let answer = self.h.send(&request);
                let member = self.clients.remove(i).member_id;
                format!("leave {member}: {}", answer.response.error_code)
            }
            3 if !self.clients.is_empty() => {
                // A member goes silent: its session runs out unless it comes back first.
                let i = self.pick();
                let member = self.clients.remove(i).member_id;
                format!("silent {member}")
            }
            4 if self.rng.chance(4) => {
                // The input grows: the internal topics no longer match (Kafka's
                // INCORRECTLY_PARTITIONED_TOPICS), and the group waits.
                let partitions = self.h.topics[INPUT].num_partitions + 1;
                self.h.set_topic(INPUT, partitions);
                format!("input -> {partitions}")
            }
            5 => {
                let standby = self.rng.below(3) as i32;
                let overrides = StreamsGroupOverrides { num_standby_replicas: Some(standby), ..Default::default() };
                self.h.overrides.insert(GROUP.into(), overrides);
                format!("standby replicas -> {standby}")
            }
            6 => {
                let advance = self.rng.below(30_000) as i64;
                let gone = self.tick(advance);
                format!("tick {advance} fenced {gone:?}")
            }
            _ if !self.clients.is_empty() => {
                let i = self.pick();
                let mut request = self.clients[i].request();
                let omit_owned = self.rng.chance(6);
                if omit_owned && self.clients[i].joined {
                    request.active_tasks = None;
                    request.standby_tasks = None;
                    request.warmup_tasks = None;
                }
                let answer = self.h.send(&request);
                let lost = self.rng.chance(8);
                let client = &mut self.clients[i];
                let code = answer.response.error_code;
                if code != 0 {
                    assert!(
                        code == ErrorCode::FENCED_MEMBER_EPOCH.code() || code == ErrorCode::UNKNOWN_MEMBER_ID.code(),
                        "heartbeat of {}: {:?}",
                        client.member_id,
                        answer.response.error_message
                    );
                    // Fenced: the client abandons its tasks and rejoins under its id.
                    client.apply(&answer.response);
                    return format!("heartbeat {} fenced ({code})", client.member_id);
                }
                if !lost {
                    client.apply(&answer.response);
                }
                format!(
                    "heartbeat {} -> {} lost={lost} omit={omit_owned}",
                    client.member_id, answer.response.member_epoch
                )
            }
            _ => "idle".into(),
        }
    }

    /// Every client heartbeats once. A client fenced earlier keeps being fenced (Kafka
    /// refuses epoch 0 from a member it still holds at a later epoch) until its old
    /// member's session runs out.
    fn heartbeat_all(&mut self) {
        for i in 0..self.clients.len() {
            let answer = self.clients[i].heartbeat(&mut self.h);
            let code = answer.response.error_code;
            assert!(code == 0 || code == ErrorCode::FENCED_MEMBER_EPOCH.code(), "{:?}", answer.response.error_message);
        }
    }

    fn pick(&mut self) -> usize {
        self.rng.below(self.clients.len() as u64) as usize
    }

    /// Time passes; the clients the coordinator fenced meanwhile find out at their next
    /// heartbeat (they rejoin). Returns the members fenced.
    fn tick(&mut self, advance_ms: i64) -> Vec<String> {
        self.h.tick(advance_ms);
        let known: BTreeSet<String> =
            self.h.coordinator.streams_group(GROUP).map(|g| g.members.keys().cloned().collect()).unwrap_or_default();
        let mut gone = Vec::new();
        for client in &mut self.clients {
            if client.joined && !known.contains(&client.member_id) {
                gone.push(client.member_id.clone());
                // A fenced member's client stops processing: Kafka Streams closes its
                // tasks as lost when its heartbeat is refused.
                client.epoch = 0;
                client.joined = false;
                client.active.clear();
                client.standby.clear();
                client.warmup.clear();
            }
        }
        gone
    }

    fn check(&self) {
        self.h.coordinator.check_invariants().expect("invariants");
        let Some(group) = self.h.coordinator.streams_group(GROUP) else { return };
        // Each client runs at most what the coordinator says it owns (assigned or being
        // revoked), so no two clients run one active task.
        let mut running: BTreeMap<(String, i32), &str> = BTreeMap::new();
        for client in &self.clients {
            let Some(member) = group.members.get(&client.member_id) else {
                assert!(client.active.is_empty(), "{} runs tasks outside the group", client.member_id);
                continue;
            };
            let owned = task_set(&member.assigned.active);
            let revoking = task_set(&member.pending_revocation.active);
            for (s, ps) in &client.active {
                for p in ps {
                    let held =
                        owned.get(s).is_some_and(|o| o.contains(p)) || revoking.get(s).is_some_and(|o| o.contains(p));
                    assert!(held, "{} runs {s}-{p} it does not own", client.member_id);
                    if let Some(other) = running.insert((s.clone(), *p), &client.member_id) {
                        panic!("{s}-{p} run by {other} and {}", client.member_id);
                    }
                }
            }
        }
        let reloaded = self.h.reloaded();
        assert_eq!(reloaded.streams_group(GROUP).map(|g| g.durable()), Some(group.durable()), "reload differs");
    }

    /// Every client heartbeats, with time passing, until nothing changes; then the group
    /// is Stable and every task is run by exactly one member.
    /// The group's records reload as the group is (what is not persisted aside).
    fn check_reload(&self) {
        let live = self.h.coordinator.streams_group(GROUP).map(|g| g.durable());
        let reloaded = self.h.reloaded();
        assert_eq!(reloaded.streams_group(GROUP).map(|g| g.durable()), live, "the group reloaded from its records");
    }

    fn settle_and_check(&mut self) {
        self.check_reload();
        // The silent members' sessions (45 s) run out while the others heartbeat.
        for _ in 0..2 {
            self.heartbeat_all();
            self.tick(25_000);
            self.check();
        }
        for _ in 0..12 {
            self.heartbeat_all();
            self.tick(1_000);
            self.check();
        }
        assert!(self.clients.iter().all(|c| c.epoch > 0), "every client is back in the group");
        let Some(group) = self.h.coordinator.streams_group(GROUP) else { return };
        if group.members.is_empty() {
            return;
        }
        let state = group.state();
        if state == StreamsGroupState::NotReady {
            // The input grew past its internal topics: Kafka waits for an operator.
            return;
        }
        assert_eq!(state, StreamsGroupState::Stable, "{group:?}");
        let configured = group.configured.as_ref().expect("configured").subtopologies.clone().expect("ready");
        let mut run: BTreeMap<(String, i32), usize> = BTreeMap::new();
        for m in group.members.values() {
            assert_eq!(m.member_epoch, group.assignment_epoch);
            for (s, ps) in &m.assigned.active {
                for p in ps.keys() {
                    *run.entry((s.clone(), *p)).or_default() += 1;
                }
            }
        }
        for (id, subtopology) in &configured {
            for p in 0..subtopology.num_tasks {
                assert_eq!(run.get(&(id.clone(), p)), Some(&1), "task {id}-{p}");
            }
        }
        // A standby never shares a process with its active task.
        let active_on: BTreeMap<(String, i32), &str> = group
            .members
            .values()
            .flat_map(|m| {
                m.assigned
                    .active
                    .iter()
                    .flat_map(move |(s, ps)| ps.keys().map(move |p| ((s.clone(), *p), m.process_id.as_str())))
            })
            .collect();
        for m in group.members.values() {
            for (s, ps) in &m.assigned.standby {
                for p in ps {
                    assert_ne!(active_on.get(&(s.clone(), *p)), Some(&m.process_id.as_str()), "standby {s}-{p}");
                }
            }
        }
    }
}

#[test]
fn streams_group_simulation() {
    for seed in simulation_seeds(40) {
        let result = std::panic::catch_unwind(|| {
            let mut sim = Sim::new(seed);
            let trace = std::env::var("SIM_TRACE").is_ok();
            for step in 0..150 {
                let what = sim.step();
                if trace {
                    println!("{seed} {step}: {what}");
                }
                sim.check();
                if step % 10 == 9 {
                    sim.check_reload();
                }
                if step % 50 == 49 {
                    sim.settle_and_check();
                }
            }
        });
        if let Err(e) = result {
            eprintln!("streams group simulation failed at seed {seed} (SIM_SEED={seed} SIM_TRACE=1)");
            std::panic::resume_unwind(e);
        }
    }
}
