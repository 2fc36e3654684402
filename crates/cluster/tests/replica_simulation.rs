//! Seeded simulation of one partition's replica state machine on its leader (broker 1)
//! with one to three followers: appends, fsyncs, follower fetches, transactions opening
//! and closing, time passing, AlterPartition answers, the controller removing a fenced
//! follower, leadership moving away and back, and `min.insync.replicas` changing. The
//! simulation keeps the true logs (what each replica has, and has made durable) and
//! checks after every step that:
//! - the ISR contains the leader;
//! - the high watermark never goes back on a leader, never passes the log end offset of
//!   an ISR member, nor (under `fsync_before_ack`) what an ISR member made durable, and
//!   does not move while the ISR is under the effective `min.insync.replicas`;
//! - the last stable offset never passes the high watermark;
//! - an acknowledged acks=all request lies below the high watermark when it completes,
//!   an acks=1 request below what the leader counts; nothing completes twice;
//! - no request stays waiting once the high watermark (or the leader) passed it, once
//!   the ISR is below the effective minimum, or once leadership is gone.
//!
//! At the end every replica catches up and every request is answered.
//! A failure prints its seed; `SIM_SEED=n` replays one seed, `SIM_TRACE=1` prints every
//! step.

use osprey_cluster::replica::{AckLevel, Assignment, IsrChange, LocalLog, Output, ReplicaConfig, ReplicaState};
/// Seeded SplitMix64 shared with the codec tests: a run replays from its seed.
use osprey_protocol::wire::{simulation_seeds, TestRng as Rng};
use osprey_protocol::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

const LOCAL: i32 = 1;
const LAG_MS: i64 = 10_000;
const STEPS: usize = 400;

/// A replica's true log.
#[derive(Debug, Clone, Copy, Default)]
struct TrueLog {
    end: i64,
    durable: i64,
}

#[derive(Debug, Clone, Copy)]
struct Request {
    required_offset: i64,
    level: AckLevel,
}

