//! Seeded simulation: producers of a few transactional ids initialize, add partitions and
//! offsets, commit and abort at random, while time passes, appends succeed or fail,
//! markers are written or bounce, partitions move and the broker crashes. After every
//! step: the coordinator's invariants hold; no request is answered twice; no producer
//! holds an epoch newer than the coordinator's for its producer id, and InitProducerId
//! only hands out growing epochs; the durable `__transaction_state` history of every id
//! follows Kafka's transitions (one transaction at a time: after PrepareX only CompleteX).
//! At the end every request not lost to a crash is answered, nothing stays held, and every
//! transaction is finished.
//!
//! Each producer instance uses transaction version 1 or 2 (AddPartitionsToTxn v5 and
//! EndTxn v5, whose answers move the producer to the bumped epoch), chosen by the seed.
//!
//! A failure prints its seed; `SIM_SEEDS=n` runs more seeds, `SIM_TRACE=1` prints steps.

mod txn_support;

use bytes::Buf;
use osprey_coordinator::txn::{ReplyId, Response, TransactionCoordinator, TxnConfig, TxnState};
use osprey_protocol::messages::InitProducerIdRequest;
/// Seeded SplitMix64 shared with the codec tests: a run replays from its seed.
use osprey_protocol::wire::{simulation_seeds, TestRng as Rng};
use osprey_protocol::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};
use txn_support::Harness;

const IDS: [&str; 3] = ["sim-0", "sim-1", "sim-2"];
const TOPICS: [(&str, i32); 4] = [("orders", 0), ("orders", 1), ("audit", 0), ("audit", 1)];
const PARTITIONS: i32 = 4;

#[derive(Clone, Copy, Debug)]
enum Asked {
    Init {
        id: usize,
        client: usize,
        bump_expected: bool,
    },
    /// A TV2 EndTxn: its answer carries the producer's next id and epoch.
    EndV2 {
        id: usize,
        client: usize,
    },
    Other,
}

