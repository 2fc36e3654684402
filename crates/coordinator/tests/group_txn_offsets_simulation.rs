//! Seeded simulation of plain and transactional offset commits of one simple group:
//! commits from three producers and a plain committer, appends that complete, fail or lag,
//! COMMIT and ABORT markers, and crashes that reload the log. After every step the
//! invariants hold, OffsetFetch shows exactly what a model of Kafka's log replay
//! (newest record wins when a transaction commits) says, and a fresh coordinator
//! loading the log agrees with the live one.
//!
//! A failure prints its seed.

use osprey_coordinator::group::{
    partition_for, GroupConfig, GroupCoordinator, Output, PersistId, Record, Replay, ReplyId,
};
use osprey_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use osprey_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
use osprey_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use osprey_protocol::wire::{simulation_seeds, TestRng as Rng};
use std::collections::BTreeMap;

const G: &str = "sim-txn-group";
const N: i32 = 50;
const PARTITIONS: i32 = 3;

/// (offset, position in the log) of a durable offset record.
type Durable = (i64, usize);

/// A persist in flight: its id, producer (transactional), records, and the partition
/// and offset it commits.
type Held = (PersistId, Option<i64>, Vec<Record>, i32, i64);

struct Sim {
    coordinator: GroupCoordinator,
    rng: Rng,
    now: i64,
    next_reply: u64,
    next_offset: i64,
    log: Vec<Replay>,
    /// Persists in flight, in output order.
    held: Vec<Held>,
    committed: BTreeMap<i32, Durable>,
    pending: BTreeMap<i64, BTreeMap<i32, Durable>>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        Sim {
            coordinator: GroupCoordinator::new(GroupConfig::default()),
            rng: Rng::new(seed),
            now: 1_000_000,
            next_reply: 0,
            next_offset: 0,
            log: Vec::new(),
            held: Vec::new(),
            committed: BTreeMap::new(),
            pending: BTreeMap::new(),
        }
    }

    fn step(&mut self) {
        let partition = self.rng.below(PARTITIONS as u64) as i32;
        let producer = 1 + self.rng.below(3) as i64;
        let commit_marker = self.rng.below(3) != 0;
        match self.rng.below(10) {
            0..=1 => self.plain_commit(partition),
            2..=4 => self.txn_commit(producer, partition),
            5 if !self.in_flight(producer) => self.marker(producer, commit_marker),
            6 if self.rng.below(10) == 0 => self.crash_and_reload(),
            _ => self.settle(),
        }
        self.drain();
        self.coordinator.check_invariants().unwrap_or_else(|e| panic!("invariant broken: {e}"));
        self.check();
    }

    fn in_flight(&self, producer: i64) -> bool {
        self.held.iter().any(|h| h.1 == Some(producer))
    }

    fn reply(&mut self) -> ReplyId {
        self.next_reply += 1;
        ReplyId(self.next_reply)
    }

    fn plain_commit(&mut self, partition: i32) {
        self.next_offset += 1;
        let request = OffsetCommitRequest {
            group_id: G.into(),
            generation_id_or_member_epoch: -1,
            topics: vec![OffsetCommitRequestTopic {
                name: "t".into(),
                partitions: vec![OffsetCommitRequestPartition {
                    partition_index: partition,
                    committed_offset: self.next_offset,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let reply = self.reply();
        self.coordinator.commit_offsets(&request, 9, reply, self.now);
        self.collect_persist(None, partition);
    }

    fn txn_commit(&mut self, producer_id: i64, partition: i32) {
        self.next_offset += 1;
        let request = TxnOffsetCommitRequest {
            transactional_id: format!("tx-{producer_id}"),
            group_id: G.into(),
            producer_id,
            producer_epoch: 0,
            generation_id: -1,
            topics: vec![TxnOffsetCommitRequestTopic {
                name: "t".into(),
                partitions: vec![TxnOffsetCommitRequestPartition {
                    partition_index: partition,
                    committed_offset: self.next_offset,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let reply = self.reply();
        self.coordinator.txn_commit_offsets(&request, 5, reply, self.now);
        self.collect_persist(Some(producer_id), partition);
    }

    fn collect_persist(&mut self, producer_id: Option<i64>, partition: i32) {
        let offset = self.next_offset;
        while let Some(output) = self.coordinator.poll_output() {
            if let Output::Persist { id, records, producer, .. } = output {
                assert_eq!(producer.map(|p| p.0), producer_id);
                self.held.push((id, producer_id, records, partition, offset));
            }
        }
    }

    /// Appends complete in order, fail, or stay in flight.
    fn settle(&mut self) {
        let fail = self.rng.below(5) == 0;
        for (id, producer, records, partition, offset) in std::mem::take(&mut self.held) {
            if fail {
                self.coordinator.persisted(id, Err(osprey_protocol::ErrorCode::NOT_ENOUGH_REPLICAS), self.now);
                continue;
            }
            let position = self.log.len();
            match producer {
                None => {
                    self.log.extend(records.into_iter().map(Replay::Record));
                    self.committed.insert(partition, (offset, position));
                }
                Some(producer_id) => {
                    self.log.extend(records.into_iter().map(|record| Replay::Transactional { producer_id, record }));
                    self.pending.entry(producer_id).or_default().insert(partition, (offset, position));
                }
            }
            self.coordinator.persisted(id, Ok(()), self.now);
        }
        self.now += self.rng.below(1_000) as i64;
        self.coordinator.tick(self.now);
    }

    fn marker(&mut self, producer_id: i64, committed: bool) {
        let partition = partition_for(G, N);
        self.coordinator.complete_txn(producer_id, committed, partition, N, self.now);
        self.log.push(Replay::Marker { producer_id, committed, partition });
        let pending = self.pending.remove(&producer_id).unwrap_or_default();
        if committed {
            for (p, durable) in pending {
                if self.committed.get(&p).is_none_or(|c| c.1 < durable.1) {
                    self.committed.insert(p, durable);
                }
            }
        }
    }

    /// Appends in flight are lost; a new coordinator loads the log.
    fn crash_and_reload(&mut self) {
        self.held.clear();
        self.coordinator = self.reloaded();
    }

    fn reloaded(&self) -> GroupCoordinator {
        let mut coordinator = GroupCoordinator::new(GroupConfig::default());
        coordinator.load_replay(self.log.clone(), N, self.now).expect("our own log loads");
        coordinator
    }

    /// Drops responses. A persist the coordinator asks for on its own (a timer's: the
    /// tombstone of an empty group that has no offsets) fails:
    /// the model keeps no such records, and a persist never reported would hold back the
    /// group's later completions, which apply in issue order.
    fn drain(&mut self) {
        while let Some(output) = self.coordinator.poll_output() {
            if let Output::Persist { id, .. } = output {
                self.coordinator.persisted(id, Err(osprey_protocol::ErrorCode::NOT_ENOUGH_REPLICAS), self.now);
            }
        }
    }

    fn fetch(coordinator: &GroupCoordinator, require_stable: bool) -> Vec<(i64, i16)> {
        let topics = [OffsetFetchRequestTopics {
            name: "t".into(),
            partition_indexes: (0..PARTITIONS).collect(),
            ..Default::default()
        }];
        let group = coordinator.fetch_offsets(G, Some(&topics), require_stable);
        group.topics.iter().flat_map(|t| t.partitions.iter().map(|p| (p.committed_offset, p.error_code))).collect()
    }

    fn check(&self) {
        let expected: Vec<(i64, i16)> =
            (0..PARTITIONS).map(|p| (self.committed.get(&p).map_or(-1, |c| c.0), 0)).collect();
        assert_eq!(Sim::fetch(&self.coordinator, false), expected);
        let unstable = |p: i32| {
            self.pending.values().any(|offsets| offsets.contains_key(&p)) || self.held.iter().any(|h| h.3 == p)
        };
        let stable: Vec<(i64, i16)> = (0..PARTITIONS)
            .map(|p| if unstable(p) { (-1, 88) } else { (self.committed.get(&p).map_or(-1, |c| c.0), 0) })
            .collect();
        assert_eq!(Sim::fetch(&self.coordinator, true), stable);
        // Replaying the log gives the same state, but for commits still in flight.
        if self.held.is_empty() {
            assert_eq!(Sim::fetch(&self.reloaded(), true), stable);
        }
    }
}

#[test]
fn txn_and_plain_commits_agree_with_the_log_model() {
    for seed in simulation_seeds(200) {
        let mut sim = Sim::new(seed);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for _ in 0..200 {
                sim.step();
            }
        }));
        if let Err(e) = outcome {
            eprintln!("failing seed: {seed}");
            std::panic::resume_unwind(e);
        }
    }
}