struct Sim {
    rng: Rng,
    trace: bool,
    now: i64,
    fsync_before_ack: bool,
    min_insync_replicas: usize,
    state: ReplicaState,
    /// The controller's record of the partition.
    controller: Assignment,
    leader: TrueLog,
    followers: BTreeMap<i32, TrueLog>,
    first_unstable_offset: Option<i64>,
    /// AlterPartition requests sent and not answered.
    proposals: Vec<IsrChange>,
    next_request: u64,
    waiting: BTreeMap<u64, Request>,
    completed: BTreeSet<u64>,
    /// The high watermark last seen while leading (reset when leadership changes).
    leader_high_watermark: Option<i64>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let follower_count = 1 + rng.below(3) as i32;
        let replicas: Vec<i32> = (LOCAL..=LOCAL + follower_count).collect();
        let fsync_before_ack = rng.below(4) != 0;
        let min_insync_replicas = 1 + rng.below(3) as usize;
        let controller = Assignment {
            leader: LOCAL,
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: replicas.clone(),
            isr: replicas,
        };
        let config =
            ReplicaConfig { local_id: LOCAL, replica_lag_time_max_ms: LAG_MS, min_insync_replicas, fsync_before_ack };
        let local = LocalLog { log_end_offset: 0, durable_end_offset: 0, first_unstable_offset: None };
        let state = ReplicaState::new(config, controller.clone(), local, 0, 0);
        Sim {
            rng,
            trace: std::env::var_os("SIM_TRACE").is_some(),
            now: 0,
            fsync_before_ack,
            min_insync_replicas,
            state,
            followers: (LOCAL + 1..=LOCAL + follower_count).map(|id| (id, TrueLog::default())).collect(),
            controller,
            leader: TrueLog::default(),
            first_unstable_offset: None,
            proposals: Vec::new(),
            next_request: 0,
            waiting: BTreeMap::new(),
            completed: BTreeSet::new(),
            leader_high_watermark: Some(0),
        }
    }

    fn local_log(&self) -> LocalLog {
        LocalLog {
            log_end_offset: self.leader.end,
            durable_end_offset: self.leader.durable,
            first_unstable_offset: self.first_unstable_offset,
        }
    }

    fn report_local_log(&mut self) {
        let local = self.local_log();
        self.state.local_log_changed(local, self.now);
    }

    fn step(&mut self) {
        self.now += self.rng.below(LAG_MS as u64 / 4) as i64;
        let leading = self.state.is_leader();
        match self.rng.below(20) {
            0..=3 if leading => self.append(),
            4..=6 if self.leader.durable < self.leader.end => {
                self.leader.durable += 1 + self.rng.below((self.leader.end - self.leader.durable) as u64) as i64;
                self.trace(format!("fsync to {}", self.leader.durable));
                self.report_local_log();
            }
            7..=10 if leading => {
                let ids: Vec<i32> = self.followers.keys().copied().collect();
                let id = ids[self.rng.below(ids.len() as u64) as usize];
                self.follower_fetch(id);
            }
            11 => {
                self.first_unstable_offset = match self.rng.below(2) {
                    0 => None,
                    _ => Some(self.rng.below(self.leader.end as u64 + 1) as i64),
                };
                self.trace(format!("first unstable offset {:?}", self.first_unstable_offset));
                self.report_local_log();
            }
            12 | 13 => {
                self.trace(format!("tick at {}", self.now));
                self.state.tick(self.now);
            }
            14 | 15 => self.answer_proposal(),
            16 => self.fence_follower(),
            17 => self.move_leadership(),
            18 => {
                self.min_insync_replicas = 1 + self.rng.below(3) as usize;
                self.trace(format!("min.insync.replicas={}", self.min_insync_replicas));
                let config = ReplicaConfig { min_insync_replicas: self.min_insync_replicas, ..self.state.config() };
                self.state.set_config(config, self.now);
            }
            19 => {
                if let Some(&id) = self.waiting.keys().next() {
                    self.trace(format!("request {id} times out"));
                    assert!(self.state.cancel(id), "request {id} was waiting");
                    self.waiting.remove(&id);
                    self.completed.insert(id);
                }
            }
            _ => {}
        }
        self.drain();
        self.check();
    }

    fn append(&mut self) {
        let level = if self.rng.below(3) == 0 { AckLevel::Leader } else { AckLevel::All };
        if self.state.check_append(level).is_err() {
            self.trace(format!("append refused at {level:?}"));
            return;
        }
        self.leader.end += 1 + self.rng.below(5) as i64;
        self.report_local_log();
        let id = self.next_request;
        self.next_request += 1;
        self.trace(format!("append to {} waits as request {id} ({level:?})", self.leader.end));
        self.waiting.insert(id, Request { required_offset: self.leader.end, level });
        self.state.await_ack(id, self.leader.end, level, self.now);
    }

    /// A follower copies some of the leader's log, makes some of it durable, and fetches.
    fn follower_fetch(&mut self, id: i32) {
        let leader_end = self.leader.end;
        let log = self.followers.get_mut(&id).expect("a follower");
        if log.end < leader_end {
            log.end += self.rng.below((leader_end - log.end) as u64 + 1) as i64;
        }
        if log.durable < log.end {
            log.durable += self.rng.below((log.end - log.durable) as u64 + 1) as i64;
        }
        let log = *log;
        // A follower may report a position it has since passed (a fetch in flight).
        let stale = self.rng.below(4) == 0;
        let (end, durable) = if stale { (log.end.min(log.durable), log.durable) } else { (log.end, log.durable) };
        self.trace(format!("follower {id} fetches at {end}, durable to {durable}"));
        self.state.follower_fetched(id, end, durable, self.now).expect("the leader accepts its followers' fetches");
    }

    /// The controller accepts or refuses the oldest AlterPartition in flight.
    fn answer_proposal(&mut self) {
        if self.proposals.is_empty() {
            return;
        }
        let change = self.proposals.remove(0);
        if self.rng.below(4) == 0 || !self.state.is_leader() {
            self.trace(format!("controller refuses ISR {:?}", change.new_isr));
            self.state.isr_change_refused(&change, ErrorCode::INELIGIBLE_REPLICA, self.now);
            return;
        }
        self.controller.isr = change.new_isr;
        self.controller.partition_epoch += 1;
        self.trace(format!("controller commits ISR {:?}", self.controller.isr));
        self.state.apply_assignment(self.controller.clone(), self.now);
    }

    /// The controller drops a follower whose broker was fenced from the ISR.
    fn fence_follower(&mut self) {
        let candidates: Vec<i32> = self.controller.isr.iter().copied().filter(|id| *id != LOCAL).collect();
        if candidates.is_empty() || self.controller.leader != LOCAL {
            return;
        }
        let id = candidates[self.rng.below(candidates.len() as u64) as usize];
        self.controller.isr.retain(|r| *r != id);
        self.controller.partition_epoch += 1;
        self.proposals.clear();
        self.trace(format!("controller fences {id}: ISR {:?}", self.controller.isr));
        self.state.apply_assignment(self.controller.clone(), self.now);
    }

    /// Leadership moves to an ISR follower, or back here. No writes happen meanwhile, so
    /// the logs need no truncation.
    fn move_leadership(&mut self) {
        if self.controller.leader == LOCAL {
            let candidates: Vec<i32> = self.controller.isr.iter().copied().filter(|id| *id != LOCAL).collect();
            if candidates.is_empty() {
                return;
            }
            self.controller.leader = candidates[self.rng.below(candidates.len() as u64) as usize];
        } else {
            self.controller.leader = LOCAL;
        }
        self.controller.leader_epoch += 1;
        self.controller.partition_epoch += 1;
        self.proposals.clear();
        self.leader_high_watermark = None;
        self.trace(format!("leader {} in epoch {}", self.controller.leader, self.controller.leader_epoch));
        self.state.apply_assignment(self.controller.clone(), self.now);
    }

    fn drain(&mut self) {
        while let Some(output) = self.state.poll_output() {
            self.trace(format!("-> {output:?}"));
            match output {
                Output::HighWatermark(hw) => assert!(hw <= self.state.high_watermark(), "published {hw} beyond the HW"),
                Output::AlterPartition(change) => {
                    assert_eq!(change.leader_epoch, self.controller.leader_epoch, "proposed in the current epoch");
                    assert_eq!(change.partition_epoch, self.controller.partition_epoch, "based on the current ISR");
                    assert!(change.new_isr.contains(&LOCAL), "a proposed ISR keeps its leader");
                    assert!(self.proposals.is_empty(), "one AlterPartition in flight at a time");
                    self.proposals.push(change);
                }
                Output::Completed { request_id, result } => self.completed_request(request_id, result),
            }
        }
    }

    fn completed_request(&mut self, request_id: u64, result: Result<(), ErrorCode>) {
        assert!(self.completed.insert(request_id), "request {request_id} completed twice");
        let request = self.waiting.remove(&request_id).expect("a completed request was waiting");
        if result.is_err() {
            return;
        }
        match request.level {
            AckLevel::All => assert!(
                request.required_offset <= self.state.high_watermark(),
                "acks=all request {request_id} acknowledged at {} above the high watermark {}",
                request.required_offset,
                self.state.high_watermark()
            ),
            AckLevel::Leader => {
                let counted = if self.fsync_before_ack { self.leader.durable } else { self.leader.end };
                assert!(
                    request.required_offset <= counted,
                    "acks=1 request {request_id} acknowledged before the leader has it"
                );
            }
        }
    }

    fn check(&mut self) {
        let s = &self.state;
        let hw = s.high_watermark();
        assert!(s.last_stable_offset() <= hw, "LSO {} above HW {hw}", s.last_stable_offset());
        if !s.is_leader() {
            assert!(self.waiting.is_empty(), "requests wait on a follower: {:?}", self.waiting);
            self.leader_high_watermark = None;
            return;
        }
        assert!(s.isr().contains(&LOCAL), "the ISR {:?} lost its leader", s.isr());
        let under_min_isr = s.isr().len() < s.effective_min_insync_replicas();
        if let Some(previous) = self.leader_high_watermark {
            assert!(hw >= previous, "high watermark went back from {previous} to {hw}");
            assert!(!under_min_isr || hw == previous, "high watermark moved with the ISR under its minimum");
        }
        self.leader_high_watermark = Some(hw);
        for &id in s.isr() {
            let log = if id == LOCAL { self.leader } else { self.followers[&id] };
            assert!(hw <= log.end, "HW {hw} passes ISR member {id}'s log end {}", log.end);
            if self.fsync_before_ack {
                assert!(hw <= log.durable, "HW {hw} passes what ISR member {id} made durable ({})", log.durable);
            }
        }
        let counted = if self.fsync_before_ack { self.leader.durable } else { self.leader.end };
        for (id, r) in &self.waiting {
            match r.level {
                AckLevel::All => {
                    assert!(r.required_offset > hw, "request {id} waits though the HW {hw} passed it");
                    assert!(!under_min_isr, "acks=all request {id} waits with the ISR under its minimum");
                }
                AckLevel::Leader => {
                    assert!(r.required_offset > counted, "acks=1 request {id} waits though the leader has it")
                }
            }
        }
    }

    /// Everything becomes durable, every follower catches up and the controller commits
    /// what it is asked: afterwards nothing waits.
    fn settle(&mut self) {
        if !self.state.is_leader() {
            self.move_leadership();
            self.drain();
            self.check();
        }
        for _ in 0..8 {
            self.now += 1;
            self.leader.durable = self.leader.end;
            self.report_local_log();
            self.drain();
            self.check();
            let ids: Vec<i32> = self.followers.keys().copied().collect();
            for id in ids {
                let log = self.followers.get_mut(&id).expect("a follower");
                *log = self.leader;
                self.state.follower_fetched(id, self.leader.end, self.leader.durable, self.now).expect("leader");
                self.drain();
                self.check();
            }
            while !self.proposals.is_empty() {
                let change = self.proposals.remove(0);
                self.controller.isr = change.new_isr;
                self.controller.partition_epoch += 1;
                self.state.apply_assignment(self.controller.clone(), self.now);
                self.drain();
                self.check();
            }
        }
        assert_eq!(
            self.state.isr().len(),
            self.controller.replicas.len(),
            "every caught-up replica is back in the ISR"
        );
        assert_eq!(self.state.high_watermark(), self.leader.end, "the HW reaches the end once all caught up");
        assert!(self.waiting.is_empty(), "requests left waiting: {:?}", self.waiting);
        assert_eq!(self.state.waiting_count(), 0);
    }

    fn trace(&self, what: String) {
        if self.trace {
            eprintln!("[{}] {what}", self.now);
        }
    }
}

#[test]
fn replica_state_machine_keeps_its_invariants() {
    let mut completed = 0;
    for seed in simulation_seeds(300) {
        let result = std::panic::catch_unwind(|| {
            let mut sim = Sim::new(seed);
            for _ in 0..STEPS {
                sim.step();
            }
            sim.settle();
            sim.completed.len()
        });
        match result {
            Ok(n) => completed += n,
            Err(e) => {
                eprintln!("failing seed: {seed} (replay with SIM_SEED={seed} SIM_TRACE=1)");
                std::panic::resume_unwind(e);
            }
        }
    }
    // The runs did something: requests were answered.
    assert!(completed > 10_000, "only {completed} requests answered");
}