struct Sim {
    h: Harness,
    rng: Rng,
    trace: bool,
    /// Per id, two producer instances and the producer id / epoch each holds.
    clients: [[Option<(i64, i16)>; 2]; 3],
    /// Per id, whether each producer instance uses transaction version 2.
    tv2: [[bool; 2]; 3],
    asked: BTreeMap<ReplyId, Asked>,
    /// Answers taken in so far.
    seen: usize,
    lost: BTreeSet<ReplyId>,
    /// Per (id, producer id), the newest epoch InitProducerId returned.
    returned: BTreeMap<(usize, i64), i16>,
    epochs: BTreeMap<i32, i32>,
    /// The log history checked so far: records read per partition, last state per key.
    history: BTreeMap<i32, (usize, BTreeMap<String, TxnState>)>,
    /// Durable records seen, by state (a summary that the run did something).
    durable: BTreeMap<TxnState, usize>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let config = TxnConfig {
            transaction_state_log_num_partitions: PARTITIONS,
            transactional_id_expiration_ms: 120_000,
            transaction_remove_expired_transaction_cleanup_interval_ms: 30_000,
            ..TxnConfig::default()
        };
        let mut rng = Rng::new(seed);
        let mut tv2 = [[false; 2]; 3];
        for flag in tv2.iter_mut().flatten() {
            *flag = rng.below(2) == 1;
        }
        Sim {
            h: Harness::with_config(config),
            rng,
            tv2,
            trace: std::env::var("SIM_TRACE").is_ok(),
            clients: [[None; 2]; 3],
            asked: BTreeMap::new(),
            seen: 0,
            lost: BTreeSet::new(),
            returned: BTreeMap::new(),
            epochs: (0..PARTITIONS).map(|p| (p, 0)).collect(),
            history: BTreeMap::new(),
            durable: BTreeMap::new(),
        }
    }

    fn step(&mut self) {
        let id = self.rng.below(3) as usize;
        let client = self.rng.below(2) as usize;
        let name = IDS[id];
        let producer = self.clients[id][client];
        let tv2 = self.tv2[id][client];
        match self.rng.below(100) {
            0..=5 => {
                let bump_expected = producer.is_some() && (self.rng.below(100) < 30);
                let (pid, epoch) = if bump_expected { producer.unwrap() } else { (-1, -1) };
                let request = InitProducerIdRequest {
                    transactional_id: Some(name.into()),
                    transaction_timeout_ms: 5_000 + self.rng.below(60_000) as i32,
                    producer_id: pid,
                    producer_epoch: epoch,
                    ..Default::default()
                };
                self.trace(format!("init {name}/{client} expected={bump_expected}"));
                let reply = self.h.init_request(&request, 4);
                self.asked.insert(reply, Asked::Init { id, client, bump_expected });
            }
            6..=29 => {
                let Some(p) = producer else { return };
                let n = 1 + self.rng.below(2) as usize;
                let partitions: Vec<(&str, i32)> = (0..n).map(|_| TOPICS[self.rng.below(4) as usize]).collect();
                self.trace(format!("add {name}/{client} {p:?} {partitions:?}"));
                let reply = self.h.add(name, p, &partitions, if tv2 { 5 } else { 3 });
                self.asked.insert(reply, Asked::Other);
            }
            30..=34 => {
                let Some(p) = producer else { return };
                self.trace(format!("add offsets {name}/{client}"));
                let reply = self.h.add_offsets(name, p, "group");
                self.asked.insert(reply, Asked::Other);
            }
            35..=46 => {
                let Some(p) = producer else { return };
                let commit = self.rng.below(100) < 60;
                self.trace(format!("end {name}/{client} {p:?} commit={commit} tv2={tv2}"));
                let reply = self.h.end(name, p, commit, if tv2 { 5 } else { 3 });
                self.asked.insert(reply, if tv2 { Asked::EndV2 { id, client } } else { Asked::Other });
            }
            47..=49 => {
                let Some(p) = producer else { return };
                let answers = self.h.verify(name, p, &[TOPICS[0], TOPICS[2]]);
                let view = self.h.c.transaction(name);
                for (error, tp) in answers.iter().zip([TOPICS[0], TOPICS[2]]) {
                    if *error == ErrorCode::NONE {
                        let view = view.as_ref().expect("verified ids exist");
                        assert!(view.partitions.contains(&(tp.0.to_string(), tp.1)));
                    }
                }
            }
            50..=69 => {
                if self.h.persists.is_empty() {
                    return;
                }
                match self.rng.below(10) {
                    0 => {
                        let error =
                            [ErrorCode::NOT_ENOUGH_REPLICAS, ErrorCode::REQUEST_TIMED_OUT][self.rng.below(2) as usize];
                        self.trace(format!("persist fails {error:?}"));
                        self.h.fail_persist(error);
                    }
                    1 => {
                        // The partition moved away: its appends fail, then it is led again.
                        let partition = self.h.persists[0].1;
                        self.move_partition(partition);
                    }
                    _ => {
                        self.trace("persist".into());
                        let (txn, state) = id_and_state(&self.h.persists[0].2);
                        if matches!(state, Some(TxnState::CompleteCommit | TxnState::CompleteAbort)) {
                            assert!(
                                self.h.markers.iter().all(|(id, _)| *id != txn),
                                "{txn} completes with markers still to write"
                            );
                        }
                        self.h.persist_one();
                    }
                }
            }
            70..=83 => {
                let Some((txn, marker)) = self.h.markers.pop_front() else { return };
                self.trace(format!("markers {txn} {marker:?}"));
                for tp in &marker.partitions {
                    let error =
                        if self.rng.below(100) < 15 { ErrorCode::NOT_LEADER_OR_FOLLOWER } else { ErrorCode::NONE };
                    self.h.c.marker_written(&txn, marker.coordinator_epoch, tp, error, self.h.now);
                }
                self.h.drain();
            }
            84..=97 => {
                let advance = self.rng.below(4_000) as i64;
                self.trace(format!("tick +{advance}"));
                self.h.tick(advance);
            }
            98 => {
                let partition = self.rng.below(PARTITIONS as u64) as i32;
                self.move_partition(partition);
            }
            _ => self.crash(),
        }
    }

    fn move_partition(&mut self, partition: i32) {
        self.trace(format!("partition {partition} moves"));
        self.h.c.unload_partition(partition);
        let held = std::mem::take(&mut self.h.persists);
        for (id, p, record) in held {
            if p == partition {
                self.h.c.persisted(id, Err(ErrorCode::NOT_LEADER_OR_FOLLOWER), self.h.now);
            } else {
                self.h.persists.push_back((id, p, record));
            }
        }
        let epoch = self.epochs.get_mut(&partition).unwrap();
        *epoch += 1;
        let records = self.h.log.get(&partition).cloned().unwrap_or_default();
        self.h.c.load(partition, *epoch, records, self.h.now).unwrap();
        self.h.drain();
    }

    /// The broker dies: a prefix of the held appends made it to the log, the rest and
    /// every connection are lost; a new coordinator loads the log.
    fn crash(&mut self) {
        let landed = self.rng.below(self.h.persists.len() as u64 + 1) as usize;
        self.trace(format!("crash, {landed} of {} appends landed", self.h.persists.len()));
        for (_, partition, record) in self.h.persists.drain(..).take(landed) {
            self.h.log.entry(partition).or_default().push(record);
        }
        self.h.persists.clear();
        self.h.markers.clear();
        for reply in self.asked.keys() {
            if !self.h.answers.contains_key(reply) {
                self.lost.insert(*reply);
            }
        }
        self.h.c = TransactionCoordinator::new(self.h.c.config().clone());
        for (partition, epoch) in self.epochs.iter_mut() {
            *epoch += 1;
            let records = self.h.log.get(partition).cloned().unwrap_or_default();
            self.h.c.load(*partition, *epoch, records, self.h.now).unwrap();
        }
        self.h.drain();
    }

    /// Takes in new answers and checks what must hold between steps.
    fn observe(&mut self) {
        let fresh: Vec<(ReplyId, Response)> =
            self.h.answer_order[self.seen..].iter().map(|r| (*r, self.h.answers[r].clone())).collect();
        self.seen = self.h.answer_order.len();
        for (reply, response) in fresh {
            assert!(!self.lost.contains(&reply), "{reply:?} answered after its connection was lost");
            let (id, client, bump_expected, (error, pid, epoch)) = match self.asked.get(&reply).copied() {
                Some(Asked::Init { id, client, bump_expected }) => {
                    (id, client, bump_expected, txn_support::init_result(&response))
                }
                Some(Asked::EndV2 { id, client }) => {
                    let answer = txn_support::end_ids(&response);
                    if answer.0 == ErrorCode::NONE {
                        // The next transaction runs at the bumped epoch; a retry's answer
                        // may repeat the newest one.
                        let newest = self.returned.entry((id, answer.1)).or_insert(-1);
                        assert!(answer.2 >= *newest, "EndTxn epoch went back: {} after {newest}", answer.2);
                        *newest = answer.2;
                        self.clients[id][client] = Some((answer.1, answer.2));
                    }
                    continue;
                }
                _ => continue,
            };
            if error != ErrorCode::NONE {
                continue;
            }
            let newest = self.returned.entry((id, pid)).or_insert(-1);
            // Without an expected epoch every answer bumps; with one, a retry may get the
            // same epoch again.
            assert!(epoch > *newest || (bump_expected && epoch == *newest), "epoch went back: {epoch} after {newest}");
            *newest = epoch;
            self.clients[id][client] = Some((pid, epoch));
        }
        self.h.c.check_invariants().unwrap();
        for (id, name) in IDS.iter().enumerate() {
            let Some(view) = self.h.c.transaction(name) else { continue };
            if let Some(newest) = self.returned.get(&(id, view.producer_id)) {
                assert!(
                    view.producer_epoch >= *newest,
                    "{name}: coordinator epoch {} behind a producer's {newest}",
                    view.producer_epoch
                );
            }
        }
        self.check_log_history();
    }

    /// Every id's durable history follows Kafka's transitions (read incrementally: the
    /// log only grows).
    fn check_log_history(&mut self) {
        for (partition, records) in &self.h.log {
            let (read, last) = self.history.entry(*partition).or_default();
            for record in &records[*read..] {
                let (key, state) = id_and_state(record);
                let Some(state) = state else {
                    last.remove(&key);
                    continue;
                };
                if let Some(previous) = last.get(&key) {
                    let allowed = state.valid_previous_states().contains(previous);
                    assert!(allowed, "{key}: {previous:?} -> {state:?} in the log");
                }
                *self.durable.entry(state).or_default() += 1;
                last.insert(key, state);
            }
            *read = records.len();
        }
    }

    /// Stops the producers and lets everything through: every transaction finishes.
    fn finish(&mut self) {
        for _ in 0..4 {
            self.h.settle();
            self.h.tick(1_000_000);
            self.h.settle();
            self.observe();
        }
        assert!(self.h.persists.is_empty() && self.h.markers.is_empty());
        assert_eq!(self.h.c.persists_in_flight(), 0);
        for reply in self.asked.keys() {
            assert!(self.h.answers.contains_key(reply) || self.lost.contains(reply), "{reply:?} never answered");
        }
        for name in IDS {
            if let Some(view) = self.h.c.transaction(name) {
                assert!(
                    matches!(view.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
                        && view.pending_state.is_none(),
                    "{name} left in {view:?}"
                );
            }
        }
    }

    fn trace(&self, line: String) {
        if self.trace {
            eprintln!("[{}] {line}", self.h.now);
        }
    }
}

/// The transactional id and state of a `__transaction_state` record (`None`: tombstone).
fn id_and_state(record: &osprey_coordinator::group::Record) -> (String, Option<TxnState>) {
    let mut key = record.key.clone();
    key.advance(2);
    let len = key.get_i16() as usize;
    let id = String::from_utf8(key[..len].to_vec()).unwrap();
    let state = record.value.as_ref().map(|v| {
        let mut v = v.clone();
        v.advance(2 + 8 + 2 + 4);
        TxnState::from_id(v.get_i8()).expect("a known status")
    });
    (id, state)
}

fn run(seed: u64) {
    let mut sim = Sim::new(seed);
    for _ in 0..2_000 {
        sim.step();
        sim.observe();
    }
    sim.finish();
    if sim.trace {
        eprintln!("seed {seed}: durable records by state {:?}", sim.durable);
    }
    for state in [TxnState::CompleteCommit, TxnState::CompleteAbort] {
        assert!(sim.durable.get(&state).is_some_and(|n| *n > 0), "seed {seed}: no {state:?} at all");
    }
}

#[test]
fn seeded_simulation_keeps_invariants_and_answers_every_request() {
    for seed in simulation_seeds(40) {
        let result = std::panic::catch_unwind(|| run(seed));
        if result.is_err() {
            panic!("simulation failed with seed {seed}; replay with SIM_TRACE=1");
        }
    }
}
